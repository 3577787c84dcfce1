"""Caltech 101 Silhouettes (28x28, split 1) from the standard .mat file.

Example::

    from inputpipe.dataflow.dataset import Caltech101Silhouettes
    ds = Caltech101Silhouettes("train", shuffle=False, dir="/data/caltech101")
    ds.reset_state()
    image, label = next(iter(ds))      # (28, 28) image in [0, 1], label 0-100
"""
import os
from typing import Any, List, Optional


from .._core.helpers import IndexedSource
from ._checks import check_array, check_labels, check_variables, format_error
from .._formats.dataset_files import RemoteFile, fetch, get_dataset_path, load_mat
# tensorpack's dataset.caltech101 also has these (outside __all__): scripts import them from here
from ..base import RNGDataFlow  # noqa: F401
from ..tensorpack_helpers import create_dummy_class, download, maybe_download  # noqa: F401

__all__ = ["Caltech101Silhouettes"]

# No checksum or size of this file is published (neither by the dataset page nor by tensorpack),
# so a download is not verified.
_REMOTE = RemoteFile("caltech101_silhouettes_28_split1.mat", ("https://people.cs.umass.edu/~marlin/data/",))


class Caltech101Silhouettes(IndexedSource):
    """Caltech 101 Silhouettes: ``[image, label]``, image a (28, 28) array in [0, 1] with the
    file's dtype, label in 0-100 (the file's 1-based labels minus one).

    ``name`` is ``'train'``, ``'test'`` or ``'val'``. ``dir`` holds
    ``caltech101_silhouettes_28_split1.mat`` (default ``~/tensorpack_data/caltech101_data``; a
    missing file is downloaded, unverified because no checksum is published). Needs SciPy.
    Images are the file's rows reshaped in C order, as tensorpack does.

    Example::

        ds = Caltech101Silhouettes("val")
        ds.reset_state()
        for image, label in ds:
            ...
    """

    _DIR_NAME = "caltech101_data"

    def __init__(self, name: str, shuffle: bool = True, dir: Optional[str] = None):
        component = type(self).__name__
        if name not in ("train", "test", "val"):
            raise ValueError("{}: name must be 'train', 'test' or 'val', got {!r}".format(component, name))
        self.name = name
        self.shuffle = shuffle
        directory = os.path.expanduser(dir) if dir is not None else get_dataset_path(self._DIR_NAME)
        path = fetch(_REMOTE, directory, component)
        self.data = load_mat(path, component)
        data_key, labels_key = name + "_data", name + "_labels"
        check_variables(component, path, self.data, [data_key, labels_key])
        self.images = check_array(component, path, data_key, self.data[data_key], (None, 784)).reshape((-1, 28, 28))
        if self.data[labels_key].size != self.images.shape[0]:
            raise format_error(component, path, "the {} split has {} images but {} labels".format(
                name, self.images.shape[0], self.data[labels_key].size))
        check_labels(component, path, self.data[labels_key], 1, 101, " in " + labels_key)
        self.labels = self.data[labels_key].ravel() - 1

    def __len__(self) -> int:
        return self.images.shape[0]

    def _datapoint(self, k: int) -> List[Any]:
        return [self.images[k], self.labels[k]]
