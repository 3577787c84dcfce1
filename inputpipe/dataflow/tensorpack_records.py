"""Reading tensorpack's dataset files without tensorpack, msgpack_numpy or unasked pickle.

tensorpack 0.11 serializes each datapoint with ``tensorpack.utils.serialize.dumps``: pickle by
default (``TENSORPACK_SERIALIZE=pickle``) or msgpack with msgpack-numpy's array maps
(``TENSORPACK_SERIALIZE=msgpack``). A msgpack record is decoded as data only: its
``{b"nd": ..., b"type": ..., b"shape": ..., b"data": ...}`` maps become numpy arrays/scalars of
numeric, bool or fixed-width string dtypes; object and structured arrays (which would need
pickle or arbitrary dtypes) and every msgpack extension type are refused. A pickled record, and
tensorpack's ``.npz`` files (always pickled), are unpickled only when the caller passes
``allow_pickle=True`` or, without that argument, when ``INPUTPIPE_ALLOW_PICKLE=1`` is set (for
trusted local files: unpickling runs code chosen by whoever wrote the file). The reading itself
is :mod:`inputpipe.utils._tensorpack_records`, shared with :func:`inputpipe.utils.serialize.loads`;
this module gives its errors as :class:`~inputpipe.dataflow.serialize.DatasetFormatError`.

Example::

    from inputpipe.dataflow.tensorpack_records import decode_tensorpack_record
    dp = decode_tensorpack_record(lmdb_value, what="my.lmdb record 0")
"""
from typing import Any, List, Optional

from ..utils._tensorpack_records import decode_record, is_pickle, read_npz
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


def read_tensorpack_npz(path: str, allow_pickle: Optional[bool], what: str) -> List[Any]:
    """The datapoints of a ``.npz`` file of tensorpack's NumpySerializer (an object array
    ``buffer``, pickled). The zip is checked first: every member lies inside the file and passes
    its CRC, and ``buffer`` is an object array; then it is unpickled if the pickle rule allows.

    Example::

        datapoints = read_tensorpack_npz("train.npz", allow_pickle=True, what="my loader")
    """
    try:
        return read_npz(path, allow_pickle, what)
    except WireFormatError as err:
        raise DatasetFormatError(str(err)) from None
