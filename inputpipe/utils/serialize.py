"""The wire format: msgpack for structure, raw bytes for numpy arrays, never pickle (:func:`loads`
also reads records of tensorpack's dataset files; it unpickles only when asked, see its docs).

Everything inputpipe sends between processes or machines, and every dataset file it writes, is
encoded here. Decoding only ever builds plain data (lists, tuples, dicts, str, bytes, numbers,
None, numpy scalars and numpy arrays of numeric, bool or fixed-width string dtype); it never runs
code, and it refuses malformed, truncated, oversized or unknown input (including every msgpack
extension type it does not define, msgpack's timestamp among them) with a :class:`WireFormatError`.
A message is bounded as a whole: at most ``max_bytes`` bytes and ``max_frames`` array frames,
both checked before any object is built.

Two forms of the same message:

- ``dumps(obj) -> bytes``: one self-contained buffer (for files and single-frame sockets);
- ``dumps_frames(obj) -> list``: frame 0 is the header, every later frame is the memory of one
  array itself (no copy for contiguous arrays), ready for ``zmq.Socket.send_multipart(copy=False)``.

Decoded arrays are built on the received memory without copying. They are read-only unless the
input buffer is writable (e.g. a ``bytearray``); pass ``copy=True`` to get independent, writable
arrays. See ``docs/wire_format.md`` for the byte layout.

Example::

    from inputpipe.utils.serialize import dumps, loads, dumps_frames, loads_frames
    dp = [np.zeros((224, 224, 3), np.uint8), 7, {"name": "cat"}]
    assert loads(dumps(dp))[1] == 7
    frames = dumps_frames(dp)               # socket.send_multipart(frames, copy=False)
    img, label, meta = loads_frames(frames)  # img shares memory with frames[1]
"""
import pickle
import struct
from typing import Any, List, NoReturn, Optional, Sequence, Tuple

import msgpack
import numpy as np

# msgpack's own packer, bound once (the unpacker likewise, in _wire_decode): libraries that patch
# the msgpack module's functions must not change inputpipe's wire format.
try:
    from msgpack._cmsgpack import Packer as _Packer
except ImportError:                 # msgpack without its C extension
    from msgpack.fallback import Packer as _Packer

from ._tensorpack_records import NotARecordError, decode_record, is_pickle
from ._wire_decode import _as_bytes_view, _check_limit, _check_max_frames, _decode, _read_preamble
from ._wire_layout import (  # noqa: F401  (_MAGIC, _PREAMBLE: the layout, for tests and tools)
    _DTYPE_NAMES, _EXT_ARRAY, _EXT_INLINE_ARRAY, _EXT_SCALAR, _EXT_TUPLE, _FRAME_INDEX, _INLINE_ARRAY_MAX_BYTES,
    _LAYOUT_FRAMES, _LAYOUT_SINGLE, _MAGIC, _PADDING, _PREAMBLE, DEFAULT_MAX_FRAMES, DEFAULT_MAX_MESSAGE_BYTES,
    WIRE_FORMAT_VERSION, WireFormatError, _align, _array_head, _dtype_name, _ext, _short_repr,
)

__all__ = [
    "dumps",
    "loads",
    "dumps_frames",
    "loads_frames",
    "WireFormatError",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_FRAMES",
    "WIRE_FORMAT_VERSION",
]

_TUPLE_MARK = _ext(_EXT_TUPLE, b"")
# Subclasses of these travel as the plain type.
_PLAIN_BASES: Tuple[type, ...] = (float, str, bytes, list, dict)


# ----------------------------------------------------------------------------------- encoding

def _unsupported_dtype_message(dtype: np.dtype) -> str:
    if dtype.kind == "O":
        why = "object arrays would need pickle, which the wire format never uses; convert it to a list"
    else:
        why = ("only bool, int8..int64, uint8..uint64, float16/32/64, complex64/128 and fixed-width "
               "str/bytes (U, S) arrays are carried")
    return "cannot serialize a numpy array of dtype {}: {}".format(dtype, why)


class _Encoder:
    """Turns the types msgpack does not know into msgpack ext types, collecting array frames."""

    __slots__ = ("frames", "inline_max")

    def __init__(self, inline_max: int):
        self.frames: List[Any] = []
        self.inline_max = inline_max

    def pack(self, obj: Any) -> bytes:
        return _Packer(default=self.default, use_bin_type=True, strict_types=True).pack(obj)

    def default(self, obj: Any) -> Any:
        # Called by msgpack for everything that is not exactly None/bool/int/float/str/bytes/
        # list/dict (strict_types: subclasses and tuples come here too).
        if isinstance(obj, np.ndarray):
            return self.array(obj)
        if isinstance(obj, np.generic):
            return self.scalar(obj)
        if isinstance(obj, tuple):
            # Not an ext holding the packed items: decoding that would nest msgpack unpackers,
            # each with a large C stack frame, as deep as hostile input wants.
            return [_TUPLE_MARK, *obj]
        if isinstance(obj, int):
            if type(obj) is int:
                raise TypeError("cannot serialize int {}: it does not fit in 64 bits (the wire format "
                                "carries -2**63 .. 2**64-1)".format(_short_repr(obj)))
            return int(obj)
        for base in _PLAIN_BASES:
            if isinstance(obj, base):
                return base(obj)
        raise TypeError("cannot serialize an object of type {}.{} ({}): the wire format carries "
                        "only None, bool, int, float, str, bytes, list, tuple, dict, numpy scalars "
                        "and numeric/bool/fixed-width string numpy arrays".format(
                            type(obj).__module__, type(obj).__qualname__, _short_repr(obj)))

    def array(self, arr: np.ndarray) -> msgpack.ExtType:
        dtype_name = _DTYPE_NAMES.get(arr.dtype) or _dtype_name(arr.dtype)
        if dtype_name is None:
            raise TypeError(_unsupported_dtype_message(arr.dtype))
        flags = arr.flags
        # A Fortran-ordered array travels as its (C-contiguous) transpose: no copy.
        order = 1 if flags.f_contiguous and not flags.c_contiguous else 0
        head = _array_head(dtype_name, arr.shape, order)
        if arr.nbytes <= self.inline_max:
            return _ext(_EXT_INLINE_ARRAY, head + arr.tobytes("F" if order else "C"))
        if order:
            memory = arr.T  # C-contiguous
        elif flags.c_contiguous:
            memory = arr
        else:
            memory = np.ascontiguousarray(arr)  # the one copy of a strided array
        index = len(self.frames)
        # ndarray.data is memoryview(memory) (numpy's stubs type ndarray as a buffer only on Python >= 3.12)
        self.frames.append(memory.data.cast("B"))
        return _ext(_EXT_ARRAY, _FRAME_INDEX.pack(index) + head)

    @staticmethod
    def scalar(value: np.generic) -> Any:
        if isinstance(value, np.str_):
            return str(value)
        if isinstance(value, np.bytes_):
            return bytes(value)
        dtype_name = _DTYPE_NAMES.get(value.dtype)
        if dtype_name is None:
            raise TypeError("cannot serialize a numpy scalar of dtype {} ({}): only bool, integer, "
                            "float and complex scalars are carried".format(value.dtype, _short_repr(value)))
        return _ext(_EXT_SCALAR, bytes([len(dtype_name)]) + dtype_name + value.tobytes())


def _locate(obj: Any, path: str, depth: int = 0) -> Optional[str]:
    """The path of the first part of ``obj`` that the encoder refuses (only used for errors)."""
    if depth > 100:
        return None
    if isinstance(obj, dict):
        for key, value in obj.items():
            found = _locate(key, "{} key {!r}".format(path, key), depth + 1) or \
                _locate(value, "{}[{!r}]".format(path, key), depth + 1)
            if found:
                return found
        return None
    if isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            found = _locate(value, "{}[{}]".format(path, i), depth + 1)
            if found:
                return found
        return None
    try:
        _Encoder(_INLINE_ARRAY_MAX_BYTES).pack(obj)
    except (TypeError, ValueError, OverflowError):
        return path
    return None


def _encode(obj: Any):
    encoder = _Encoder(_INLINE_ARRAY_MAX_BYTES)
    try:
        body = encoder.pack(obj)
    except (TypeError, ValueError, OverflowError) as err:
        where = _locate(obj, "obj")
        raise TypeError("wire format: {}{}".format(err, " (at {})".format(where) if where else "")) from None
    frames = encoder.frames
    sizes = [len(frame) if isinstance(frame, bytes) else frame.nbytes for frame in frames]
    return body, frames, sizes


def _header(layout: int, body: bytes, sizes: List[int]) -> List[bytes]:
    return [_PREAMBLE.pack(_MAGIC, WIRE_FORMAT_VERSION, layout, 0, len(sizes), len(body)),
            struct.pack("<%dQ" % len(sizes), *sizes), body]


def dumps(obj: Any) -> bytes:
    """Encode ``obj`` as one self-contained buffer (each array's memory is copied once).

    Raises ``TypeError`` naming the type and where it is in ``obj`` for anything the format
    does not carry (object arrays, custom classes, ints beyond 64 bits).

    Example::

        data = dumps([np.arange(6).reshape(2, 3), "label"])
        arr, name = loads(data)
    """
    body, frames, sizes = _encode(obj)
    chunks = _header(_LAYOUT_SINGLE, body, sizes)
    offset = sum(len(chunk) for chunk in chunks)
    for frame, size in zip(frames, sizes):
        aligned = _align(offset)
        chunks.append(_PADDING[:aligned - offset])
        chunks.append(frame)
        offset = aligned + size
    return b"".join(chunks)


def dumps_frames(obj: Any) -> List[Any]:
    """Encode ``obj`` as a list of buffers: frame 0 is the header (``bytes``), each later frame is
    one array's memory. Contiguous arrays are not copied (their frame is a ``memoryview`` of the
    array, so do not modify the arrays until the frames are sent); other arrays are copied once.
    Arrays of at most 4 KiB travel inside the header.

    Example::

        socket.send_multipart(dumps_frames(batch), copy=False)
        batch = loads_frames(socket.recv_multipart(copy=False))
    """
    body, frames, sizes = _encode(obj)
    return [b"".join(_header(_LAYOUT_FRAMES, body, sizes))] + frames


def loads(data: Any, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, copy: bool = False,
          max_frames: int = DEFAULT_MAX_FRAMES, *, allow_pickle: Optional[bool] = None) -> Any:
    """Decode a buffer made by :func:`dumps` (or a single frame of :func:`dumps_frames` that
    holds no array frames), or one record of a tensorpack dataset file.

    Arrays are views of ``data``: read-only when ``data`` is immutable (``bytes``), writable when
    it is a ``bytearray``; ``copy=True`` gives every array its own writable memory. Raises
    :class:`WireFormatError` for anything that is not a complete, valid message of at most
    ``max_bytes`` bytes and ``max_frames`` arrays stored outside the header.

    Bytes that do not start with the wire format's magic ``IPWF`` are read as a record of
    tensorpack's ``dumps`` (values of tensorpack-made LMDB or TFRecord files): msgpack-numpy is
    decoded as data (numpy arrays of numeric, bool or fixed-width string dtypes, always writable
    copies; no extension types), and a pickle is refused unless ``allow_pickle=True`` or, when ``allow_pickle`` is not
    passed, the environment variable ``INPUTPIPE_ALLOW_PICKLE=1`` (trusted files only: unpickling
    runs code chosen by whoever wrote them). Sockets and inputpipe's own files never take this path.

    Example::

        arr = loads(dumps(np.ones(3)), copy=True)
        arr += 1
        dp = loads(txn.get(b"00000007"))   # a value of a tensorpack LMDB file (msgpack-numpy)
    """
    what = "loads"
    view = _as_bytes_view(data, what)
    if not _MAGIC.startswith(bytes(view[:len(_MAGIC)])):
        _check_max_frames(max_frames)
        _check_limit(len(view), max_bytes, what)
        try:
            return decode_record(view, allow_pickle, what)
        except NotARecordError as err:
            raise WireFormatError("loads: neither an inputpipe wire-format message (expected it to start with {!r}, "
                                  "got {!r}) nor a tensorpack record ({})".format(
                                      _MAGIC, bytes(view[:8]), err.detail)) from None
    return _loads_wire(view, max_bytes, copy, max_frames)


def _loads_wire(data: Any, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, copy: bool = False,
                max_frames: int = DEFAULT_MAX_FRAMES) -> Any:
    """:func:`loads` of the wire format only (sockets, worker channels, inputpipe's own files)."""
    what = "loads"
    view = _as_bytes_view(data, what)
    _check_limit(len(view), max_bytes, what)
    layout, sizes, body, offset = _read_preamble(view, what, _check_max_frames(max_frames))
    if layout == _LAYOUT_FRAMES and sizes:
        raise WireFormatError("loads: this is the header frame of a multi-frame message with {} array "
                              "frames (made by dumps_frames); decode all frames with loads_frames".format(
                                  len(sizes)))
    frames: List[memoryview] = []
    for size in sizes:
        start = _align(offset)
        if start + size > len(view):
            raise WireFormatError("loads: truncated: array frame {} of {} needs bytes {}..{}, the message "
                                  "has {} bytes".format(len(frames) + 1, len(sizes), start, start + size, len(view)))
        frames.append(view[start:start + size])
        offset = start + size
    if offset != len(view):
        raise WireFormatError("loads: message should be {} bytes, got {} ({} unexpected trailing bytes)".format(
            offset, len(view), len(view) - offset))
    return _decode(body, frames, copy, what)


def loads_frames(frames: Sequence[Any], max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, copy: bool = False,
                 max_frames: int = DEFAULT_MAX_FRAMES) -> Any:
    """Decode the frames made by :func:`dumps_frames` (bytes, memoryview or ``zmq.Frame`` objects).

    Arrays are built on the frames' memory without copying: they are read-only unless the frames
    are writable buffers, and they keep the frames alive. ``copy=True`` gives every array its own
    writable memory. A one-element list holding a :func:`dumps` buffer is accepted too. More than
    ``max_frames`` array frames, or more than ``max_bytes`` bytes in all, are refused before any
    frame is looked at further.

    Example::

        frames = socket.recv_multipart(copy=False)
        batch = loads_frames(frames)
    """
    what = "loads_frames"
    if isinstance(frames, (bytes, bytearray, memoryview)) or not isinstance(frames, Sequence):
        raise WireFormatError("loads_frames: expected a list of frames, got {}".format(type(frames).__name__))
    if not frames:
        raise WireFormatError("loads_frames: expected at least the header frame, got an empty list")
    if len(frames) > _check_max_frames(max_frames) + 1:
        raise WireFormatError("loads_frames: {} frames, more than the header and {} array frames (raise "
                              "max_frames if such messages are expected)".format(len(frames), max_frames))
    views = [_as_bytes_view(frame, "{} frame {}".format(what, i)) for i, frame in enumerate(frames)]
    _check_limit(sum(len(view) for view in views), max_bytes, what)
    header = views[0]
    layout, sizes, body, header_end = _read_preamble(header, what, max_frames)
    if layout == _LAYOUT_SINGLE:
        if len(views) == 1:
            return _loads_wire(header, max_bytes=max_bytes, copy=copy, max_frames=max_frames)
        raise WireFormatError("loads_frames: frame 0 is a single-buffer message (made by dumps), but {} "
                              "more frames came with it".format(len(views) - 1))
    if header_end != len(header):
        raise WireFormatError("loads_frames: header frame should be {} bytes, got {}".format(header_end, len(header)))
    if len(views) != 1 + len(sizes):
        raise WireFormatError("loads_frames: header declares {} array frames, got {} frames after the "
                              "header".format(len(sizes), len(views) - 1))
    for i, (view, size) in enumerate(zip(views[1:], sizes)):
        if len(view) != size:
            raise WireFormatError("loads_frames: array frame {} should be {} bytes, got {}".format(i + 1, size, len(view)))
    return _decode(body, views[1:], copy, what)


# ------------------------------------------------------------------ tensorpack's serializer classes
# tensorpack.utils.serialize defines these outside its __all__; they are kept here for its scripts.

#: tensorpack's limit on a msgpack string, bytes, array or map length (about 1 GB); here a whole
#: message may have up to :data:`DEFAULT_MAX_MESSAGE_BYTES` (1 GiB).
MAX_MSGPACK_LEN = 1000000000


class MsgpackSerializer:
    """tensorpack's msgpack serializer. ``dumps`` writes inputpipe's wire format (msgpack with raw
    array frames, see the module docstring); ``loads`` reads that and tensorpack's msgpack-numpy
    records (``TENSORPACK_SERIALIZE=msgpack``), as data only. The bytes ``dumps`` writes are not
    msgpack-numpy: tensorpack's own ``loads`` cannot read them.

    Example::

        data = MsgpackSerializer.dumps([np.arange(3), "label"])
        array, label = MsgpackSerializer.loads(data)
    """

    @staticmethod
    def dumps(obj: Any) -> bytes:
        return dumps(obj)

    @staticmethod
    def loads(buf: Any) -> Any:
        view = _as_bytes_view(buf, "MsgpackSerializer.loads")
        if is_pickle(view):
            raise WireFormatError("MsgpackSerializer.loads: these bytes are a pickle, not msgpack; PickleSerializer.loads "
                                  "reads a trusted pickle")
        return loads(view, allow_pickle=False)


class PickleSerializer:
    """tensorpack's pickle serializer (tensorpack 0.11's default). ``dumps`` pickles; ``loads``
    unpickles only when allowed, since unpickling runs code chosen by whoever made the bytes:
    ``allow_pickle=True``, or (when it is not passed) the environment variable
    ``INPUTPIPE_ALLOW_PICKLE=1``. Otherwise it raises :class:`WireFormatError` saying how to
    allow it or convert the data. Use it only for your own trusted data.

    Example::

        data = PickleSerializer.dumps({"a": 1})
        assert PickleSerializer.loads(data, allow_pickle=True) == {"a": 1}
    """

    @staticmethod
    def dumps(obj: Any) -> bytes:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def loads(buf: Any, *, allow_pickle: Optional[bool] = None) -> Any:
        view = _as_bytes_view(buf, "PickleSerializer.loads")
        if not is_pickle(view):
            raise WireFormatError("PickleSerializer.loads: expected a pickle of protocol 2 to 5, got bytes starting "
                                  "with {!r}".format(bytes(view[:8])))
        return decode_record(view, allow_pickle, "PickleSerializer.loads")


_PYARROW_GONE = ("PyarrowSerializer.{}: pyarrow.serialize()/deserialize() were deprecated in pyarrow 2.0 and removed in "
                 "pyarrow 12.0, so tensorpack's pyarrow serializer cannot work with a current pyarrow. Use inputpipe's "
                 "wire format instead: inputpipe.utils.serialize.dumps/loads (or MsgpackSerializer), which carries "
                 "numpy arrays without a copy")


def _pyarrow_gone(method: str) -> NoReturn:
    raise NotImplementedError(_PYARROW_GONE.format(method))


class PyarrowSerializer:
    """A stand-in for tensorpack's pyarrow serializer: pyarrow removed the functions it used, so
    every method raises ``NotImplementedError`` naming what replaces it (:func:`dumps` and
    :func:`loads`, the wire format).

    Example::

        data = dumps(datapoint)        # instead of PyarrowSerializer.dumps(datapoint)
    """

    @staticmethod
    def dumps(obj: Any) -> NoReturn:
        _pyarrow_gone("dumps")

    @staticmethod
    def dumps_bytes(obj: Any) -> NoReturn:
        _pyarrow_gone("dumps_bytes")

    @staticmethod
    def loads(buf: Any) -> NoReturn:
        _pyarrow_gone("loads")
