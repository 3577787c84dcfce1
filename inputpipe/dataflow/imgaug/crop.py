"""Crops (tensorpack's ``imgaug.crop``): fixed, random, random-shape, Inception-style, and cutout."""
from typing import Any, Optional, Tuple

import numpy as np

from .._image.opencv import INTER_LINEAR, import_cv2
from ._image_rule import HW_OR_HWC, NON_EMPTY_HW_OR_HWC
from .base import ImageAugmentor, ImagePlaceholder, hw_shape
# tensorpack's imgaug.crop also has these (outside __all__): scripts import them from here
from ..tensorpack_helpers import log_deprecated, shape2d  # noqa: F401
from .misc import ResizeShortestEdge
from .transform import CropTransform, PhotometricTransform, ResizeTransform, TransformList

__all__ = ["RandomCrop", "CenterCrop", "RandomCropRandomShape", "GoogleNetRandomCropAndResize", "RandomCutout"]


def _check_size(component: str, name: str, size: Any) -> None:
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
        raise ValueError("{}: {} must be an int >= 1 (pixels), got {!r}".format(component, name, size))


def _check_fits(component: str, crop_shape: Tuple[int, int], img_shape: Tuple[int, ...]) -> None:
    if img_shape[0] < crop_shape[0] or img_shape[1] < crop_shape[1]:
        raise ValueError("{}: crop of (h, w) = {} does not fit in an image of shape {}".format(
            component, tuple(crop_shape), tuple(img_shape)))


class RandomCrop(ImageAugmentor):
    """Crop a window of ``crop_shape`` (int or ``(h, w)``) at a uniformly random position.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.RandomCrop((2, 3))
        aug.reset_state()
        assert aug.augment(np.zeros((5, 5, 3), np.uint8)).shape == (2, 3, 3)
    """

    _image_rule = HW_OR_HWC
    reads_encoded = True           # chooses from the image's size: works on encoded bytes

    def __init__(self, crop_shape: Any):
        shape = hw_shape("RandomCrop", crop_shape)
        super().__init__()
        self.crop_shape = shape

    def get_transform(self, img: np.ndarray) -> Any:
        _check_fits("RandomCrop", self.crop_shape, img.shape)
        y0 = self.rng.randint(img.shape[0] - self.crop_shape[0] + 1)
        x0 = self.rng.randint(img.shape[1] - self.crop_shape[1] + 1)
        return CropTransform(y0, x0, self.crop_shape[0], self.crop_shape[1])


class CenterCrop(ImageAugmentor):
    """Crop the central window of ``crop_shape`` (int or ``(h, w)``); an odd margin leaves the extra row/column below/right.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        img = np.arange(16, dtype=np.uint8).reshape(4, 4)
        assert imgaug.CenterCrop(2).augment(img).tolist() == [[5, 6], [9, 10]]
    """

    _image_rule = HW_OR_HWC
    reads_encoded = True           # chooses from the image's size: works on encoded bytes

    def __init__(self, crop_shape: Any):
        self.crop_shape = hw_shape("CenterCrop", crop_shape)
        super().__init__()

    def get_transform(self, img: Any) -> Any:
        _check_fits("CenterCrop", self.crop_shape, img.shape)
        y0 = int((img.shape[0] - self.crop_shape[0]) * 0.5)
        x0 = int((img.shape[1] - self.crop_shape[1]) * 0.5)
        return CropTransform(y0, x0, self.crop_shape[0], self.crop_shape[1])


class RandomCropRandomShape(ImageAugmentor):
    """Crop a window whose height is uniform in ``[hmin, hmax]`` and width in ``[wmin, wmax]`` (inclusive;
    a max of None means the image's size), at a uniformly random position.

    ``max_aspect_ratio`` is accepted for tensorpack compatibility and has no effect (as there).

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.RandomCropRandomShape(wmin=2, hmin=2, wmax=4, hmax=4)
        aug.reset_state()
        h, w = aug.augment(np.zeros((6, 6), np.uint8)).shape
        assert 2 <= h <= 4 and 2 <= w <= 4
    """

    _image_rule = HW_OR_HWC
    reads_encoded = True           # chooses from the image's size: works on encoded bytes

    def __init__(self, wmin: int, hmin: int, wmax: Optional[int] = None, hmax: Optional[int] = None,
                 max_aspect_ratio: Optional[float] = None):
        super().__init__()
        self.wmin, self.hmin, self.wmax, self.hmax = wmin, hmin, wmax, hmax
        self.max_aspect_ratio = max_aspect_ratio

    def get_transform(self, img: np.ndarray) -> Any:
        hmax = self.hmax or img.shape[0]
        wmax = self.wmax or img.shape[1]
        if hmax < self.hmin or wmax < self.wmin:
            raise ValueError("RandomCropRandomShape: crop of (h, w) from ({}, {}) to ({}, {}) does not fit in an image "
                             "of shape {}".format(self.hmin, self.wmin, hmax, wmax, tuple(img.shape)))
        h = self.rng.randint(self.hmin, hmax + 1)
        w = self.rng.randint(self.wmin, wmax + 1)
        _check_fits("RandomCropRandomShape", (h, w), img.shape)
        y0 = self.rng.randint(img.shape[0] - h + 1)
        x0 = self.rng.randint(img.shape[1] - w + 1)
        return CropTransform(y0, x0, h, w)


class GoogleNetRandomCropAndResize(ImageAugmentor):
    """Inception-style crop: a random window of ``crop_area_fraction`` of the area and aspect ratio
    in ``aspect_ratio_range`` (either orientation), resized to ``target_shape`` squared. After 10
    failed draws: :class:`ResizeShortestEdge` then :class:`CenterCrop`. A draw fails when its
    window does not fit in the image or rounds to no pixel (tensorpack took a window of width or
    height 0, on images of a few pixels, and failed in OpenCV's resize): a 1x1 image always gets
    the fallback.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.GoogleNetRandomCropAndResize(target_shape=8)
        aug.reset_state()
        assert aug.augment(np.zeros((20, 30, 3), np.uint8)).shape == (8, 8, 3)
    """

    _image_rule = NON_EMPTY_HW_OR_HWC
    reads_encoded = True           # chooses from the image's size: works on encoded bytes

    def __init__(self, crop_area_fraction: Tuple[float, float] = (0.08, 1.),
                 aspect_ratio_range: Tuple[float, float] = (0.75, 1.333),
                 target_shape: int = 224, interp: int = INTER_LINEAR):
        import_cv2("GoogleNetRandomCropAndResize")
        _check_size("GoogleNetRandomCropAndResize", "target_shape", target_shape)
        super().__init__()
        self.crop_area_fraction = crop_area_fraction
        self.aspect_ratio_range = aspect_ratio_range
        self.target_shape = target_shape
        self.interp = interp

    def get_transform(self, img: np.ndarray) -> Any:
        h, w = img.shape[:2]
        area = h * w
        rng = self.rng
        for _ in range(10):
            target_area = rng.uniform(*self.crop_area_fraction) * area
            aspect = rng.uniform(*self.aspect_ratio_range)
            ww = int(np.sqrt(target_area * aspect) + 0.5)
            hh = int(np.sqrt(target_area / aspect) + 0.5)
            if rng.uniform() < 0.5:
                ww, hh = hh, ww
            if 1 <= hh <= h and 1 <= ww <= w:
                x0 = rng.randint(0, w - ww + 1)
                y0 = rng.randint(0, h - hh + 1)
                return TransformList([CropTransform(y0, x0, hh, ww),
                                      ResizeTransform(hh, ww, self.target_shape, self.target_shape, self.interp)])
        resize = ResizeShortestEdge(self.target_shape, interp=self.interp).get_transform(img)
        crop = CenterCrop(self.target_shape).get_transform(ImagePlaceholder(shape=(resize.new_h, resize.new_w)))
        return TransformList([resize, crop])


class RandomCutout(ImageAugmentor):
    """Cutout (DeVries & Taylor, 2017): fill a random ``h x w`` rectangle with ``fill``.

    ``h_range``/``w_range``: an int (that size) or a ``(low, high)`` pair to draw from ``[low, high)``.
    The rectangle lies inside the image; coordinates are unchanged. The input image is not modified.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.RandomCutout(2, (1, 3), fill=7)
        aug.reset_state()
        out = aug.augment(np.zeros((4, 4), np.uint8))
        assert (out == 7).sum() in (2, 4)
    """

    _image_rule = HW_OR_HWC

    def __init__(self, h_range: Any, w_range: Any, fill: float = 0.):
        super().__init__()
        self.h_range, self.w_range, self.fill = h_range, w_range, fill

    def _draw_size(self, size_range: Any) -> int:
        if isinstance(size_range, (int, np.integer)):
            return int(size_range)
        return int(self.rng.randint(*size_range))

    def get_transform(self, img: np.ndarray) -> Any:
        h, w = self._draw_size(self.h_range), self._draw_size(self.w_range)
        _check_fits("RandomCutout", (h, w), img.shape)
        x0 = self.rng.randint(0, img.shape[1] + 1 - w)
        y0 = self.rng.randint(0, img.shape[0] + 1 - h)
        fill = self.fill

        def cutout(image: np.ndarray) -> np.ndarray:
            image = image.copy()
            image[y0:y0 + h, x0:x0 + w] = fill
            return image

        return PhotometricTransform(cutout, "cutout")
