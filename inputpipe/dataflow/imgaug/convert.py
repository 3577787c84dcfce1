"""Colour-space and dtype conversions: ColorSpace, Grayscale, ToUint8, ToFloat32.

Example::

    from inputpipe.dataflow import imgaug
    aug = imgaug.AugmentorList([imgaug.Grayscale(rgb=True, keepshape=True), imgaug.ToFloat32()])
    out = aug.augment(img)   # HxWx3 float32, the three channels equal
"""
import numpy as np

from .._image.opencv import import_cv2
from ._image_rule import NON_EMPTY_HW_OR_HWC, ImageRule
from .base import PhotometricAugmentor

__all__ = ["ColorSpace", "Grayscale", "ToUint8", "ToFloat32"]


class ColorSpace(PhotometricAugmentor):
    """Convert with ``cv2.cvtColor(img, mode)``.

    float16 and float64 images are converted in float32 and returned in their dtype; an image the
    conversion does not take is a ValueError naming the mode, the shape, the dtype and OpenCV's reason.

    Example::

        import cv2
        aug = imgaug.ColorSpace(cv2.COLOR_BGR2HSV)
        out = aug.augment(bgr_img)
    """

    _image_rule = NON_EMPTY_HW_OR_HWC

    def __init__(self, mode: int, keepdims: bool = True):
        """
        Args:
            mode: an OpenCV conversion code, e.g. ``cv2.COLOR_BGR2HSV``.
            keepdims: when the conversion drops the channel axis of an HxWxC image (e.g. to
                grey), give the result back as HxWx1.
        """
        super().__init__()
        import_cv2(type(self).__name__)    # fail at construction when OpenCV is missing
        self.mode = mode
        self.keepdims = keepdims

    def _augment(self, img, _):
        cv2 = import_cv2(type(self).__name__)
        source = img.astype(np.float32) if img.dtype.char in "ed" else img    # float16/64: through float32
        try:
            converted = cv2.cvtColor(source, self.mode)
        except cv2.error as err:
            reason = [line for line in str(err).splitlines() if line.strip()]
            raise ValueError("{}: OpenCV's cvtColor cannot convert an array of shape {} and dtype {} with mode {}: "
                             "{}".format(type(self).__name__, img.shape, img.dtype, self.mode,
                                         reason[-1].strip() if reason else err)) from None
        if source is not img:
            converted = converted.astype(img.dtype)
        if self.keepdims and img.ndim == 3 and converted.ndim == 2:
            converted = converted[:, :, np.newaxis]
        return converted


class Grayscale(ColorSpace):
    """Convert an RGB or BGR image to grey.

    Example::

        aug = imgaug.Grayscale(keepdims=True, rgb=False)
        out = aug.augment(bgr_img)      # HxWx1
    """

    _image_rule = ImageRule((3,), channels=(3, 4), nonempty=True)      # colour, or colour and alpha

    def __init__(self, keepdims: bool = True, rgb: bool = False, keepshape: bool = False):
        """
        Args:
            keepdims: return HxWx1 instead of HxW.
            rgb: the input is RGB (default: BGR).
            keepshape: repeat the grey channel three times, so the shape stays HxWx3 (needs keepdims).
        """
        if keepshape and not keepdims:
            raise ValueError("Grayscale(keepshape=True) needs keepdims=True, got keepdims={!r}".format(keepdims))
        cv2 = import_cv2(type(self).__name__)
        super().__init__(cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY, keepdims)
        self.rgb = rgb
        self.keepshape = keepshape

    def _augment(self, img, params):
        grey = super()._augment(img, params)
        return np.concatenate([grey] * 3, axis=2) if self.keepshape else grey


class ToUint8(PhotometricAugmentor):
    """Clip to [0, 255] and cast to uint8 (truncating), e.g. to send less data between processes.

    Example::

        aug = imgaug.ToUint8()
        out = aug.augment(float_img)    # uint8
    """

    def _augment(self, img, _):
        return np.clip(img, 0, 255).astype(np.uint8)


class ToFloat32(PhotometricAugmentor):
    """Cast to float32, so later augmentors compute without uint8 rounding.

    Example::

        aug = imgaug.ToFloat32()
        out = aug.augment(uint8_img)    # float32, same values
    """

    def _augment(self, img, _):
        return img.astype(np.float32)
