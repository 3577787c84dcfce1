"""BSDS500, the Berkeley segmentation dataset, as images and edge-probability maps.

Example::

    from inputpipe.dataflow.dataset import BSDS500
    ds = BSDS500("val", data_dir="/data/bsds500", shuffle=False)   # holds BSR/
    ds.reset_state()
    image, edges = next(iter(ds))     # uint8 (321, 481, 3) BGR, float32 (321, 481) in [0, 1]
"""
import functools
import glob
import os
from typing import Any, Dict, List, Optional

import numpy as np

from .._core.helpers import IndexedSource
from .._image.opencv import import_cv2
from ._checks import describe, format_error
from .._formats.dataset_files import RemoteFile, extract_tar, fetch, get_dataset_path, load_mat, read_color_image
# tensorpack's dataset.bsds500 also has these (outside __all__): scripts import them from here
from ..base import RNGDataFlow  # noqa: F401
from ..tensorpack_helpers import create_dummy_class, download  # noqa: F401

__all__ = ["BSDS500"]

# Only the size of the standard archive is known (tensorpack records it); no checksum is published.
_REMOTE = RemoteFile("BSR_bsds500.tgz", ("http://www.eecs.berkeley.edu/Research/Projects/CS/vision/grouping/BSR/",),
                     size=70763455)
IMG_W, IMG_H = 481, 321
#: tensorpack's names of the standard archive's URL and size in bytes.
DATA_URL = _REMOTE.urls[0]
DATA_SIZE = 70763455


def _boundary_maps(component: str, gt_file: str, content: Dict[str, Any]) -> List[np.ndarray]:
    """The ``Boundaries`` map of every annotation in a groundTruth .mat file (a 1xN cell array of
    structs); anything else is a DatasetFormatError naming the file."""
    expected = "expected a groundTruth cell array of annotations with a Boundaries map each, found "
    cells = content.get("groundTruth")
    if cells is None:
        raise format_error(component, gt_file, expected + "the variables {}".format(
            sorted(name for name in content if not name.startswith("__"))))
    if not isinstance(cells, np.ndarray) or cells.dtype != object or cells.ndim != 2 or cells.shape[0] != 1 \
            or cells.shape[1] == 0:
        raise format_error(component, gt_file, expected + describe(cells))
    maps: List[np.ndarray] = []
    for k, cell in enumerate(cells[0]):
        if "Boundaries" not in (getattr(getattr(cell, "dtype", None), "names", None) or ()) or cell.size != 1:
            raise format_error(component, gt_file, expected + "annotation {} without Boundaries".format(k))
        boundary = cell["Boundaries"].flat[0]
        if not isinstance(boundary, np.ndarray) or boundary.ndim != 2 \
                or (maps and boundary.shape != maps[0].shape):
            raise format_error(component, gt_file, expected + "annotation {}'s Boundaries as {}".format(
                k, describe(boundary)))
        maps.append(boundary)
    return maps


class BSDS500(IndexedSource):
    """BSDS500: ``[image, label]``; image a uint8 (321, 481, 3) BGR array, label a float32
    (321, 481) map whose pixels are the fraction of annotators that marked an edge there.
    Portrait images and maps are transposed to landscape, as in tensorpack.

    ``name`` is ``'train'``, ``'test'`` or ``'val'``; ``data_dir`` holds the unpacked ``BSR/``
    folder (default ``~/tensorpack_data/bsds500_data``; when missing the standard archive is
    downloaded, checked against its documented size, and unpacked). Images are read in sorted
    file-name order. Needs OpenCV and SciPy.

    Example::

        ds = BSDS500("train")
        ds.reset_state()
        for image, edges in ds:
            ...
    """

    def __init__(self, name: str, data_dir: Optional[str] = None, shuffle: bool = True):
        component = type(self).__name__
        if name not in ("train", "test", "val"):
            raise ValueError("{}: name must be 'train', 'test' or 'val', got {!r}".format(component, name))
        data_dir = os.path.expanduser(data_dir) if data_dir is not None else get_dataset_path("bsds500_data")
        if not os.path.isdir(os.path.join(data_dir, "BSR")):
            path = fetch(_REMOTE, data_dir, component, expected=[_REMOTE.name + " (or the unpacked folder BSR/)"])
            extract_tar(path, data_dir, component)
        self.data_root = os.path.join(data_dir, "BSR", "BSDS500", "data")
        if not os.path.isdir(self.data_root):
            raise FileNotFoundError("{}: expected the folder {} inside the unpacked archive".format(
                component, self.data_root))
        self.shuffle = shuffle
        self._load(name)

    def _load(self, name: str) -> None:
        component = type(self).__name__
        import_cv2(component)   # fail before reading anything when OpenCV is missing
        image_files = sorted(glob.glob(os.path.join(self.data_root, "images", name, "*.jpg")))
        gt_dir = os.path.join(self.data_root, "groundTruth", name)
        self.data = np.zeros((len(image_files), IMG_H, IMG_W, 3), dtype="uint8")
        self.label = np.zeros((len(image_files), IMG_H, IMG_W), dtype="float32")
        for idx, fname in enumerate(image_files):
            image = read_color_image(component, fname)
            if image.shape[0] > image.shape[1]:
                image = np.transpose(image, (1, 0, 2))
            if image.shape[:2] != (IMG_H, IMG_W):
                raise ValueError("{}: {} is {}x{}, expected {}x{} (or its transpose)".format(
                    component, fname, image.shape[0], image.shape[1], IMG_H, IMG_W))
            gt_file = os.path.join(gt_dir, os.path.basename(fname).split(".")[0] + ".mat")
            boundaries = _boundary_maps(component, gt_file, load_mat(gt_file, component))
            edges = functools.reduce(np.add, boundaries).astype("float32")
            edges *= 1.0 / len(boundaries)
            if edges.shape[0] > edges.shape[1]:
                edges = edges.transpose()
            if edges.shape != (IMG_H, IMG_W):
                raise ValueError("{}: the boundaries in {} are {}, expected {}".format(
                    component, gt_file, edges.shape, (IMG_H, IMG_W)))
            self.data[idx] = image
            self.label[idx] = edges

    def __len__(self) -> int:
        return self.data.shape[0]

    def _datapoint(self, k: int) -> List[Any]:
        return [self.data[k], self.label[k]]
