"""Crop plans for a decoder in the graph: the DataFlow chooses each JPEG's crop window and flip
(with the augmentors' own random draws), TensorFlow decodes only that window in its own threads.

:class:`JpegCropWindows` turns ``[jpeg, ...]`` into ``[jpeg, crop, ...]``: ``jpeg`` the file's
bytes (a Python ``bytes``, so ``BatchData`` batches them and ``QueueInput`` carries them as a
``tf.string``), ``crop`` an int32 vector ``[y, x, h, w, out_h, out_w, flip]``: the window of the
source image, the size to resize it to and whether to mirror it left-right
(:func:`~inputpipe.dataflow.imgaug.crop_plan.plan_crop`).
:class:`~inputpipe.input_source.JpegDecodeInput` decodes them in the graph. The queue then
carries the JPEGs, about a tenth of the pixels' bytes, and no Python thread decodes.

Damaged JPEGs are refused here, in Python, before they reach the graph (a
:class:`~inputpipe.dataflow.image_damage.DamagedImageError` naming the flow), by the decoding mode
(:mod:`~inputpipe.dataflow.image_damage`): ``"strict"`` (the default) checks each file's structure
(empty, cut short, damaged marker segments, an empty frame), ``"thorough"`` also reads each file's
entropy-coded data to its end with libjpeg-turbo (about two thirds of a decode's CPU time, here in
the DataFlow's process), ``"lenient"`` checks nothing (and ``JpegDecodeInput`` then decodes what
it can of a damaged file). TensorFlow's decoder itself fails on data that ends inside the window it
decodes, but decodes corrupt data without an error: ``"thorough"`` is the mode that refuses it.

Example::

    augmentors = [imgaug.GoogleNetRandomCropAndResize(), imgaug.Flip(horiz=True)]
    ds = dataset.ILSVRC12(datadir, "train", shuffle=True, encoded=True)     # [jpeg, label]
    ds = BatchData(JpegCropWindows(ds, augmentors), 64)                    # [jpeg, crop, label]
    source = StagingInput(JpegDecodeInput(QueueInput(ds)))
"""
from typing import Any, Optional

import numpy as np

from ..utils.logger import get_logger
from .base import DataFlow
from .common import MapData
from .image import _augmentor_list, _SeededAugmentation
from .image_damage import check_unless_lenient, decoding_mode, read_all_jpeg_data

__all__ = ["JpegCropWindows", "CROP_FIELDS"]

logger = get_logger(__name__)
_warned_no_turbojpeg: list = []

#: The fields of a crop vector, in order.
CROP_FIELDS = ("y", "x", "h", "w", "out_h", "out_w", "flip")


class JpegCropWindows(_SeededAugmentation, MapData):
    """Replace the JPEG component ``index`` of every datapoint by its bytes and a crop plan
    right after it (see the module docstring).

    ``augmentors`` (a list or an ``AugmentorList``) must choose from the image's size alone and
    give crops, resizes and left-right flips (``GoogleNetRandomCropAndResize``, ``RandomCrop``,
    ``CenterCrop``, ``ResizeShortestEdge``, ``Resize``, ``Flip``); the size is read from each
    JPEG's header. The random draws are those ``AugmentImageComponent`` makes with the same
    augmentors, per datapoint (from this flow's base seed and the datapoint's number, or the
    parallel map's datapoint seed), so the flow resumes as they do.

    ``decoding``: ``"strict"``, ``"thorough"`` or ``"lenient"`` (see the module docstring); None:
    the process' mode (:func:`~inputpipe.dataflow.image_damage.set_decoding`) at each datapoint.

    Example::

        ds = JpegCropWindows(DataFromList([[open(f, "rb").read(), label] for f, label in files]),
                             [imgaug.GoogleNetRandomCropAndResize(), imgaug.Flip(horiz=True)])
        ds.reset_state()
        jpeg, crop, label = next(iter(ds))     # crop: int32 [y, x, h, w, 224, 224, flip]
    """

    def __init__(self, ds: DataFlow, augmentors: Any, index: int = 0, decoding: Optional[str] = None):
        from .imgaug.crop_plan import plan_crop

        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError("JpegCropWindows: index must be the int position of the JPEG in list datapoints, got "
                            "{!r}".format(index))
        self.augs = _augmentor_list(augmentors)
        self._index = index
        self._decoding = None if decoding is None else decoding_mode("JpegCropWindows", decoding)
        self._plan = plan_crop
        super().__init__(ds, self._augment)

    def _augment_one(self, dp: Any) -> Any:
        component = "{} (component {!r})".format(type(self).__name__, self._index)
        if not isinstance(dp, (list, tuple)):
            raise TypeError("{}: expected list or tuple datapoints, got a {}".format(component, type(dp).__name__))
        data = dp[self._index]
        mode = decoding_mode(component, self._decoding)
        check_unless_lenient(component, data, mode=mode)
        if mode == "thorough":
            _check_all(component, data)
        plan = self._plan(self.augs.augmentors, data, component)
        crop = np.array(plan.window + plan.size + (int(plan.flip),), np.int32)
        data = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        out = list(dp)
        out[self._index:self._index + 1] = [data, crop]
        return out



def _check_all(component: str, data: Any) -> None:
    """Read all of the JPEG's entropy-coded data; without libjpeg-turbo only the structure is
    checked (one warning says so)."""
    if not read_all_jpeg_data(component, data) and not _warned_no_turbojpeg:
        _warned_no_turbojpeg.append(True)
        logger.warning("%s: decoding is 'thorough' but libjpeg-turbo's TurboJPEG library was not found, so only the "
                       "structure of each JPEG is checked; pip install \"inputpipe[jpeg]\"", component)
