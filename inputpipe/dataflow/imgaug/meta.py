"""Augmentors made of other augmentors or of plain functions (tensorpack's ``imgaug.meta``)."""
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .base import ImageAugmentor
from .transform import NoOpTransform, TransformFactory, TransformList

__all__ = ["RandomChooseAug", "MapImage", "Identity", "RandomApplyAug", "RandomOrderAug"]


class Identity(ImageAugmentor):
    """Does nothing.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        img = np.ones((2, 2), np.uint8)
        assert imgaug.Identity().augment(img) is img
    """

    def get_transform(self, img: np.ndarray) -> Any:
        return NoOpTransform()


class RandomApplyAug(ImageAugmentor):
    """Apply ``aug`` with probability ``prob``, else nothing.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.RandomApplyAug(imgaug.Flip(horiz=True, prob=1.0), prob=0.0)
        aug.reset_state()
        assert aug.augment(np.array([[1, 2]])).tolist() == [[1, 2]]
    """

    def __init__(self, aug: ImageAugmentor, prob: float):
        self.aug, self.prob = aug, prob     # before super().__init__(): its reset_state() uses them
        super().__init__()

    def reset_state(self) -> None:
        super().reset_state()
        self.aug.reset_state()

    def get_transform(self, img: np.ndarray) -> Any:
        if self.rng.rand() < self.prob:
            return self.aug.get_transform(img)
        return NoOpTransform()


class RandomChooseAug(ImageAugmentor):
    """Apply one augmentor of ``aug_lists``, chosen at random: uniformly, or by the probabilities in
    a list of ``(augmentor, probability)`` pairs.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.RandomChooseAug([(imgaug.Identity(), 0.0), (imgaug.Flip(vert=True, prob=1.0), 1.0)])
        aug.reset_state()
        assert aug.augment(np.array([[1], [2]])).tolist() == [[2], [1]]
    """

    def __init__(self, aug_lists: Sequence[Any]):
        if len(aug_lists) == 0:
            raise ValueError("RandomChooseAug: expected at least one augmentor, got an empty list")
        if isinstance(aug_lists[0], (tuple, list)):
            prob = [pair[1] for pair in aug_lists]
            aug_lists = [pair[0] for pair in aug_lists]
        else:
            prob = [1.0 / len(aug_lists)] * len(aug_lists)
        self.aug_lists, self.prob = aug_lists, prob     # before super().__init__(): its reset_state() uses them
        super().__init__()

    def reset_state(self) -> None:
        super().reset_state()
        for aug in self.aug_lists:
            aug.reset_state()

    def get_transform(self, img: np.ndarray) -> Any:
        index = self.rng.choice(len(self.aug_lists), p=self.prob)
        return self.aug_lists[index].get_transform(img)


class RandomOrderAug(ImageAugmentor):
    """Apply all of ``aug_lists`` in a random order. Every transform is drawn from the input image,
    so the augmentors should keep the image's shape.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.RandomOrderAug([imgaug.Flip(horiz=True, prob=1.0), imgaug.Flip(vert=True, prob=1.0)])
        aug.reset_state()
        assert aug.augment(np.array([[1, 2], [3, 4]])).tolist() == [[4, 3], [2, 1]]
    """

    def __init__(self, aug_lists: Sequence[ImageAugmentor]):
        self.aug_lists = aug_lists      # before super().__init__(): its reset_state() uses them
        super().__init__()

    def reset_state(self) -> None:
        super().reset_state()
        for aug in self.aug_lists:
            aug.reset_state()

    def get_transform(self, img: np.ndarray) -> Any:
        order = self.rng.permutation(len(self.aug_lists))
        tfms = [aug.get_transform(img) for aug in self.aug_lists]
        return TransformList([tfms[k] for k in order])


class MapImage(ImageAugmentor):
    """Apply ``func(img) -> img``, and ``coord_func(coords) -> coords`` to Nx2 ``(x, y)`` coordinates
    if given (without it, ``apply_coords`` raises NotImplementedError).

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        aug = imgaug.MapImage(lambda img: img[::2], lambda coords: coords * [1, 0.5])
        tfm = aug.get_transform(np.zeros((4, 4)))
        assert tfm.apply_image(np.zeros((4, 4))).shape == (2, 4)
        assert tfm.apply_coords(np.array([[2.0, 2.0]])).tolist() == [[2.0, 1.0]]
    """

    def __init__(self, func: Callable[[np.ndarray], np.ndarray],
                 coord_func: Optional[Callable[[np.ndarray], np.ndarray]] = None):
        super().__init__()
        self.func = func
        self.coord_func = coord_func

    def get_transform(self, img: np.ndarray) -> Any:
        if self.coord_func:
            return TransformFactory(name="MapImage", apply_image=self.func, apply_coords=self.coord_func)
        return TransformFactory(name="MapImage", apply_image=self.func)
