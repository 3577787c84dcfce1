"""Dataset files: save a DataFlow to disk once, load it back as a DataFlow (tensorpack's serializers).

Every file is written in inputpipe's wire format (:mod:`inputpipe.utils.serialize`: msgpack and
raw numpy bytes, never pickle) and carries a format tag, so a file of another kind, version or
library is refused with a clear error instead of being misread. The format never depends on an
environment variable.

- :class:`LMDBSerializer` — one LMDB record per datapoint; fast random access, the recommended
  format for datasets larger than memory (needs ``pip install inputpipe[lmdb]``).
- :class:`TFRecordSerializer` — a TFRecord file that ``tf.data.TFRecordDataset`` can read; written
  and read here without importing TensorFlow.
- :class:`NumpySerializer` — a single ``.npy`` file loaded whole into memory.

Example::

    from inputpipe.dataflow import LMDBSerializer, BatchData
    LMDBSerializer.save(df, "/data/train.lmdb")
    df = BatchData(LMDBSerializer.load("/data/train.lmdb", shuffle=True), 64)
"""
import os
import struct
import tokenize
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..utils.crc32c import masked_crc32c
from ..utils.logger import get_logger
from ..utils.serialize import _MAGIC, WireFormatError, _loads_wire, dumps
from ._core.helpers import EpochCursor
from ._core.state import IntRange, StatePlan
from .base import DataFlow, StateMismatchError, check_state, get_length
from .format import LMDBData, LMDBDataDecoder
from ._formats.dataset_headers import DATASET_FORMAT_VERSION, _check_header, _decode_record, _header
from ._formats.lmdb_file import _LMDB_INITIAL_MAP_SIZE, _LMDB_KEYS_KEY, _LMDB_META_KEY, _LMDBFile, _record_key
from .dataset_io import (
    DatasetFormatError, _AtomicPath, _datapoints, _import_lmdb, _lmdb_location, _refuse_existing,
    _require_file, lmdb_errors, open_shared_lmdb,
)
from .hdf5 import HDF5Serializer
from .raw import DataFromList
from .tensorpack_records import decode_tensorpack_record, is_pickle, read_tensorpack_npz
# tensorpack's dataflow.serialize also has these (outside __all__): scripts import them from here
from ..utils.serialize import loads  # noqa: F401
from .format import HDF5Data  # noqa: F401
from .raw import DataFromGenerator  # noqa: F401
from .tensorpack_helpers import create_dummy_class, get_tqdm  # noqa: F401
from .transforms import FixedSizeData, MapData  # noqa: F401

__all__ = ["LMDBSerializer", "TFRecordSerializer", "NumpySerializer", "HDF5Serializer", "DatasetFormatError",
           "DATASET_FORMAT_VERSION"]

logger = get_logger(__name__)

class LMDBSerializer:
    """Save a DataFlow to an LMDB file, one record per datapoint, and load it back.

    ``load(path, shuffle=True)`` returns a DataFlow with a length that reads records in key order
    (sequential, fast) or, with ``shuffle=True``, in a new random order every epoch (drawn from the
    flow's RNG, see :mod:`inputpipe.dataflow.seeding`). The LMDB environment is opened in
    ``reset_state()``, so the flow can be built before worker processes fork. Loaded arrays are
    writable and independent of the file.

    ``path`` is a file (and ``path-lock`` is never needed for reading), or an existing directory
    that will hold ``data.mdb``. The file is written to a temporary name and renamed when complete,
    so an interrupted ``save`` leaves nothing behind. Needs ``pip install 'inputpipe[lmdb]'``.

    Files written by tensorpack's ``LMDBSerializer.save`` / ``dump_dataflow_to_lmdb`` load as they
    are (as :class:`~inputpipe.dataflow.LMDBDataDecoder` over :class:`~inputpipe.dataflow.LMDBData`):
    msgpack-numpy records (``TENSORPACK_SERIALIZE=msgpack``) are decoded as data, without pickle
    or msgpack_numpy; pickled records (tensorpack 0.11's default) raise a
    :class:`DatasetFormatError` unless ``load(..., allow_pickle=True)`` is passed or, without that
    argument, ``INPUTPIPE_ALLOW_PICKLE=1`` is set, which is only for trusted local files (unpickling
    runs code chosen by whoever wrote the file). ``python -m inputpipe.dataflow.convert`` rewrites
    such a file once into inputpipe's format.

    Example::

        LMDBSerializer.save(DataFromList([[np.zeros(3), 1]] * 10, shuffle=False), "/tmp/d.lmdb")
        df = LMDBSerializer.load("/tmp/d.lmdb", shuffle=False)
        df.reset_state()
        assert len(list(df)) == 10
    """

    @staticmethod
    def save(df: DataFlow, path: str, write_frequency: int = 5000) -> None:
        """Write every datapoint of ``df`` (after ``df.reset_state()``); commit every
        ``write_frequency`` datapoints."""
        lmdb = _import_lmdb()
        what = "LMDBSerializer.save"
        path = os.fspath(path)
        target, _ = _lmdb_location(path)
        _refuse_existing(target, what)
        if write_frequency < 1:
            raise ValueError("{}: write_frequency must be >= 1, got {}".format(what, write_frequency))
        with _AtomicPath(target) as tmp:
            env = lmdb.open(tmp, subdir=False, map_size=_LMDB_INITIAL_MAP_SIZE, meminit=False, map_async=True)
            try:
                pending: List[Tuple[bytes, Any]] = []
                keys: List[bytes] = []
                for dp in _datapoints(df, what):
                    keys.append(_record_key(len(keys)))
                    pending.append((keys[-1], dumps(dp)))
                    if len(pending) >= write_frequency:
                        _lmdb_commit(env, lmdb, pending)
                        pending = []
                count = len(keys)
                pending.append((_LMDB_KEYS_KEY, dumps(keys)))
                _lmdb_commit(env, lmdb, pending)
                env.sync(True)
            finally:
                env.close()
        logger.info("%s: wrote %d datapoints to %s", what, count, target)

    @staticmethod
    def load(path: str, shuffle: bool = True, *, allow_pickle: Optional[bool] = None) -> DataFlow:
        """A DataFlow of the datapoints in ``path`` (see the class docs)."""
        path = os.fspath(path)
        if _is_tensorpack_lmdb(path):
            what = "LMDBSerializer.load({!r})".format(path)
            return LMDBDataDecoder(LMDBData(path, shuffle), _TensorpackValueDecoder(what, allow_pickle))
        return _LMDBFile(path, shuffle)


    @staticmethod
    def _deserialize_lmdb(dp: Any) -> Any:
        """tensorpack's decoder of a ``[key, value]`` record of an LMDB file, which subclasses
        reuse as ``MapData(LMDBData(...), LMDBSerializer._deserialize_lmdb)``: the value decoded
        by :func:`inputpipe.utils.serialize.loads`, whether :meth:`save` or tensorpack wrote it
        (pickles only with ``INPUTPIPE_ALLOW_PICKLE=1``)."""
        try:
            return loads(dp[1])
        except WireFormatError as err:
            raise DatasetFormatError("LMDBSerializer record {!r}: {}".format(bytes(dp[0]), err)) from err


def _reset_df_and_get_size(df: DataFlow) -> int:
    """tensorpack's helper of its serializers (custom serializers import it): ``df.reset_state()``,
    then ``len(df)``, or 0 when the flow has no length."""
    df.reset_state()
    size = get_length(df)
    return 0 if size is None else size


def _is_tensorpack_lmdb(path: str) -> bool:
    """Whether ``path`` is an LMDB file of tensorpack's LMDBSerializer: a ``__keys__`` record that
    is not in inputpipe's wire format, and no header of an inputpipe file written before 0.3."""
    what = "LMDBSerializer.load({!r})".format(path)
    _import_lmdb()
    _require_file(_lmdb_location(path)[0], what)
    shared = open_shared_lmdb(path, True, what)  # kept referenced: the last reference closes it
    with lmdb_errors(what, path), shared.env.begin(buffers=True) as txn:
        listed = txn.get(_LMDB_KEYS_KEY)
        return txn.get(_LMDB_META_KEY) is None and listed is not None and bytes(listed[:len(_MAGIC)]) != _MAGIC


class _TensorpackValueDecoder:
    """``decoder(key, value)`` of a tensorpack LMDB record: the datapoint (see
    :mod:`inputpipe.dataflow.tensorpack_records`)."""

    def __init__(self, what: str, allow_pickle: Optional[bool]):
        self.what = what
        self.allow_pickle = allow_pickle

    def __call__(self, key: bytes, value: bytes) -> Any:
        return decode_tensorpack_record(value, self.allow_pickle, "{} record {!r}".format(self.what, bytes(key)))


def _lmdb_commit(env, lmdb, items) -> None:
    """Write ``items`` in one transaction, growing the memory map while it is too small."""
    while True:
        try:
            with env.begin(write=True) as txn:
                for key, value in items:
                    txn.put(key, value)
            return
        except lmdb.MapFullError:
            env.set_mapsize(env.info()["map_size"] * 2)


# ------------------------------------------------------------------------------------- TFRecord

_TFRECORD_LENGTH = struct.Struct("<QI")  # record length, masked CRC-32C of the 8 length bytes
_TFRECORD_CRC = struct.Struct("<I")


def _tfrecord_frame(data: bytes) -> list:
    length = struct.pack("<Q", len(data))
    return [length, _TFRECORD_CRC.pack(masked_crc32c(length)), data, _TFRECORD_CRC.pack(masked_crc32c(data))]


#: Bytes every TFRecord record takes besides its data (length, its CRC, the data's CRC).
_TFRECORD_FRAMING = 16


class _TFRecordFile(DataFlow):
    """The datapoints of a TFRecord file written by :meth:`TFRecordSerializer.save`."""

    def __init__(self, path: str, size: Optional[int], allow_pickle: Optional[bool]):
        self.path = path
        self._what = "TFRecordSerializer.load({!r})".format(path)
        _require_file(path, self._what)
        self._size = size
        self._allow_pickle = allow_pickle
        self._tensorpack = False
        self._cursor = EpochCursor()
        self._offset: Optional[int] = None
        with open(path, "rb") as f:
            self._check_header(f)

    def _read_length(self, f, file_size: int, index: int) -> Optional[int]:
        """The next record's length (its CRC checked, its bytes present), or None at the end."""
        head = f.read(_TFRECORD_LENGTH.size)
        if not head:
            return None
        where = "record {}".format(index) if index >= 0 else "header record"
        if len(head) < _TFRECORD_LENGTH.size:
            raise DatasetFormatError("{}: {} is truncated ({} of {} length bytes)".format(
                self._what, where, len(head), _TFRECORD_LENGTH.size))
        length, length_crc = _TFRECORD_LENGTH.unpack(head)
        if masked_crc32c(head[:8]) != length_crc:
            raise DatasetFormatError("{}: {}: length field fails its CRC check (corrupt file, or not a "
                                     "TFRecord file)".format(self._what, where))
        if length + _TFRECORD_CRC.size > file_size - f.tell():
            raise DatasetFormatError("{}: {} is truncated: its length field announces {} bytes of data and a "
                                     "{}-byte CRC, {} bytes are left in the file".format(
                                         self._what, where, length, _TFRECORD_CRC.size, file_size - f.tell()))
        return length

    def _read_record(self, f, file_size: int, index: int) -> Optional[bytearray]:
        """The next record's data (a bytearray, CRC checked), or None at the end of the file."""
        length = self._read_length(f, file_size, index)
        if length is None:
            return None
        data = bytearray(length)
        f.readinto(data)
        if _TFRECORD_CRC.unpack(f.read(_TFRECORD_CRC.size))[0] != masked_crc32c(data):
            raise DatasetFormatError("{}: {}: data fails its CRC check (corrupt file)".format(
                self._what, "record {}".format(index) if index >= 0 else "header record"))
        return data

    def _check_header(self, f) -> int:
        file_size = os.fstat(f.fileno()).st_size
        data = self._read_record(f, file_size, -1)
        if data is None:
            raise DatasetFormatError("{}: empty file, expected an inputpipe header record".format(self._what))
        try:
            header = _loads_wire(data, max_bytes=len(data))
        except WireFormatError:
            # Not inputpipe's: a file of tensorpack's TFRecordSerializer has no header, every record
            # is a datapoint (this raises for pickled records without allow_pickle, and for others).
            try:
                decode_tensorpack_record(bytes(data), self._allow_pickle, "{} record 0".format(self._what))
            except DatasetFormatError as err:
                if is_pickle(data):
                    raise
                raise DatasetFormatError("{}: first record is not an inputpipe header: not written by inputpipe's "
                                         "TFRecordSerializer, nor a tensorpack record (e.g. tf.Example records): "
                                         "{}".format(self._what, err)) from None
            self._tensorpack = True
            f.seek(0)
            return file_size
        _check_header(header, "tfrecord", self._what)
        return file_size

    def __len__(self) -> int:
        if self._size is None:
            self._size = self._count_records()
        return self._size

    def _count_records(self) -> int:
        """Count records by hopping over them (reads only the 12-byte length fields)."""
        count = 0
        with open(self.path, "rb") as f:
            file_size = self._check_header(f)
            while True:
                length = self._read_length(f, file_size, count)
                if length is None:
                    return count
                f.seek(length + _TFRECORD_CRC.size, os.SEEK_CUR)
                count += 1

    def reset_state(self) -> None:
        self._cursor.reset()
        self._offset = None

    def __iter__(self) -> Iterator[Any]:
        _, start, token = self._cursor.begin()
        offset = self._offset if start else None
        return self._cursor.track(self._records(start, offset), token)

    def _records(self, index: int, offset: Optional[int]) -> Iterator[Any]:
        with open(self.path, "rb") as f:
            file_size = self._check_header(f)
            if offset is not None:
                f.seek(offset)
            try:
                while True:
                    data = self._read_record(f, file_size, index)
                    if data is None:
                        return
                    if self._tensorpack:
                        dp = decode_tensorpack_record(bytes(data), self._allow_pickle,
                                                      "{} record {}".format(self._what, index))
                    else:
                        # Arrays are writable views of this record's own bytearray: no further copy.
                        dp = _decode_record(data, self._what, index)
                    index += 1
                    self._offset = f.tell()
                    yield dp
            finally:
                self._offset = None

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "offset"}``: records read in this epoch and the file
        offset after the last one (a restore seeks there)."""
        cursor = self._cursor
        return {"type": type(self).__name__, "epoch": cursor.epoch, "position": cursor.position,
                "offset": self._offset if cursor.position else None}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        file_size = os.path.getsize(self.path)
        most = file_size // _TFRECORD_FRAMING          # every record takes at least its framing
        state = check_state(self, state, {"epoch": int, "position": IntRange(0, most),
                                          "offset": (IntRange(1, file_size), type(None))})
        position, offset = state["position"], state["offset"]
        if (position > 0) != (offset is not None) or (offset is not None and position > offset // _TFRECORD_FRAMING):
            raise StateMismatchError("{}.set_state: position {} and offset {} do not fit this file of {} bytes "
                                     "({})".format(type(self).__name__, position, offset, file_size, self._what))

        def restore() -> None:
            self._cursor.restore(state["epoch"], position)
            self._offset = offset
        plan.then(restore)


class TFRecordSerializer:
    """Save a DataFlow to a TFRecord file and load it back, without TensorFlow.

    The file is a standard TFRecord file (length, masked CRC-32C, data, masked CRC-32C per record),
    so ``tf.data.TFRecordDataset`` reads it. Its first record is an inputpipe header; every later
    record is one datapoint in the wire format (decode it with
    :func:`inputpipe.utils.serialize.loads`). With tf.data, skip the header:
    ``tf.data.TFRecordDataset(path).skip(1)``.

    ``load(path, size=None)`` reads the file sequentially (as tensorpack does; no shuffling) and
    checks every CRC. ``size`` is the number of datapoints, for ``len()``; when None, ``len()``
    counts the records by reading only their length fields.

    Files written by tensorpack's ``TFRecordSerializer`` load too: msgpack-numpy records as data
    (no pickle, no msgpack_numpy), pickled ones (tensorpack 0.11's default) only with
    ``allow_pickle=True`` (or ``INPUTPIPE_ALLOW_PICKLE=1``), for trusted local files.

    Example::

        TFRecordSerializer.save(df, "/tmp/train.tfrecord")
        df = TFRecordSerializer.load("/tmp/train.tfrecord")
    """

    @staticmethod
    def save(df: DataFlow, path: str) -> None:
        """Write every datapoint of ``df`` (after ``df.reset_state()``)."""
        what = "TFRecordSerializer.save"
        path = os.fspath(path)
        _refuse_existing(path, what)
        count = 0
        with _AtomicPath(path) as tmp:
            with open(tmp, "wb") as f:
                f.writelines(_tfrecord_frame(dumps(_header("tfrecord"))))
                for dp in _datapoints(df, what):
                    f.writelines(_tfrecord_frame(dumps(dp)))
                    count += 1
        logger.info("%s: wrote %d datapoints to %s", what, count, path)

    @staticmethod
    def load(path: str, size: Optional[int] = None, *, allow_pickle: Optional[bool] = None) -> DataFlow:
        """A DataFlow of the datapoints in ``path`` (see the class docs)."""
        return _TFRecordFile(os.fspath(path), size, allow_pickle)


# ---------------------------------------------------------------------------------------- NumPy

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def _load_npy_bytes(path: str, what: str) -> np.ndarray:
    """The uint8 vector of an inputpipe ``.npy`` file. The header is checked against the file
    size first, so a corrupt or hostile header cannot make ``np.load`` allocate what it declares."""
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(f)
        except (ValueError, OSError, EOFError, SyntaxError, tokenize.TokenError) as err:
            raise DatasetFormatError("{}: unreadable .npy header: {}".format(what, err)) from None
        if dtype != np.uint8 or len(shape) != 1:
            raise DatasetFormatError("{}: not an inputpipe dataset: holds a {} array of shape {}, expected a "
                                     "uint8 vector".format(what, dtype, shape))
        data_bytes = os.fstat(f.fileno()).st_size - f.tell()
        if shape[0] != data_bytes:
            raise DatasetFormatError("{}: corrupt .npy file: its header declares {} bytes of data, the file "
                                     "holds {}".format(what, shape[0], data_bytes))
        vector = np.empty(data_bytes, dtype=np.uint8)
        if f.readinto(vector.data) != data_bytes:
            raise DatasetFormatError("{}: the file changed while it was read".format(what))
    return vector


class NumpySerializer:
    """Save a DataFlow to one ``.npy`` file and load it back whole into memory.

    The file is a standard NumPy ``.npy`` file holding a uint8 vector: one wire-format message with
    an inputpipe header and every datapoint. ``np.load(path)`` opens it without pickle; only
    inputpipe decodes its content. Unlike tensorpack's (a pickled ``.npz``), the file is written at
    exactly ``path`` (no extension is added). ``load(path, shuffle=True)`` returns a
    ``DataFromList`` over the datapoints, with writable arrays. tensorpack's ``.npz`` files are
    pickled: they load only with ``load(..., allow_pickle=True)`` (or ``INPUTPIPE_ALLOW_PICKLE=1``),
    for trusted local files; they are checked (zip members inside the file, CRCs) before unpickling.

    Example::

        NumpySerializer.save(df, "/tmp/small.npy")
        df = NumpySerializer.load("/tmp/small.npy", shuffle=False)
    """

    @staticmethod
    def save(df: DataFlow, path: str) -> None:
        """Collect every datapoint of ``df`` (after ``df.reset_state()``) and write the file."""
        what = "NumpySerializer.save"
        path = os.fspath(path)
        _refuse_existing(path, what)
        datapoints = list(_datapoints(df, what))
        payload = dumps(_header("numpy", datapoints=datapoints))
        with _AtomicPath(path) as tmp:
            with open(tmp, "wb") as f:
                np.save(f, np.frombuffer(payload, dtype=np.uint8), allow_pickle=False)
        logger.info("%s: wrote %d datapoints to %s", what, len(datapoints), path)

    @staticmethod
    def load(path: str, shuffle: bool = True, *, allow_pickle: Optional[bool] = None) -> DataFlow:
        """A ``DataFromList`` of the datapoints in ``path`` (see the class docs)."""
        what = "NumpySerializer.load({!r})".format(os.fspath(path))
        path = os.fspath(path)
        _require_file(path, what)
        with open(path, "rb") as f:
            magic = f.read(len(_NPY_MAGIC))
        if magic.startswith(_ZIP_MAGIC):
            return DataFromList(read_tensorpack_npz(path, allow_pickle, what), shuffle=shuffle)
        if magic != _NPY_MAGIC:
            raise DatasetFormatError("{}: not a .npy file (starts with {!r})".format(what, magic))
        vector = _load_npy_bytes(path, what)
        try:
            content = _loads_wire(vector, max_bytes=max(vector.nbytes, 1))
        except WireFormatError as err:
            raise DatasetFormatError("{}: not an inputpipe dataset, or corrupt: {}".format(what, err)) from None
        header = _check_header(content, "numpy", what)
        datapoints = header.get("datapoints")
        if not isinstance(datapoints, list):
            raise DatasetFormatError("{}: no list of datapoints in the file".format(what))
        return DataFromList(datapoints, shuffle=shuffle)
