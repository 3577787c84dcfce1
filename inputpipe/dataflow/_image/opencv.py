"""The one place the image augmentors import OpenCV, lazily (OpenCV is the ``image`` extra).

``import inputpipe.dataflow.imgaug`` never imports ``cv2``; an augmentor or transform that needs it
calls :func:`import_cv2` (:mod:`inputpipe.utils.optional`'s, which ``utils.viz`` uses too) when it
is built or used, and gets a one-line ImportError saying how to install it when it is missing. The
flag constants below equal OpenCV's, so they can serve as default arguments without importing
OpenCV.

Example::

    from inputpipe.dataflow._image.opencv import import_cv2, INTER_LINEAR
    cv2 = import_cv2("Resize")
    assert cv2.INTER_LINEAR == INTER_LINEAR

:func:`apply_per_channel` runs such a call on images OpenCV does not take as they are (bool,
float16, 32/64-bit integers, more than four channels).
"""
from typing import Any, Callable

import numpy as np

from ...utils.optional import INSTALL_HINT, import_cv2  # noqa: F401  (the augmentors import them from here)

__all__ = []

# OpenCV's interpolation flags (cv2.INTER_*) and border modes (cv2.BORDER_*), fixed by its ABI.
INTER_NEAREST = 0
INTER_LINEAR = 1
INTER_CUBIC = 2
INTER_AREA = 3
INTER_LANCZOS4 = 4
BORDER_CONSTANT = 0
BORDER_REPLICATE = 1
BORDER_REFLECT = 2
BORDER_WRAP = 3
BORDER_REFLECT_101 = 4


# dtypes (numpy type characters) that resize, warpAffine and GaussianBlur take with every
# interpolation: uint8, uint16, int16, float32, float64; the others go through a working dtype
OPENCV_DTYPES = "BHhfd"
_WORKING_DTYPES = {"?": np.uint8, "e": np.float32, "b": np.int16}    # bool, float16, int8; wider ints: float64
MAX_OPENCV_CHANNELS = 4


def apply_per_channel(component: str, func: Callable[..., np.ndarray], img: np.ndarray, *args: Any,
                      **kwargs: Any) -> np.ndarray:
    """``func(img, *args, **kwargs)``, an OpenCV call that treats each channel on its own (resize,
    warpAffine, GaussianBlur), for an image of any real dtype and channel count.

    An image OpenCV takes as it is goes straight to ``func`` (the same pixels as OpenCV). Otherwise
    it is computed in a dtype OpenCV takes and cast back: bool through uint8, float16 through
    float32, int8 through int16, wider integers through float64 (rounded to the nearest integer and
    clipped to the dtype's range); more than four channels are done four at a time.
    """
    if img.dtype.char in OPENCV_DTYPES and (img.ndim < 3 or img.shape[2] <= MAX_OPENCV_CHANNELS):
        return func(img, *args, **kwargs)
    kind = img.dtype.kind
    if kind not in "biuf":
        raise TypeError("{}: expected an image of a real (bool, integer or floating point) dtype, got an array of "
                        "shape {} and dtype {}".format(component, img.shape, img.dtype))
    char = img.dtype.char
    work = img if char in OPENCV_DTYPES else img.astype(_WORKING_DTYPES.get(char, np.float64))
    if work.ndim == 3 and work.shape[2] > MAX_OPENCV_CHANNELS:
        parts = [func(work[:, :, k:k + MAX_OPENCV_CHANNELS], *args, **kwargs)
                 for k in range(0, work.shape[2], MAX_OPENCV_CHANNELS)]
        out = np.concatenate([part[:, :, np.newaxis] if part.ndim == 2 else part for part in parts], axis=2)
    else:
        out = func(work, *args, **kwargs)
    if out.dtype == img.dtype:
        return out
    if kind == "b":
        return out.astype(bool)
    if kind in "iu":
        info = np.iinfo(img.dtype)
        high = float(info.max) if info.bits < 53 else np.nextafter(float(info.max), 0.0)
        return np.clip(np.rint(out), info.min, high).astype(img.dtype)
    return out.astype(img.dtype)
