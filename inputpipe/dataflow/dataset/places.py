"""Places365-Standard (low resolution, "easy directory structure").

Example::

    from inputpipe.dataflow.dataset import Places365Standard
    ds = Places365Standard("/data/places365_standard", "val")
    ds.reset_state()
    image, label = next(iter(ds))      # uint8 (256, 256, 3) BGR, int label
"""
import os
from typing import Any, List, Optional


from ...utils.logger import get_logger
from .._core.helpers import IndexedSource
from .._image.opencv import import_cv2
from ._checks import DatasetFormatError, read_text_lines
from .._formats.dataset_files import read_color_image
from ..base import RNGDataFlow  # noqa: F401  (tensorpack's dataset.places has it, outside __all__)

__all__ = ["Places365Standard"]

logger = get_logger(__name__)


class Places365Standard(IndexedSource):
    """Places365-Standard: ``[image, label]``, image a uint8 BGR array (256x256x3 in the low
    resolution release), label the index of the class name in the sorted list of class names
    found in the list file (see :meth:`get_label_names`).

    ``dir`` is the "easy directory structure" folder holding ``train.txt`` / ``val.txt``, whose
    lines are image paths relative to ``dir`` like ``train/airfield/00000001.jpg`` (the second
    path element is the class). ``shuffle`` defaults to True for ``'train'``. Needs OpenCV.

    Example::

        ds = Places365Standard("~/data/places365_standard", "train")
        ds.reset_state()
        for image, label in ds:
            ...
    """

    def __init__(self, dir: str, name: str, shuffle: Optional[bool] = None):
        component = type(self).__name__
        if name not in ("train", "val"):
            raise ValueError("{}: name must be 'train' or 'val', got {!r}".format(component, name))
        dir = os.path.expanduser(dir)
        if not os.path.isdir(dir):
            raise FileNotFoundError("{}: the dataset directory {} does not exist".format(component, dir))
        self.name = name
        self.shuffle = name == "train" if shuffle is None else shuffle
        label_file = os.path.join(dir, name + ".txt")
        entries = []
        for number, relative in enumerate(read_text_lines(component, label_file, "the image list"), 1):
            parts = relative.split("/")
            if len(parts) < 3:
                raise DatasetFormatError("{}: line {} of {} should be a path like 'train/<class>/<file>.jpg', got "
                                         "{!r}".format(component, number, label_file, relative))
            entries.append((os.path.join(dir, relative), parts[1]))
        self._labels = sorted({label for _, label in entries})
        ids = {label: i for i, label in enumerate(self._labels)}
        self._files = [(path, ids[label]) for path, label in entries]
        import_cv2(component)
        logger.info("%s: found %d images in %s", component, len(self._files), label_file)

    def get_label_names(self) -> List[str]:
        """The class names, indexed by label (sorted alphabetically, as the dataset numbers them)."""
        return self._labels

    def __len__(self) -> int:
        return len(self._files)

    def _datapoint(self, k: int) -> List[Any]:
        fname, label = self._files[k]
        return [read_color_image(type(self).__name__, fname), label]
