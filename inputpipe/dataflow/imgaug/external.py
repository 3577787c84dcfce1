"""Wrappers for augmenters of two third-party libraries: imgaug (aleju/imgaug) and albumentations.

Neither library is needed to import this module: the user builds the third-party augmenter and
hands it in. The one place that needs a library itself (imgaug's keypoint classes, to move
coordinates) imports it when first used and says how to install it when it is missing.

Example::

    import imgaug.augmenters as iaa            # the third-party library
    from inputpipe.dataflow import imgaug      # this package
    aug = imgaug.IAAugmentor(iaa.Sequential([iaa.Fliplr(0.5), iaa.Sharpen(alpha=(0, 1))]))
    out = aug.augment(img)
"""
import importlib

import numpy as np

from .base import ImageAugmentor
from .transform import Transform

__all__ = ["IAAugmentor", "Albumentations"]


def _import_third_party(module: str, package: str, needed_for: str):
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError("{} needs the '{}' library: pip install {} ({})".format(
            needed_for, module, package, err)) from None


class IAATransform(Transform):
    """One deterministic draw of an imgaug augmenter, applied to an image and to its coordinates."""

    def __init__(self, aug, img_shape):
        """
        Args:
            aug: a deterministic imgaug augmenter (from ``to_deterministic()``).
            img_shape: shape of the image the coordinates belong to.
        """
        super().__init__()
        self.aug = aug
        self.img_shape = img_shape

    def apply_image(self, img):
        return self.aug.augment_image(img)

    def apply_coords(self, coords):
        ia = _import_third_party("imgaug", "imgaug", "IAAugmentor's coordinate transform")
        keypoints = ia.KeypointsOnImage([ia.Keypoint(x=x, y=y) for x, y in coords], shape=self.img_shape)
        moved = self.aug.augment_keypoints([keypoints])[0].keypoints
        return np.asarray([[point.x, point.y] for point in moved])


class IAAugmentor(ImageAugmentor):
    """Use an augmenter of the imgaug library (https://github.com/aleju/imgaug) here.

    Images and coordinates are both supported, with the limits of that library: uint8 images
    only, the output has the input's shape, and its keypoint handling is not exact (avoid it
    for precise boxes). Each ``get_transform`` freezes one random draw with
    ``to_deterministic()``, so the image and its coordinates get the same change.

    Example::

        import imgaug.augmenters as iaa
        aug = imgaug.IAAugmentor(iaa.Sequential([iaa.Fliplr(0.5), iaa.Crop(px=(0, 10))]))
        tfm = aug.get_transform(img)
        out, points = tfm.apply_image(img), tfm.apply_coords(points)
    """

    def __init__(self, augmentor):
        """
        Args:
            augmentor: an ``imgaug.augmenters.Augmenter``.
        """
        super().__init__()
        self._aug = augmentor

    def reset_state(self):
        """New RNG for this augmentor, and a seed from it for the wrapped augmenter, so each
        worker's copy draws its own numbers (and a global seed makes the draws repeat)."""
        super().reset_state()
        wrapped = getattr(self, "_aug", None)   # None while the base constructor runs
        if wrapped is not None and hasattr(wrapped, "reseed"):
            wrapped.reseed(int(self.rng.randint(2 ** 31 - 1)))

    def get_transform(self, img):
        return IAATransform(self._aug.to_deterministic(), img.shape)

    def __repr__(self):
        return "imgaug.IAAugmentor({!r})".format(self._aug)

    __str__ = __repr__


class AlbumentationsTransform(Transform):
    """One draw of an albumentations transform's parameters, applied to an image."""

    def __init__(self, aug, param):
        """
        Args:
            aug: an albumentations ``BasicTransform``.
            param: the keyword arguments its ``get_params()`` drew.
        """
        super().__init__()
        self.aug = aug
        self.param = param

    def apply_image(self, img):
        return self.aug.apply(img, **self.param)


class Albumentations(ImageAugmentor):
    """Use a transform of the albumentations library (https://github.com/albumentations-team/albumentations).

    Images only: the library's transforms do not move coordinates here. The parameters are
    drawn by the transform's own ``get_params()`` and applied with its ``apply(img, **params)``.

    Example::

        import albumentations as AB
        aug = imgaug.Albumentations(AB.RandomRotate90(p=1))
        out = aug.augment(img)
    """

    def __init__(self, augmentor):
        """
        Args:
            augmentor: an ``albumentations.BasicTransform``.
        """
        super().__init__()
        self._aug = augmentor

    def get_transform(self, img):
        return AlbumentationsTransform(self._aug, self._aug.get_params())

    def __repr__(self):
        return "imgaug.Albumentations({!r})".format(self._aug)

    __str__ = __repr__
