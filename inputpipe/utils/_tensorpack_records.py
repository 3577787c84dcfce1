"""Decoding one record of tensorpack's dataset files without tensorpack, msgpack_numpy or unasked pickle.

tensorpack 0.11 serializes each datapoint with ``tensorpack.utils.serialize.dumps``: pickle by
default (``TENSORPACK_SERIALIZE=pickle``) or msgpack with msgpack-numpy's array maps
(``TENSORPACK_SERIALIZE=msgpack``). A msgpack record is decoded here as data only: its
``{b"nd": ..., b"type": ..., b"shape": ..., b"data": ...}`` maps become numpy arrays/scalars of
numeric, bool or fixed-width string dtypes; object and structured arrays (which would need
pickle or arbitrary dtypes) and every msgpack extension type (msgpack's timestamp in any of its
encodings included) are refused. A pickled record is unpickled only under the rule of
:mod:`inputpipe.utils._pickle_policy` (``allow_pickle=True`` or ``INPUTPIPE_ALLOW_PICKLE=1``).

The two kinds cannot be mistaken for each other or for the wire format: a pickle of protocol 2 to
5 starts with ``0x80`` and its protocol, which as msgpack is an empty map followed by more bytes
(not a valid record); a wire-format message starts with ``IPWF``, which as msgpack is the integer
73 followed by more bytes. tensorpack's ``.npz`` files (NumpySerializer: an object array
``buffer``, always pickled) are checked as zip files first, then unpickled under the same rule.

This module is the one reader of tensorpack's records and ``.npz`` files: its errors are
:class:`~inputpipe.utils.serialize.WireFormatError`; :func:`inputpipe.utils.serialize.loads` uses it
as it is, and :mod:`inputpipe.dataflow.tensorpack_records` (the dataset readers' face) turns them into
``DatasetFormatError``.
"""
import os
import pickle
import tokenize
import zipfile
import zlib
from typing import Any, List, Optional

import numpy as np

from .compat import npz_array, pickle_loads, prod
from ._pickle_policy import pickle_allowed, pickle_refusal
from ._wire_decode import _Timestamp, holds_timestamp, timestamp_refused
from ._wire_layout import _ALLOWED_DTYPES, WireFormatError, _lookup_dtype

try:
    from msgpack._cmsgpack import unpackb as _unpackb
except ImportError:                 # msgpack without its C extension
    from msgpack.fallback import unpackb as _unpackb

PICKLED = "it is pickled (tensorpack 0.11's default serializer, TENSORPACK_SERIALIZE=pickle)"


class NotARecordError(WireFormatError):
    """Bytes that are neither msgpack nor a pickle (so not a tensorpack record at all); ``detail``
    is msgpack's complaint."""

    def __init__(self, what: str, detail: str):
        super().__init__("{}: not a tensorpack msgpack or pickle record ({})".format(what, detail))
        self.detail = detail


def is_pickle(data: Any) -> bool:
    """Whether ``data`` starts like a pickle of protocol 2 or later (what tensorpack writes)."""
    return len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5


def _dtype(descr: Any, what: str) -> np.dtype:
    name = descr.encode("ascii", "replace") if isinstance(descr, str) else descr
    dtype = _ALLOWED_DTYPES.get(name) if isinstance(name, bytes) else None
    if dtype is None and isinstance(name, bytes):
        dtype = _lookup_dtype(name)
    if dtype is None:
        raise WireFormatError("{}: msgpack-numpy array of dtype {!r}, expected a numeric, bool or fixed-width "
                              "string dtype".format(what, descr))
    return dtype


def _array(obj: dict, what: str) -> Any:
    """The array or scalar of one msgpack-numpy map (already known to have ``b"nd"``)."""
    kind, data = obj.get(b"kind", b""), obj.get(b"data")
    if kind == b"O":
        raise WireFormatError("{}: msgpack-numpy object array: its data is a pickle, which inputpipe does not "
                              "load from msgpack records".format(what))
    if kind not in (b"", ""):
        raise WireFormatError("{}: msgpack-numpy array of kind {!r} (structured arrays are not read)".format(
            what, kind))
    if not isinstance(data, bytes):
        raise WireFormatError("{}: msgpack-numpy map without bytes data: {!r}".format(what, sorted(obj)))
    dtype = _dtype(obj.get(b"type"), what)
    if obj[b"nd"] is False:
        if len(data) != dtype.itemsize:
            raise WireFormatError("{}: msgpack-numpy scalar of dtype {} has {} bytes".format(what, dtype, len(data)))
        return np.frombuffer(data, dtype=dtype)[0]
    shape = obj.get(b"shape")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape) or len(shape) > 64:
        raise WireFormatError("{}: msgpack-numpy array with a malformed shape {!r}".format(what, shape))
    if prod(shape) * dtype.itemsize != len(data):
        raise WireFormatError("{}: msgpack-numpy array of dtype {} and shape {} needs {} bytes, has {}".format(
            what, dtype, tuple(shape), prod(shape) * dtype.itemsize, len(data)))
    # A copy: writable, and independent of the record's bytes (as inputpipe's own files load).
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


class _MsgpackNumpyDecoder:
    """Hooks for msgpack's unpacker that turn msgpack-numpy maps into numpy values."""

    def __init__(self, what: str):
        self.what = what

    def object_hook(self, obj: dict) -> Any:
        if holds_timestamp(obj) or holds_timestamp(obj.values()):
            raise WireFormatError("{}: {}".format(self.what, timestamp_refused()))
        nd = obj.get(b"nd")
        if nd is True or nd is False:
            return _array(obj, self.what)
        if obj.get(b"complex") is True and isinstance(obj.get(b"data"), (bytes, str)) and len(obj) == 2:
            text = obj[b"data"].decode("ascii", "replace") if isinstance(obj[b"data"], bytes) else obj[b"data"]
            try:
                return complex(text)
            except ValueError:
                raise WireFormatError("{}: malformed msgpack-numpy complex {!r}".format(self.what, text)) from None
        return obj

    def list_hook(self, items: list) -> list:
        if holds_timestamp(items):
            raise WireFormatError("{}: {}".format(self.what, timestamp_refused()))
        return items

    def ext_hook(self, code: int, data: bytes) -> Any:
        raise WireFormatError("{}: msgpack ext type {} in a tensorpack record (msgpack-numpy writes none)".format(
            self.what, code))


def decode_record(data: Any, allow_pickle: Optional[bool], what: str, max_bytes: Optional[int] = None) -> Any:
    """One datapoint of a tensorpack record (bytes-like): msgpack-numpy decoded as data, a pickle
    unpickled only when :func:`~inputpipe.utils._pickle_policy.pickle_allowed`; raises
    :class:`WireFormatError` (:class:`NotARecordError` for bytes that are neither).

    Example::

        dp = decode_record(lmdb_value, None, "train.lmdb record b'00000007'")
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise WireFormatError("{}: record of {} bytes exceeds the limit of {}".format(what, len(data), max_bytes))
    if is_pickle(data):
        if not pickle_allowed(allow_pickle):
            raise WireFormatError("{}: {}; {}".format(what, PICKLED, pickle_refusal()))
        try:
            return pickle_loads(data)
        except Exception as err:  # a damaged pickle, or a class the unpickler cannot find here
            raise WireFormatError("{}: the pickle cannot be loaded: {}: {}".format(what, type(err).__name__, err)) from err
    decoder = _MsgpackNumpyDecoder(what)
    try:
        obj = _unpackb(data, raw=False, strict_map_key=False, object_hook=decoder.object_hook,
                       list_hook=decoder.list_hook, ext_hook=decoder.ext_hook)
    except WireFormatError:
        raise
    except Exception as err:  # msgpack's own errors, bad UTF-8, unhashable keys, deep nesting
        raise NotARecordError(what, "{}: {}".format(type(err).__name__, str(err) or "invalid msgpack data")) from None
    if type(obj) is _Timestamp:
        raise WireFormatError("{}: {}".format(what, timestamp_refused()))
    return obj


# A zip member's local header: 30 fixed bytes, then its name and extra field (lengths at 26, 28).
_ZIP_LOCAL_HEADER = 30
_NPZ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, pickle.UnpicklingError, SyntaxError,
               tokenize.TokenError)


def read_npz(path: str, allow_pickle: Optional[bool], what: str) -> List[Any]:
    """The datapoints of a ``.npz`` file of tensorpack's NumpySerializer (an object array
    ``buffer``, pickled). The zip is checked first: every member lies inside the file and passes
    its CRC, and ``buffer`` is an object array; then it is unpickled if the pickle rule allows.

    Example::

        datapoints = read_npz("train.npz", allow_pickle=True, what="my loader")
    """
    if not pickle_allowed(allow_pickle):
        raise WireFormatError("{}: this is a .npz (zip) file, like those of tensorpack's NumpySerializer, which "
                                 "hold pickled objects; {}".format(what, pickle_refusal()))
    _check_npz(path, what)
    try:
        with np.load(path, allow_pickle=True) as archive:
            buffer = npz_array(archive, "buffer")
    except _NPZ_ERRORS as err:
        raise WireFormatError("{}: {} cannot be unpickled: {}: {}".format(what, path, type(err).__name__, err)) from None
    return [list(dp) if isinstance(dp, np.ndarray) and dp.dtype == object else dp for dp in buffer]


def _check_npz(path: str, what: str) -> None:
    """Refuse a truncated or damaged zip, or one without tensorpack's object array ``buffer``,
    before anything is unpickled."""
    try:
        with open(path, "rb") as f, zipfile.ZipFile(f) as archive:
            size = os.fstat(f.fileno()).st_size
            for info in archive.infolist():
                f.seek(info.header_offset + 26)
                name_and_extra = int.from_bytes(f.read(2), "little") + int.from_bytes(f.read(2), "little")
                end = info.header_offset + _ZIP_LOCAL_HEADER + name_and_extra + info.compress_size
                if end > size:
                    raise WireFormatError("{}: {} is truncated or damaged: its zip member {!r} needs bytes up to "
                                             "offset {}, the file has {} bytes".format(what, path, info.filename, end, size))
            damaged = archive.testzip()
            if damaged is not None:
                raise WireFormatError("{}: {} is damaged: its zip member {!r} fails its CRC check".format(
                    what, path, damaged))
            if "buffer.npy" not in archive.namelist():
                raise WireFormatError("{}: .npz file without tensorpack's 'buffer' array (it has {})".format(
                    what, [name[:-4] if name.endswith(".npy") else name for name in archive.namelist()]))
            with archive.open("buffer.npy") as member:
                version = np.lib.format.read_magic(member)
                read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, _, dtype = read_header(member)
    except WireFormatError:
        raise
    except _NPZ_ERRORS as err:
        raise WireFormatError("{}: {} is not a readable .npz (zip) file, or is truncated or damaged: {}: {}".format(
            what, path, type(err).__name__, err)) from None
    if dtype.kind != "O":
        raise WireFormatError("{}: expected tensorpack's object array 'buffer', found a {} array of shape {}".format(
            what, dtype, shape))
