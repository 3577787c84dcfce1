"""Shared pieces of the dataset-file modules (:mod:`inputpipe.dataflow.serialize`, :mod:`inputpipe.dataflow.format`): the error type,
file checks, atomic writing and per-process shared LMDB environments.

Example::

    from inputpipe.dataflow.dataset_io import DatasetFormatError
    try:
        df = LMDBSerializer.load(path)
    except DatasetFormatError as err:
        print(err)
"""
import contextlib
import os
import threading
import weakref
from typing import Any, Iterator

from ..utils.logger import get_logger
from ..utils.serialize import WireFormatError
from ._formats.lmdb_header import lmdb_file_problem
from .base import DataFlow, get_length

__all__ = ["DatasetFormatError"]

logger = get_logger(__name__)


class DatasetFormatError(WireFormatError):
    """A dataset file that is not a valid inputpipe file of the expected kind and version
    (or is corrupt). The message names the file and what was expected.

    Example::

        try:
            df = LMDBSerializer.load(path)
        except DatasetFormatError as err:
            sys.exit(str(err))
    """


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


def _import_lmdb():
    try:
        import lmdb
    except ImportError:
        raise ImportError("reading or writing LMDB files needs the lmdb package: pip install 'inputpipe[lmdb]'") from None
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


def open_shared_lmdb(path: str, readahead: bool, what: str) -> _SharedEnv:
    """This process' read-only environment of the LMDB file or directory ``path`` (opened on first
    use, shared by every flow over the same file in this process)."""
    data_file, subdir = _lmdb_location(path)
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
            # LMDB maps the file and trusts its header: a file shorter than the header says would
            # be read past its end (SIGBUS, no Python error), so the header is checked first.
            problem = lmdb_file_problem(data_file)
            if problem:
                raise DatasetFormatError("{}: {} is {}".format(what, data_file, problem))
            try:
                env = lmdb.open(path, subdir=subdir, readonly=True, lock=False,
                                readahead=readahead, max_readers=126)
            except lmdb.Error as err:
                raise DatasetFormatError("{}: cannot open {} as an LMDB file: {}".format(
                    what, data_file, err)) from None
            shared = _shared_envs[key] = _SharedEnv(env)
    return shared


@contextlib.contextmanager
def lmdb_errors(what: str, path: str) -> Iterator[None]:
    """Turn LMDB's errors while reading ``path`` (a damaged page, a missing page) into a
    :class:`DatasetFormatError` naming the reader and the file."""
    lmdb = _import_lmdb()
    try:
        yield
    except lmdb.Error as err:
        raise DatasetFormatError("{}: {} is damaged: LMDB reports {}".format(
            what, _lmdb_location(path)[0], err)) from None
