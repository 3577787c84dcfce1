"""A smooth random deformation (tensorpack's ``imgaug.deform``; slow, rarely useful, kept for old code).

:class:`GaussianDeform` displaces every pixel by a sum of random offsets at a few anchor points,
weighted by Gaussians around the anchors, and resamples bilinearly (:func:`np_sample`).
"""
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ...utils.logger import get_logger
from ._image_rule import HW_OR_HWC
from .base import ImageAugmentor
from .transform import TransformFactory

__all__ = ["GaussianDeform"]

_logger = get_logger(__name__)


class GaussianMap:
    """Gaussian weights over an ``image_shape`` (h, w) grid in [0, 1) coordinates.

    Example::

        from inputpipe.dataflow.imgaug.deform import GaussianMap
        weights = GaussianMap((4, 4), sigma=0.5).get_gaussian_weight((0.0, 0.0))
        assert weights.shape == (4, 4) and weights[0, 0] == 1.0
    """

    def __init__(self, image_shape: Tuple[int, int], sigma: float = 0.5):
        if len(image_shape) != 2:
            raise ValueError("GaussianMap: expected an (h, w) shape, got {}".format(image_shape))
        self.shape = tuple(image_shape)
        self.sigma = sigma

    def get_gaussian_weight(self, anchor: Tuple[float, float]) -> np.ndarray:
        """``exp(-d^2 / sigma)``, ``d`` the distance of each pixel to ``anchor`` = (y, x) in [0, 1)."""
        y, x = np.mgrid[:self.shape[0], :self.shape[1]].astype("float32")
        y = y / self.shape[0] - anchor[0]
        x = x / self.shape[1] - anchor[1]
        return np.exp(-(x ** 2 + y ** 2) / self.sigma)


def np_sample(img: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """Bilinear sampling: ``out[i, j] = img at (y, x) = coords[i, j]``, clamped to the image.

    Works for HW and HWC images with any number of channels (tensorpack's handled 3 channels only).
    """
    limit = np.array([img.shape[0] - 1, img.shape[1] - 1])
    coords = np.minimum(np.maximum(coords, 0), limit)
    low = np.floor(coords).astype("int32")
    high = np.minimum(low + 1, limit)
    frac = coords - low
    fy, fx = frac[..., 0], frac[..., 1]
    if img.ndim == 3:
        fy, fx = fy[..., np.newaxis], fx[..., np.newaxis]
    ly, lx, hy, hx = low[..., 0], low[..., 1], high[..., 0], high[..., 1]
    return (img[ly, lx] * (1 - fx) * (1 - fy) + img[hy, hx] * fx * fy
            + img[ly, hx] * (1 - fy) * fx + img[hy, lx] * fy * (1 - fx))


class GaussianDeform(ImageAugmentor):
    """Random smooth deformation of images of ``shape`` (h, w).

    Args:
        anchors: ``(y, x)`` centres in [0, 1).
        shape: the (h, w) of the images.
        sigma: width of the Gaussian weight around each anchor.
        randrange: each anchor's offset is uniform in ``[-randrange, randrange)`` pixels on each
            axis (default ``shape[0] / 8``).

    The output is float (bilinear interpolation), like tensorpack's.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.GaussianDeform([(0.2, 0.2), (0.7, 0.7)], (8, 8), sigma=0.2)
        aug.reset_state()
        assert aug.augment(np.zeros((8, 8, 3), np.uint8)).shape == (8, 8, 3)
    """

    _image_rule = HW_OR_HWC

    def __init__(self, anchors: Sequence[Tuple[float, float]], shape: Tuple[int, int], sigma: float = 0.5,
                 randrange: Optional[float] = None):
        _logger.warning("GaussianDeform is slow; run it in several worker processes")
        super().__init__()
        self.anchors = anchors
        self.K = len(anchors)
        self.shape = shape
        self.grid = np.mgrid[0:shape[0], 0:shape[1]].transpose(1, 2, 0).astype("float32")  # HxWx2 of (y, x)
        gmap = GaussianMap(shape, sigma=sigma)
        self.gws = np.array([gmap.get_gaussian_weight(anchor) for anchor in anchors],
                            dtype="float32").transpose(1, 2, 0)  # HxWxK
        self.randrange = shape[0] / 8 if randrange is None else randrange
        self.sigma = sigma

    def get_transform(self, img: np.ndarray) -> Any:
        if tuple(img.shape[:2]) != tuple(self.shape):
            raise ValueError("GaussianDeform: made for images of (h, w) = {}, got an image of shape {}".format(
                tuple(self.shape), img.shape))
        offsets = (self.rng.rand(self.K, 2).astype("float32") - 0.5) * 2 * self.randrange
        return TransformFactory(name="GaussianDeform", apply_image=lambda image: self._augment(image, offsets))

    def _augment(self, img: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return np_sample(img, self.grid + np.dot(self.gws, offsets))
