"""Fuzzing the wire format and its readers with hypothesis: arbitrary bytes and frames decode or
raise WireFormatError (never another exception, never a hang), and round trips are exact.
Derandomized and bounded (a few seconds in all) so CI runs it every time."""
import math
import time

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inputpipe.dataflow import RemoteDataZMQ
from inputpipe.dataflow.serialize import DatasetFormatError
from inputpipe.dataflow.tensorpack_records import decode_tensorpack_record
from inputpipe.utils.serialize import WireFormatError, dumps, dumps_frames, loads, loads_frames

# a module-scoped fixture is made once: the module's tests run in one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_wire_fuzz")

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

DTYPES = ["bool", "int8", "uint16", "int32", "int64", "uint64", "float16", "float32", ">f8", "complex64",
          "<U3", ">U2", "S4", "U1"]

arrays = st.sampled_from(DTYPES).flatmap(lambda dt: hnp.arrays(
    np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)))
big_arrays = hnp.arrays(np.uint8, st.integers(4097, 9000))          # frames of their own
scalars = (st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 64 - 1) | st.floats(allow_nan=False)
           | st.text(max_size=20) | st.binary(max_size=20)
           | st.sampled_from(["int8", "uint32", "float64", "bool"]).map(lambda dt: np.zeros((), dt)[()]))
objects = st.recursive(scalars | arrays | big_arrays, lambda inner: (
    st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(st.text(max_size=5) | st.integers(0, 9), inner, max_size=4)), max_leaves=12)


def same(a, b):
    """Equal values with equal types all the way down, arrays byte-exact."""
    if isinstance(a, np.ndarray):
        return type(b) is np.ndarray and a.dtype.str == b.dtype.str and a.shape == b.shape and \
            a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return type(a) is type(b) and a.tobytes() == b.tobytes()
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


@FUZZ
@given(objects)
def test_round_trips_are_exact(obj):
    assert same(obj, loads(dumps(obj)))
    assert same(obj, loads_frames(dumps_frames(obj)))
    assert same(obj, loads_frames([bytes(f) for f in dumps_frames(obj)], copy=True))


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_or_raise_wire_format_error(data):
    for decode in (lambda: loads(data), lambda: loads_frames([data]), lambda: loads(b"IPWF\x01" + data),
                   lambda: loads_frames([b"IPWF\x01\x02\x00\x00" + data])):
        try:
            decode()
        except WireFormatError:
            pass


def _mutations():
    messages = [dumps_frames(obj) for obj in (
        [np.arange(2000, dtype=np.int32), "x", (1, 2.5)], {"a": np.array(["ab", "c"]), "b": [None, b"\x00"]},
        np.zeros((3, 0)), (np.float32(1), [np.ones(5000, np.uint8), np.ones(3, ">c8")]))]
    return st.tuples(st.sampled_from(messages), st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)),
                                                         min_size=1, max_size=6),
                     st.integers(0, 3), st.sampled_from(["flip", "truncate", "extend", "drop", "add"]))


@FUZZ
@given(_mutations())
def test_mutated_messages_decode_or_raise_wire_format_error(case):
    frames, edits, which, how = case
    frames = [bytearray(bytes(f)) for f in frames]
    target = frames[which % len(frames)]
    for at, value in edits:
        if how == "flip" and target:
            target[at % len(target)] = value
        elif how == "truncate":
            del target[at % (len(target) + 1):]
        elif how == "extend":
            target.extend(bytes([value]) * (at % 7 + 1))
    if how == "drop" and len(frames) > 1:
        del frames[1 + which % (len(frames) - 1)]
    if how == "add":
        frames.append(bytes(edits[0][0] % 64))
    for decode in (lambda: loads_frames(frames), lambda: loads(b"".join(frames)), lambda: loads_frames(frames[:1])):
        try:
            decode()
        except WireFormatError:
            pass


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 64 - 1) | st.floats() | st.text(max_size=8)
    | st.binary(max_size=8) | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=12))
    | st.builds(msgpack.Timestamp, st.integers(0, 2 ** 33), st.integers(0, 999999999)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3) | st.binary(max_size=3),
                                                                inner, max_size=3), max_leaves=10)


@FUZZ
@given(msgpack_values)
def test_any_msgpack_body_decodes_or_raises_and_undefined_ext_types_never_pass(value):
    body = msgpack.packb(value, use_bin_type=True)
    header = b"IPWF\x01\x02\x00\x00" + bytes(4) + len(body).to_bytes(8, "little")
    try:
        decoded = loads_frames([header + body])
    except WireFormatError:
        return
    pending = [decoded]
    while pending:                                        # nothing but plain data came out
        item = pending.pop()
        assert not isinstance(item, (msgpack.ExtType, msgpack.Timestamp))
        if isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())


@FUZZ
@given(msgpack_values | st.binary(max_size=200))
def test_tensorpack_records_decode_or_raise_dataset_format_error(value):
    data = value if isinstance(value, bytes) else msgpack.packb(value, use_bin_type=True)
    try:
        decode_tensorpack_record(data)
    except DatasetFormatError:
        pass


@pytest.fixture(scope="module")
def receiver():
    df = RemoteDataZMQ("tcp://127.0.0.1:*", max_bytes=1 << 16, max_frames=8)
    df.reset_state()
    context = zmq.Context()
    sender = context.socket(zmq.PUSH)
    sender.connect(df.endpoints[0])
    yield df, sender
    sender.close(linger=0)
    context.term()
    df.close()


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(frames=st.lists(st.binary(max_size=64), min_size=1, max_size=20), valid_first=st.booleans())
def test_socket_reader_drops_or_decodes_arbitrary_frames_and_counts_each_drop(receiver, frames, valid_first):
    df, sender = receiver
    if valid_first:
        frames = [bytes(dumps_frames([1])[0])] + frames
    before = df.rejected
    sender.send_multipart(frames)
    sender.send_multipart(dumps_frames(["marker"]))
    got, deadline = [], time.monotonic() + 10
    while ["marker"] not in got:
        assert time.monotonic() < deadline, "the reader stopped answering"
        dp = df.receive(0.05)
        if dp is not None:
            got.append(dp)
    got.remove(["marker"])
    # the fuzzed message either arrived as one datapoint or was dropped and counted once
    assert len(got) + (df.rejected - before) == 1


@FUZZ
@given(st.integers(-128, -1), st.sampled_from([1, 2, 4, 8, 16]))
def test_reserved_negative_ext_types_are_refused(code, size):
    body = bytes([{1: 0xd4, 2: 0xd5, 4: 0xd6, 8: 0xd7, 16: 0xd8}[size], code & 0xFF]) + bytes(size)
    header = b"IPWF\x01\x02\x00\x00" + bytes(4) + len(body).to_bytes(8, "little")
    with pytest.raises(WireFormatError):
        loads_frames([header + body])


def _ext_header(form, length):
    """The msgpack header of an ext of ``length`` bytes in the given form (type byte not included)."""
    if form == "ext8":
        return b"\xc7" + length.to_bytes(1, "big")
    if form == "ext16":
        return b"\xc8" + length.to_bytes(2, "big")
    return b"\xc9" + length.to_bytes(4, "big")


def _places(item):
    """``item`` (msgpack bytes) alone, in a list, as a map value and as a map key."""
    return [item, b"\x92\x01" + item, b"\x81\xa1k" + item, b"\x81" + item + b"\x01"]


@FUZZ
@given(st.sampled_from(["ext8", "ext16", "ext32"]), st.sampled_from([4, 8, 12]), st.binary(min_size=12, max_size=12),
       st.integers(0, 3))
def test_timestamps_in_non_canonical_ext_encodings_are_refused_like_the_canonical_ones(form, length, payload, place):
    # msgpack decodes ext type -1 of 4, 8 or 12 bytes to a Timestamp in any ext encoding (fixext4/8,
    # ext8, ext16, ext32), never calling ext_hook; canonical packers use fixext4/8 and ext8 (12 bytes).
    if length in (8, 12):
        payload = bytes(4) + payload[4:]              # nanoseconds 0: a valid 64- or 96-bit timestamp
    item = _ext_header(form, length) + b"\xff" + payload[:length]
    body = _places(item)[place]
    header = b"IPWF\x01\x02\x00\x00" + bytes(4) + len(body).to_bytes(8, "little")
    with pytest.raises(WireFormatError, match=r"ext type -1 \(timestamp\) is not part of the wire format"):
        loads_frames([header + body])
    with pytest.raises(DatasetFormatError, match=r"ext type -1 \(timestamp\)"):
        decode_tensorpack_record(body)


@pytest.mark.parametrize("form", ["fixext", "ext8", "ext16", "ext32"])
def test_ext_type_minus_one_of_any_length_in_any_encoding_never_decodes(form):
    fixed = {1: b"\xd4", 2: b"\xd5", 4: b"\xd6", 8: b"\xd7", 16: b"\xd8"}
    lengths = sorted(fixed) if form == "fixext" else range(21)
    for length in lengths:
        head = fixed[length] if form == "fixext" else _ext_header(form, length)
        for body in _places(head + b"\xff" + bytes(length)):
            header = b"IPWF\x01\x02\x00\x00" + bytes(4) + len(body).to_bytes(8, "little")
            with pytest.raises(WireFormatError):
                loads_frames([header + body])
            with pytest.raises(DatasetFormatError):
                decode_tensorpack_record(body)
