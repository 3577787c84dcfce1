"""Noise augmentors: JPEG re-compression, additive Gaussian noise, salt-and-pepper noise.

Example::

    from inputpipe.dataflow import imgaug
    aug = imgaug.AugmentorList([imgaug.JpegNoise((60, 100)), imgaug.GaussianNoise(sigma=3)])
    out = aug.augment(img)   # same shape and dtype as img
"""
from typing import Sequence

import numpy as np

from .._image.opencv import import_cv2
from ._image_rule import ImageRule
from .base import PhotometricAugmentor

__all__ = ["JpegNoise", "GaussianNoise", "SaltPepperNoise"]


class JpegNoise(PhotometricAugmentor):
    """Encode as JPEG at a random quality and decode again.

    The quality is drawn from [low, high) (so ``high`` itself is never used). uint8 and float
    images in [0, 255] work; float values are rounded and clipped to uint8 for the encoder and
    the result is cast back. The output has the input's shape (grey stays grey); the alpha channel
    of an HxWx4 image is kept as it is.

    Example::

        aug = imgaug.JpegNoise(quality_range=(40, 100))
        out = aug.augment(img)
    """

    _image_rule = ImageRule((2, 3), channels=(1, 3, 4), nonempty=True)

    def __init__(self, quality_range: Sequence[int] = (40, 100)):
        """
        Args:
            quality_range: [low, high) of the JPEG quality (1..100).
        """
        super().__init__()
        import_cv2(type(self).__name__)    # fail at construction when OpenCV is missing
        self.quality_range = quality_range

    def _get_augment_params(self, _):
        return self.rng.randint(*self.quality_range)

    def _augment(self, img, quality):
        if img.ndim == 3 and img.shape[2] == 4:      # JPEG holds no alpha: compress the colour, keep the alpha
            colour = self._augment(img[:, :, :3], quality)
            return np.concatenate([colour, img[:, :, 3:]], axis=2)
        cv2 = import_cv2(type(self).__name__)
        as_uint8 = img if img.dtype == np.uint8 else np.clip(np.rint(img), 0, 255).astype(np.uint8)
        grey = img.ndim == 2 or img.shape[2] == 1
        ok, encoded = cv2.imencode(".jpg", as_uint8, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
        if not ok:
            raise ValueError("JpegNoise could not JPEG-encode an image of shape {} and dtype {}".format(
                img.shape, img.dtype))
        decoded = cv2.imdecode(encoded, cv2.IMREAD_GRAYSCALE if grey else cv2.IMREAD_COLOR)
        return decoded.reshape(img.shape).astype(img.dtype)


class GaussianNoise(PhotometricAugmentor):
    """Add noise drawn from N(0, sigma^2) independently for every element.

    Example::

        aug = imgaug.GaussianNoise(sigma=5)
        out = aug.augment(img)
    """

    def __init__(self, sigma: float = 1, clip: bool = True):
        """
        Args:
            sigma: standard deviation of the noise.
            clip: clip the result to [0, 255] also for float images (uint8 is always clipped).
        """
        super().__init__()
        self.sigma = sigma
        self.clip = clip

    def _get_augment_params(self, img):
        return self.rng.randn(*img.shape)

    def _augment(self, img, noise):
        out = img + noise * self.sigma
        if self.clip or img.dtype == np.uint8:
            out = np.clip(out, 0, 255)
        return out.astype(img.dtype)


class SaltPepperNoise(PhotometricAugmentor):
    """Set random elements to 255 (salt; int8 images: 127) or 0 (pepper), each element and channel
    on its own.

    Returns a new array; the input is left untouched.

    Example::

        aug = imgaug.SaltPepperNoise(white_prob=0.01, black_prob=0.01)
        out = aug.augment(img)
    """

    def __init__(self, white_prob: float = 0.05, black_prob: float = 0.05):
        """
        Args:
            white_prob: probability that an element becomes 255.
            black_prob: probability that an element becomes 0 (their sum must be <= 1).
        """
        super().__init__()
        if white_prob + black_prob > 1:
            raise ValueError("SaltPepperNoise expects white_prob + black_prob <= 1, got {!r} + {!r}".format(
                white_prob, black_prob))
        self.white_prob = white_prob
        self.black_prob = black_prob

    def _get_augment_params(self, img):
        return self.rng.uniform(low=0, high=1, size=img.shape)

    def _augment(self, img, draws):
        out = np.array(img, copy=True)
        white = min(255, np.iinfo(out.dtype).max) if out.dtype.kind in "iu" else 255    # int8: its largest, 127
        out[draws > 1 - self.white_prob] = white
        out[draws < self.black_prob] = 0
        return out
