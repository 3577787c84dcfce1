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
import threading
import tokenize
import weakref
from typing import Any, Iterator, Optional

import numpy as np

from ..utils.crc32c import masked_crc32c
from ..utils.logger import get_logger
from ..utils.serialize import WireFormatError, dumps, loads
from .base import DataFlow, RNGDataFlow, get_length
from .raw import DataFromList

__all__ = ["LMDBSerializer", "TFRecordSerializer", "NumpySerializer", "DatasetFormatError",
           "DATASET_FORMAT_VERSION"]

logger = get_logger(__name__)

#: Version of the dataset file layouts written here; files of other versions are refused.
DATASET_FORMAT_VERSION = 1

_TAG_KEY = "inputpipe_dataset"


class DatasetFormatError(WireFormatError):
    """A dataset file that is not a valid inputpipe file of the expected kind and version
    (or is corrupt). The message names the file and what was expected.

    Example::

        try:
            df = LMDBSerializer.load(path)
        except DatasetFormatError as err:
            sys.exit(str(err))
    """


def _header(container: str, **fields: Any) -> dict:
    header = {_TAG_KEY: container, "version": DATASET_FORMAT_VERSION}
    header.update(fields)
    return header


def _check_header(header: Any, container: str, what: str) -> dict:
    if not isinstance(header, dict) or _TAG_KEY not in header:
        raise DatasetFormatError("{}: not an inputpipe dataset file (no format tag)".format(what))
    if header[_TAG_KEY] != container:
        raise DatasetFormatError("{}: this is an inputpipe {!r} dataset file, expected {!r}; load it with "
                                 "the matching serializer".format(what, header[_TAG_KEY], container))
    if header.get("version") != DATASET_FORMAT_VERSION:
        raise DatasetFormatError("{}: dataset format version {!r}, this inputpipe reads version {}".format(
            what, header.get("version"), DATASET_FORMAT_VERSION))
    return header


def _require_file(path: str, what: str) -> None:
    if not os.path.exists(path):
        raise FileNotFoundError("{}: {} does not exist".format(what, path))


def _refuse_existing(path: str, what: str) -> None:
    if os.path.exists(path):
        raise FileExistsError("{}: {} already exists; remove it first (files are never "
                              "overwritten)".format(what, path))


def _datapoints(df: DataFlow, what: str) -> Iterator[Any]:
    """Iterate ``df`` once, after ``reset_state()``, logging progress every 10%."""
    df.reset_state()
    total = get_length(df)
    step = max(total // 10, 1) if total else None
    for index, dp in enumerate(df):
        if step and index and index % step == 0:
            logger.info("%s: %d/%d datapoints", what, index, total)
        yield dp


def _decode_record(data: Any, what: str, index: int, copy: bool = False) -> Any:
    try:
        return loads(data, max_bytes=max(len(data), 1), copy=copy)
    except WireFormatError as err:
        raise DatasetFormatError("{}: record {} is corrupt: {}".format(what, index, err)) from None


class _AtomicPath:
    """Write to a temporary file beside ``path`` and move it in place only on success."""

    def __init__(self, path: str):
        self.path = path
        self.tmp = "{}.tmp-{}".format(path, os.getpid())

    def __enter__(self) -> str:
        # A leftover of a killed run with the same pid (pid 1 in every container): LMDB would
        # open it and keep its old records.
        for stale in (self.tmp, self.tmp + "-lock"):
            if os.path.exists(stale):
                os.remove(stale)
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            os.replace(self.tmp, self.path)
        leftovers = [self.tmp + "-lock"] + ([self.tmp] if exc_type is not None else [])
        for leftover in leftovers:  # the lock file LMDB makes while writing, and a failed file
            if os.path.exists(leftover):
                os.remove(leftover)
        return False


# ----------------------------------------------------------------------------------------- LMDB

_LMDB_META_KEY = b"__inputpipe__"
_LMDB_INITIAL_MAP_SIZE = 1 << 28


def _import_lmdb():
    try:
        import lmdb
    except ImportError:
        raise ImportError("LMDBSerializer needs the lmdb package: pip install 'inputpipe[lmdb]'") from None
    return lmdb


def _lmdb_key(index: int) -> bytes:
    return b"%010d" % index


def _lmdb_location(path: str):
    """(file to open, subdir flag): a directory holds data.mdb, otherwise the path is the file."""
    if os.path.isdir(path):
        return os.path.join(path, "data.mdb"), True
    return path, False


class _SharedEnv:
    """An open read-only LMDB environment, closed when the last flow using it is gone."""

    def __init__(self, env):
        self.env = env

    def __del__(self):
        self.env.close()


# The lmdb package refuses to open one file twice in a process, so every flow over the same file
# (e.g. a train and an eval loader) shares one environment per process.
_shared_envs: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_shared_envs_lock = threading.Lock()


class _LMDBFile(RNGDataFlow):
    """The datapoints of an LMDB file written by :meth:`LMDBSerializer.save`."""

    def __init__(self, path: str, shuffle: bool):
        super().__init__()
        self.path = path
        self.shuffle = shuffle
        self._what = "LMDBSerializer.load({!r})".format(path)
        _import_lmdb()
        data_file, _ = _lmdb_location(path)
        _require_file(data_file, self._what)
        shared = self._open()
        with shared.env.begin() as txn:
            meta = txn.get(_LMDB_META_KEY)
            if meta is None:
                hint = (" (it has tensorpack's '__keys__': files of tensorpack's LMDBSerializer hold "
                        "pickled or msgpack-numpy data that inputpipe does not read; re-create it with "
                        "inputpipe's LMDBSerializer.save)") if txn.get(b"__keys__") is not None else ""
                raise DatasetFormatError("{}: not an inputpipe LMDB dataset: no {!r} key{}".format(
                    self._what, _LMDB_META_KEY.decode(), hint))
        try:
            header = loads(meta, max_bytes=len(meta))
        except WireFormatError as err:
            raise DatasetFormatError("{}: corrupt metadata: {}".format(self._what, err)) from None
        header = _check_header(header, "lmdb", self._what)
        count = header.get("count")
        if type(count) is not int or count < 0:
            raise DatasetFormatError("{}: metadata has no valid record count: {!r}".format(self._what, count))
        self._count = count
        self._env = None

    def _open(self) -> _SharedEnv:
        """This process' environment of the file (opened on first use)."""
        data_file, subdir = _lmdb_location(self.path)
        stat = os.stat(data_file)
        key = (os.getpid(), stat.st_dev, stat.st_ino)
        with _shared_envs_lock:
            shared = _shared_envs.get(key)
            if shared is None:
                for (pid, dev, ino), inherited in list(_shared_envs.items()):
                    if pid != key[0] and (dev, ino) == key[1:]:
                        # Inherited through fork: unusable here, and lmdb refuses a second open.
                        inherited.env.close()
                lmdb = _import_lmdb()
                try:
                    env = lmdb.open(self.path, subdir=subdir, readonly=True, lock=False,
                                    readahead=not self.shuffle, max_readers=126)
                except lmdb.Error as err:
                    raise DatasetFormatError("{}: cannot open {} as an LMDB file: {}".format(
                        self._what, data_file, err)) from None
                shared = _shared_envs[key] = _SharedEnv(env)
        return shared

    def reset_state(self) -> None:
        super().reset_state()
        # Opened here, in the process that iterates: an LMDB handle must not cross a fork.
        self._env = self._open()

    # A copy sent to a spawned worker process re-opens the file in its own reset_state().
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_env"] = None
        return state

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Any]:
        if self._env is None:
            raise RuntimeError("{}: call reset_state() before iterating".format(self._what))
        with self._env.env.begin(buffers=True) as txn:
            if self.shuffle:
                for index in self.rng.permutation(self._count).tolist():
                    value = txn.get(_lmdb_key(index))
                    if value is None:
                        raise DatasetFormatError("{}: record {} of {} is missing".format(
                            self._what, index, self._count))
                    yield _decode_record(value, self._what, index, copy=True)
                return
            cursor = txn.cursor()
            if self._count and not cursor.set_key(_lmdb_key(0)):
                raise DatasetFormatError("{}: record 0 of {} is missing".format(self._what, self._count))
            for index in range(self._count):
                key = cursor.key()
                if bytes(key) != _lmdb_key(index):
                    raise DatasetFormatError("{}: record {} of {} is missing (found key {!r})".format(
                        self._what, index, self._count, bytes(key)))
                # copy=True: the value is LMDB's memory, valid only until the cursor moves.
                yield _decode_record(cursor.value(), self._what, index, copy=True)
                cursor.next()


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
                pending, count = [], 0
                for dp in _datapoints(df, what):
                    pending.append((_lmdb_key(count), dumps(dp)))
                    count += 1
                    if len(pending) >= write_frequency:
                        _lmdb_commit(env, lmdb, pending)
                        pending = []
                pending.append((_LMDB_META_KEY, dumps(_header("lmdb", count=count))))
                _lmdb_commit(env, lmdb, pending)
                env.sync(True)
            finally:
                env.close()
        logger.info("%s: wrote %d datapoints to %s", what, count, target)

    @staticmethod
    def load(path: str, shuffle: bool = True) -> DataFlow:
        """A DataFlow of the datapoints in ``path`` (see the class docs)."""
        return _LMDBFile(os.fspath(path), shuffle)


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


class _TFRecordFile(DataFlow):
    """The datapoints of a TFRecord file written by :meth:`TFRecordSerializer.save`."""

    def __init__(self, path: str, size: Optional[int]):
        self.path = path
        self._what = "TFRecordSerializer.load({!r})".format(path)
        _require_file(path, self._what)
        self._size = size
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
            raise DatasetFormatError("{}: {} is truncated: {} bytes announced, {} left in the file".format(
                self._what, where, length, file_size - f.tell()))
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
            header = loads(data, max_bytes=len(data))
        except WireFormatError:
            raise DatasetFormatError("{}: first record is not an inputpipe header: not written by "
                                     "inputpipe's TFRecordSerializer (e.g. tf.Example records)".format(
                                         self._what)) from None
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

    def __iter__(self) -> Iterator[Any]:
        with open(self.path, "rb") as f:
            file_size = self._check_header(f)
            index = 0
            while True:
                data = self._read_record(f, file_size, index)
                if data is None:
                    return
                # Arrays are writable views of this record's own bytearray: no further copy.
                yield _decode_record(data, self._what, index)
                index += 1


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
    def load(path: str, size: Optional[int] = None) -> DataFlow:
        """A DataFlow of the datapoints in ``path`` (see the class docs)."""
        return _TFRecordFile(os.fspath(path), size)


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
        if f.readinto(memoryview(vector)) != data_bytes:
            raise DatasetFormatError("{}: the file changed while it was read".format(what))
    return vector


class NumpySerializer:
    """Save a DataFlow to one ``.npy`` file and load it back whole into memory.

    The file is a standard NumPy ``.npy`` file holding a uint8 vector: one wire-format message with
    an inputpipe header and every datapoint. ``np.load(path)`` opens it without pickle; only
    inputpipe decodes its content. Unlike tensorpack's (a pickled ``.npz``), the file is written at
    exactly ``path`` (no extension is added). ``load(path, shuffle=True)`` returns a
    ``DataFromList`` over the datapoints, with writable arrays.

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
    def load(path: str, shuffle: bool = True) -> DataFlow:
        """A ``DataFromList`` of the datapoints in ``path`` (see the class docs)."""
        what = "NumpySerializer.load({!r})".format(os.fspath(path))
        path = os.fspath(path)
        _require_file(path, what)
        with open(path, "rb") as f:
            magic = f.read(len(_NPY_MAGIC))
        if magic.startswith(_ZIP_MAGIC):
            raise DatasetFormatError("{}: this is a .npz (zip) file, like those of tensorpack's NumpySerializer, "
                                     "which hold pickled objects that inputpipe never loads; re-create it with "
                                     "inputpipe's NumpySerializer.save".format(what))
        if magic != _NPY_MAGIC:
            raise DatasetFormatError("{}: not a .npy file (starts with {!r})".format(what, magic))
        vector = _load_npy_bytes(path, what)
        try:
            content = loads(vector, max_bytes=max(vector.nbytes, 1))
        except WireFormatError as err:
            raise DatasetFormatError("{}: not an inputpipe dataset, or corrupt: {}".format(what, err)) from None
        header = _check_header(content, "numpy", what)
        datapoints = header.get("datapoints")
        if not isinstance(datapoints, list):
            raise DatasetFormatError("{}: no list of datapoints in the file".format(what))
        return DataFromList(datapoints, shuffle=shuffle)
