"""Reading tensorpack's dataset files without tensorpack, msgpack_numpy or unasked pickle.

tensorpack 0.11 serializes each datapoint with ``tensorpack.utils.serialize.dumps``: pickle by
default (``TENSORPACK_SERIALIZE=pickle``) or msgpack with msgpack-numpy's array maps
(``TENSORPACK_SERIALIZE=msgpack``). A msgpack record is decoded as data only: its
``{b"nd": ..., b"type": ..., b"shape": ..., b"data": ...}`` maps become numpy arrays/scalars of
numeric, bool or fixed-width string dtypes; object and structured arrays (which would need
pickle or arbitrary dtypes) and every msgpack extension type are refused. A pickled record, and
tensorpack's ``.npz`` files (always pickled), are unpickled only when the caller passes
``allow_pickle=True`` or, without that argument, when ``INPUTPIPE_ALLOW_PICKLE=1`` is set (for
trusted local files: unpickling runs code chosen by whoever wrote the file). The decoding itself
is :mod:`inputpipe.utils._tensorpack_records`, shared with :func:`inputpipe.utils.serialize.loads`.

Example::

    from inputpipe.dataflow.tensorpack_records import decode_tensorpack_record
    dp = decode_tensorpack_record(lmdb_value, what="my.lmdb record 0")
"""
import os
import pickle
import tokenize
import zipfile
import zlib
from typing import Any, List, Optional

import numpy as np

from ..utils._pickle_policy import pickle_allowed, pickle_refusal
from ..utils._tensorpack_records import decode_record, is_pickle
from ..utils.compat import npz_array
from ..utils.serialize import WireFormatError
from .dataset_io import DatasetFormatError

__all__ = ["decode_tensorpack_record", "is_pickle", "read_tensorpack_npz"]


def decode_tensorpack_record(data: Any, allow_pickle: Optional[bool] = None, what: str = "tensorpack record",
                             max_bytes: Optional[int] = None) -> Any:
    """One datapoint of a tensorpack dataset file (an LMDB value or a TFRecord record).

    msgpack-numpy records are decoded as data only; pickled records raise
    :class:`~inputpipe.dataflow.serialize.DatasetFormatError` unless ``allow_pickle=True`` (or,
    when ``allow_pickle`` is not passed, ``INPUTPIPE_ALLOW_PICKLE=1``).

    Example::

        dp = decode_tensorpack_record(value)                       # msgpack-numpy record
        dp = decode_tensorpack_record(value, allow_pickle=True)    # trusted pickled record
    """
    try:
        return decode_record(data, allow_pickle, what, max_bytes)
    except DatasetFormatError:
        raise
    except WireFormatError as err:
        raise DatasetFormatError(str(err)) from err.__cause__   # the unpickler's error, if it was one


# A zip member's local header: 30 fixed bytes, then its name and extra field (lengths at 26, 28).
_ZIP_LOCAL_HEADER = 30
_NPZ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, pickle.UnpicklingError, SyntaxError,
               tokenize.TokenError)


def read_tensorpack_npz(path: str, allow_pickle: Optional[bool], what: str) -> List[Any]:
    """The datapoints of a ``.npz`` file of tensorpack's NumpySerializer (an object array
    ``buffer``, pickled). The zip is checked first: every member lies inside the file and passes
    its CRC, and ``buffer`` is an object array; then it is unpickled if the pickle rule allows.

    Example::

        datapoints = read_tensorpack_npz("train.npz", allow_pickle=True, what="my loader")
    """
    if not pickle_allowed(allow_pickle):
        raise DatasetFormatError("{}: this is a .npz (zip) file, like those of tensorpack's NumpySerializer, which "
                                 "hold pickled objects; {}".format(what, pickle_refusal()))
    _check_npz(path, what)
    try:
        with np.load(path, allow_pickle=True) as archive:
            buffer = npz_array(archive, "buffer")
    except _NPZ_ERRORS as err:
        raise DatasetFormatError("{}: {} cannot be unpickled: {}: {}".format(what, path, type(err).__name__, err)) from None
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
                    raise DatasetFormatError("{}: {} is truncated or damaged: its zip member {!r} needs bytes up to "
                                             "offset {}, the file has {} bytes".format(what, path, info.filename, end, size))
            damaged = archive.testzip()
            if damaged is not None:
                raise DatasetFormatError("{}: {} is damaged: its zip member {!r} fails its CRC check".format(
                    what, path, damaged))
            if "buffer.npy" not in archive.namelist():
                raise DatasetFormatError("{}: .npz file without tensorpack's 'buffer' array (it has {})".format(
                    what, [name[:-4] if name.endswith(".npy") else name for name in archive.namelist()]))
            with archive.open("buffer.npy") as member:
                version = np.lib.format.read_magic(member)
                read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, _, dtype = read_header(member)
    except DatasetFormatError:
        raise
    except _NPZ_ERRORS as err:
        raise DatasetFormatError("{}: {} is not a readable .npz (zip) file, or is truncated or damaged: {}: {}".format(
            what, path, type(err).__name__, err)) from None
    if dtype.kind != "O":
        raise DatasetFormatError("{}: expected tensorpack's object array 'buffer', found a {} array of shape {}".format(
            what, dtype, shape))
