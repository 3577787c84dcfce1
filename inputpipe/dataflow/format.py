"""Readers of other data formats (tensorpack's ``dataflow.format``): raw LMDB records, Caffe LMDB,
HDF5 and SVMlight files.

Example::

    from inputpipe.dataflow import LMDBData, LMDBDataDecoder
    df = LMDBDataDecoder(LMDBData("/data/raw.lmdb", shuffle=False), lambda k, v: [k, len(v)])
    df.reset_state()
    key, size = next(iter(df))
"""
import itertools
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Union

import numpy as np

from ..utils.logger import get_logger
from ._core.helpers import EpochCursor, indexed_epoch, indexed_state, check_indexed
from ._core.state import StatePlan
from .base import DataFlowReentrantGuard, RNGDataFlow, require_rng
from .caffe_datum import datum_to_image, parse_datum
from .dataset_io import (DatasetFormatError, _import_lmdb, _lmdb_location, _require_file, _SharedEnv,
                         lmdb_errors, open_shared_lmdb)
from .hdf5 import HDF5Data
from .transforms import MapData
# tensorpack's dataflow.format also has these (outside __all__): scripts import them from here
from ..utils.serialize import loads  # noqa: F401
from .tensorpack_helpers import create_dummy_class, get_caffe_pb, get_tqdm, log_once, timed_operation  # noqa: F401

__all__ = ["HDF5Data", "LMDBData", "LMDBDataDecoder", "CaffeLMDB", "SVMLightData"]

logger = get_logger(__name__)

# Keys that hold a file's metadata, not a record: tensorpack's key list and inputpipe's header.
_META_KEYS = (b"__keys__", b"__inputpipe__")


class LMDBData(RNGDataFlow):
    """The ``[key, value]`` records (both ``bytes``) of any LMDB file or directory, without decoding.

    With ``shuffle=False`` the records come in key order; with ``shuffle=True`` in a new random
    order every epoch, over ``keys``: a list of keys (str or bytes), a format string such as
    ``"{:0>8d}"`` formatted with 0 .. len-1, or None to list the file's keys (once, when
    constructed). The metadata records ``__keys__`` (tensorpack) and ``__inputpipe__`` are skipped
    and not counted. The file is opened in ``reset_state()`` (safe to build before forking).

    Unlike tensorpack, the stored ``__keys__`` record is never decoded (it may be a pickle); the
    keys are read from the file itself. Needs ``pip install "inputpipe[lmdb]"``.

    Subclasses written for tensorpack work: ``keys`` lists the file's keys also without shuffling
    (read when first asked), ``_set_keys(keys)`` is called from the constructor with ``_txn`` open,
    and after ``reset_state()`` ``_txn`` (a read transaction) and ``_lmdb`` (the environment) are
    open in the process that iterates, with ``_guard``, ``_size`` and ``_shuffle``.

    Example::

        df = LMDBData("/data/train.lmdb", shuffle=True)
        df.reset_state()
        key, value = next(iter(df))
    """

    def __init__(self, lmdb_path: str, shuffle: bool = True, keys: Union[None, str, Sequence[Any]] = None):
        super().__init__()
        _import_lmdb()
        self._lmdb_path = os.fspath(lmdb_path)
        self._shuffle = shuffle
        self._what = "{}({!r})".format(type(self).__name__, self._lmdb_path)
        _require_file(_lmdb_location(self._lmdb_path)[0], self._what)
        self._keys: Optional[List[bytes]] = None
        self._keys_read = False
        self._env: Optional[_SharedEnv] = None
        self._guard = DataFlowReentrantGuard(type(self).__name__)
        self._open_lmdb(not shuffle)
        try:
            with lmdb_errors(self._what, self._lmdb_path):
                meta = sum(self._txn.get(key) is not None for key in _META_KEYS)
                self._size = self._txn.stat()["entries"] - meta
                self._set_keys(keys)
        finally:
            self._close_lmdb()
        logger.info("%s: %d records", self._what, self._size)

    @property
    def keys(self) -> Optional[List[bytes]]:
        """The keys iterated when shuffling; without shuffling, the file's keys in order (read
        from the file when first asked, as tensorpack read them from its ``__keys__`` record)."""
        if self._keys is None and not self._keys_read and not self._shuffle:
            self._keys_read = True
            shared = open_shared_lmdb(self._lmdb_path, True, self._what)
            with lmdb_errors(self._what, self._lmdb_path), shared.env.begin() as txn:
                self._keys = self._key_list(txn, None)
        return self._keys

    @keys.setter
    def keys(self, keys: Optional[Sequence[Any]]) -> None:
        self._keys = None if keys is None else list(keys)
        self._keys_read = True

    def _set_keys(self, keys: Union[None, str, Sequence[Any]] = None) -> None:
        """tensorpack's hook, called by the constructor with ``self._txn`` open: set ``self.keys``,
        the keys to iterate when shuffling (the file's keys when ``keys`` is None)."""
        if self._shuffle:
            self.keys = self._key_list(self._txn, keys)

    def _key_list(self, txn, keys: Union[None, str, Sequence[Any]]) -> List[bytes]:
        if keys is None:
            return [bytes(key) for key in txn.cursor().iternext(keys=True, values=False) if key not in _META_KEYS]
        if isinstance(keys, str):
            return [keys.format(i).encode("ascii") for i in range(self._size)]
        return [key.encode("ascii") if isinstance(key, str) else bytes(key) for key in keys]

    def _open_lmdb(self, readahead: Optional[bool] = None) -> None:
        """Open the file in this process: ``_env`` (shared by the flows over it), ``_lmdb`` (the
        environment) and ``_txn`` (a read transaction, as tensorpack's subclasses use it)."""
        self._env = open_shared_lmdb(self._lmdb_path, not self._shuffle if readahead is None else readahead,
                                     self._what)
        self._lmdb = self._env.env
        with lmdb_errors(self._what, self._lmdb_path):
            self._txn = self._lmdb.begin()

    def _close_lmdb(self) -> None:
        """End the read transaction and drop this flow's reference to the file."""
        txn = self.__dict__.pop("_txn", None)
        if txn is not None:
            txn.abort()
        self.__dict__.pop("_lmdb", None)
        self._env = None

    def reset_state(self) -> None:
        super().reset_state()
        self._close_lmdb()
        self._open_lmdb()
        self._cursor = EpochCursor()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_env"] = None
        state.pop("_txn", None)
        state.pop("_lmdb", None)
        return state

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[List[bytes]]:
        if self._env is None:
            raise RuntimeError("{}: call reset_state() before iterating".format(self._what))
        require_rng(self)
        size = len(self._keys) if self._shuffle and self._keys is not None else self._size
        order, token = indexed_epoch(self, self._cursor, size, self._shuffle)
        return self._cursor.track(self._records(order), token)

    def _records(self, order: Sequence[int]) -> Iterator[List[bytes]]:
        assert self._env is not None        # checked by __iter__, which made this generator
        with self._guard, lmdb_errors(self._what, self._lmdb_path), self._env.env.begin() as txn:
            if not self._shuffle:
                records = (item for item in txn.cursor() if item[0] not in _META_KEYS)
                for key, value in itertools.islice(records, order.start if isinstance(order, range) else 0, None):
                    yield [key, value]
                return
            keys = self._keys or []
            for index in order:
                key = keys[index]
                value = txn.get(key)
                if value is None:
                    raise DatasetFormatError("{}: key {!r} is not in the file".format(self._what, key))
                yield [key, value]

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "size", "seed"}``; without shuffling a restore steps over
        the first ``position`` records in key order."""
        size = len(self._keys) if self._shuffle and self._keys is not None else self._size
        return indexed_state(self, self._require_cursor(), size, self._shuffle)

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        size = len(self._keys) if self._shuffle and self._keys is not None else self._size
        check_indexed(self, self._require_cursor(), state, size, self._shuffle, plan)

    def _require_cursor(self) -> EpochCursor:
        if self._env is None:
            raise RuntimeError("{}: call reset_state() before iterating or using its state".format(self._what))
        return self._cursor


class LMDBDataDecoder(MapData):
    """Decode the records of an :class:`LMDBData` with ``decoder(key, value)``, which returns a
    datapoint or None to drop the record.

    Example::

        df = LMDBDataDecoder(LMDBData(path, shuffle=False), lambda k, v: [np.frombuffer(v, np.uint8)])
    """

    def __init__(self, lmdb_data: LMDBData, decoder: Callable[[bytes, bytes], Any]):
        self.decoder = decoder
        super().__init__(lmdb_data, self._decode)

    def _decode(self, dp: List[bytes]) -> Any:
        return self.decoder(dp[0], dp[1])


class _DatumDecoder:
    """Turns a Caffe LMDB record into ``[HWC image, label]``; an undecodable record is dropped with
    a warning (one per distinct message), as tensorpack does."""

    def __init__(self, what: str):
        self.what = what
        self.warned: Set[str] = set()
        self.dropped = 0

    def __call__(self, key: bytes, value: bytes) -> Optional[List[Any]]:
        try:
            fields = parse_datum(value)
            return [datum_to_image(fields), fields["label"]]
        except ValueError as err:
            self.dropped += 1
            if str(err) not in self.warned:
                self.warned.add(str(err))
                logger.warning("%s: dropped record %r, not a readable Caffe Datum: %s", self.what, key, err)
            return None


def CaffeLMDB(lmdb_path: str, shuffle: bool = True, keys: Union[None, str, Sequence[Any]] = None) -> LMDBDataDecoder:
    """``[HWC image, label]`` datapoints of a Caffe LMDB file (values are ``caffe.Datum`` protobufs,
    decoded without protobuf or Caffe); ``lmdb_path``, ``shuffle`` and ``keys`` as in
    :class:`LMDBData`. uint8 images come from ``Datum.data``, float32 ones from ``float_data``.

    Example::

        df = CaffeLMDB("/data/caffe_val_lmdb", shuffle=False)
        df.reset_state()
        image, label = next(iter(df))
    """
    data = LMDBData(lmdb_path, shuffle, keys)
    return LMDBDataDecoder(data, _DatumDecoder("CaffeLMDB({!r})".format(os.fspath(lmdb_path))))


def _parse_svmlight(path: str, what: str):
    labels, rows = [], []
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            line = line.split(b"#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            try:
                labels.append(float(parts[0]))
                row = []
                for item in parts[1:]:
                    index, value = item.split(b":", 1)
                    if index == b"qid":
                        continue
                    row.append((int(index), float(value)))
            except ValueError as err:
                raise DatasetFormatError("{}: line {} is not 'label index:value ...': {}".format(
                    what, number, err)) from None
            rows.append(row)
    return labels, rows


class SVMLightData(RNGDataFlow):
    """``[features, label]`` datapoints of an SVMlight / libsvm text file (``label index:value ...``
    per line, ``#`` comments, ``qid:`` ignored): dense float64 feature vectors and float labels.

    Indices are one-based unless the file uses index 0 (as scikit-learn's ``zero_based="auto"``);
    the width is the largest index. Read without scikit-learn.

    Example::

        df = SVMLightData("/data/a1a.txt", shuffle=False)
        df.reset_state()
        x, y = next(iter(df))
    """

    def __init__(self, filename: str, shuffle: bool = True):
        super().__init__()
        what = "SVMLightData({!r})".format(os.fspath(filename))
        _require_file(os.fspath(filename), what)
        labels, rows = _parse_svmlight(os.fspath(filename), what)
        indices = [i for row in rows for i, _ in row]
        offset = 0 if not indices or min(indices) == 0 else 1
        if indices and min(indices) < 0:
            raise DatasetFormatError("{}: negative feature index {}".format(what, min(indices)))
        width = max(indices) + 1 - offset if indices else 0
        self.X = np.zeros((len(rows), width), dtype=np.float64)
        for r, row in enumerate(rows):
            for index, value in row:
                self.X[r, index - offset] = value
        self.y = np.asarray(labels, dtype=np.float64)
        self.shuffle = shuffle
        self._cursor = EpochCursor()

    def __len__(self) -> int:
        return len(self.y)

    def reset_state(self) -> None:
        super().reset_state()
        self._cursor.reset()

    def __iter__(self) -> Iterator[List[Any]]:
        if self.shuffle:
            require_rng(self)
        order, token = indexed_epoch(self, self._cursor, len(self.y), self.shuffle)
        return self._cursor.track(([self.X[k, :], self.y[k]] for k in order), token)

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "size", "seed"}``."""
        return indexed_state(self, self._cursor, len(self.y), self.shuffle)

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        check_indexed(self, self._cursor, state, len(self.y), self.shuffle, plan)
