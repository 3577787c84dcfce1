"""Reading the records of tensorpack's dataset files without tensorpack, msgpack_numpy or pickle.

tensorpack 0.11 serializes each datapoint with ``tensorpack.utils.serialize.dumps``: pickle by
default (``TENSORPACK_SERIALIZE=pickle``) or msgpack with msgpack-numpy's array maps
(``TENSORPACK_SERIALIZE=msgpack``). A msgpack record is decoded here as data only: its
``{b"nd": ..., b"type": ..., b"shape": ..., b"data": ...}`` maps become numpy arrays/scalars of
numeric, bool or fixed-width string dtypes; object and structured arrays (which would need
pickle or arbitrary dtypes) and every msgpack extension type are refused. A pickled record is
unpickled only when the caller passes ``allow_pickle=True`` (for trusted local files: unpickling
runs code chosen by whoever wrote the file).

Example::

    from inputpipe.dataflow.tensorpack_records import decode_tensorpack_record
    dp = decode_tensorpack_record(lmdb_value, what="my.lmdb record 0")
"""
import math
import pickle
from typing import Any, Optional

import numpy as np

from ..utils._wire_decode import _TIMESTAMP_START, _refuse_timestamps
from ..utils._wire_layout import _ALLOWED_DTYPES, _lookup_dtype
from .dataset_io import DatasetFormatError

try:
    from msgpack._cmsgpack import unpackb as _unpackb
except ImportError:                 # msgpack without its C extension
    from msgpack.fallback import unpackb as _unpackb

__all__ = ["decode_tensorpack_record", "is_pickle"]

_PICKLE_HINT = ("it is pickled (tensorpack 0.11's default serializer, TENSORPACK_SERIALIZE=pickle). "
                "inputpipe unpickles only when asked: pass allow_pickle=True if the file is a trusted local "
                "file (unpickling runs code chosen by whoever wrote it), or re-create the file with "
                "TENSORPACK_SERIALIZE=msgpack or with inputpipe's serializers")


def is_pickle(data: Any) -> bool:
    """Whether ``data`` starts like a pickle of protocol 2 or later (what tensorpack writes)."""
    return len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5


def _dtype(descr: Any, what: str) -> np.dtype:
    name = descr.encode("ascii", "replace") if isinstance(descr, str) else descr
    dtype = _ALLOWED_DTYPES.get(name) if isinstance(name, bytes) else None
    if dtype is None and isinstance(name, bytes):
        dtype = _lookup_dtype(name)
    if dtype is None:
        raise DatasetFormatError("{}: msgpack-numpy array of dtype {!r}, expected a numeric, bool or fixed-width "
                                 "string dtype".format(what, descr))
    return dtype


def _array(obj: dict, what: str) -> Any:
    """The array or scalar of one msgpack-numpy map (already known to have ``b"nd"``)."""
    kind, data = obj.get(b"kind", b""), obj.get(b"data")
    if kind == b"O":
        raise DatasetFormatError("{}: msgpack-numpy object array: its data is a pickle, which inputpipe does not "
                                 "load from msgpack records".format(what))
    if kind not in (b"", ""):
        raise DatasetFormatError("{}: msgpack-numpy array of kind {!r} (structured arrays are not read)".format(
            what, kind))
    if not isinstance(data, bytes):
        raise DatasetFormatError("{}: msgpack-numpy map without bytes data: {!r}".format(what, sorted(obj)))
    dtype = _dtype(obj.get(b"type"), what)
    if obj[b"nd"] is False:
        if len(data) != dtype.itemsize:
            raise DatasetFormatError("{}: msgpack-numpy scalar of dtype {} has {} bytes".format(what, dtype, len(data)))
        return np.frombuffer(data, dtype=dtype)[0]
    shape = obj.get(b"shape")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape) or len(shape) > 64:
        raise DatasetFormatError("{}: msgpack-numpy array with a malformed shape {!r}".format(what, shape))
    if math.prod(shape) * dtype.itemsize != len(data):
        raise DatasetFormatError("{}: msgpack-numpy array of dtype {} and shape {} needs {} bytes, has {}".format(
            what, dtype, tuple(shape), math.prod(shape) * dtype.itemsize, len(data)))
    # A copy: writable, and independent of the record's bytes (as inputpipe's own files load).
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


class _MsgpackNumpyDecoder:
    """Hooks for msgpack's unpacker that turn msgpack-numpy maps into numpy values."""

    def __init__(self, what: str):
        self.what = what

    def object_hook(self, obj: dict) -> Any:
        nd = obj.get(b"nd")
        if nd is True or nd is False:
            return _array(obj, self.what)
        if obj.get(b"complex") is True and isinstance(obj.get(b"data"), (bytes, str)) and len(obj) == 2:
            text = obj[b"data"].decode("ascii", "replace") if isinstance(obj[b"data"], bytes) else obj[b"data"]
            try:
                return complex(text)
            except ValueError:
                raise DatasetFormatError("{}: malformed msgpack-numpy complex {!r}".format(self.what, text)) from None
        return obj

    def ext_hook(self, code: int, data: bytes) -> Any:
        raise DatasetFormatError("{}: msgpack ext type {} in a tensorpack record (msgpack-numpy writes none)".format(
            self.what, code))


def decode_tensorpack_record(data: Any, allow_pickle: bool = False, what: str = "tensorpack record",
                             max_bytes: Optional[int] = None) -> Any:
    """One datapoint of a tensorpack dataset file (an LMDB value or a TFRecord record).

    msgpack-numpy records are decoded as data only; pickled records raise
    :class:`~inputpipe.dataflow.serialize.DatasetFormatError` unless ``allow_pickle=True``.

    Example::

        dp = decode_tensorpack_record(value)                       # msgpack-numpy record
        dp = decode_tensorpack_record(value, allow_pickle=True)    # trusted pickled record
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise DatasetFormatError("{}: record of {} bytes exceeds the limit of {}".format(what, len(data), max_bytes))
    if is_pickle(data):
        if not allow_pickle:
            raise DatasetFormatError("{}: {}".format(what, _PICKLE_HINT))
        return pickle.loads(data)
    decoder = _MsgpackNumpyDecoder(what)
    try:
        obj = _unpackb(data, raw=False, strict_map_key=False, object_hook=decoder.object_hook,
                       ext_hook=decoder.ext_hook)
    except DatasetFormatError:
        raise
    except Exception as err:  # msgpack's own errors, bad UTF-8, unhashable keys, deep nesting
        raise DatasetFormatError("{}: not a tensorpack msgpack or pickle record ({}: {})".format(
            what, type(err).__name__, err or "invalid msgpack data")) from None
    if _TIMESTAMP_START.search(data) is not None:
        try:
            _refuse_timestamps(obj)
        except ValueError as err:
            raise DatasetFormatError("{}: {}".format(what, err)) from None
    return obj
