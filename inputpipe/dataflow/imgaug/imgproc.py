"""Photometric augmentors: hue, brightness, contrast, saturation, lighting, gamma, blur, normalisation.

Each changes pixel values only (coordinates pass through unchanged). Unless a docstring says
otherwise, an augmentor returns the dtype it was given: uint8 images are computed in floating
point, clipped to [0, 255] and truncated back to uint8 (as tensorpack does); floating-point
images are clipped to [0, 255] only when ``clip=True``.

Example::

    from inputpipe.dataflow import imgaug
    aug = imgaug.AugmentorList([imgaug.BrightnessScale((0.6, 1.4)), imgaug.Contrast((0.6, 1.4))])
    out = aug.augment(img)   # img: HxWx3 uint8 -> HxWx3 uint8
"""
from typing import Callable, Optional, Sequence, Union, cast

import numpy as np

from ...utils.logger import get_logger
from .._image.opencv import apply_per_channel, import_cv2
from ._image_rule import HW_OR_HWC, ImageRule
from .base import PhotometricAugmentor
from ..tensorpack_helpers import log_deprecated  # noqa: F401  (tensorpack's imgaug.imgproc has it, outside __all__)

__all__ = ["Hue", "Brightness", "BrightnessScale", "Contrast", "MeanVarianceNormalize",
           "GaussianBlur", "Gamma", "Clip", "Saturation", "Lighting", "MinMaxNormalize"]

logger = get_logger(__name__)


def _clip_and_cast(img: np.ndarray, dtype: np.dtype, clip: bool) -> np.ndarray:
    """Clip to [0, 255] when asked or when going back to uint8, then cast to ``dtype``."""
    if clip or dtype == np.uint8:
        img = np.clip(img, 0, 255)
    return img.astype(dtype)


def _for_opencv(img: np.ndarray, native: str) -> np.ndarray:
    """``img`` when its dtype (numpy type character) is in ``native``, the dtypes the OpenCV colour
    conversion takes; else a float32 copy (float16, float64, integers other than those)."""
    return img if img.dtype.char in native else img.astype(np.float32)


def _keeping_alpha(func: Callable[[np.ndarray], np.ndarray], img: np.ndarray) -> np.ndarray:
    """``func`` of an HxWx3 image; of an HxWx4 one, ``func`` of its first three channels with the
    fourth (alpha) passed through unchanged."""
    if img.shape[2] == 4:
        colour = func(img[:, :, :3])
        return np.concatenate([colour, img[:, :, 3:].astype(colour.dtype, copy=False)], axis=2)
    return func(img)


# Images the colour augmentors take: RGB or BGR (an alpha channel passes through unchanged); those
# that convert colours with OpenCV also need pixels and a numeric dtype.
_COLOUR = ImageRule((3,), channels=(3, 4))
_COLOUR_FOR_OPENCV = ImageRule((3,), channels=(3, 4), nonempty=True, kinds="uif")
_GREY_OR_COLOUR = ImageRule((0, 1, 2, 3), channels=(3, 4), nonempty=True)
_UP_TO_3D = ImageRule((0, 1, 2, 3))


class Hue(PhotometricAugmentor):
    """Shift the hue by a random offset (in OpenCV's half-degree units, 180 = a full turn).

    Takes HxWx3 images (HxWx4: the alpha channel is kept) of any numeric dtype: dtypes other than
    uint8 and float32 are computed in float32 and returned in their own dtype.

    Example::

        aug = imgaug.Hue(range=(-10, 10), rgb=True)
        out = aug.augment(rgb_uint8_image)
    """

    _image_rule = _COLOUR_FOR_OPENCV

    def __init__(self, range: Sequence[float] = (0, 180), rgb: bool = True):
        """
        Args:
            range: the offset is drawn uniformly from [range[0], range[1]); it is taken modulo
                a full turn, so (0, 180) covers every hue.
            rgb: True if the input is RGB, False if it is BGR.
        """
        super().__init__()
        import_cv2(type(self).__name__)    # fail at construction when OpenCV is missing
        self.range = range
        self.rgb = bool(rgb)

    def _get_augment_params(self, _):
        return self._rand_range(*self.range)

    def _augment(self, img, hue):
        return _keeping_alpha(lambda colour: self._shift_hue(colour, hue), img)

    def _shift_hue(self, img, hue):
        cv2 = import_cv2(type(self).__name__)
        to_hsv, from_hsv = ((cv2.COLOR_RGB2HSV, cv2.COLOR_HSV2RGB) if self.rgb
                            else (cv2.COLOR_BGR2HSV, cv2.COLOR_HSV2BGR))
        hsv = cv2.cvtColor(_for_opencv(img, "Bf"), to_hsv)
        if hsv.dtype == np.uint8:
            hsv[..., 0] = (hsv[..., 0] + hue) % 180        # 8-bit hue is 0..179
        else:
            hsv[..., 0] = (hsv[..., 0] + 2 * hue) % 360    # float hue is in degrees
        return cv2.cvtColor(hsv, from_hsv).astype(img.dtype, copy=False)


class Brightness(PhotometricAugmentor):
    """Add one random value, drawn from [-delta, delta), to every pixel.

    Example::

        aug = imgaug.Brightness(30, clip=True)
        out = aug.augment(img)
    """

    def __init__(self, delta: float, clip: bool = True):
        """
        Args:
            delta: the largest absolute change (must be > 0).
            clip: clip the result to [0, 255] also for float images (uint8 is always clipped).
        """
        super().__init__()
        if not delta > 0:
            raise ValueError("Brightness expects delta > 0, got {!r}".format(delta))
        self.delta = delta
        self.clip = clip

    def _get_augment_params(self, _):
        return self._rand_range(-self.delta, self.delta)

    def _augment(self, img, delta):
        return _clip_and_cast(img.astype(np.float32) + delta, img.dtype, self.clip)


class BrightnessScale(PhotometricAugmentor):
    """Multiply every pixel by one random factor drawn from [range[0], range[1]).

    Example::

        aug = imgaug.BrightnessScale((0.6, 1.4))
        out = aug.augment(img)
    """

    def __init__(self, range: Sequence[float], clip: bool = True):
        """
        Args:
            range: (low, high) of the factor.
            clip: clip the result to [0, 255] also for float images (uint8 is always clipped).
        """
        super().__init__()
        self.range = range
        self.clip = clip

    def _get_augment_params(self, _):
        return self._rand_range(*self.range)

    def _augment(self, img, factor):
        return _clip_and_cast(img.astype(np.float32) * factor, img.dtype, self.clip)


class Contrast(PhotometricAugmentor):
    """Scale each pixel's distance from the mean: ``x = (x - mean) * factor + mean``.

    The mean is per channel when ``rgb`` is None, else the mean of the grey image (RGB or BGR
    order as ``rgb`` says; an alpha channel of an HxWx4 image is kept); a 2-D image uses its
    overall mean.

    Example::

        aug = imgaug.Contrast((0.6, 1.4), rgb=True)
        out = aug.augment(img)
    """

    def __init__(self, factor_range: Sequence[float], rgb: Optional[bool] = None, clip: bool = True):
        """
        Args:
            factor_range: (low, high) of the contrast factor.
            rgb: None: per-channel mean; True/False: mean of the grey image of an RGB/BGR input.
            clip: clip the result to [0, 255] also for float images (uint8 is always clipped).
        """
        super().__init__()
        if rgb is not None:
            import_cv2(type(self).__name__)    # fail at construction when OpenCV is missing
        self.factor_range = factor_range
        self.rgb = rgb
        self.clip = clip
        # the mean is per channel (rgb=None) or of the grey image of RGB/BGR(A) channels
        self._image_rule = _UP_TO_3D if rgb is None else _GREY_OR_COLOUR

    def _get_augment_params(self, _):
        return self._rand_range(*self.factor_range)

    def _augment(self, img, factor):
        if not img.size:
            return img.copy()    # no mean to scale around
        if img.ndim == 3 and self.rgb is not None:
            return _keeping_alpha(lambda colour: self._against_grey(colour, factor), img)
        mean = np.mean(img, axis=(0, 1), keepdims=True) if img.ndim == 3 else np.mean(img)
        return _clip_and_cast(img * factor + mean * (1 - factor), img.dtype, self.clip)

    def _against_grey(self, img, factor):
        cv2 = import_cv2(type(self).__name__)
        grey = cv2.cvtColor(img.astype(np.float32), cv2.COLOR_RGB2GRAY if self.rgb else cv2.COLOR_BGR2GRAY)
        return _clip_and_cast(img * factor + np.mean(grey) * (1 - factor), img.dtype, self.clip)


class MeanVarianceNormalize(PhotometricAugmentor):
    """Scale to zero mean and unit variance: ``x = (x - mean) / max(std, 1 / sqrt(x.size))``.

    Always returns float32.

    Example::

        aug = imgaug.MeanVarianceNormalize(all_channel=False)
        out = aug.augment(img)     # float32, each channel with mean 0 and std 1
    """

    def __init__(self, all_channel: bool = True):
        """
        Args:
            all_channel: one mean/std for the whole image (True) or one per channel (False).
        """
        super().__init__()
        self.all_channel = all_channel
        self._image_rule = None if all_channel else HW_OR_HWC      # per channel: the last axis of HWC

    def _augment(self, img, _):
        img = img.astype(np.float32)
        if not img.size:
            return img           # no values to normalise
        if self.all_channel:
            mean, std = np.mean(img), np.std(img)
        else:
            mean = np.mean(img, axis=(0, 1), keepdims=True)
            std = np.std(img, axis=(0, 1), keepdims=True)
        std = np.maximum(std, 1.0 / np.sqrt(np.prod(img.shape)))
        return ((img - mean) / std).astype(np.float32, copy=False)   # tensorpack: float64 with all_channel


class GaussianBlur(PhotometricAugmentor):
    """Blur with a Gaussian window of random odd size ``2 * s + 1``, s drawn from [low, high).

    Example::

        aug = imgaug.GaussianBlur(size_range=(0, 3), sigma_range=(0, 0))
        out = aug.augment(img)     # same shape and dtype

    Any real dtype and channel count (see :func:`~inputpipe.dataflow._image.opencv.apply_per_channel`).
    """

    _image_rule = ImageRule((0, 1, 2, 3), nonempty=True)

    def __init__(self, size_range: Union[int, Sequence[int]] = (0, 3), sigma_range: Sequence[float] = (0, 0),
                 symmetric: bool = True, max_size: Optional[int] = None):
        """
        Args:
            size_range: [low, high) of s (window size 2 * s + 1); an int n means (0, n).
            sigma_range: (low, high) of sigma; 0 lets OpenCV derive sigma from the window size.
            symmetric: use the same size and sigma in x and y (else each is drawn separately).
            max_size: deprecated alias: ``size_range=(0, max_size)``.
        """
        super().__init__()
        import_cv2(type(self).__name__)    # fail at construction when OpenCV is missing
        sizes: Sequence[int] = size_range if isinstance(size_range, (list, tuple)) else (0, cast(int, size_range))
        if not isinstance(sigma_range, (list, tuple)):
            raise ValueError("GaussianBlur expects sigma_range as a (low, high) pair, got {!r}".format(sigma_range))
        if max_size is not None:
            logger.warning("GaussianBlur(max_size=) is deprecated: use size_range=(0, %s) instead", max_size)
            sizes = (0, max_size)
        self.size_range = sizes
        self.sigma_range = sigma_range
        self.symmetric = symmetric
        self.max_size = max_size

    def _get_augment_params(self, _):
        sizes = self.rng.randint(self.size_range[0], self.size_range[1], size=(2,)) * 2 + 1
        sigmas = self._rand_range(self.sigma_range[0], self.sigma_range[1], size=(2,))
        if self.symmetric:
            sizes[1] = sizes[0]
            sigmas[1] = sigmas[0]
        return tuple(sizes), tuple(sigmas)

    def _augment(self, img, params):
        cv2 = import_cv2(type(self).__name__)
        (size_x, size_y), (sigma_x, sigma_y) = params
        blurred = apply_per_channel(type(self).__name__, cv2.GaussianBlur, img, (int(size_x), int(size_y)),
                                    sigmaX=float(sigma_x), sigmaY=float(sigma_y), borderType=cv2.BORDER_REPLICATE)
        return blurred.reshape(img.shape)


class Gamma(PhotometricAugmentor):
    """Gamma correction through a 256-entry lookup table: ``x = 255 * (x / 255) ** (1 / (1 + gamma))``.

    The image is clipped to [0, 255] and cast to uint8 before the lookup (so float images
    should be in [0, 255]); the result is cast back to the input dtype.

    Example::

        aug = imgaug.Gamma(range=(-0.5, 0.5))
        out = aug.augment(img)
    """

    def __init__(self, range: Sequence[float] = (-0.5, 0.5)):
        """
        Args:
            range: (low, high) of gamma; must stay above -1.
        """
        super().__init__()
        import_cv2(type(self).__name__)    # fail at construction when OpenCV is missing
        self.range = range

    def _get_augment_params(self, _):
        return self._rand_range(*self.range)

    def _augment(self, img, gamma):
        table = ((np.arange(256, dtype=np.float32) / 255) ** (1.0 / (1.0 + gamma)) * 255).astype(np.uint8)
        as_uint8 = np.clip(img, 0, 255).astype(np.uint8)
        if as_uint8.size and 1 <= as_uint8.ndim <= 3 and (as_uint8.ndim < 3 or as_uint8.shape[2] <= 4):
            out = import_cv2(type(self).__name__).LUT(as_uint8, table)
        else:     # what cv2.LUT does not take (no pixels, a scalar, many channels): the same lookup
            out = table[as_uint8]
        return out.astype(img.dtype).reshape(img.shape)


class Clip(PhotometricAugmentor):
    """Clip pixel values to [min, max] (dtype unchanged).

    Example::

        aug = imgaug.Clip(0, 255)
        out = aug.augment(float_img)
    """

    def __init__(self, min: float = 0, max: float = 255):
        """
        Args:
            min, max: the clip range.
        """
        super().__init__()
        self.min = min
        self.max = max

    def _augment(self, img, _):
        return np.clip(img, self.min, self.max)


class Saturation(PhotometricAugmentor):
    """Blend the image with its grey version: ``x = x * v + grey * (1 - v)``, v in [1 - alpha, 1 + alpha).

    As in fb.resnet.torch's colour augmentation. Needs an HxWx3 image (HxWx4: the alpha channel
    is kept).

    Example::

        aug = imgaug.Saturation(0.4, rgb=True)
        out = aug.augment(img)
    """

    _image_rule = _COLOUR_FOR_OPENCV

    def __init__(self, alpha: float = 0.4, rgb: bool = True, clip: bool = True):
        """
        Args:
            alpha: the largest change of the blend factor (must be < 1).
            rgb: True if the input is RGB, False if it is BGR.
            clip: clip the result to [0, 255] also for float images (uint8 is always clipped).
        """
        super().__init__()
        import_cv2(type(self).__name__)    # fail at construction when OpenCV is missing
        if not alpha < 1:
            raise ValueError("Saturation expects alpha < 1, got {!r}".format(alpha))
        self.alpha = alpha
        self.rgb = bool(rgb)
        self.clip = clip

    def _get_augment_params(self, _):
        return 1 + self._rand_range(-self.alpha, self.alpha)

    def _augment(self, img, factor):
        return _keeping_alpha(lambda colour: self._blend_with_grey(colour, factor), img)

    def _blend_with_grey(self, img, factor):
        cv2 = import_cv2(type(self).__name__)
        grey = cv2.cvtColor(_for_opencv(img, "BHf"), cv2.COLOR_RGB2GRAY if self.rgb else cv2.COLOR_BGR2GRAY)
        out = img * factor + (grey * (1 - factor))[:, :, np.newaxis]
        return _clip_and_cast(out, img.dtype, self.clip)


class Lighting(PhotometricAugmentor):
    """AlexNet-style PCA lighting noise: add ``eigvec @ (alpha * eigval)``, alpha ~ N(0, std^2) per component.

    As in fb.resnet.torch. Needs an HxWx3 image (HxWx4: the alpha channel is kept).

    Example::

        eigval = [0.2175, 0.0188, 0.0045]          # ImageNet, scaled by 255 below
        eigvec = [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]
        aug = imgaug.Lighting(0.1, eigval=[v * 255 for v in eigval], eigvec=eigvec)
        out = aug.augment(img)
    """

    _image_rule = _COLOUR

    def __init__(self, std: float, eigval, eigvec, clip: bool = True):
        """
        Args:
            std: standard deviation of the random weight of each principal component.
            eigval: the 3 eigenvalues.
            eigvec: a 3x3 matrix whose columns are the eigenvectors.
            clip: clip the result to [0, 255] also for float images (uint8 is always clipped).
        """
        super().__init__()
        eigval = np.asarray(eigval, dtype=np.float32)
        eigvec = np.asarray(eigvec, dtype=np.float32)
        if eigval.shape != (3,) or eigvec.shape != (3, 3):
            raise ValueError("Lighting expects eigval of shape (3,) and eigvec of shape (3, 3), got {} and {}".format(
                eigval.shape, eigvec.shape))
        self.std = std
        self.eigval = eigval
        self.eigvec = eigvec
        self.clip = clip

    def _get_augment_params(self, img):
        return (self.rng.randn(3) * self.std).astype(np.float32)

    def _augment(self, img, alpha):
        shift = np.dot(self.eigvec, (alpha * self.eigval).reshape((3, 1))).reshape((3,))
        return _keeping_alpha(lambda colour: _clip_and_cast(np.add(colour, shift), colour.dtype, self.clip), img)


class MinMaxNormalize(PhotometricAugmentor):
    """Scale linearly so the smallest value becomes ``min`` and the largest ``max``. Returns float32.

    A constant image (or channel) has no range to scale and becomes ``min``.

    Example::

        aug = imgaug.MinMaxNormalize(0, 1)
        out = aug.augment(img)     # float32 in [0, 1]
    """

    def __init__(self, min: float = 0, max: float = 255, all_channel: bool = True):
        """
        Args:
            min, max: the new smallest and largest value.
            all_channel: one range for the whole image (True) or one per channel (False).
        """
        super().__init__()
        self.min = min
        self.max = max
        self.all_channel = all_channel
        self._image_rule = None if all_channel else HW_OR_HWC      # per channel: the last axis of HWC

    def _augment(self, img, _):
        img = img.astype(np.float32)
        if not img.size:
            return img           # no values to scale
        if self.all_channel:
            low, high = np.min(img), np.max(img)
        else:
            low = np.min(img, axis=(0, 1), keepdims=True)
            high = np.max(img, axis=(0, 1), keepdims=True)
        span = np.where(high > low, high - low, 1)   # a constant channel has img - low == 0: becomes min
        return ((self.max - self.min) * (img - low) / span + self.min).astype(np.float32)
