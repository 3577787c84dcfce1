"""The wire format: msgpack for structure, raw bytes for numpy arrays, never pickle.

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
import math
import re
import struct
from typing import Any, List, Optional, Sequence

import msgpack
import numpy as np

# msgpack's own packer and unpacker, bound once: libraries that patch the msgpack module's
# functions (msgpack_numpy.patch(), which importing tensorpack calls, makes msgpack.unpackb
# unpickle some maps) must not change, slow down or open up inputpipe's wire format.
try:
    from msgpack._cmsgpack import Packer as _Packer, unpackb as _unpackb
except ImportError:                 # msgpack without its C extension
    from msgpack.fallback import Packer as _Packer, unpackb as _unpackb
from msgpack.ext import Timestamp as _Timestamp

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

#: Largest message (all frames together) a decoder accepts unless told otherwise: 1 GiB. A batch of
#: 256 float32 ImageNet images is 154 MB, so this only stops garbage or hostile sizes.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30

#: Most array frames a decoder accepts in one message unless told otherwise. A datapoint with more
#: than this many arrays above 4 KiB is unusual; a hostile message of millions of empty frames is
#: refused from its header (or, on a socket, while its frames are counted) before anything is built.
DEFAULT_MAX_FRAMES = 1 << 16

#: Version of the byte layout. A decoder refuses any other version with a clear error.
WIRE_FORMAT_VERSION = 1

_MAGIC = b"IPWF"
# magic, version, layout, reserved (0), number of array frames, msgpack body length
_PREAMBLE = struct.Struct("<4sBBHIQ")
_LAYOUT_SINGLE = 1  # dumps(): header, then every array buffer, each at a 64-byte aligned offset
_LAYOUT_FRAMES = 2  # dumps_frames(): the header frame alone; array buffers are the next frames
_ALIGNMENT = 64

# Arrays up to this size travel inside the header instead of in a frame of their own: a frame
# costs more (a zmq message, a memoryview, padding) than copying a few KiB.
_INLINE_ARRAY_MAX_BYTES = 4096

_EXT_ARRAY = 1  # an array whose memory is one of the frames
_EXT_INLINE_ARRAY = 2  # a small array whose memory follows its description inside the ext
_EXT_SCALAR = 3  # a numpy scalar: dtype + raw bytes
_EXT_TUPLE = 4  # marks a tuple: a msgpack array whose first item is this (empty) ext
_EXT_NAMES = {_EXT_ARRAY: "array", _EXT_INLINE_ARRAY: "inline array", _EXT_SCALAR: "numpy scalar",
              _EXT_TUPLE: "tuple"}

# An array's description: order (0 = C, 1 = Fortran), ndim, length of the dtype string; then the
# dtype string (numpy's dtype.str, e.g. "<f4"), then ndim little-endian uint64 dimensions, then
# zero padding to a multiple of 8 bytes. A frame array's ext is a uint32 frame index followed by
# the description; an inline array's ext is the description followed by the array's bytes.
_ARRAY_HEAD = struct.Struct("<BBB")
_MAX_NDIM = 64

_ALLOWED_DTYPES = {}
for _name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"):
    for _dt in (np.dtype(_name).newbyteorder("<"), np.dtype(_name).newbyteorder(">")):
        _ALLOWED_DTYPES[_dt.str.encode("ascii")] = _dt
del _name, _dt

_DTYPE_NAMES = {dtype: name for name, dtype in _ALLOWED_DTYPES.items()}

# Fixed-width strings: numpy's dtype.str of a str (UCS-4, either byte order) or bytes array, e.g.
# "<U5" or "|S3", with a width of 1 .. 2**28 - 1 characters.
_STRING_DTYPE_NAME = re.compile(rb"(?:[<>]U|\|S)[1-9][0-9]{0,8}\Z")
_MAX_STRING_WIDTH = 1 << 28


def _string_dtype(name: bytes) -> Optional[np.dtype]:
    """The fixed-width string dtype named ``name`` (canonical ``dtype.str`` only), or None."""
    if not _STRING_DTYPE_NAME.match(name) or int(name[2:]) >= _MAX_STRING_WIDTH:
        return None
    return np.dtype(name.decode("ascii"))


def _dtype_name(dtype: np.dtype) -> Optional[bytes]:
    """The name an array of ``dtype`` travels under, or None for a dtype the format does not carry."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None and dtype.kind in "US" and dtype.itemsize and \
            _string_dtype(dtype.str.encode("ascii")) == dtype:
        name = dtype.str.encode("ascii")
    return name


def _lookup_dtype(name: bytes) -> Optional[np.dtype]:
    return _ALLOWED_DTYPES.get(name) or _string_dtype(name)
_PADDING = bytes(_ALIGNMENT)
_FRAME_INDEX = struct.Struct("<I")
_CACHE_SIZE = 1024


def _ext(code: int, data: bytes) -> msgpack.ExtType:
    # msgpack.ExtType(code, data) re-validates its arguments in Python on every call; these are
    # known to be valid, and a datapoint may hold many small arrays.
    return tuple.__new__(msgpack.ExtType, (code, data))


_TUPLE_MARK = _ext(_EXT_TUPLE, b"")
_head_cache = {}


def _array_head(dtype_name: bytes, shape: tuple, order: int) -> bytes:
    """The description of an array after its frame index: order, ndim, dtype, shape, padded
    to a multiple of 8 bytes (so inline data that follows stays aligned). Cached by shape."""
    key = (dtype_name, shape, order)
    head = _head_cache.get(key)
    if head is None:
        head = _ARRAY_HEAD.pack(order, len(shape), len(dtype_name)) + dtype_name + \
            struct.pack("<%dQ" % len(shape), *shape)
        head += bytes(-len(head) % 8)
        if len(_head_cache) >= _CACHE_SIZE:
            _head_cache.clear()
        _head_cache[key] = head
    return head


class WireFormatError(ValueError):
    """Input that is not a valid inputpipe wire-format message: malformed, truncated, too large,
    of another format version, or of a type the format does not carry.

    Example::

        try:
            obj = loads(data)
        except WireFormatError as err:
            logger.error("dropping bad message: %s", err)
    """


def _align(offset: int) -> int:
    return (offset + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


def _short_repr(obj: Any, limit: int = 80) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[:limit - 3] + "..."


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
        for base in (float, str, bytes, list, dict):
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
        self.frames.append(memoryview(memory).cast("B"))
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


# ----------------------------------------------------------------------------------- decoding

def _as_bytes_view(buffer: Any, what: str) -> memoryview:
    """A flat, contiguous byte view of a bytes-like object (bytes, bytearray, memoryview,
    numpy array, mmap, zmq.Frame, ...), without copying."""
    try:
        view = memoryview(buffer)
    except TypeError:
        inner = getattr(buffer, "buffer", None)  # older zmq.Frame exposes its memory here
        if inner is None:
            raise WireFormatError("{}: expected a bytes-like object (bytes, bytearray, memoryview or "
                                  "zmq.Frame), got {}".format(what, type(buffer).__name__)) from None
        view = memoryview(inner)
    if not view.c_contiguous:
        raise WireFormatError("{}: expected a contiguous buffer, got a strided {}".format(
            what, type(buffer).__name__))
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


_TUPLE_MARK_DECODED = object()

# msgpack decodes its timestamp extension (type -1) itself, without calling ext_hook. Its three
# encodings start with these bytes; a body without them holds no timestamp, and a body with them
# (perhaps only inside binary data) is searched for decoded timestamps.
_TIMESTAMP_START = re.compile(rb"[\xd6\xd7]\xff|\xc7\x0c\xff")


def _refuse_timestamps(obj: Any) -> None:
    """Raise WireFormatError if a msgpack Timestamp is anywhere in ``obj`` (keys included)."""
    pending = [obj]
    while pending:
        item = pending.pop()
        if isinstance(item, _Timestamp):
            raise WireFormatError("msgpack ext type -1 (timestamp) is not part of the wire format (it "
                                  "defines ext types {})".format(
                                      ", ".join("{} ({})".format(k, v) for k, v in sorted(_EXT_NAMES.items()))))
        if isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())


class _Decoder:
    """Builds the objects of one message; ``ext_hook`` is handed every msgpack ext type."""

    __slots__ = ("frames", "used", "copy", "copy_inline", "open_tuple_marks")

    def __init__(self, frames: List[memoryview], copy: bool, writable_header: bool):
        self.frames = frames
        self.used = [False] * len(frames)
        self.copy = copy
        # Inline arrays are views of msgpack's (immutable) ext bytes; they are copied when the
        # message's own memory is writable, so writability never depends on an array's size.
        self.copy_inline = copy or writable_header
        self.open_tuple_marks = 0  # tuple marks decoded but not (yet) at the head of a list

    def unpack(self, data: Any) -> Any:
        obj = _unpackb(data, ext_hook=self.ext_hook, list_hook=self.list_hook, raw=False, strict_map_key=False)
        if _TIMESTAMP_START.search(data) is not None:
            _refuse_timestamps(obj)
        if self.open_tuple_marks:
            raise WireFormatError("a tuple mark appears outside the head of a list")
        if not all(self.used):
            raise WireFormatError("{} of {} array frames are not referenced by the body".format(
                self.used.count(False), len(self.frames)))
        return obj

    def list_hook(self, items: list) -> Any:
        if items and items[0] is _TUPLE_MARK_DECODED:
            self.open_tuple_marks -= 1
            return tuple(items[1:])
        return items

    def ext_hook(self, code: int, data: bytes) -> Any:
        if code == _EXT_INLINE_ARRAY or code == _EXT_ARRAY:
            return self.array(code, data)
        if code == _EXT_SCALAR:
            return self.scalar(data)
        if code == _EXT_TUPLE:
            if data:
                raise WireFormatError("a tuple mark must be empty, got {} bytes".format(len(data)))
            self.open_tuple_marks += 1
            return _TUPLE_MARK_DECODED
        raise WireFormatError("unknown msgpack ext type {} (expected one of {})".format(
            code, ", ".join("{} ({})".format(k, v) for k, v in sorted(_EXT_NAMES.items()))))

    def array(self, code: int, data: bytes) -> np.ndarray:
        if code == _EXT_ARRAY:
            if len(data) < _FRAME_INDEX.size:
                raise WireFormatError("array description of {} bytes has no frame index".format(len(data)))
            index = _FRAME_INDEX.unpack_from(data)[0]
            dtype, shape, order, nbytes, end = _parse_array_head(data, _FRAME_INDEX.size, "array")
            if end != len(data):
                raise WireFormatError("array description has {} trailing bytes".format(len(data) - end))
            if index >= len(self.frames) or self.used[index]:
                raise WireFormatError("array refers to frame {} of {} ({})".format(
                    index + 1, len(self.frames), "already used" if index < len(self.frames) else "missing"))
            self.used[index] = True
            memory = self.frames[index]
            if len(memory) != nbytes:
                raise WireFormatError("array of dtype {} and shape {} needs {} bytes, its frame has {}".format(
                    dtype, shape, nbytes, len(memory)))
            arr = np.ndarray(shape, dtype=dtype, buffer=memory, order="F" if order else "C")
        else:
            dtype, shape, order, nbytes, end = _parse_array_head(data, 0, "inline array")
            if len(data) - end != nbytes:
                raise WireFormatError("inline array of dtype {} and shape {} needs {} bytes, got {}".format(
                    dtype, shape, nbytes, len(data) - end))
            arr = np.ndarray(shape, dtype=dtype, buffer=data, offset=end, order="F" if order else "C")
            return arr.copy(order="K") if self.copy_inline else arr
        return arr.copy(order="K") if self.copy else arr

    @staticmethod
    def scalar(data: bytes) -> np.generic:
        dtype = None
        if len(data) >= 1:
            dtype = _ALLOWED_DTYPES.get(bytes(data[1:1 + data[0]]))  # numeric/bool only: str -> str
        if dtype is None or len(data) != 1 + data[0] + dtype.itemsize:
            raise WireFormatError("numpy scalar description of {} bytes is malformed or of an "
                                  "unsupported dtype: {!r}".format(len(data), bytes(data[:32])))
        return np.frombuffer(data, dtype=dtype, count=1, offset=1 + data[0])[0]


_parsed_head_cache = {}


def _parse_array_head(data: bytes, at: int, kind: str):
    """Validate the array description at ``data[at:]``; returns (dtype, shape as stored,
    order, nbytes, end of the description). Cached by the description's bytes."""
    if len(data) < at + _ARRAY_HEAD.size:
        raise WireFormatError("{} description of {} bytes is too short".format(kind, len(data) - at))
    order, ndim, dtype_len = _ARRAY_HEAD.unpack_from(data, at)
    shape_at = at + _ARRAY_HEAD.size + dtype_len
    end = shape_at + 8 * ndim
    end += -(end - at) % 8
    key = data[at:end]
    parsed = _parsed_head_cache.get(key)
    if parsed is not None:
        return parsed + (end,)
    if order > 1 or ndim > _MAX_NDIM or len(data) < end or any(data[shape_at + 8 * ndim:end]):
        raise WireFormatError("{} description is malformed (order {}, ndim {}, {} bytes)".format(
            kind, order, ndim, len(data) - at))
    dtype_name = bytes(data[at + _ARRAY_HEAD.size:shape_at])
    dtype = _lookup_dtype(dtype_name)
    if dtype is None:
        raise WireFormatError("{} has unsupported dtype {!r}; expected one of {} or a fixed-width string "
                              "dtype (<U<n>, >U<n>, |S<n>)".format(
                                  kind, dtype_name, ", ".join(sorted(k.decode() for k in _ALLOWED_DTYPES))))
    shape = struct.unpack_from("<%dQ" % ndim, data, shape_at)
    parsed = (dtype, shape, order, math.prod(shape) * dtype.itemsize)
    if len(_parsed_head_cache) >= _CACHE_SIZE:
        _parsed_head_cache.clear()
    _parsed_head_cache[bytes(key)] = parsed
    return parsed + (end,)


def _check_max_frames(max_frames: int) -> int:
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 0:
        raise ValueError("wire format: max_frames must be an int >= 0, got {!r}".format(max_frames))
    return max_frames


def _read_preamble(header: memoryview, what: str, max_frames: int):
    if len(header) < _PREAMBLE.size or bytes(header[:4]) != _MAGIC:
        if len(header) >= 4 and bytes(header[:4]) != _MAGIC:
            hint = " (it looks like a pickle; inputpipe never unpickles)" if header[0] == 0x80 else ""
            raise WireFormatError("{}: not an inputpipe wire-format message: expected it to start with "
                                  "{!r}, got {!r}{}".format(what, _MAGIC, bytes(header[:8]), hint))
        raise WireFormatError("{}: truncated: a message starts with a {} byte preamble, got {} bytes".format(
            what, _PREAMBLE.size, len(header)))
    _, version, layout, reserved, n_frames, body_len = _PREAMBLE.unpack_from(header)
    if version != WIRE_FORMAT_VERSION:
        raise WireFormatError("{}: message is in wire format version {}, this inputpipe reads version {} "
                              "(sender and receiver must run compatible inputpipe versions)".format(
                                  what, version, WIRE_FORMAT_VERSION))
    if layout not in (_LAYOUT_SINGLE, _LAYOUT_FRAMES) or reserved != 0:
        raise WireFormatError("{}: unknown message layout {} (reserved field {})".format(what, layout, reserved))
    if n_frames > max_frames:
        raise WireFormatError("{}: header declares {} array frames, more than the limit of {} (raise "
                              "max_frames if such messages are expected)".format(what, n_frames, max_frames))
    header_end = _PREAMBLE.size + 8 * n_frames + body_len
    if len(header) < header_end:
        raise WireFormatError("{}: truncated: header declares {} bytes (with {} frame sizes and a {} byte "
                              "body), got {}".format(what, header_end, n_frames, body_len, len(header)))
    sizes = struct.unpack_from("<%dQ" % n_frames, header, _PREAMBLE.size)
    body = header[_PREAMBLE.size + 8 * n_frames:header_end]
    return layout, sizes, body, header_end


def _check_limit(total: int, max_bytes: int, what: str) -> None:
    if total > max_bytes:
        raise WireFormatError("{}: message of {} bytes exceeds the limit of {} bytes (raise max_bytes "
                              "if such large messages are expected)".format(what, total, max_bytes))


def _decode(body: memoryview, frames: List[memoryview], copy: bool, what: str) -> Any:
    try:
        return _Decoder(frames, copy, not body.readonly).unpack(body)
    except WireFormatError as err:
        raise WireFormatError("{}: {}".format(what, err)) from None
    except Exception as err:  # msgpack's own errors, bad UTF-8, unhashable keys, deep nesting
        raise WireFormatError("{}: malformed message body: {}: {}".format(
            what, type(err).__name__, err or "invalid msgpack data")) from None


def loads(data: Any, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, copy: bool = False,
          max_frames: int = DEFAULT_MAX_FRAMES) -> Any:
    """Decode a buffer made by :func:`dumps` (or a single frame of :func:`dumps_frames` that
    holds no array frames).

    Arrays are views of ``data``: read-only when ``data`` is immutable (``bytes``), writable when
    it is a ``bytearray``; ``copy=True`` gives every array its own writable memory. Raises
    :class:`WireFormatError` for anything that is not a complete, valid message of at most
    ``max_bytes`` bytes and ``max_frames`` arrays stored outside the header.

    Example::

        arr = loads(dumps(np.ones(3)), copy=True)
        arr += 1
    """
    what = "loads"
    view = _as_bytes_view(data, what)
    _check_limit(len(view), max_bytes, what)
    layout, sizes, body, offset = _read_preamble(view, what, _check_max_frames(max_frames))
    if layout == _LAYOUT_FRAMES and sizes:
        raise WireFormatError("loads: this is the header frame of a multi-frame message with {} array "
                              "frames (made by dumps_frames); decode all frames with loads_frames".format(
                                  len(sizes)))
    frames = []
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
            return loads(header, max_bytes=max_bytes, copy=copy, max_frames=max_frames)
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
