"""Reading the LMDB files of :meth:`inputpipe.dataflow.LMDBSerializer.save`: tensorpack's layout
(keys ``00000000``, ``00000001``, ... and a ``__keys__`` list of them) with values in inputpipe's
wire format, and the layout of files written before 0.3 (10-digit keys and an ``__inputpipe__``
header)."""
from typing import Any, Dict, Iterator, Optional, Sequence

from ...utils.serialize import WireFormatError, _loads_wire
from .dataset_headers import _check_header, _decode_record
from .._core.helpers import EpochCursor, check_indexed, indexed_epoch, indexed_state
from .._core.state import StatePlan
from ..base import RNGDataFlow
from ..dataset_io import (DatasetFormatError, _import_lmdb, _lmdb_key, _lmdb_location, _require_file, _SharedEnv,
                         lmdb_errors, open_shared_lmdb)

_LMDB_META_KEY = b"__inputpipe__"     # the header of files written before 0.3 (10-digit keys)
_LMDB_KEYS_KEY = b"__keys__"           # tensorpack's key list; in inputpipe's files, in the wire format
_LMDB_INITIAL_MAP_SIZE = 1 << 28
# Keys of the 8-digit layout sort in record order up to this count (tensorpack's layout, whose
# longer keys beyond it sort out of order): beyond it, records are read by key, not by cursor.
_LMDB_ORDERED_KEYS = 10 ** 8


def _record_key(index: int) -> bytes:
    """The key of record ``index`` in the files :meth:`LMDBSerializer.save` writes: tensorpack's."""
    return b"%08d" % index


def _describe_keys(keys: Any) -> str:
    if not isinstance(keys, list):
        return "a {}".format(type(keys).__name__)
    wrong = next(i for i, key in enumerate(keys) if key != _record_key(i))
    return "{!r} at position {} of {}".format(keys[wrong], wrong, len(keys))


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
        with lmdb_errors(self._what, path), shared.env.begin() as txn:
            meta, listed = txn.get(_LMDB_META_KEY), txn.get(_LMDB_KEYS_KEY)
            if meta is None and listed is None:
                raise DatasetFormatError("{}: not an inputpipe LMDB dataset: no {!r} key, and no tensorpack "
                                         "'__keys__' key either".format(self._what, _LMDB_META_KEY.decode()))
        self._key = _lmdb_key if meta is not None else _record_key
        self._count = self._count_from_header(meta) if meta is not None else self._count_from_keys(listed)
        self._by_key = shuffle or (meta is None and self._count > _LMDB_ORDERED_KEYS)
        self._env: Optional[_SharedEnv] = None

    def _count_from_header(self, meta: bytes) -> int:
        """The record count in the header of a file written before 0.3."""
        try:
            header = _loads_wire(meta, max_bytes=len(meta))
        except WireFormatError as err:
            raise DatasetFormatError("{}: corrupt metadata: {}".format(self._what, err)) from None
        header = _check_header(header, "lmdb", self._what)
        count = header.get("count")
        if type(count) is not int or count < 0:
            raise DatasetFormatError("{}: metadata has no valid record count: {!r}".format(self._what, count))
        return count

    def _count_from_keys(self, listed: bytes) -> int:
        """The record count of a file in tensorpack's layout: its ``__keys__`` list, which must
        name the records ``00000000``, ``00000001``, ... in order."""
        try:
            keys = _loads_wire(listed, max_bytes=len(listed))
        except WireFormatError as err:
            raise DatasetFormatError("{}: corrupt '__keys__' record: {}".format(self._what, err)) from None
        if not isinstance(keys, list) or any(key != _record_key(i) for i, key in enumerate(keys)):
            raise DatasetFormatError("{}: the '__keys__' record must list the keys b'00000000', b'00000001', ... "
                                     "in order; got {}".format(self._what, _describe_keys(keys)))
        return len(keys)

    def _open(self) -> _SharedEnv:
        """This process' environment of the file (opened on first use)."""
        return open_shared_lmdb(self.path, not self.shuffle, self._what)

    def reset_state(self) -> None:
        super().reset_state()
        # Opened here, in the process that iterates: an LMDB handle must not cross a fork.
        self._env = self._open()
        self._cursor = EpochCursor()

    # A copy sent to a spawned worker process re-opens the file in its own reset_state().
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_env"] = None
        return state

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Any]:
        cursor = self._require_cursor()
        order, token = indexed_epoch(self, cursor, self._count, self.shuffle)
        return cursor.track(self._records(order), token)

    def _records(self, order: Sequence[int]) -> Iterator[Any]:
        assert self._env is not None        # checked by __iter__ (_require_cursor), which made this generator
        with lmdb_errors(self._what, self.path), self._env.env.begin(buffers=True) as txn:
            if self._by_key:
                for index in order:
                    value = txn.get(self._key(index))
                    if value is None:
                        raise DatasetFormatError("{}: record {} of {} is missing".format(
                            self._what, index, self._count))
                    yield _decode_record(value, self._what, index, copy=True)
                return
            cursor = txn.cursor()
            if len(order) and not cursor.set_key(self._key(order[0])):
                raise DatasetFormatError("{}: record {} of {} is missing".format(self._what, order[0], self._count))
            for index in order:
                key = cursor.key()
                if bytes(key) != self._key(index):
                    raise DatasetFormatError("{}: record {} of {} is missing (found key {!r})".format(
                        self._what, index, self._count, bytes(key)))
                # copy=True: the value is LMDB's memory, valid only until the cursor moves.
                yield _decode_record(cursor.value(), self._what, index, copy=True)
                cursor.next()

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "size", "seed"}`` (epoch ``e`` is shuffled from (base seed, ``e``))."""
        return indexed_state(self, self._require_cursor(), self._count, self.shuffle)

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        check_indexed(self, self._require_cursor(), state, self._count, self.shuffle, plan)

    def _require_cursor(self) -> EpochCursor:
        if self._env is None:
            raise RuntimeError("{}: call reset_state() before iterating or using its state".format(self._what))
        return self._cursor
