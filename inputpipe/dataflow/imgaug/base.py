"""The augmentor protocol: :class:`ImageAugmentor`, :class:`AugmentorList`, :class:`PhotometricAugmentor`.

An augmentor holds a *random policy*; ``get_transform(img)`` draws from it and returns a
deterministic :class:`~inputpipe.dataflow.imgaug.transform.Transform`, which can then be applied
to the image and to anything attached to it (coordinates, masks, a second image).

Two ways of writing an augmentor are supported, and can be mixed in one :class:`AugmentorList`:

- the current one (tensorpack >= 0.10): override ``get_transform(img)``;
- the old one (tensorpack < 0.10): override ``_get_augment_params(img)`` (returns any
  parameters), ``_augment(img, params)`` and optionally ``_augment_coords(coords, params)``.
  ``get_transform`` then wraps them into a transform.

Both kinds answer the old calls ``augment_return_params(img) -> (img, params)``,
``augment_with_params(img, params)`` and ``augment_coords(coords, params)``; ``params`` is the
transform.

Random numbers come from ``self.rng``, a ``numpy.random.RandomState`` made by
:func:`inputpipe.dataflow.seeding.new_rng` in ``reset_state()``: fresh entropy in every process
by default, reproducible when a global seed is set. A copy of an augmentor that reaches another
process (fork, or pickled for spawn/forkserver workers) makes a new RNG there the first time it
draws, so worker processes never repeat each other's numbers even if nobody calls
``reset_state()`` in them.

Inside a parallel map's call (a :func:`~inputpipe.dataflow.seeding.datapoint_context`),
``self.rng`` is instead a stream of the datapoint's own seed: the augmentors draw the same numbers
for a datapoint whichever worker maps it, with any number of workers, and after a restore.
"""
import functools
import inspect
import os
from collections import namedtuple
from typing import Any, Callable, List, Optional, Sequence, Set, Tuple

import numpy as np

from ...utils.logger import get_logger
from ..seeding import augmentor_rng, new_rng
from ._image_rule import HW_OR_HWC, ImageRule
from ._repr import default_repr
# tensorpack's imgaug.base also has these (outside __all__), and check_dtype below: scripts import them from here
from ..tensorpack_helpers import deprecated, get_rng, log_once  # noqa: F401
from .encoded import EncodedImage, as_encoded, decoded, is_encoded

__all__ = ["Augmentor", "ImageAugmentor", "AugmentorList", "PhotometricAugmentor"]

_logger = get_logger(__name__)
_logged_once: Set[Any] = set()

#: Stands in for an image when only its shape matters to ``get_transform`` (``ImagePlaceholder(shape=(h, w))``).
ImagePlaceholder = namedtuple("ImagePlaceholder", ["shape"])


class _Described:
    """A transform's name that is formatted only when shown: ``prefix`` + ``repr(augmentor)``."""

    def __init__(self, prefix: str, augmentor: Any):
        self.prefix = prefix
        self.augmentor = augmentor

    def __str__(self) -> str:
        return self.prefix + repr(self.augmentor)


def _log_once(key: Any, message: str) -> None:
    if key not in _logged_once:
        _logged_once.add(key)
        _logger.info(message)


def check_image(component: str, img: Any, check_ndim: bool = True) -> None:
    """Raise a TypeError/ValueError naming ``component`` unless ``img`` is a numpy array, of 2 (HW)
    or 3 (HWC) dimensions when ``check_ndim``.

    Like tensorpack, any numeric dtype passes (the augmentors are written for uint8 in [0, 255]
    and floats in [0, 1] or [0, 255]).
    """
    if not isinstance(img, np.ndarray):
        raise TypeError("{}: expected an image as a numpy array (HW or HWC), got {}".format(
            component, type(img).__name__))
    if check_ndim and img.ndim not in (2, 3):
        raise ValueError("{}: expected an image of 2 (HW) or 3 (HWC) dimensions, got shape {}".format(
            component, img.shape))


def check_dtype(img: Any) -> None:
    """Raise ``TypeError`` unless ``img`` is a numpy array (any numeric dtype passes, as in
    tensorpack, whose check of integer dtypes never fired). tensorpack's helper of
    ``dataflow.image`` and ``imgaug.base``; importable from both.

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug.base import check_dtype
        check_dtype(np.zeros((4, 4, 3), np.uint8))
    """
    check_image("check_dtype", img, check_ndim=False)


def _checking_the_image(get_transform: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``get_transform`` preceded by the check of the augmentor's ``_image_rule`` (if it has one)."""
    @functools.wraps(get_transform)
    def checked(self: Any, img: Any) -> Any:
        if not self.reads_encoded and isinstance(img, EncodedImage):
            img = img.decode()
        rule = self._image_rule
        if rule is not None:
            rule.check(self, img)
        return get_transform(self, img)

    checked.checks_the_image = True  # type: ignore[attr-defined]
    return checked


def hw_shape(component: str, value: Any) -> Tuple[int, int]:
    """``(h, w)`` from an int (a square) or a pair; a ValueError naming ``component`` otherwise."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value), int(value)
    if isinstance(value, (list, tuple, np.ndarray)) and len(value) == 2:
        return int(value[0]), int(value[1])
    raise ValueError("{}: expected a shape as an int or an (h, w) pair, got {!r}".format(component, value))


class ImageAugmentor:
    """Base class of the augmentors: a random policy that makes a deterministic transform per image.

    Images are numpy arrays of shape HW or HWC, uint8 in [0, 255] or floating point in [0, 1]
    or [0, 255]. Subclasses implement ``get_transform(img)`` (or, the old way,
    ``_get_augment_params(img)`` and ``_augment(img, params)``; see the module doc), draw random
    numbers from ``self.rng`` / :meth:`_rand_range`, and may store their constructor arguments
    with ``self._init(locals())``, which also makes ``repr()`` show them.

    Call ``reset_state()`` in the process that uses the augmentor (the augmenting DataFlows do).

    An augmentor whose ``_image_rule`` is an ``ImageRule`` (every augmentor of this package that
    needs one; None by default) has it checked before each ``get_transform(img)``, also one a
    subclass defines: an image it cannot take is a ValueError naming the augmentor, the rule and
    the shape and dtype that came.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug

        class RandomInvert(imgaug.ImageAugmentor):
            def __init__(self, prob=0.5):
                super().__init__()
                self._init(locals())

            def get_transform(self, img):
                if self._rand_range() < self.prob:
                    return imgaug.PhotometricTransform(lambda im: 255 - im, "invert")
                return imgaug.NoOpTransform()

        aug = RandomInvert(prob=1.0)
        aug.reset_state()
        assert aug.augment(np.zeros((2, 2), np.uint8)).tolist() == [[255, 255], [255, 255]]
        assert repr(aug) == "imgaug.RandomInvert(prob=1.0)"
    """

    #: The images ``get_transform`` accepts, checked before it runs (None: no check).
    _image_rule: Optional[ImageRule] = None
    #: True when ``get_transform`` reads only the image's ``shape`` (and ``dtype``), so it may be
    #: given an :class:`~inputpipe.dataflow.imgaug.encoded.EncodedImage` (bytes not yet decoded);
    #: otherwise such an image is decoded before ``get_transform`` sees it.
    reads_encoded = False

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        method = cls.__dict__.get("get_transform")
        if inspect.isfunction(method) and not getattr(method, "checks_the_image", False):
            cls.get_transform = _checking_the_image(method)  # type: ignore[method-assign,assignment]

    def __init__(self):
        self.reset_state()

    def _init(self, params: Optional[dict] = None) -> None:
        """Store ``params`` (typically ``locals()`` of ``__init__``) as attributes, except ``self``
        and names starting with ``_``."""
        if params:
            for key, value in params.items():
                if key != "self" and not key.startswith("_"):
                    setattr(self, key, value)

    # --------------------------------------------------------------------------- randomness

    @property
    def rng(self) -> np.random.RandomState:
        """This augmentor's ``RandomState``; remade in a process other than the one that made it.

        While a parallel map maps a datapoint, it is that datapoint's stream for this augmentor
        (see :func:`~inputpipe.dataflow.seeding.augmentor_rng`) and the per-process one is untouched."""
        rng = augmentor_rng(self)
        if rng is not None:
            return rng
        state = self.__dict__
        rng = state.get("_rng")
        if rng is None or state.get("_rng_pid") != os.getpid():
            rng = self.rng = new_rng(self)
        return rng

    @rng.setter
    def rng(self, value: np.random.RandomState) -> None:
        self.__dict__["_rng"] = value
        self.__dict__["_rng_pid"] = os.getpid()

    def reset_state(self) -> None:
        """Give the augmentor a new RNG (and reset any other state). Call it in the process that
        augments; with :func:`~inputpipe.dataflow.seeding.set_global_seed` the draws are reproducible."""
        self.rng = new_rng(self)

    def _rand_range(self, low: float = 1.0, high: Optional[float] = None, size: Any = None) -> np.ndarray:
        """Uniform float32 number(s) in [low, high) from ``self.rng``; ``_rand_range(x)`` is [0, x)."""
        if high is None:
            low, high = 0, low
        if size is None:
            size = []
        return self.rng.uniform(low, high, size).astype("float32")

    # --------------------------------------------------------------------------- the protocol

    def get_transform(self, img: np.ndarray) -> Any:
        """Draw this augmentor's random choices for ``img`` and return them as a deterministic
        :class:`~inputpipe.dataflow.imgaug.transform.Transform`.

        Subclasses override this. The default serves old-style augmentors: it calls
        ``_get_augment_params(img)`` and wraps ``_augment`` / ``_augment_coords`` in a transform.
        """
        from .transform import BaseTransform, TransformFactory

        img = decoded(img)
        cls = type(self)
        draw = getattr(self, "_get_augment_params", None) or getattr(self, "get_augment_params", None)
        if draw is None and not hasattr(self, "_augment"):
            raise NotImplementedError("{} implements neither get_transform(img) nor the old "
                                      "_get_augment_params(img) / _augment(img, params)".format(cls.__name__))
        _log_once((cls, "legacy"), "{} uses the old augmentor interface (_get_augment_params/_augment); "
                                   "it keeps working, get_transform(img) is the current one".format(cls.__name__))
        params = None if draw is None else draw(img)
        if isinstance(params, BaseTransform):     # old augmentors that draw a Transform (tensorpack 0.9's style)
            return params
        if not hasattr(self, "_augment"):
            raise NotImplementedError("{}._get_augment_params returned a {}, not a Transform, and {} has no "
                                      "_augment(img, params) to apply it".format(cls.__name__, type(params).__name__,
                                                                                 cls.__name__))
        return TransformFactory(name=_Described("LegacyConversion -- ", self),
                                apply_image=lambda image: self._augment(image, params),
                                apply_coords=lambda coords: self._legacy_coords(coords, params))

    def _legacy_coords(self, coords: np.ndarray, params: Any) -> np.ndarray:
        if hasattr(self, "_augment_coords"):
            return self._augment_coords(coords, params)
        _log_once((type(self), "coords"), "{} has no _augment_coords(coords, params); its transform leaves "
                                          "coordinates unchanged".format(type(self).__name__))
        return coords

    def augment(self, img: np.ndarray) -> np.ndarray:
        """Augment one image: ``get_transform(img).apply_image(img)``. ``img`` may also be the
        encoded bytes of an image file (see :mod:`~inputpipe.dataflow.imgaug.encoded`): it is then
        decoded as late and as little as the augmentors allow."""
        img = self._input_image(img)
        return decoded(self.get_transform(img).apply_image(img))

    def _input_image(self, img: Any) -> Any:
        if is_encoded(img):
            return as_encoded(img, type(self).__name__)
        check_image(type(self).__name__, img, check_ndim=False)
        return img

    # --------------------------------------------------------------------------- the old calls

    def augment_return_params(self, img: Any) -> Tuple[Any, Any]:
        """Old API: augment ``img`` and return ``(augmented, params)``; ``params`` is the transform.

        As in tensorpack, ``img`` is not checked here: an old-style augmentor may take any object
        its ``_get_augment_params`` and ``_augment`` understand (e.g. an image with its mask)."""
        if is_encoded(img):
            img = as_encoded(img, type(self).__name__)
        tfm = self.get_transform(img)
        return decoded(tfm.apply_image(img)), tfm

    def augment_with_params(self, img: np.ndarray, params: Any) -> np.ndarray:
        """Old API: apply the same augmentation again: ``params`` from :meth:`augment_return_params`
        (a transform), or the parameters an old-style augmentor's ``_get_augment_params`` returns."""
        if _is_transform(params) or not hasattr(self, "_augment"):
            return _as_transform(type(self).__name__, params).apply_image(img)
        return self._augment(img, params)

    def augment_coords(self, coords: np.ndarray, params: Any) -> np.ndarray:
        """Old API: move Nx2 ``(x, y)`` coordinates as the augmentation with ``params`` moved the image."""
        if _is_transform(params) or not hasattr(self, "_augment"):
            return _as_transform(type(self).__name__, params).apply_coords(coords)
        return self._legacy_coords(coords, params)

    def __repr__(self) -> str:
        return default_repr(self)

    __str__ = __repr__


def _is_transform(obj: Any) -> bool:
    from .transform import BaseTransform

    return isinstance(obj, BaseTransform)


def _as_transform(component: str, params: Any) -> Any:
    if not _is_transform(params):
        raise TypeError("{}: expected the params returned by augment_return_params (a Transform), got {}".format(
            component, type(params).__name__))
    return params


class AugmentorList(ImageAugmentor):
    """Apply augmentors one after the other; itself an augmentor.

    ``get_transform(img)`` returns a :class:`~inputpipe.dataflow.imgaug.transform.TransformList`.
    Each augmentor after the first draws its transform from the image its predecessors produced,
    so those transforms are made when the list is first applied to an image: call
    ``apply_image`` before ``apply_coords``.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug
        augs = imgaug.AugmentorList([imgaug.Resize((4, 6)), imgaug.Flip(horiz=True, prob=1.0)])
        augs.reset_state()
        img = np.arange(6, dtype=np.uint8).reshape(2, 3)
        tfm = augs.get_transform(img)
        out = tfm.apply_image(img)
        assert out.shape == (4, 6)
        coords = tfm.apply_coords(np.array([[0.5, 0.5]], np.float32))   # pixel (0, 0)'s centre
        assert coords.tolist() == [[5.0, 1.0]]
    """

    _image_rule = HW_OR_HWC
    reads_encoded = True            # the first augmentor's get_transform decodes if it must

    def __init__(self, augmentors: Sequence[ImageAugmentor]):
        if not isinstance(augmentors, (list, tuple)):
            raise TypeError("AugmentorList: expected a list or tuple of augmentors, got {}".format(
                type(augmentors).__name__))
        self.augmentors = augmentors
        super().__init__()

    def reset_state(self) -> None:
        """Reset this list's RNG and every augmentor in it."""
        super().reset_state()
        for aug in self.augmentors:
            aug.reset_state()

    def get_transform(self, img: np.ndarray) -> Any:
        from .transform import LazyTransform, TransformList

        tfms: List[Any] = []
        for index, aug in enumerate(self.augmentors):
            tfm = aug.get_transform(img) if index == 0 else LazyTransform(aug.get_transform)
            if isinstance(tfm, TransformList):
                tfms.extend(tfm.tfms)
            else:
                tfms.append(tfm)
        return TransformList(tfms)

    def __repr__(self) -> str:
        return "imgaug.AugmentorList([\n{}])".format(",\n".join("  " + repr(aug) for aug in self.augmentors))

    __str__ = __repr__


#: tensorpack's older name of :class:`ImageAugmentor`.
Augmentor = ImageAugmentor


class PhotometricAugmentor(ImageAugmentor):
    """Base class of augmentors that change pixel values only (coordinates stay where they are).

    Subclasses implement ``_get_augment_params(img)`` (the random draw; default ``None``) and
    ``_augment(img, params)``; ``get_transform`` wraps them in a
    :class:`~inputpipe.dataflow.imgaug.transform.PhotometricTransform`.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug

        class AddNoise(imgaug.PhotometricAugmentor):
            def __init__(self, scale):
                super().__init__()
                self._init(locals())

            def _get_augment_params(self, img):
                return self.rng.randn(*img.shape).astype("float32") * self.scale

            def _augment(self, img, noise):
                return img + noise

        aug = AddNoise(0.1)
        aug.reset_state()
        tfm = aug.get_transform(np.zeros((4, 4), np.float32))
        assert tfm.apply_coords(np.array([[1.0, 2.0]])).tolist() == [[1.0, 2.0]]
    """

    #: ``_augment(img, params) -> img``, defined by every subclass (declared here, not defined).
    _augment: Callable[[np.ndarray, Any], np.ndarray]

    def get_transform(self, img: np.ndarray) -> Any:
        from .transform import PhotometricTransform

        params = self._get_augment_params(img)
        return PhotometricTransform(func=lambda image: self._augment(image, params), name=_Described("from ", self))

    def _get_augment_params(self, img: np.ndarray) -> Any:
        return None
