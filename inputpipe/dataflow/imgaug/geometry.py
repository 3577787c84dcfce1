"""Affine warps (tensorpack's ``imgaug.geometry``): shift, rotation, rotation with a valid crop, affine."""
import math
from typing import Any, Optional, Tuple

import numpy as np

from .._image.opencv import BORDER_REPLICATE, INTER_LINEAR, import_cv2
from ._image_rule import NON_EMPTY_HW_OR_HWC
from .base import ImageAugmentor
from .transform import CropTransform, TransformList, WarpAffineTransform

__all__ = ["Shift", "Rotation", "RotationAndCropValid", "Affine"]


def _check_step(component: str, max_deg: float, step_deg: Optional[float]) -> None:
    if step_deg is not None and not (max_deg == 180 and max_deg % step_deg == 0):
        raise ValueError("{}: step_deg needs max_deg == 180 and a step dividing 180, got max_deg={} and "
                         "step_deg={}".format(component, max_deg, step_deg))


class Shift(ImageAugmentor):
    """Shift by a random whole number of pixels, up to ``horiz_frac`` of the width and ``vert_frac``
    of the height either way; the uncovered border is filled by OpenCV's ``border`` mode
    (``border_value`` for ``cv2.BORDER_CONSTANT``).

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.Shift(horiz_frac=0.2, vert_frac=0.2)
        aug.reset_state()
        assert aug.augment(np.zeros((10, 10, 3), np.uint8)).shape == (10, 10, 3)
    """

    _image_rule = NON_EMPTY_HW_OR_HWC

    def __init__(self, horiz_frac: float = 0, vert_frac: float = 0, border: int = BORDER_REPLICATE,
                 border_value: Any = 0):
        import_cv2("Shift")
        if not (horiz_frac < 1.0 and vert_frac < 1.0):
            raise ValueError("Shift: horiz_frac and vert_frac must be < 1, got {} and {}".format(horiz_frac, vert_frac))
        super().__init__()
        self.horiz_frac, self.vert_frac = horiz_frac, vert_frac
        self.border, self.border_value = border, border_value

    def get_transform(self, img: np.ndarray) -> Any:
        max_dx = self.horiz_frac * img.shape[1]
        max_dy = self.vert_frac * img.shape[0]
        dx = np.round(self._rand_range(-max_dx, max_dx))
        dy = np.round(self._rand_range(-max_dy, max_dy))
        mat = np.array([[1, 0, dx], [0, 1, dy]], dtype="float32")
        return WarpAffineTransform(mat, img.shape[1::-1], borderMode=self.border, borderValue=self.border_value)


class Rotation(ImageAugmentor):
    """Rotate by a random angle in ``[-max_deg, max_deg)`` degrees (counter-clockwise positive, a
    multiple of ``step_deg`` if given) about a random centre: each of x, y is the image size times a
    fraction drawn from ``center_range``. Border handling as in :class:`Shift`.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.Rotation(180, center_range=(0.5, 0.5), step_deg=90)
        aug.reset_state()
        img = np.arange(16, dtype=np.uint8).reshape(4, 4)
        out = aug.augment(img)
        assert any(np.array_equal(out, np.rot90(img, k)) for k in range(4))
    """

    _image_rule = NON_EMPTY_HW_OR_HWC

    def __init__(self, max_deg: float, center_range: Tuple[float, float] = (0, 1), interp: int = INTER_LINEAR,
                 border: int = BORDER_REPLICATE, step_deg: Optional[float] = None, border_value: Any = 0):
        import_cv2("Rotation")
        _check_step("Rotation", max_deg, step_deg)
        super().__init__()
        self.max_deg, self.center_range, self.interp = max_deg, center_range, interp
        self.border, self.step_deg, self.border_value = border, step_deg, border_value

    def get_transform(self, img: np.ndarray) -> Any:
        cv2 = import_cv2("Rotation")
        center = np.asarray(img.shape[1::-1]) * self._rand_range(self.center_range[0], self.center_range[1], (2,))
        deg = self._rand_range(-self.max_deg, self.max_deg)
        if self.step_deg:
            deg = deg // self.step_deg * self.step_deg
        # OpenCV puts pixel centres at integers: the continuous point c is index c - 0.5.
        mat = cv2.getRotationMatrix2D(tuple(center - 0.5), float(deg), 1)
        return WarpAffineTransform(mat, img.shape[1::-1], interp=self.interp, borderMode=self.border,
                                   borderValue=self.border_value)


class RotationAndCropValid(ImageAugmentor):
    """Rotate about the centre (angle as in :class:`Rotation`), then crop the largest upright
    rectangle that holds no border; the output size therefore changes with the angle.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.RotationAndCropValid(30)
        aug.reset_state()
        h, w = aug.augment(np.zeros((40, 60), np.uint8)).shape
        assert h <= 40 and w <= 60
    """

    _image_rule = NON_EMPTY_HW_OR_HWC

    def __init__(self, max_deg: float, interp: int = INTER_LINEAR, step_deg: Optional[float] = None):
        import_cv2("RotationAndCropValid")
        _check_step("RotationAndCropValid", max_deg, step_deg)
        super().__init__()
        self.max_deg, self.interp, self.step_deg = max_deg, interp, step_deg

    def _get_deg(self, img: np.ndarray) -> float:
        deg = self._rand_range(-self.max_deg, self.max_deg)
        if self.step_deg:
            deg = deg // self.step_deg * self.step_deg
        return float(deg)

    def get_transform(self, img: np.ndarray) -> Any:
        cv2 = import_cv2("RotationAndCropValid")
        deg = self._get_deg(img)
        h, w = img.shape[:2]
        center = (w * 0.5, h * 0.5)
        rotate = WarpAffineTransform(cv2.getRotationMatrix2D((center[0] - 0.5, center[1] - 0.5), deg, 1), (w, h),
                                     interp=self.interp)
        new_w, new_h = RotationAndCropValid.largest_rotated_rect(w, h, deg)
        new_w, new_h = min(new_w, w), min(new_h, h)
        crop = CropTransform(int(center[1] - new_h * 0.5), int(center[0] - new_w * 0.5), new_h, new_w)
        return TransformList([rotate, crop])

    @staticmethod
    def largest_rotated_rect(w: int, h: int, angle: float) -> Tuple[int, int]:
        """``(width, height)`` of the largest axis-aligned rectangle inside a ``w x h`` rectangle rotated
        by ``angle`` degrees, both centred at the same point."""
        if w <= 0 or h <= 0:
            return 0, 0
        radians = angle / 180.0 * math.pi
        wide = w >= h
        long_side, short_side = (w, h) if wide else (h, w)
        sin_a, cos_a = abs(math.sin(radians)), abs(math.cos(radians))
        if short_side <= 2. * sin_a * cos_a * long_side:
            # Two corners touch the long side; the other two lie on the midline parallel to it.
            half = 0.5 * short_side
            wr, hr = (half / sin_a, half / cos_a) if wide else (half / cos_a, half / sin_a)
        else:
            # The rectangle touches all four sides.
            cos_2a = cos_a * cos_a - sin_a * sin_a
            wr, hr = (w * cos_a - h * sin_a) / cos_2a, (h * cos_a - w * sin_a) / cos_2a
        return int(np.round(wr)), int(np.round(hr))


class Affine(ImageAugmentor):
    """A random affine warp about the image centre: scale drawn from ``scale`` (a pair), shift up to
    ``translate_frac`` = (x fraction, y fraction) of the size either way, rotation up to
    ``rotate_max_deg`` and shear up to ``shear`` degrees either way. Border handling as in :class:`Shift`.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.Affine(scale=(0.9, 1.1), translate_frac=(0.1, 0.1), rotate_max_deg=10, shear=5)
        aug.reset_state()
        assert aug.augment(np.zeros((8, 8, 3), np.float32)).shape == (8, 8, 3)
    """

    _image_rule = NON_EMPTY_HW_OR_HWC

    def __init__(self, scale: Optional[Tuple[float, float]] = None, translate_frac: Optional[Tuple[float, float]] = None,
                 rotate_max_deg: float = 0.0, shear: float = 0.0, interp: int = INTER_LINEAR,
                 border: int = BORDER_REPLICATE, border_value: Any = 0):
        import_cv2("Affine")
        if scale is not None and not (isinstance(scale, tuple) and len(scale) == 2):
            raise ValueError("Affine: scale must be a tuple of two floats (low, high), got {!r}".format(scale))
        if translate_frac is not None and not (isinstance(translate_frac, tuple) and len(translate_frac) == 2):
            raise ValueError("Affine: translate_frac must be a tuple of two floats (x, y), got {!r}".format(
                translate_frac))
        if shear < 0.0:
            raise ValueError("Affine: shear must be in [0, 180] degrees, got {}".format(shear))
        super().__init__()
        self.scale, self.translate_frac = scale, translate_frac
        self.rotate_max_deg, self.shear = rotate_max_deg, shear
        self.interp, self.border, self.border_value = interp, border, border_value

    def get_transform(self, img: np.ndarray) -> Any:
        cv2 = import_cv2("Affine")
        scale = self._rand_range(self.scale[0], self.scale[1]) if self.scale is not None else 1.0
        dx = dy = 0.0
        if self.translate_frac is not None:
            max_dx = self.translate_frac[0] * img.shape[1]
            max_dy = self.translate_frac[1] * img.shape[0]
            dx = float(np.round(self._rand_range(-max_dx, max_dx)))
            dy = float(np.round(self._rand_range(-max_dy, max_dy)))
        if self.shear > 0.0:
            shear = math.radians(self._rand_range(-self.shear, self.shear))
            sin_shear, cos_shear = math.sin(shear), math.cos(shear)
        center = np.asarray(img.shape[1::-1]) * 0.5 - 0.5
        deg = self._rand_range(-self.rotate_max_deg, self.rotate_max_deg)
        mat = cv2.getRotationMatrix2D(tuple(center), float(deg), float(scale))
        if self.shear > 0.0:
            m00, m01, m10, m11 = mat[0, 0], mat[0, 1], mat[1, 0], mat[1, 1]
            mat[0, 1] = m01 * cos_shear + m00 * sin_shear
            mat[1, 1] = m11 * cos_shear + m10 * sin_shear
            # keep the centre where it is
            mat[0, 2] = center[0] * (1.0 - m00) - center[1] * mat[0, 1]
            mat[1, 2] = -center[0] * m10 + center[1] * (1.0 - mat[1, 1])
        mat[0, 2] += dx
        mat[1, 2] += dy
        return WarpAffineTransform(mat, img.shape[1::-1], self.interp, self.border, self.border_value)
