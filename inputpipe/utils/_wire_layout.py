"""The byte layout of the wire format (:mod:`inputpipe.utils.serialize`): limits, preamble, ext
type codes, the dtypes arrays may have and the description of an array. Shared by the encoder and
the decoder; the public names are re-exported by :mod:`inputpipe.utils.serialize`.
"""
import re
import struct
from typing import Any, Dict, Optional, Tuple

import msgpack
import numpy as np

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


_head_cache: Dict[Tuple[bytes, Tuple[int, ...], int], bytes] = {}


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
