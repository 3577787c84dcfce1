"""Paste the image onto a larger canvas (tensorpack's ``imgaug.paste``)."""
from typing import Any, Optional, Tuple, cast

import numpy as np

from ._image_rule import HW_OR_HWC
from .base import ImageAugmentor, hw_shape
from .transform import Transform
from .transform import TransformFactory  # noqa: F401  (tensorpack's imgaug.paste has it, outside __all__)

__all__ = ["CenterPaste", "BackgroundFiller", "ConstantBackgroundFiller", "RandomPaste"]


class BackgroundFiller:
    """Makes the canvas for the paste augmentors; subclasses implement ``_fill(background_shape, img)``.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug

        class NoiseFiller(imgaug.BackgroundFiller):
            def _fill(self, background_shape, img):
                return np.random.randint(0, 256, background_shape + img.shape[2:]).astype(img.dtype)

        canvas = NoiseFiller().fill((4, 5), np.zeros((2, 2, 3), np.uint8))
        assert canvas.shape == (4, 5, 3) and canvas.dtype == np.uint8
    """

    def fill(self, background_shape: Tuple[int, int], img: np.ndarray) -> np.ndarray:
        """A canvas of ``background_shape`` (h, w), with ``img``'s channels, for pasting ``img`` on."""
        # a list from the caller becomes the tuple _fill is promised (its length is the caller's)
        return self._fill(cast(Tuple[int, int], tuple(background_shape)), img)

    def _fill(self, background_shape: Tuple[int, int], img: np.ndarray) -> np.ndarray:
        raise NotImplementedError("{} does not implement _fill(background_shape, img)".format(type(self).__name__))


class ConstantBackgroundFiller(BackgroundFiller):
    """A canvas of the constant ``value``, in the image's dtype.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        canvas = imgaug.ConstantBackgroundFiller(3).fill((2, 2), np.zeros((1, 1), np.uint8))
        assert canvas.tolist() == [[3, 3], [3, 3]] and canvas.dtype == np.uint8
    """

    def __init__(self, value: float):
        self.value = value

    def __repr__(self) -> str:
        return "imgaug.ConstantBackgroundFiller({!r})".format(self.value)

    def _fill(self, background_shape: Tuple[int, int], img: np.ndarray) -> np.ndarray:
        if img.ndim not in (2, 3):
            raise ValueError("ConstantBackgroundFiller: expected an HW or HWC image, got shape {}".format(img.shape))
        return np.full(background_shape + img.shape[2:], self.value, dtype=img.dtype)


class PasteTransform(Transform):
    """Paste the image with its top-left pixel at ``(y0, x0)`` of a canvas made by ``background_filler``.

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug.paste import PasteTransform, ConstantBackgroundFiller
        tfm = PasteTransform((3, 3), ConstantBackgroundFiller(0), 1, 1)
        assert tfm.apply_image(np.ones((1, 1), np.uint8)).tolist() == [[0, 0, 0], [0, 1, 0], [0, 0, 0]]
        assert tfm.apply_coords(np.array([[0.5, 0.5]])).tolist() == [[1.5, 1.5]]
    """

    def __init__(self, background_shape: Tuple[int, int], background_filler: BackgroundFiller, y0: int, x0: int):
        super().__init__()
        self._init(locals())

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        h, w = img.shape[:2]
        bh, bw = self.background_shape
        if self.y0 + h > bh or self.x0 + w > bw:
            raise ValueError("PasteTransform: an image of shape {} at (y0, x0) = ({}, {}) does not fit on a canvas "
                             "of (h, w) = {}".format(img.shape, self.y0, self.x0, tuple(self.background_shape)))
        canvas = self.background_filler.fill(self.background_shape, img)
        canvas[self.y0:self.y0 + h, self.x0:self.x0 + w] = img
        return canvas

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = np.array(coords, dtype=np.result_type(np.asarray(coords).dtype, np.float32))
        coords[:, 0] += self.x0
        coords[:, 1] += self.y0
        return coords


def _check_fits(component: str, background_shape: Tuple[int, int], img_shape: Tuple[int, ...]) -> None:
    if background_shape[0] < img_shape[0] or background_shape[1] < img_shape[1]:
        raise ValueError("{}: an image of shape {} does not fit on a canvas of (h, w) = {}".format(
            component, tuple(img_shape), tuple(background_shape)))


class CenterPaste(ImageAugmentor):
    """Paste the image at the centre of a ``background_shape`` (h, w) canvas made by
    ``background_filler`` (default: zeros). Coordinates move with the image.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        out = imgaug.CenterPaste((4, 4)).augment(np.ones((2, 2), np.uint8))
        assert out.tolist() == [[0, 0, 0, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]]
    """

    _image_rule = HW_OR_HWC

    def __init__(self, background_shape: Any, background_filler: Optional[BackgroundFiller] = None):
        if background_filler is None:
            background_filler = ConstantBackgroundFiller(0)
        self.background_shape = hw_shape(type(self).__name__, background_shape)
        self.background_filler = background_filler
        super().__init__()

    def get_transform(self, img: np.ndarray) -> Any:
        _check_fits(type(self).__name__, self.background_shape, img.shape)
        y0 = int((self.background_shape[0] - img.shape[0]) * 0.5)
        x0 = int((self.background_shape[1] - img.shape[1]) * 0.5)
        return PasteTransform(self.background_shape, self.background_filler, y0, x0)


class RandomPaste(CenterPaste):
    """Paste the image at a uniformly random position of a ``background_shape`` (h, w) canvas.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.RandomPaste((3, 4))
        aug.reset_state()
        out = aug.augment(np.ones((2, 2), np.uint8))
        assert out.shape == (3, 4) and out.sum() == 4
    """

    def get_transform(self, img: np.ndarray) -> Any:
        _check_fits("RandomPaste", self.background_shape, img.shape)
        y0 = self.rng.randint(self.background_shape[0] - img.shape[0] + 1)
        x0 = self.rng.randint(self.background_shape[1] - img.shape[1] + 1)
        return PasteTransform(self.background_shape, self.background_filler, y0, x0)
