"""Flips, resizes and transposes (tensorpack's ``imgaug.misc``)."""
from typing import Any, Optional, Tuple

import numpy as np

from ...utils.logger import get_logger
from .._image.opencv import INTER_LINEAR, import_cv2
from ._image_rule import HW_OR_HWC, NON_EMPTY_HW_OR_HWC
from .base import ImageAugmentor, hw_shape
from ..tensorpack_helpers import shape2d  # noqa: F401  (tensorpack's imgaug.misc has it, outside __all__)
from .transform import FlipTransform, NoOpTransform, ResizeTransform, TransposeTransform

__all__ = ["Flip", "Resize", "RandomResize", "ResizeShortestEdge", "Transpose"]

_logger = get_logger(__name__)


class Flip(ImageAugmentor):
    """Mirror the image left-right (``horiz=True``) or top-bottom (``vert=True``) with probability ``prob``.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.Flip(horiz=True, prob=1.0)
        assert aug.augment(np.array([[1, 2, 3]], np.uint8)).tolist() == [[3, 2, 1]]
    """

    _image_rule = HW_OR_HWC
    reads_encoded = True           # chooses from the image's size: works on encoded bytes

    def __init__(self, horiz: bool = False, vert: bool = False, prob: float = 0.5):
        super().__init__()
        if horiz and vert:
            raise ValueError("Flip: horiz and vert cannot both be True; use two Flip augmentors")
        if not horiz and not vert:
            raise ValueError("Flip: one of horiz or vert must be True")
        self.horiz, self.vert, self.prob = horiz, vert, prob

    def get_transform(self, img: np.ndarray) -> Any:
        h, w = img.shape[:2]
        if self._rand_range() < self.prob:
            return FlipTransform(h, w, self.horiz)
        return NoOpTransform()


class Resize(ImageAugmentor):
    """Resize to ``shape`` (an int for a square, or ``(h, w)``) with OpenCV interpolation ``interp``.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        assert imgaug.Resize((3, 5)).augment(np.zeros((6, 6, 3), np.uint8)).shape == (3, 5, 3)
    """

    _image_rule = NON_EMPTY_HW_OR_HWC
    reads_encoded = True           # chooses from the image's size: works on encoded bytes

    def __init__(self, shape: Any, interp: int = INTER_LINEAR):
        import_cv2("Resize")
        self.shape = hw_shape("Resize", shape)
        if min(self.shape) < 1:
            raise ValueError("Resize: shape must be at least (1, 1), got {!r}".format(shape))
        self.interp = interp
        super().__init__()

    def get_transform(self, img: np.ndarray) -> Any:
        return ResizeTransform(img.shape[0], img.shape[1], self.shape[0], self.shape[1], self.interp)


class ResizeShortestEdge(ImageAugmentor):
    """Resize so the shorter side is ``size`` pixels, keeping the aspect ratio (the longer side is rounded).

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        assert imgaug.ResizeShortestEdge(4).augment(np.zeros((10, 15), np.uint8)).shape == (4, 6)
    """

    _image_rule = NON_EMPTY_HW_OR_HWC
    reads_encoded = True           # chooses from the image's size: works on encoded bytes

    def __init__(self, size: int, interp: int = INTER_LINEAR):
        import_cv2("ResizeShortestEdge")
        self.size = int(size)
        if self.size < 1:
            raise ValueError("ResizeShortestEdge: size must be >= 1 (pixels), got {!r}".format(size))
        self.interp = interp
        super().__init__()

    def get_transform(self, img: np.ndarray) -> Any:
        h, w = img.shape[:2]
        scale = self.size * 1.0 / min(h, w)
        if h < w:
            new_h, new_w = self.size, int(scale * w + 0.5)
        else:
            new_h, new_w = int(scale * h + 0.5), self.size
        return ResizeTransform(h, w, new_h, new_w, self.interp)


def _round_at_least(size: np.ndarray, minimum: int) -> int:
    """``max(size, minimum)`` rounded half up (in the precision of ``size`` when that is larger),
    and at least 1: a side that would round to no pixel (a small scale of an image a few pixels
    wide) keeps one."""
    return max(1, int((minimum if minimum > size else size) + 0.5))


def _is_float_range(values: Tuple[Any, Any]) -> bool:
    return isinstance(values[0], (float, np.floating)) or isinstance(values[1], (float, np.floating))


class RandomResize(ImageAugmentor):
    """Resize width and height by random amounts.

    Args:
        xrange: ``(min, max)`` of the new width: a scale factor when either is a float (e.g.
            ``(0.9, 1.2)``), else pixels (e.g. ``(200, 350)``).
        yrange: the same for the height; unused (may be None) when ``aspect_ratio_thres == 0``.
        minimum: ``(min_w, min_h)`` in pixels; a side never becomes less than 1 pixel.
        aspect_ratio_thres: draws that change the aspect ratio by this fraction or more are
            redrawn (after 50 tries the image keeps its size); 0 keeps the aspect ratio.
        interp: OpenCV interpolation.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.RandomResize((0.5, 2.0), aspect_ratio_thres=0)
        aug.reset_state()
        out = aug.augment(np.zeros((10, 20), np.uint8))
        assert 5 <= out.shape[0] <= 20 and abs(out.shape[1] - 2 * out.shape[0]) <= 1
    """

    _image_rule = NON_EMPTY_HW_OR_HWC
    reads_encoded = True           # chooses from the image's size: works on encoded bytes

    def __init__(self, xrange: Tuple[Any, Any], yrange: Optional[Tuple[Any, Any]] = None,
                 minimum: Tuple[int, int] = (0, 0), aspect_ratio_thres: float = 0.15, interp: int = INTER_LINEAR):
        import_cv2("RandomResize")
        super().__init__()
        if aspect_ratio_thres < 0:
            raise ValueError("RandomResize: aspect_ratio_thres must be >= 0, got {}".format(aspect_ratio_thres))
        self.xrange, self.yrange, self.minimum = xrange, yrange, minimum
        self.aspect_ratio_thres, self.interp = aspect_ratio_thres, interp
        self._is_scale = _is_float_range(xrange)
        if yrange is not None and _is_float_range(yrange) != self._is_scale:
            raise ValueError("RandomResize: xrange {} and yrange {} must both be scales (floats) or both pixel "
                             "sizes (ints)".format(xrange, yrange))
        if yrange is None and aspect_ratio_thres != 0:
            raise ValueError("RandomResize: yrange is needed unless aspect_ratio_thres == 0")
        if aspect_ratio_thres == 0:
            if self._is_scale and yrange is not None and tuple(xrange) != tuple(yrange):
                raise ValueError("RandomResize: with aspect_ratio_thres=0 a scale yrange must equal xrange, got {} "
                                 "and {}".format(xrange, yrange))
            if not self._is_scale and yrange is not None:
                _logger.warning("RandomResize: aspect_ratio_thres == 0, so yrange %s is not used", yrange)

    def _draw_size(self, h: int, w: int) -> Tuple[int, int]:
        sx = self._rand_range(*self.xrange)
        if self.aspect_ratio_thres == 0:
            sy = sx if self._is_scale else sx * 1.0 / w * h
        else:
            assert self.yrange is not None  # __init__ requires yrange unless aspect_ratio_thres == 0
            sy = self._rand_range(*self.yrange)
        if self._is_scale:
            return _round_at_least(sx * w, self.minimum[0]), _round_at_least(sy * h, self.minimum[1])
        return _round_at_least(sx, self.minimum[0]), _round_at_least(sy, self.minimum[1])

    def get_transform(self, img: np.ndarray) -> Any:
        h, w = img.shape[:2]
        for _ in range(51):
            new_w, new_h = self._draw_size(h, w)
            if self.aspect_ratio_thres > 0:
                old_ratio = w * 1.0 / h
                change = abs(new_w * 1.0 / new_h - old_ratio) / old_ratio
                if change >= self.aspect_ratio_thres + 1e-5:
                    continue
            return ResizeTransform(h, w, new_h, new_w, self.interp)
        _logger.warning("RandomResize: no size within aspect_ratio_thres=%s in 51 draws for an image of %dx%d; "
                        "keeping its size", self.aspect_ratio_thres, h, w)
        return ResizeTransform(h, w, h, w, self.interp)


class Transpose(ImageAugmentor):
    """Swap rows and columns with probability ``prob``.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        assert imgaug.Transpose(prob=1.0).augment(np.zeros((2, 5, 3), np.uint8)).shape == (5, 2, 3)
    """

    _image_rule = HW_OR_HWC
    reads_encoded = True           # chooses from the image's size: works on encoded bytes

    def __init__(self, prob: float = 0.5):
        import_cv2("Transpose")
        super().__init__()
        self.prob = prob

    def get_transform(self, img: np.ndarray) -> Any:
        if self.rng.rand() < self.prob:
            return TransposeTransform()
        return NoOpTransform()
