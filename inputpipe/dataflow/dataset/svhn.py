"""SVHN cropped digits (format 2) from the standard ``{train,test,extra}_32x32.mat`` files.

Example::

    from inputpipe.dataflow.dataset import SVHNDigit
    ds = SVHNDigit("test", data_dir="/data/svhn", shuffle=False)
    ds.reset_state()
    image, label = next(iter(ds))       # uint8 (32, 32, 3) in [0, 255], label 0-9
"""
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...utils.logger import get_logger
from .._core.helpers import IndexedSource
from ._checks import check_array, check_labels, check_variables, format_error
from .._formats.dataset_files import RemoteFile, fetch, get_dataset_path, load_mat
# tensorpack's dataset.svhn also has these (outside __all__): scripts import them from here
from ..base import RNGDataFlow  # noqa: F401
from ..tensorpack_helpers import create_dummy_class, download  # noqa: F401

__all__ = ["SVHNDigit"]

logger = get_logger(__name__)

_SVHN_URL = "http://ufldl.stanford.edu/housenumbers/"
SVHN_URL = _SVHN_URL        # tensorpack's name (outside __all__)
_MD5 = {
    "train": "e26dedcc434d2e4c54c9b2d4a06d8373",
    "test": "eb5a983be6a315427106f1b164d9cef3",
    "extra": "a93ce644f1a588dc4d68dda5feec44a7",
}


def _read_split(path: str, component: str) -> Tuple[np.ndarray, np.ndarray]:
    """(images (N, 32, 32, 3) uint8, labels (N,) 0-9) of a ``*_32x32.mat`` file; anything else in
    it is a DatasetFormatError naming the file."""
    data = load_mat(path, component)
    check_variables(component, path, data, ["X", "y"])
    images = check_array(component, path, "X", data["X"], (32, 32, 3, None), "uint8").transpose(3, 0, 1, 2)
    if data["y"].size != images.shape[0]:
        raise format_error(component, path, "has {} images in X but {} labels in y".format(
            images.shape[0], data["y"].size))
    check_labels(component, path, data["y"], 1, 10, " in y")
    labels = data["y"].reshape(-1)
    labels[labels == 10] = 0
    return images, labels


class SVHNDigit(IndexedSource):
    """The SVHN cropped-digit dataset: ``[image, label]``, image a uint8 (32, 32, 3) array in
    [0, 255], label a numpy uint8 in 0-9 (the files' label 10 for the digit 0 becomes 0).

    ``name`` is ``'train'``, ``'test'`` or ``'extra'``; ``data_dir`` holds ``<name>_32x32.mat``
    (default ``~/tensorpack_data/svhn_data``; a missing file is downloaded from the standard URL
    and checked against its md5). Reading .mat files needs SciPy. Loaded splits are kept in a
    process-wide cache keyed by file path, so building the same split twice reads it once.

    Example::

        ds = SVHNDigit("train")
        ds.reset_state()
        for image, label in ds:
            ...
    """

    _Cache: Dict[Tuple[str, str], Tuple[np.ndarray, np.ndarray]] = {}

    def __init__(self, name: str, data_dir: Optional[str] = None, shuffle: bool = True):
        component = type(self).__name__
        if name not in ("train", "test", "extra"):
            raise ValueError("{}: name must be 'train', 'test' or 'extra', got {!r}".format(component, name))
        self.name = name
        self.shuffle = shuffle
        data_dir = os.path.expanduser(data_dir) if data_dir is not None else get_dataset_path("svhn_data")
        key = (os.path.abspath(data_dir), name)
        if key not in SVHNDigit._Cache:
            remote = RemoteFile(name + "_32x32.mat", (_SVHN_URL,), md5=_MD5[name])
            path = fetch(remote, data_dir, component)
            logger.info("%s: loading %s", component, path)
            SVHNDigit._Cache[key] = _read_split(path, component)
        self.X, self.Y = SVHNDigit._Cache[key]

    def __len__(self) -> int:
        return self.X.shape[0]

    def _datapoint(self, k: int) -> List[Any]:
        return [self.X[k], self.Y[k]]

    @staticmethod
    def get_per_pixel_mean(names: Sequence[str] = ("train", "test", "extra")) -> np.ndarray:
        """The (32, 32, 3) float64 mean image over the splits ``names`` in the default directory."""
        for name in names:
            if name not in ("train", "test", "extra"):
                raise ValueError("SVHNDigit.get_per_pixel_mean: names must be 'train', 'test' or 'extra', "
                                 "got {!r}".format(name))
        return np.concatenate([SVHNDigit(name).X for name in names]).mean(axis=0)
