"""Decoding of the wire format (:mod:`inputpipe.utils.serialize`): builds the objects of one
message from its header and frames, refusing anything the format does not define.
"""
import struct
from typing import Any, Dict, List, Tuple

import numpy as np

# msgpack's own unpacker, bound once: libraries that patch the msgpack module's functions
# (msgpack_numpy.patch(), which importing tensorpack calls, makes msgpack.unpackb unpickle some
# maps) must not change, slow down or open up inputpipe's wire format.
try:
    from msgpack._cmsgpack import unpackb as _unpackb
except ImportError:                 # msgpack without its C extension
    from msgpack.fallback import unpackb as _unpackb
from msgpack.ext import Timestamp as _Timestamp

from .compat import prod
from ._wire_layout import (
    _ALLOWED_DTYPES, _ARRAY_HEAD, _CACHE_SIZE, _EXT_ARRAY, _EXT_INLINE_ARRAY, _EXT_NAMES, _EXT_SCALAR,
    _EXT_TUPLE, _FRAME_INDEX, _LAYOUT_FRAMES, _LAYOUT_SINGLE, _MAGIC, _MAX_NDIM, _PREAMBLE,
    WIRE_FORMAT_VERSION, WireFormatError, _lookup_dtype,
)

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

# msgpack decodes its timestamp extension (type -1) itself, without calling ext_hook, in whichever
# ext encoding it comes (fixext4/8 and ext8 as packers write it, but also ext8/16/32 of 4 or 8
# bytes and ext16/32 of 12). The decoders look for the Timestamps it made in each list and map as
# msgpack hands them over (list_hook, object_hook) and in the message itself: a cost per item
# decoded, none for the bytes of arrays and binary data (a search of the body's bytes for ext
# headers of type -1 cost 30 ns a byte: 90 us for an inline array of 3 KiB).


def holds_timestamp(items: Any) -> bool:
    """Whether msgpack decoded a Timestamp among ``items`` (a list, or a map's keys or values)."""
    return _Timestamp in map(type, items)


def timestamp_refused() -> WireFormatError:
    """The error for a msgpack Timestamp (ext type -1) in a message."""
    return WireFormatError("msgpack ext type -1 (timestamp) is not part of the wire format (it defines ext types "
                           "{})".format(", ".join("{} ({})".format(k, v) for k, v in sorted(_EXT_NAMES.items()))))


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
        obj = _unpackb(data, ext_hook=self.ext_hook, list_hook=self.list_hook, object_hook=self.map_hook,
                       raw=False, strict_map_key=False)
        if type(obj) is _Timestamp:
            raise timestamp_refused()
        if self.open_tuple_marks:
            raise WireFormatError("a tuple mark appears outside the head of a list")
        if not all(self.used):
            raise WireFormatError("{} of {} array frames are not referenced by the body".format(
                self.used.count(False), len(self.frames)))
        return obj

    def list_hook(self, items: list) -> Any:
        if holds_timestamp(items):
            raise timestamp_refused()
        if items and items[0] is _TUPLE_MARK_DECODED:
            self.open_tuple_marks -= 1
            return tuple(items[1:])
        return items

    @staticmethod
    def map_hook(obj: dict) -> dict:
        if holds_timestamp(obj) or holds_timestamp(obj.values()):
            raise timestamp_refused()
        return obj

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


# description bytes -> (dtype, shape, order, nbytes)
_parsed_head_cache: Dict[bytes, Tuple[np.dtype, Tuple[int, ...], int, int]] = {}


def _parse_array_head(data: bytes, at: int, kind: str) -> Tuple[np.dtype, Tuple[int, ...], int, int, int]:
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
    parsed = (dtype, shape, order, prod(shape) * dtype.itemsize)
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
            what, type(err).__name__, str(err) or "invalid msgpack data")) from None
