"""The wire format: round trips of every carried type, zero-copy frames, and refusal of bad input."""
import collections
import enum
import pickle
import random
import struct

import msgpack
import numpy as np
import pytest
import zmq

from inputpipe.dataflow.tensorpack_records import decode_tensorpack_record
from inputpipe.utils import serialize
from inputpipe.utils.serialize import (
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_MESSAGE_BYTES,
    WIRE_FORMAT_VERSION,
    WireFormatError,
    dumps,
    dumps_frames,
    loads,
    loads_frames,
)

NUMERIC_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                  "float16", "float32", "float64", "complex64", "complex128"]


def roundtrips(obj, **kwargs):
    """Decode ``obj`` through every entry point; returns the four results."""
    return [
        loads(dumps(obj), **kwargs),
        loads(bytearray(dumps(obj)), **kwargs),
        loads_frames(dumps_frames(obj), **kwargs),
        loads_frames([bytes(f) for f in dumps_frames(obj)], **kwargs),
    ]


def assert_same(expected, got):
    """Equal values with equal types all the way down (list vs tuple, dtypes, shapes)."""
    assert type(got) is type(expected) or (isinstance(expected, np.ndarray) and type(got) is np.ndarray), \
        (type(expected), type(got))
    if isinstance(expected, np.ndarray):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    elif isinstance(expected, np.generic):
        assert got.dtype == expected.dtype
        assert got == expected or (np.isnan(got) and np.isnan(expected))
    elif isinstance(expected, dict):
        assert list(got.keys()) == list(expected.keys())
        for key in expected:
            assert_same(expected[key], got[key])
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected)
        for a, b in zip(expected, got):
            assert_same(a, b)
    else:
        assert got == expected


# ----------------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("value", [
    None, True, False, 0, 1, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 64 - 1, 0.0, -1.5, float("inf"),
    1e308, "", "héllo wörld ✓", b"", b"\x00\xff" * 10, [], (), {},
])
def test_python_scalars_and_empty_containers(value):
    for got in roundtrips(value):
        assert_same(value, got)


def test_nan_float():
    for got in roundtrips(float("nan")):
        assert isinstance(got, float) and got != got


def test_nested_containers_keep_list_tuple_and_key_types():
    obj = {
        "list": [1, [2, (3, [4, (5,)])]],
        "tuple": (1, "a", b"b", None, (True, 2.5)),
        1: "int key",
        -7: "negative key",
        2.5: "float key",
        b"raw": "bytes key",
        (1, "x"): "tuple key",
        None: "None key",
        "deep": [[[[[[("x",)]]]]]],
    }
    for got in roundtrips(obj):
        assert_same(obj, got)
        assert type(got["list"][1][1]) is tuple
        assert type(got["list"][1][1][1][1]) is tuple
        assert (1, "x") in got


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_arrays_of_every_dtype_and_layout(dtype):
    rng = np.random.RandomState(0)
    base = (rng.rand(6, 5, 4) * 100).astype(dtype)
    cases = {
        "c": base,
        "fortran": np.asfortranarray(base),
        "strided": base[::2, 1:, ::3],
        "negative strides": base[::-1, :, ::-2],
        "transposed": base.transpose(2, 0, 1),
        "0-d": np.array(base[1, 2, 3]),
        "empty": base[:0],
        "empty 2-d": np.zeros((3, 0), dtype=dtype),
        "1-d big": np.resize(base, 5000),  # larger than the inline limit: its own frame
        "big fortran": np.asfortranarray(np.resize(base, (50, 40))),
        "big strided": np.resize(base, (100, 60))[::-1, ::2],
    }
    for name, arr in cases.items():
        for got in roundtrips([arr, (arr,)]):
            assert type(got) is list and type(got[1]) is tuple, name
            for decoded in (got[0], got[1][0]):
                assert decoded.dtype == arr.dtype, name
                assert decoded.shape == arr.shape, name
                np.testing.assert_array_equal(decoded, arr, err_msg=name)


def test_fortran_order_travels_without_copy_and_stays_fortran():
    arr = np.asfortranarray(np.arange(20000, dtype=np.float32).reshape(100, 200))
    frames = dumps_frames(arr)
    assert np.shares_memory(np.frombuffer(frames[1], np.uint8), arr)
    got = loads_frames(frames)
    assert got.flags.f_contiguous and not got.flags.c_contiguous
    np.testing.assert_array_equal(got, arr)


def test_big_endian_arrays_keep_their_byte_order():
    arr = np.arange(3000, dtype=">i4").reshape(30, 100)
    for got in roundtrips(arr):
        assert got.dtype == np.dtype(">i4")
        np.testing.assert_array_equal(got, arr)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_numpy_scalars_keep_their_dtype(dtype):
    value = np.array(3, dtype=dtype)[()]
    for got in roundtrips([value, {"v": value}]):
        assert type(got[0]) is type(value) and got[0].dtype == value.dtype
        assert got[0] == value and got[1]["v"] == value


def test_extreme_numpy_scalars():
    values = [np.uint64(2 ** 64 - 1), np.int64(-2 ** 63), np.float16(65504), np.complex128(1 - 2j),
              np.float64(np.inf)]
    for got in roundtrips(values):
        assert_same(values, got)


def test_subclasses_of_builtins_become_the_builtin():
    class Color(enum.IntEnum):
        RED = 3

    point = collections.namedtuple("Point", "x y")(1, 2)
    obj = [Color.RED, collections.OrderedDict([("b", 1), ("a", 2)]), point, np.str_("s"),
           np.bytes_(b"b"), bytearray(b"ba"), memoryview(b"mv")]
    got = loads(dumps(obj))
    assert got == [3, {"b": 1, "a": 2}, (1, 2), "s", b"b", b"ba", b"mv"]
    assert [type(x) for x in got] == [int, dict, tuple, str, bytes, bytes, bytes]
    assert list(got[1]) == ["b", "a"]


def test_many_small_datapoints_round_trip():
    rng = np.random.RandomState(1)
    dps = [[rng.rand(8, 8).astype(np.float32), i, {"id": "img%d" % i}] for i in range(1000)]
    for got in roundtrips(dps):
        assert len(got) == 1000
        for want, have in zip(dps, got):
            assert_same(want, have)


def test_arrays_of_a_message_are_decoded_independently():
    # Same shape and dtype repeated (the description cache) with different contents.
    arrs = [np.full((7, 3), i, np.int16) for i in range(50)] + [np.full(3000, i, np.int64) for i in range(5)]
    got = loads_frames(dumps_frames(arrs))
    for want, have in zip(arrs, got):
        np.testing.assert_array_equal(want, have)


# ----------------------------------------------------------------------------------- memory

def test_dumps_frames_does_not_copy_contiguous_arrays():
    big = np.arange(100000, dtype=np.float64).reshape(1000, 100)
    frames = dumps_frames([big, "label", big[:10]])
    assert len(frames) == 3
    assert isinstance(frames[0], bytes)
    assert np.shares_memory(np.frombuffer(frames[1], np.uint8), big)
    assert np.shares_memory(np.frombuffer(frames[2], np.uint8), big)


def test_dumps_frames_copies_strided_arrays_once():
    big = np.arange(100000, dtype=np.float64).reshape(1000, 100)
    frames = dumps_frames(big[:, ::2])
    assert len(frames) == 2
    assert not np.shares_memory(np.frombuffer(frames[1], np.uint8), big)
    assert len(frames[1]) == big[:, ::2].nbytes


def test_loads_frames_is_zero_copy_and_read_only():
    big = np.arange(100000, dtype=np.float64)
    frames = [bytes(f) for f in dumps_frames([big])]
    got = loads_frames(frames)[0]
    assert np.shares_memory(got, np.frombuffer(frames[1], np.uint8))
    assert not got.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        got[0] = 1


def test_loads_frames_copy_gives_writable_independent_arrays():
    big = np.arange(100000, dtype=np.float64)
    frames = [bytes(f) for f in dumps_frames([big, np.arange(4)])]
    got = loads_frames(frames, copy=True)
    assert not np.shares_memory(got[0], np.frombuffer(frames[1], np.uint8))
    got[0][0] = -1
    got[1][0] = -1
    assert got[0][0] == -1 and big[0] == 0


def test_loads_is_zero_copy_on_its_input():
    big = np.arange(100000, dtype=np.float64)
    data = dumps(big)
    got = loads(data)
    assert np.shares_memory(got, np.frombuffer(data, np.uint8))
    assert not got.flags.writeable
    writable = bytearray(data)
    got = loads(writable)
    assert got.flags.writeable and np.shares_memory(got, np.frombuffer(writable, np.uint8))
    assert loads(data, copy=True).flags.writeable


def test_small_inline_arrays_follow_the_writability_of_the_input():
    data = dumps([np.arange(4), np.arange(10000)])
    assert [a.flags.writeable for a in loads(data)] == [False, False]
    assert [a.flags.writeable for a in loads(bytearray(data))] == [True, True]
    assert [a.flags.writeable for a in loads(data, copy=True)] == [True, True]


def test_big_arrays_in_dumps_are_aligned():
    arrs = [np.zeros(3, np.uint8), np.arange(1000, dtype=np.complex128), np.arange(777, dtype=np.float32)]
    got = loads(dumps(arrs))
    assert got[1].flags.aligned and got[2].flags.aligned


def test_zmq_frames_are_accepted_without_copy():
    big = np.arange(50000, dtype=np.int32)
    # copy=True: a zero-copy zmq.Frame would start pyzmq's global garbage-collector thread.
    frames = [zmq.Frame(bytes(f), copy=True) for f in dumps_frames({"x": big})]
    got = loads_frames(frames)["x"]
    np.testing.assert_array_equal(got, big)
    assert np.shares_memory(got, np.frombuffer(frames[1], np.uint8))


def test_zmq_multipart_round_trip():
    ctx = zmq.Context()
    try:
        pull = ctx.socket(zmq.PULL)
        push = ctx.socket(zmq.PUSH)
        for sock in (pull, push):
            sock.setsockopt(zmq.LINGER, 0)
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        push.connect("tcp://127.0.0.1:%d" % port)
        batch = [np.arange(300000, dtype=np.uint8).reshape(300, 1000), np.arange(10), ("a", 1)]
        push.send_multipart(dumps_frames(batch), copy=True)  # copy=False would start pyzmq's gc thread
        assert pull.poll(5000)
        got = loads_frames(pull.recv_multipart(copy=False))
        assert_same(batch, got)
        push.close()
        pull.close()
    finally:
        ctx.term()


def test_single_buffer_in_loads_frames_and_arrayless_frames_in_loads():
    assert loads_frames([dumps([1, np.arange(3000)])])[0] == 1
    assert loads(dumps_frames([1, "a"])[0]) == [1, "a"]


# ----------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("obj, match", [
    (np.array([1, "a"], dtype=object), r"dtype object: object arrays would need pickle.*\(at obj\)"),
    (np.zeros(2, dtype=[("a", "<i4")]), r"dtype \[\('a', '<i4'\)\]: only bool, int8.*fixed-width"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), r"dtype datetime64\[D\]: only bool, int8"),
    (np.datetime64("2020-01-01"), r"numpy scalar of dtype datetime64\[D\]"),
    ([1, {"a": [2 ** 64]}], r"int 18446744073709551616: it does not fit in 64 bits.*\(at obj\[1\]\['a'\]\[0\]\)"),
    ((1, -2 ** 63 - 1), r"does not fit in 64 bits.*\(at obj\[1\]\)"),
    ({"s": {1, 2}}, r"type builtins.set \(\{1, 2\}\).*\(at obj\['s'\]\)"),
    ([object()], r"type builtins.object"),
    ({frozenset(): 1}, r"type builtins.frozenset.*\(at obj key frozenset\(\)\)"),
])
def test_unsupported_types_are_refused_with_type_and_location(obj, match):
    with pytest.raises(TypeError, match=match):
        dumps(obj)
    with pytest.raises(TypeError, match=match):
        dumps_frames(obj)


def test_self_referencing_list_is_refused():
    loop = []
    loop.append(loop)
    with pytest.raises((TypeError, ValueError)):
        dumps(loop)


def test_pickle_is_refused_and_named():
    with pytest.raises(WireFormatError, match=r"loads: it is pickled \(tensorpack 0.11's default serializer, "
                                              r"TENSORPACK_SERIALIZE=pickle\); inputpipe unpickles only when asked"):
        loads(pickle.dumps([1, 2], protocol=pickle.HIGHEST_PROTOCOL))
    with pytest.raises(WireFormatError, match=r"not an inputpipe wire-format message.*looks like a pickle; inputpipe "
                                              r"never unpickles"):
        loads_frames([pickle.dumps([1, 2], protocol=pickle.HIGHEST_PROTOCOL)])       # what sockets and worker channels decode


UNPICKLED = []


class _SetsFlagWhenUnpickled:
    def __reduce__(self):
        return UNPICKLED.append, ("unpickled!",)


def test_a_patched_msgpack_module_changes_nothing(monkeypatch):
    """msgpack_numpy.patch() (called by importing tensorpack) replaces msgpack.packb/unpackb with
    versions that encode arrays their own way and unpickle maps marked as object arrays."""
    original_unpackb = msgpack.unpackb

    def unpickling_unpackb(data, **kwargs):
        def hook(obj):
            return pickle.loads(obj[b"data"]) if obj.get(b"nd") and obj.get(b"kind") == b"O" else obj
        return original_unpackb(data, object_hook=hook, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError("the patched msgpack module was used")

    monkeypatch.setattr(msgpack, "unpackb", unpickling_unpackb)
    for name in ("packb", "Packer", "Unpacker"):
        monkeypatch.setattr(msgpack, name, refuse)
    crafted = {b"nd": True, b"kind": b"O", b"type": b"|O", b"shape": [1],
               b"data": pickle.dumps(_SetsFlagWhenUnpickled())}
    assert loads(dumps(crafted)) == crafted and UNPICKLED == []
    frames = dumps_frames([np.arange(100000, dtype=np.int64)])
    assert len(frames) == 2 and len(frames[1]) == 800000        # arrays still travel as raw frames
    np.testing.assert_array_equal(loads_frames(frames)[0], np.arange(100000))


@pytest.mark.parametrize("data, match", [
    (b"", r"loads: truncated: a message starts with a 20 byte preamble, got 0 bytes"),
    (b"IPWF\x01", r"truncated: a message starts with a 20 byte preamble, got 5 bytes"),
    (b"hello world, not a message", r"expected it to start with b'IPWF', got b'hello wo'"),
    (msgpack.packb([1, 2, 3]) + b"x", r"loads: neither an inputpipe wire-format message \(expected it to start with "
                                       r"b'IPWF', got b'\\x93\\x01\\x02\\x03x'\) nor a tensorpack record \(ExtraData"),
    (b"\xc1", r"nor a tensorpack record \(FormatError: invalid msgpack data\)"),
])
def test_garbage_is_refused(data, match):
    with pytest.raises(WireFormatError, match=match):
        loads(data)


def test_wrong_argument_types_are_refused():
    with pytest.raises(WireFormatError, match=r"loads: expected a bytes-like object .* got str"):
        loads("text")
    with pytest.raises(WireFormatError, match=r"expected a list of frames, got bytes"):
        loads_frames(dumps(1))
    with pytest.raises(WireFormatError, match=r"expected at least the header frame, got an empty list"):
        loads_frames([])
    with pytest.raises(WireFormatError, match=r"loads_frames frame 1: expected a bytes-like object .* got int"):
        loads_frames([dumps(1), 5])
    with pytest.raises(WireFormatError, match=r"expected a contiguous buffer"):
        loads(np.frombuffer(dumps(1) * 2, np.uint8)[::2])


def _patch_preamble(data, **fields):
    magic, version, layout, reserved, n_frames, body_len = serialize._PREAMBLE.unpack_from(data)
    values = dict(magic=magic, version=version, layout=layout, reserved=reserved, n_frames=n_frames,
                  body_len=body_len)
    values.update(fields)
    return serialize._PREAMBLE.pack(*values.values()) + bytes(data[serialize._PREAMBLE.size:])


def test_other_format_versions_are_refused():
    data = _patch_preamble(dumps([1]), version=WIRE_FORMAT_VERSION + 1)
    with pytest.raises(WireFormatError, match=r"message is in wire format version 2, this inputpipe reads version 1"):
        loads(data)
    with pytest.raises(WireFormatError, match=r"unknown message layout 7"):
        loads(_patch_preamble(dumps([1]), layout=7))
    with pytest.raises(WireFormatError, match=r"reserved field 1"):
        loads(_patch_preamble(dumps([1]), reserved=1))


def test_truncated_and_padded_messages_are_refused():
    data = dumps([np.arange(10000), "x"])
    with pytest.raises(WireFormatError, match=r"truncated: array frame 1 of 1 needs bytes"):
        loads(data[:-1])
    with pytest.raises(WireFormatError, match=r"should be \d+ bytes, got \d+ \(3 unexpected trailing bytes\)"):
        loads(data + b"abc")
    with pytest.raises(WireFormatError, match=r"truncated: header declares \d+ bytes"):
        loads(data[:30])


def test_frame_count_and_size_mismatches_are_refused():
    frames = [bytes(f) for f in dumps_frames([np.arange(10000), np.arange(20000)])]
    with pytest.raises(WireFormatError, match=r"header declares 2 array frames, got 1 frames after the header"):
        loads_frames(frames[:2])
    with pytest.raises(WireFormatError, match=r"array frame 2 should be 160000 bytes, got 159999"):
        loads_frames(frames[:2] + [frames[2][:-1]])
    with pytest.raises(WireFormatError, match=r"header frame should be \d+ bytes"):
        loads_frames([frames[0] + b"x"] + frames[1:])
    with pytest.raises(WireFormatError, match=r"header frame of a multi-frame message with 2 array frames"):
        loads(frames[0])
    with pytest.raises(WireFormatError, match=r"single-buffer message \(made by dumps\), but 1 more frames"):
        loads_frames([dumps(1), b""])


def test_frames_swapped_between_arrays_are_refused():
    frames = [bytes(f) for f in dumps_frames([np.arange(10000), np.arange(20000)])]
    with pytest.raises(WireFormatError, match=r"array frame 1 should be 80000 bytes, got 160000"):
        loads_frames([frames[0], frames[2], frames[1]])


def test_size_limit_is_checked_before_decoding():
    data = dumps(np.zeros(10000, np.uint8))
    assert DEFAULT_MAX_MESSAGE_BYTES == 1 << 30
    with pytest.raises(WireFormatError, match=r"loads: message of \d+ bytes exceeds the limit of 1000 bytes "
                                              r"\(raise max_bytes"):
        loads(data, max_bytes=1000)
    frames = dumps_frames(np.zeros(10000, np.uint8))
    with pytest.raises(WireFormatError, match=r"loads_frames: message of \d+ bytes exceeds the limit of 5000"):
        loads_frames(frames, max_bytes=5000)
    assert loads(data, max_bytes=len(data)).shape == (10000,)


def test_huge_declared_sizes_are_refused_without_allocating():
    header = serialize._PREAMBLE.pack(b"IPWF", 1, 1, 0, 1, 2 ** 62)
    with pytest.raises(WireFormatError, match=r"truncated: header declares"):
        loads(header)
    header = serialize._PREAMBLE.pack(b"IPWF", 1, 2, 0, 2 ** 31, 0)
    with pytest.raises(WireFormatError, match=r"declares 2147483648 array frames, more than the limit"):
        loads_frames([header])


def _message_with_body(body, frames=()):
    sizes = [len(f) for f in frames]
    header = serialize._PREAMBLE.pack(b"IPWF", 1, 2, 0, len(sizes), len(body)) + \
        struct.pack("<%dQ" % len(sizes), *sizes) + body
    return [header] + list(frames)


def _head(dtype_name, length):
    """A valid description of a 1-d array (padded to 8 bytes, as the encoder writes it)."""
    head = struct.pack("<BBB", 0, 1, len(dtype_name)) + dtype_name + struct.pack("<Q", length)
    return head + bytes(-len(head) % 8)


@pytest.mark.parametrize("body, frames, match", [
    (msgpack.packb(msgpack.ExtType(99, b"")), (), r"unknown msgpack ext type 99 \(expected one of 1 \(array\)"),
    (msgpack.packb(msgpack.ExtType(3, b"\x03<f8abc")), (), r"numpy scalar description of 7 bytes is malformed"),
    (msgpack.packb(msgpack.ExtType(3, b"\x03|O8" + bytes(8))), (), r"unsupported dtype"),
    (msgpack.packb(msgpack.ExtType(2, b"\x00\x01\x03|O8" + bytes(16))), (), r"inline array has unsupported dtype b'\|O8'"),
    (msgpack.packb(msgpack.ExtType(2, _head(b"<f8", 4) + bytes(8))), (),
     r"inline array of dtype float64 and shape \(4,\) needs 32 bytes, got 8"),
    (msgpack.packb(msgpack.ExtType(2, b"\x05\x01\x03<f8" + bytes(8))), (), r"inline array description is malformed \(order 5"),
    (msgpack.packb(msgpack.ExtType(2, b"\x00")), (), r"inline array description of 1 bytes is too short"),
    (msgpack.packb(msgpack.ExtType(1, b"\x00")), (), r"array description of 1 bytes has no frame index"),
    (msgpack.packb(msgpack.ExtType(1, struct.pack("<I", 3) + _head(b"<f8", 1))),
     (bytes(8),), r"array refers to frame 4 of 1 \(missing\)"),
    (msgpack.packb([msgpack.ExtType(1, struct.pack("<I", 0) + _head(b"<f8", 1))] * 2),
     (bytes(8),), r"array refers to frame 1 of 1 \(already used\)"),
    (msgpack.packb(msgpack.ExtType(1, struct.pack("<I", 0) + _head(b"<f8", 2))),
     (bytes(8),), r"array of dtype float64 and shape \(2,\) needs 16 bytes, its frame has 8"),
    (msgpack.packb(1), (bytes(8),), r"1 of 1 array frames are not referenced by the body"),
    (msgpack.packb(msgpack.ExtType(4, b"x")), (), r"a tuple mark must be empty, got 1 bytes"),
    (msgpack.packb(msgpack.Timestamp(1, 2)), (), r"msgpack ext type -1 \(timestamp\) is not part of the wire "
                                                 r"format \(it defines ext types 1 \(array\), 2"),
    (msgpack.packb([1, {"k": [msgpack.Timestamp(2 ** 40, 5)]}]), (), r"ext type -1 \(timestamp\)"),
    (msgpack.packb({msgpack.Timestamp(7): 1}), (), r"ext type -1 \(timestamp\)"),
    (msgpack.packb([msgpack.ExtType(4, b""), 1, msgpack.Timestamp(3)]), (), r"ext type -1 \(timestamp\)"),  # a tuple
    (msgpack.packb([{"a": [1, {2: msgpack.Timestamp(3)}]}]), (), r"ext type -1 \(timestamp\)"),
    (msgpack.packb(msgpack.Timestamp(2 ** 35, 1)), (), r"ext type -1 \(timestamp\)"),  # the 12-byte form
    (b"\xd4\xff\x00", (), r"malformed message body"),  # a timestamp of an invalid length
    (msgpack.packb([1, msgpack.ExtType(4, b"")]), (), r"a tuple mark appears outside the head of a list"),
    (msgpack.packb({"a": msgpack.ExtType(4, b"")}), (), r"a tuple mark appears outside the head of a list"),
    (b"\xc1", (), r"malformed message body"),
    (msgpack.packb([1, 2]) + b"\x01", (), r"malformed message body: ExtraData"),
    (msgpack.packb([1, 2])[:-1], (), r"malformed message body"),
    (b"\xa2\xff\xfe", (), r"malformed message body: UnicodeDecodeError"),
    (b"\x81\x91\x01\x02", (), r"malformed message body: TypeError: unhashable type"),
    (b"\x91" * 5000 + b"\xc0", (), r"malformed message body"),
])
def test_malformed_bodies_are_refused(body, frames, match):
    with pytest.raises(WireFormatError, match=match):
        loads_frames(_message_with_body(body, frames))


# Every ext header of type -1 (msgpack's timestamp) in its encodings, as bytes of data.
TIMESTAMP_LIKE = b"\xd6\xff\xd7\xff\xc7\x0c\xff\xc8\x00\x08\xff\xc9\x00\x00\x00\x04\xff" * 300


def test_data_that_looks_like_timestamps_decodes_as_it_is():
    small = np.frombuffer(TIMESTAMP_LIKE[:4000], np.uint8)
    large = np.frombuffer(TIMESTAMP_LIKE * 4, np.uint8)
    value = [small, large, TIMESTAMP_LIKE, TIMESTAMP_LIKE.decode("latin-1"), (small[:6], {b"\xd6\xff": 1})]
    got = loads_frames(dumps_frames(value))
    assert [a.tobytes() for a in got[:2]] == [small.tobytes(), large.tobytes()]
    assert got[2:4] == value[2:4] and got[4][0].tobytes() == small[:6].tobytes() and got[4][1] == {b"\xd6\xff": 1}
    record = msgpack.packb([TIMESTAMP_LIKE, {"k": TIMESTAMP_LIKE}], use_bin_type=True)
    assert decode_tensorpack_record(record) == [TIMESTAMP_LIKE, {"k": TIMESTAMP_LIKE}]


def test_deeply_nested_tuples_decode_without_recursion():
    obj = None
    for _ in range(300):
        obj = (obj,)
    got = loads(dumps(obj))
    for _ in range(300):
        assert type(got) is tuple and len(got) == 1
        got = got[0]
    assert got is None


def test_hostile_nesting_is_refused():
    body = b"\x91" * 100000 + b"\xc0"
    with pytest.raises(WireFormatError, match=r"malformed message body: StackError"):
        loads_frames(_message_with_body(body))
    mark = msgpack.packb(msgpack.ExtType(4, b""))
    with pytest.raises(WireFormatError, match=r"malformed message body: StackError"):
        loads_frames(_message_with_body(b"\x92" * 100000 + (mark + b"\xc0") * 100000))


# ----------------------------------------------------------------------------------- fuzzing

def _fuzz_corpus():
    return [
        [np.arange(5000, dtype=np.float32).reshape(50, 100), 3, "label", (1, 2.5)],
        {"a": np.zeros((2, 3), np.int8), 7: [None, b"xx"], "s": np.float16(1.5)},
        [np.ones((4, 4), np.complex64).T, np.array(True), (np.arange(2000, dtype=np.uint16)[::-1],)],
    ]


def test_fuzz_random_bytes_and_truncations_always_raise_wire_format_error():
    rng = random.Random(1234)
    for obj in _fuzz_corpus():
        data = dumps(obj)
        for _ in range(300):
            garbage = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
            with pytest.raises(WireFormatError):
                serialize._loads_wire(garbage)          # the wire format alone (sockets, inputpipe's files)
            try:
                loads(garbage)                          # else read as a tensorpack record: plain data or refused
            except WireFormatError:
                pass
            with pytest.raises(WireFormatError):
                loads(serialize._MAGIC + garbage)
        for cut in range(len(data)):
            if cut < 400 or rng.random() < 0.05:
                with pytest.raises(WireFormatError):
                    loads(data[:cut])
        frames = [bytes(f) for f in dumps_frames(obj)]
        for cut in range(len(frames[0])):
            with pytest.raises(WireFormatError):
                loads_frames([frames[0][:cut]] + frames[1:])


def test_fuzz_mutated_messages_decode_or_raise_wire_format_error():
    rng = random.Random(99)
    for obj in _fuzz_corpus():
        frames = [bytearray(f) for f in dumps_frames(obj)]
        header = frames[0]
        for _ in range(1500):
            mutated = bytearray(header)
            for _ in range(rng.randint(1, 4)):
                position = rng.randrange(len(mutated))
                mutated[position] = rng.getrandbits(8)
            try:
                loads_frames([bytes(mutated)] + frames[1:])
            except WireFormatError:
                pass


# ------------------------------------------------------------------------- fixed-width strings

STRING_ARRAYS = [
    np.array(["ab", "", "héllo ✓"]),                      # <U7, with an empty string
    np.array(["ab", "c"], dtype=">U2"),                   # big-endian UCS-4
    np.array([b"ab", b"\x00\xff", b""]),                   # |S2 with NUL and 0xff bytes
    np.array("ä"),                                        # 0-d str
    np.array(b"x\x00"),                                   # 0-d bytes
    np.array([], dtype="U3"),                             # empty
    np.array([], dtype="S1").reshape(0, 4),
    np.array([["a" * 2000] * 3] * 2),                     # a frame of its own (> 4 KiB)
    np.asfortranarray(np.array([["ab", "c"], ["d", "efg"]])),
    np.array(["abcd"] * 6)[::2],                          # strided
]


@pytest.mark.parametrize("arr", STRING_ARRAYS, ids=lambda a: "{}{}".format(a.dtype.str, a.shape))
def test_fixed_width_string_arrays_round_trip_byte_exact(arr):
    for got in roundtrips([arr, {"s": arr}]):
        for value in (got[0], got[1]["s"]):
            assert type(value) is np.ndarray
            assert value.dtype.str == arr.dtype.str and value.shape == arr.shape
            assert value.tobytes() == arr.tobytes()


def test_string_dtypes_are_checked_when_decoded():
    for name, ok in [(b"<U3", True), (b">U1", True), (b"|S9", True), (b"<U0", False), (b"|S0", False),
                     (b"<S3", False), (b"|U3", False), (b"=U3", False), (b"<U03", False),
                     (b"<U999999999", False), (b"<U3 ", False), (b"<T", False)]:
        body = msgpack.packb(msgpack.ExtType(2, _head(name, 1) + bytes(4)))
        if ok:
            itemsize = np.dtype(name.decode()).itemsize
            body = msgpack.packb(msgpack.ExtType(2, _head(name, 2) + bytes(2 * itemsize)))
            assert loads_frames(_message_with_body(body)).dtype.str == name.decode()
        else:
            with pytest.raises(WireFormatError, match=r"unsupported dtype .*fixed-width string"):
                loads_frames(_message_with_body(body))


# ------------------------------------------------------------------------------- frame limits

def test_frame_count_limit_is_checked_before_the_frames_are_read():
    assert DEFAULT_MAX_FRAMES == 1 << 16
    frames = dumps_frames([np.zeros(5000, np.uint8)] * 3)
    assert len(frames) == 4
    assert len(loads_frames(frames, max_frames=3)) == 3
    with pytest.raises(WireFormatError, match=r"loads_frames: 4 frames, more than the header and 2 array "
                                              r"frames \(raise max_frames"):
        loads_frames(frames, max_frames=2)
    # the count is checked before any frame is converted: objects that are no buffers at all
    with pytest.raises(WireFormatError, match=r"1000001 frames, more than the header and 65536"):
        loads_frames([object()] * 1000001)
    data = dumps([np.zeros(5000, np.uint8)] * 3)
    assert len(loads(data, max_frames=3)) == 3
    with pytest.raises(WireFormatError, match=r"loads: header declares 3 array frames, more than the limit of 2"):
        loads(data, max_frames=2)
    with pytest.raises(ValueError, match=r"max_frames must be an int >= 0, got -1"):
        loads(data, max_frames=-1)
