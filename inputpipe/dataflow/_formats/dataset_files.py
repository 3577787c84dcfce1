"""Where datasets live, and how their standard files are downloaded, verified, unpacked and read.

A dataset reader names the files it needs as :class:`RemoteFile` entries. A file already in the
dataset directory is used as it is (like tensorpack, so you can put the files there yourself);
a missing one is downloaded from its URLs in order into a ``.part`` file, checked against its
md5 (or, where no checksum is published, its documented size) and only then moved into place.
Without network access the reader fails at once with a :class:`DatasetDownloadError` that names
the URL, the directory and every file it expects there. The downloads themselves
(:func:`fetch`, :func:`get_dataset_path`, ...) live in :mod:`inputpipe.utils.fs`, tensorpack's
``utils.fs``; this module adds unpacking and reading the datasets' files.

Example::

    from inputpipe.dataflow._formats.dataset_files import RemoteFile, fetch, get_dataset_path
    path = fetch(RemoteFile("t10k-labels-idx1-ubyte.gz", ("http://yann.lecun.com/exdb/mnist/",),
                            md5="ec29112dd5afa0611ce80d1b7f02629c"),
                 get_dataset_path("mnist_data"), component="Mnist")
"""
import codecs
import collections
import importlib
import io
import os
import pickle
import pickletools
import tarfile
from typing import Any, Dict

import numpy as np

from ...utils.fs import DatasetDownloadError, RemoteFile, fetch, get_dataset_path
from ..dataset_io import DatasetFormatError
from ..image_damage import check_image_file_damage
from ..image_limits import check_image_file

__all__ = ["DatasetDownloadError", "RemoteFile", "get_dataset_path", "fetch", "extract_tar",
           "load_mat", "load_dataset_pickle", "read_color_image", "unreadable_image_error"]


def read_color_image(component: str, path: str) -> np.ndarray:
    """The image file at ``path`` as OpenCV reads it in colour (HxWx3 uint8, BGR).

    A missing file is a FileNotFoundError, a file OpenCV cannot decode an OSError, a file whose
    header declares more pixels than :data:`inputpipe.dataflow.image_limits.MAX_IMAGE_PIXELS` an
    ``ImageTooLargeError`` (checked before decoding), and a damaged file (a JPEG or PNG cut short
    or with a damaged structure; with the ``"thorough"`` decoding mode also corrupt JPEG data) a
    :class:`~inputpipe.dataflow.image_damage.DamagedImageError` (an OSError), unless decoding is lenient
    (:mod:`~inputpipe.dataflow.image_damage`); each names ``component`` and the file.

    Example::

        image = read_color_image("ILSVRC12", "train/n01440764/n01440764_10026.JPEG")
    """
    from .._image.opencv import import_cv2

    cv2 = import_cv2(component)
    check_image_file(component, path)
    check_image_file_damage(component, path)
    image = cv2.imread(path, cv2.IMREAD_COLOR)
    if image is None:
        raise unreadable_image_error(component, path)
    return image


def read_encoded_image(component: str, path: str) -> np.ndarray:
    """The bytes of the image file at ``path`` as a 1-d uint8 array, for augmentors to decode as
    far as they need (:mod:`inputpipe.dataflow.imgaug.encoded`); a missing file is a
    FileNotFoundError, a file whose header declares more pixels than
    :data:`inputpipe.dataflow.image_limits.MAX_IMAGE_PIXELS` an ``ImageTooLargeError``, and a
    damaged file a :class:`~inputpipe.dataflow.image_damage.DamagedImageError` (as
    :func:`read_color_image`: its structure is checked here, and the decoder's warnings are
    errors when the augmentors decode it), each naming ``component`` and the file.

    Example::

        data = read_encoded_image("ILSVRC12", "train/n01440764/n01440764_10026.JPEG")
    """
    if not os.path.isfile(path):
        raise FileNotFoundError("{}: the image file {} is missing".format(component, path))
    check_image_file(component, path)
    data = np.fromfile(path, np.uint8)
    check_image_file_damage(component, path, data)
    return data


def unreadable_image_error(component: str, path: str) -> OSError:
    """The error for an image file OpenCV returned nothing for: missing, or not decodable (then
    the message shows its size and first bytes)."""
    if not os.path.isfile(path):
        return FileNotFoundError("{}: the image file {} is missing".format(component, path))
    try:
        with open(path, "rb") as f:
            head = f.read(16)
        size = os.path.getsize(path)
    except OSError as err:
        return OSError("{}: cannot read the image file {}: {}".format(component, path, err))
    return OSError("{}: cannot decode the image file {} ({} bytes, starting with {!r}): expected a complete image "
                   "in a format OpenCV reads (JPEG, PNG, BMP, ...)".format(component, path, size, head))


def _inside(root: str, member: str) -> bool:
    target = os.path.realpath(os.path.join(root, member))
    return target == os.path.realpath(root) or target.startswith(os.path.realpath(root) + os.sep)


def extract_tar(path: str, directory: str, component: str) -> None:
    """Unpack the (gzip) tarball ``path`` into ``directory``; members that would land outside it,
    links and device files are refused."""
    with tarfile.open(path, "r:*") as archive:
        if hasattr(tarfile, "data_filter"):
            try:
                archive.extractall(directory, filter="data")
            except tarfile.FilterError as err:
                raise DatasetDownloadError("{}: refusing to unpack {} ({})".format(component, path, err)) from None
            return
        members = archive.getmembers()
        for member in members:
            if not (member.isfile() or member.isdir()) or not _inside(directory, member.name):
                raise DatasetDownloadError("{}: refusing to unpack {!r} from {} (a link, device or a path "
                                           "outside {})".format(component, member.name, path, directory))
        archive.extractall(directory, members=members)


def load_mat(path: str, component: str) -> Dict[str, Any]:
    """A MATLAB .mat file as a dict of arrays, via SciPy (an optional dependency); a damaged file
    is a :class:`DatasetFormatError` naming ``component`` and the file."""
    try:
        import scipy.io
    except ImportError:
        raise ImportError("{} reads MATLAB .mat files and needs SciPy: pip install scipy".format(component)) from None
    if not os.path.isfile(path):
        raise FileNotFoundError("{}: the .mat file {} is missing".format(component, path))
    try:
        return scipy.io.loadmat(path)
    except Exception as err:  # noqa: BLE001 - SciPy raises ValueError, OSError, IndexError, ... on damaged files
        raise DatasetFormatError("{}: {} is not a readable MATLAB .mat file: {}: {}".format(
            component, path, type(err).__name__, err)) from None


def _multiarray(name: str) -> Any:
    """``numpy._core.multiarray.<name>`` (numpy 2), or ``numpy.core.multiarray.<name>`` (numpy 1)."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError("numpy has no multiarray.{}".format(name))


class _RefusedContent(pickle.UnpicklingError):
    """A dataset pickle that asks for more than data; raised as it is (an UnpicklingError)."""


class _ArrayType:
    """What a dataset pickle gets for ``numpy.ndarray``: the type argument of numpy's
    ``_reconstruct``. Called directly (which would allocate any shape it names) it refuses."""

    def __init__(self, where: str):
        self.where = where

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise _RefusedContent("{} calls numpy.ndarray{}; a dataset pickle may only rebuild arrays the way numpy "
                              "pickles them".format(self.where, args))


def _checked_reconstruct(where: str) -> Any:
    """numpy's ``_reconstruct(ndarray, (0,), dtype)``, the empty array an array's pickled state
    fills; any other type or shape is refused (it would allocate what the file names)."""
    reconstruct = _multiarray("_reconstruct")

    def rebuild(subtype: Any, shape: Any, dtype: Any) -> Any:
        if not isinstance(subtype, _ArrayType) or tuple(shape) != (0,):
            raise _RefusedContent("{} builds an array of shape {} with _reconstruct; numpy's pickles build shape "
                                  "(0,) and fill it from the pickled state".format(where, tuple(shape)))
        return reconstruct(np.ndarray, (0,), dtype)

    return rebuild


# The only globals a dataset pickle may name: numpy arrays (rebuilt only the way numpy pickles
# them), dtypes and scalars (under numpy 1 and numpy 2 module names), the contents of the CIFAR
# python files, and the bytes encoder of pickle protocol 2. Anything else is refused.
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"): _ArrayType,
    ("numpy", "dtype"): lambda where: np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _checked_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _checked_reconstruct,
    ("numpy.core.multiarray", "scalar"): lambda where: _multiarray("scalar"),
    ("numpy._core.multiarray", "scalar"): lambda where: _multiarray("scalar"),
    ("_codecs", "encode"): lambda where: codecs.encode,   # how protocol 2 stores bytes written by Python 3
}


class _DataOnlyUnpickler(pickle.Unpickler):
    def __init__(self, f: Any, path: str, component: str, **kwargs: Any):
        super().__init__(f, **kwargs)
        self._where = "{}: {}".format(component, path)

    def find_class(self, module: str, name: str) -> Any:
        make = _ALLOWED_GLOBALS.get((module, name))
        if make is None:
            raise _RefusedContent("{} names {}.{}; a dataset pickle may only hold numpy arrays, "
                                  "scalars and python data".format(self._where, module, name))
        return make(self._where)


def load_dataset_pickle(path: str, component: str, encoding: str = "ASCII",
                        kind: str = "dataset pickle") -> Any:
    """Load a dataset's own pickle file (e.g. a CIFAR batch) that the user pointed at.

    Pickle is the format these datasets are published in; loading the local file is what every
    reader does. As a safeguard the loader accepts only numpy arrays, dtypes, scalars and plain
    python data, so a file that tries to run code (or to allocate an array it does not hold) is
    refused with a ``pickle.UnpicklingError`` instead of executed. Every length the file declares
    is checked against the bytes it holds before anything is allocated; a truncated or damaged
    file is a :class:`DatasetFormatError` naming ``component``, the file and ``kind``.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError("{}: the file {} is missing".format(component, path))
    with open(path, "rb") as f:
        data = f.read()
    try:
        # Every length the pickle declares must fit in the file before the unpickler, which
        # allocates a declared length before reading it, sees it.
        collections.deque(pickletools.genops(io.BytesIO(data)), maxlen=0)
        return _DataOnlyUnpickler(io.BytesIO(data), path, component, encoding=encoding).load()
    except _RefusedContent:
        raise
    except Exception as err:  # noqa: BLE001 - whatever the bytes make the unpickler raise: a damaged file
        raise _unreadable(component, path, kind, err) from None


def _unreadable(component: str, path: str, kind: str, err: Exception) -> DatasetFormatError:
    return DatasetFormatError("{}: {} is not a readable {}: {}: {}".format(component, path, kind,
                                                                          type(err).__name__, err))
