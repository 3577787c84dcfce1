"""CIFAR-10 and CIFAR-100 from the standard "python version" batch files.

Example::

    from inputpipe.dataflow.dataset import Cifar10
    ds = Cifar10("test", dir="/data/cifar10")    # holds cifar-10-batches-py/
    ds.reset_state()
    image, label = next(iter(ds))      # uint8 (32, 32, 3) RGB in [0, 255], python int label
"""
import os
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ...utils.logger import get_logger
from .._core.helpers import IndexedSource
from ._checks import DatasetFormatError, check_array, check_keys, check_labels, describe, format_error
from .._formats.dataset_files import RemoteFile, extract_tar, fetch, get_dataset_path, load_dataset_pickle
# tensorpack's dataset.cifar also has these (outside __all__): scripts import them from here
from ..base import RNGDataFlow  # noqa: F401
from ..tensorpack_helpers import download  # noqa: F401

__all__ = ["CifarBase", "Cifar10", "Cifar100"]

logger = get_logger(__name__)

_BASE_URL = "http://www.cs.toronto.edu/~kriz/"
# (archive, md5 and size of the standard archive, folder it unpacks to)
_ARCHIVES = {
    10: (RemoteFile("cifar-10-python.tar.gz", (_BASE_URL,), md5="c58f30108f718f92721af3b95e74349a",
                    size=170498071), "cifar-10-batches-py"),
    100: (RemoteFile("cifar-100-python.tar.gz", (_BASE_URL,), md5="eb9058c3a382ffc7106e4002c42a8d85",
                     size=169001437), "cifar-100-python"),
}


#: tensorpack's names: (URL, size in bytes) of the standard archives.
DATA_URL_CIFAR_10 = (_ARCHIVES[10][0].urls[0], 170498071)
DATA_URL_CIFAR_100 = (_ARCHIVES[100][0].urls[0], 169001437)


def _check_classnum(component: str, cifar_classnum: int) -> None:
    if cifar_classnum not in (10, 100):
        raise ValueError("{}: cifar_classnum must be 10 or 100, got {!r}".format(component, cifar_classnum))


def _maybe_download_and_extract(directory: str, cifar_classnum: int, component: str) -> None:
    """Download and unpack the standard archive unless its folder is already in ``directory``."""
    remote, folder = _ARCHIVES[cifar_classnum]
    if os.path.isdir(os.path.join(directory, folder)):
        logger.info("%s: found CIFAR-%d data in %s", component, cifar_classnum, directory)
        return
    path = fetch(remote, directory, component, expected=[remote.name + " (or the unpacked folder " + folder + "/)"])
    extract_tar(path, directory, component)


def _filenames(directory: str, cifar_classnum: int) -> Tuple[List[str], List[str], str]:
    """(train batch files, test batch files, meta file) of the unpacked dataset."""
    folder = os.path.join(directory, _ARCHIVES[cifar_classnum][1])
    if cifar_classnum == 10:
        train = [os.path.join(folder, "data_batch_{}".format(i)) for i in range(1, 6)]
        return train, [os.path.join(folder, "test_batch")], os.path.join(folder, "batches.meta")
    return [os.path.join(folder, "train")], [os.path.join(folder, "test")], os.path.join(folder, "meta")


_PICKLE_KIND = "CIFAR pickle (expected the dataset's python-version batch file)"


def _read_batches(files: Sequence[str], cifar_classnum: int, component: str) -> List[List[Any]]:
    """``[image, label]`` for every row of the batch files, in file order: image a (32, 32, 3)
    uint8 view of the stored (3, 32, 32) planes, label a python int (the fine label for CIFAR-100).
    A batch that is not a dict of a uint8 (N, 3072) ``b'data'`` array and N labels in range is a
    DatasetFormatError naming the file."""
    label_key = b"labels" if cifar_classnum == 10 else b"fine_labels"
    datapoints = []
    for fname in files:
        batch = load_dataset_pickle(fname, component, encoding="bytes", kind=_PICKLE_KIND)
        check_keys(component, fname, batch, [b"data", label_key])
        data = check_array(component, fname, "b'data'", batch[b"data"], (None, 3072), "uint8")
        labels = batch[label_key]
        if not isinstance(labels, (list, tuple, np.ndarray)) or len(data) != len(labels):
            found = "{} labels".format(len(labels)) if isinstance(labels, (list, tuple, np.ndarray)) \
                else "labels as {}".format(describe(labels))
            raise DatasetFormatError("{}: {} has {} images but {}".format(component, fname, len(data), found))
        check_labels(component, fname, labels, 0, cifar_classnum - 1)
        for k in range(len(data)):
            datapoints.append([np.transpose(data[k].reshape(3, 32, 32), [1, 2, 0]), labels[k]])
    return datapoints


def _read_label_names(meta_file: str, cifar_classnum: int, component: str) -> List[str]:
    """The class names of the dataset's meta file (CIFAR-100: the fine ones)."""
    meta = load_dataset_pickle(meta_file, component, kind=_PICKLE_KIND)
    key = "label_names" if cifar_classnum == 10 else "fine_label_names"
    check_keys(component, meta_file, meta, [key])
    names = meta[key]
    if not isinstance(names, (list, tuple)) or len(names) != cifar_classnum:
        raise format_error(component, meta_file, "expected {!r} to list {} class names, found {}".format(
            key, cifar_classnum, "{} names".format(len(names)) if isinstance(names, (list, tuple)) else describe(names)))
    return list(names)


# tensorpack's module functions (outside __all__), on the readers' code

def maybe_download_and_extract(dest_directory: str, cifar_classnum: int) -> None:
    """Download the standard CIFAR-10 or -100 archive into ``dest_directory``, verify and unpack
    it, unless its folder (``cifar-10-batches-py`` or ``cifar-100-python``) is already there.

    Example::

        maybe_download_and_extract("/data/cifar10", 10)
    """
    _check_classnum("maybe_download_and_extract", cifar_classnum)
    _maybe_download_and_extract(dest_directory, cifar_classnum, "maybe_download_and_extract")


def get_filenames(dir: str, cifar_classnum: int) -> Tuple[List[str], List[str], str]:
    """``(train batch files, test batch files, meta file)`` of the unpacked dataset in ``dir``.

    Example::

        train_files, test_files, meta_file = get_filenames("/data/cifar10", 10)
    """
    _check_classnum("get_filenames", cifar_classnum)
    return _filenames(dir, cifar_classnum)


def read_cifar(filenames: Sequence[str], cifar_classnum: int) -> List[List[Any]]:
    """``[image, label]`` of every row of the batch files, in order: image a uint8 (32, 32, 3)
    array, label an int (CIFAR-100: the fine label). A damaged file is a ``DatasetFormatError``
    naming it.

    Example::

        data = read_cifar(get_filenames("/data/cifar10", 10)[1], 10)     # the 10000 test images
    """
    _check_classnum("read_cifar", cifar_classnum)
    return _read_batches(filenames, cifar_classnum, "read_cifar")


class CifarBase(IndexedSource):
    """CIFAR-10 or CIFAR-100 (``cifar_classnum``): datapoints ``[image, label]``, image a uint8
    (32, 32, 3) RGB array in [0, 255], label a python int (CIFAR-100: the fine label).

    ``dir`` is the directory that holds the unpacked ``cifar-10-batches-py/`` (or
    ``cifar-100-python/``) folder; by default ``~/tensorpack_data/cifar10_data`` (or
    ``cifar100_data``). When the folder is missing the standard archive is downloaded there,
    checked against its md5 and unpacked. The batch files are the dataset's own Python pickles:
    they are read with a loader that accepts only arrays and plain data. ``shuffle`` defaults to
    True for ``'train'``.

    Example::

        ds = CifarBase("train", cifar_classnum=100, dir="/data/cifar100")
        mean = ds.get_per_channel_mean()
    """

    def __init__(self, train_or_test: str, shuffle: Optional[bool] = None, dir: Optional[str] = None,
                 cifar_classnum: int = 10):
        component = type(self).__name__
        if train_or_test not in ("train", "test"):
            raise ValueError("{}: train_or_test must be 'train' or 'test', got {!r}".format(component, train_or_test))
        _check_classnum(component, cifar_classnum)
        self.cifar_classnum = cifar_classnum
        self.dir = os.path.expanduser(dir) if dir is not None else get_dataset_path(
            "cifar{}_data".format(cifar_classnum))
        _maybe_download_and_extract(self.dir, cifar_classnum, component)
        train_files, test_files, meta_file = _filenames(self.dir, cifar_classnum)
        self.fs = train_files if train_or_test == "train" else test_files
        for fname in self.fs:
            if not os.path.isfile(fname):
                raise FileNotFoundError("{}: the CIFAR batch file {} is missing".format(component, fname))
        self._label_names = _read_label_names(meta_file, cifar_classnum, component)
        self.train_or_test = train_or_test
        self.data = _read_batches(self.fs, cifar_classnum, component)
        self.shuffle = train_or_test == "train" if shuffle is None else shuffle

    def __len__(self) -> int:
        return len(self.data)

    def _datapoint(self, k: int) -> List[Any]:
        image, label = self.data[k]
        return [image, label]   # a new list: downstream changes cannot reach the stored data

    def get_per_pixel_mean(self, names: Sequence[str] = ("train", "test")) -> np.ndarray:
        """The float32 (32, 32, 3) mean image over the splits ``names`` ('train' and/or 'test')."""
        for name in names:
            if name not in ("train", "test"):
                raise ValueError("{}.get_per_pixel_mean: names must be 'train' or 'test', got {!r}".format(
                    type(self).__name__, name))
        train_files, test_files, _ = _filenames(self.dir, self.cifar_classnum)
        files = (train_files if "train" in names else []) + (test_files if "test" in names else [])
        images = np.array([dp[0] for dp in _read_batches(files, self.cifar_classnum, type(self).__name__)],
                          dtype="float32")
        return np.mean(images, axis=0)

    def get_per_channel_mean(self, names: Sequence[str] = ("train", "test")) -> np.ndarray:
        """The three per-channel means over the splits ``names``."""
        return np.mean(self.get_per_pixel_mean(names), axis=(0, 1))

    def get_label_names(self) -> List[str]:
        """The class names from the dataset's meta file, indexed by label."""
        return self._label_names


class Cifar10(CifarBase):
    """CIFAR-10: ``[image, label]`` with a uint8 (32, 32, 3) image and a label in 0-9; see
    :class:`CifarBase` for the files and arguments.

    Example::

        ds = Cifar10("train")              # shuffled every epoch
        ds.reset_state()
        image, label = next(iter(ds))
    """

    def __init__(self, train_or_test: str, shuffle: Optional[bool] = None, dir: Optional[str] = None):
        super().__init__(train_or_test, shuffle, dir, 10)


class Cifar100(CifarBase):
    """CIFAR-100: ``[image, fine_label]`` with a fine label in 0-99; see :class:`CifarBase`.

    Example::

        ds = Cifar100("test")
        ds.reset_state()
        image, label = next(iter(ds))
    """

    def __init__(self, train_or_test: str, shuffle: Optional[bool] = None, dir: Optional[str] = None):
        super().__init__(train_or_test, shuffle, dir, 100)
