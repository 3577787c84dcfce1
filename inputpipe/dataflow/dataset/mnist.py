"""MNIST and Fashion-MNIST from their standard gzipped IDX files.

Example::

    from inputpipe.dataflow.dataset import Mnist
    ds = Mnist("test", shuffle=False, dir="/data/mnist")   # the four *-ubyte.gz files
    ds.reset_state()
    image, label = next(iter(ds))        # float32 (28, 28) in [0, 1], numpy uint8 label
"""
import gzip
import os
import zlib
from typing import List, Optional, Tuple

import numpy as np

from ...utils.compat import BadGzipFile
from .._core.helpers import IndexedSource
from ._checks import DatasetFormatError, check_labels
from .._formats.dataset_files import RemoteFile, fetch, get_dataset_path
# tensorpack's dataset.mnist also has these (outside __all__): scripts import them from here
from ..base import RNGDataFlow  # noqa: F401
from ..tensorpack_helpers import download, maybe_download  # noqa: F401

__all__ = ["Mnist", "FashionMnist"]

_IMAGES_MAGIC = 2051
_LABELS_MAGIC = 2049
_CHUNK_BYTES = 1 << 20


def _read_up_to(f: gzip.GzipFile, count: int) -> bytearray:
    """At most ``count`` bytes of ``f``, read in chunks: memory grows with the data the file really
    holds, never with what a header declares."""
    data = bytearray()
    while len(data) < count:
        chunk = f.read(min(count - len(data), _CHUNK_BYTES))
        if not chunk:
            break
        data.extend(chunk)
    return data


def _read_idx(path: str, magic: int, ndim: int, component: str) -> np.ndarray:
    """The uint8 array of a gzipped IDX file whose header is ``magic`` and ``ndim`` big-endian sizes;
    a DatasetFormatError naming ``component`` and the file when it is anything else."""
    header_bytes = 4 * (1 + ndim)
    try:
        with gzip.open(path, "rb") as f:
            raw_header = f.read(header_bytes)
            if len(raw_header) < header_bytes:
                raise DatasetFormatError("{}: {} is truncated: expected a {}-byte IDX header, found {} bytes".format(
                    component, path, header_bytes, len(raw_header)))
            header = np.frombuffer(raw_header, dtype=">u4")
            if int(header[0]) != magic:
                raise DatasetFormatError("{}: {} is not an MNIST IDX file: expected the magic number {}, found "
                                         "{}".format(component, path, magic, int(header[0])))
            shape = tuple(int(n) for n in header[1:])
            count = 1
            for size in shape:
                count *= size
            data = _read_up_to(f, count)
            if len(data) < count:
                raise DatasetFormatError("{}: {} is truncated: its header announces {} values of shape {}, the file "
                                         "has {}".format(component, path, count, shape, len(data)))
            if f.read(1):
                raise DatasetFormatError("{}: {} holds more than its header declares: expected {} values of shape "
                                         "{}, found more after them".format(component, path, count, shape))
    except (BadGzipFile, EOFError, zlib.error) as err:
        raise DatasetFormatError("{}: {} is not a readable gzip file (expected a gzipped IDX file): {}".format(
            component, path, err)) from None
    return np.frombuffer(data, dtype=np.uint8).reshape(shape)


# tensorpack's module functions (outside __all__), on the reader's code

def extract_images(filename: str) -> np.ndarray:
    """The images of a gzipped MNIST IDX image file as a float32 array [index, y, x, 1] in [0, 1].
    A file that is not one is a ``DatasetFormatError`` (a ``ValueError``) naming it.

    Example::

        images = extract_images("/data/mnist/t10k-images-idx3-ubyte.gz")     # (10000, 28, 28, 1)
    """
    images = _read_idx(filename, _IMAGES_MAGIC, 3, "extract_images")
    return images[:, :, :, np.newaxis].astype(np.float32) / 255.0


def extract_labels(filename: str) -> np.ndarray:
    """The labels of a gzipped MNIST IDX label file as a uint8 array [index].

    Example::

        labels = extract_labels("/data/mnist/t10k-labels-idx1-ubyte.gz")     # (10000,)
    """
    return _read_idx(filename, _LABELS_MAGIC, 1, "extract_labels")


class Mnist(IndexedSource):
    """The MNIST digits: datapoints ``[image, label]``, image a float32 (28, 28) array in [0, 1],
    label a numpy uint8 in 0-9.

    ``train_or_test`` is ``'train'`` (60000 images) or ``'test'`` (10000). ``dir`` holds the
    standard files (``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
    ``t10k-images-idx3-ubyte.gz``, ``t10k-labels-idx1-ubyte.gz``); by default
    ``~/tensorpack_data/mnist_data`` (see :func:`~inputpipe.dataflow.dataset.get_dataset_path`).
    Missing files are downloaded from the standard URL and checked against their published md5.
    With ``shuffle=True`` (default) every epoch visits the images in a new order.

    Example::

        ds = Mnist("train")
        ds.reset_state()
        for image, label in ds:
            ...
    """

    _DIR_NAME = "mnist_data"
    _SOURCE_URLS: Tuple[str, ...] = ("http://yann.lecun.com/exdb/mnist/",
                                     "https://ossci-datasets.s3.amazonaws.com/mnist/")
    _MD5 = {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    }

    def __init__(self, train_or_test: str, shuffle: bool = True, dir: Optional[str] = None):
        component = type(self).__name__
        if train_or_test not in ("train", "test"):
            raise ValueError("{}: train_or_test must be 'train' or 'test', got {!r}".format(component, train_or_test))
        self.train_or_test = train_or_test
        self.shuffle = shuffle
        self.dir = os.path.expanduser(dir) if dir is not None else get_dataset_path(self._DIR_NAME)
        prefix = "train" if train_or_test == "train" else "t10k"
        image_file, label_file = prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz"
        paths = [fetch(RemoteFile(name, self._SOURCE_URLS, md5=self._MD5[name]), self.dir, component,
                       expected=[image_file, label_file]) for name in (image_file, label_file)]
        images = _read_idx(paths[0], _IMAGES_MAGIC, 3, component)
        labels = _read_idx(paths[1], _LABELS_MAGIC, 1, component)
        check_labels(component, paths[1], labels, 0, 9)
        if images.shape[0] != labels.shape[0]:
            raise DatasetFormatError("{}: {} has {} images but {} has {} labels".format(
                component, paths[0], images.shape[0], paths[1], labels.shape[0]))
        # Scaled once, like tensorpack (float32 division, so values match it bit for bit).
        self.images = images[:, :, :, np.newaxis].astype(np.float32) / 255.0
        self.labels = labels

    def __len__(self) -> int:
        return self.images.shape[0]

    def _datapoint(self, k: int) -> List[object]:
        return [self.images[k].reshape(self.images.shape[1:3]), self.labels[k]]


class FashionMnist(Mnist):
    """Fashion-MNIST: the same files, datapoints and arguments as :class:`Mnist`, with clothing
    classes (see :meth:`get_label_names`); default directory ``~/tensorpack_data/fashion_mnist_data``.

    Example::

        ds = FashionMnist("test", shuffle=False)
        names = ds.get_label_names()      # ['T-shirt/top', 'Trouser', ...]
    """

    _DIR_NAME = "fashion_mnist_data"
    _SOURCE_URLS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
    _MD5 = {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    }

    def get_label_names(self) -> List[str]:
        """The class names, indexed by label (from the Fashion-MNIST dataset page)."""
        return ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
