"""HDF5 dataset files (tensorpack's ``HDF5Serializer`` and ``HDF5Data``): one HDF5 dataset per
datapoint component, the datapoints stacked along its first axis. Needs h5py
(``pip install "inputpipe[hdf5]"``), imported only when a file is read or written.

Files of tensorpack's ``HDF5Serializer`` read as they are. Components are numeric, bool or
fixed-width string arrays/scalars; ``str`` arrays (numpy ``U``, which HDF5 has no type for) are
stored as their UCS-4 code units with the dtype in the ``inputpipe_dtype`` attribute, so they come
back byte-exact.

Example::

    from inputpipe.dataflow import HDF5Serializer
    HDF5Serializer.save(df, "/tmp/d.h5", ["images", "labels"])
    df = HDF5Serializer.load("/tmp/d.h5", ["images", "labels"], shuffle=False)
"""
import os
from typing import Any, Dict, Iterator, List, Sequence

import numpy as np

from ..utils.logger import get_logger
from ._core.helpers import EpochCursor, indexed_epoch, indexed_state, check_indexed
from ._core.state import StatePlan
from .base import DataFlow, RNGDataFlow, require_rng
from .dataset_io import DatasetFormatError, _AtomicPath, _datapoints, _refuse_existing, _require_file

__all__ = ["HDF5Serializer", "HDF5Data"]

logger = get_logger(__name__)

_DTYPE_ATTR = "inputpipe_dtype"


def import_h5py():
    """The h5py module, or a one-line ImportError naming the pip command."""
    try:
        import h5py
    except ImportError:
        raise ImportError('HDF5 files need h5py: pip install "inputpipe[hdf5]"') from None
    return h5py


def _stored(column: np.ndarray):
    """(array to store, dtype attribute or None) for one stacked component."""
    if column.dtype.kind == "U":
        native = np.ascontiguousarray(column, dtype=column.dtype.newbyteorder("="))
        return native.view(np.uint32).reshape(column.shape + (column.dtype.itemsize // 4,)), column.dtype.str
    if column.dtype.kind == "O":
        raise TypeError("HDF5Serializer.save: a component of object dtype (python objects of mixed type, or "
                        "bytes of different lengths) cannot be stored; convert it to a numeric or fixed-width "
                        "string array")
    return column, None


def _loaded(dataset: Any, what: str) -> np.ndarray:
    data = dataset[...]
    dtype = dataset.attrs.get(_DTYPE_ATTR)
    if dtype is None:
        return data
    dtype = np.dtype(dtype.decode() if isinstance(dtype, bytes) else str(dtype))
    if dtype.kind != "U" or data.dtype != np.uint32 or data.ndim < 1 or data.shape[-1] * 4 != dtype.itemsize:
        raise DatasetFormatError("{}: dataset {} has a malformed {} attribute {}".format(
            what, dataset.name, _DTYPE_ATTR, dtype))
    return np.ascontiguousarray(data).view(dtype.newbyteorder("=")).reshape(data.shape[:-1]).astype(dtype)


class HDF5Data(RNGDataFlow):
    """The datapoints zipped from the HDF5 datasets ``data_paths`` of ``filename`` (all loaded into
    memory when constructed; every dataset must have the same length), in a new random order every
    epoch when ``shuffle=True``.

    Example::

        df = HDF5Data("/tmp/d.h5", ["images", "labels"], shuffle=False)
        df.reset_state()
        image, label = next(iter(df))
    """

    def __init__(self, filename: str, data_paths: Sequence[str], shuffle: bool = True):
        super().__init__()
        h5py = import_h5py()
        what = "HDF5Data({!r})".format(os.fspath(filename))
        _require_file(os.fspath(filename), what)
        try:
            with h5py.File(filename, "r") as f:
                missing = [p for p in data_paths if p not in f]
                if missing:
                    raise KeyError("{}: no dataset {} in the file (it has {})".format(what, missing, sorted(f.keys())))
                logger.info("%s: loading %d datasets into memory", what, len(data_paths))
                self.dps: List[np.ndarray] = [_loaded(f[p], what) for p in data_paths]
        except OSError as err:
            # HDF5 checks the file against its superblock (a truncated file says so) and its
            # object headers; h5py raises OSError (not FileNotFoundError: checked above).
            raise DatasetFormatError("{}: cannot read {} as an HDF5 file: {}".format(
                what, os.fspath(filename), err)) from None
        lengths = [len(d) if d.ndim else None for d in self.dps]
        if len(set(lengths)) != 1 or lengths[0] is None:
            raise DatasetFormatError("{}: datasets {} have lengths {}; they must have one common length".format(
                what, list(data_paths), lengths))
        self._size = lengths[0]
        self.shuffle = shuffle
        self._cursor = EpochCursor()

    def __len__(self) -> int:
        return self._size

    def reset_state(self) -> None:
        super().reset_state()
        self._cursor.reset()

    def __iter__(self) -> Iterator[Any]:
        if self.shuffle:
            require_rng(self)
        order, token = indexed_epoch(self, self._cursor, self._size, self.shuffle)
        return self._cursor.track(([d[k] for d in self.dps] for k in order), token)

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "size", "seed"}`` (epoch ``e`` is shuffled from (base seed, ``e``))."""
        return indexed_state(self, self._cursor, self._size, self.shuffle)

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        check_indexed(self, self._cursor, state, self._size, self.shuffle, plan)


class HDF5Serializer:
    """Save a DataFlow to an HDF5 file, one dataset per component, and load it back (tensorpack's
    layout: files written by either library read in the other).

    ``save(df, path, data_paths)`` collects every datapoint in memory, stacks component ``k`` into
    the dataset ``data_paths[k]`` and writes the file (to a temporary name, renamed when complete;
    an existing file is refused). ``load(path, data_paths, shuffle=True)`` is :class:`HDF5Data`.

    Example::

        HDF5Serializer.save(DataFromList([[np.zeros(3), 1]] * 4, shuffle=False), "/tmp/x.h5", ["x", "y"])
        df = HDF5Serializer.load("/tmp/x.h5", ["x", "y"], shuffle=False)
    """

    @staticmethod
    def save(df: DataFlow, path: str, data_paths: Sequence[str]) -> None:
        """Write every datapoint of ``df`` (after ``df.reset_state()``)."""
        h5py = import_h5py()
        what = "HDF5Serializer.save"
        path = os.fspath(path)
        _refuse_existing(path, what)
        columns: List[List[Any]] = [[] for _ in data_paths]
        for index, dp in enumerate(_datapoints(df, what)):
            if len(dp) != len(data_paths):
                raise ValueError("{}: datapoint {} has {} components, but {} data_paths were given ({})".format(
                    what, index, len(dp), len(data_paths), list(data_paths)))
            for column, value in zip(columns, dp):
                column.append(value)
        with _AtomicPath(path) as tmp:
            with h5py.File(tmp, "w") as f:
                for name, column in zip(data_paths, columns):
                    data, dtype = _stored(np.asarray(column))
                    dataset = f.create_dataset(name, data=data)
                    if dtype is not None:
                        dataset.attrs[_DTYPE_ATTR] = dtype
        logger.info("%s: wrote %d datapoints to %s", what, len(columns[0]) if columns else 0, path)

    @staticmethod
    def load(path: str, data_paths: Sequence[str], shuffle: bool = True) -> DataFlow:
        """:class:`HDF5Data` over ``path``."""
        return HDF5Data(path, data_paths, shuffle)
