"""Deterministic transforms: what an augmentor's ``get_transform(img)`` returns.

A transform applies one fixed geometric or photometric change: ``apply_image(img)`` to an HW or
HWC array (HWC stays HWC, also with one channel), ``apply_coords(coords)`` to an Nx2 float
array of ``(x, y)`` points. Coordinates are continuous image coordinates: pixel ``(i, j)``
covers ``[j, j + 1) x [i, i + 1)``, so its centre is ``(j + 0.5, i + 0.5)`` and a box around the
whole image is ``[0, 0, w, h]``. Like tensorpack, ``apply_coords`` may update a float array in
place; use its return value.

Example::

    import numpy as np
    from inputpipe.dataflow.imgaug import CropTransform, FlipTransform, TransformList
    img = np.arange(12, dtype=np.uint8).reshape(3, 4)
    tfm = TransformList([CropTransform(y0=1, x0=1, h=2, w=3), FlipTransform(h=2, w=3, horiz=True)])
    assert tfm.apply_image(img).tolist() == [[7, 6, 5], [11, 10, 9]]
    assert tfm.apply_coords(np.array([[1.5, 1.5]])).tolist() == [[2.5, 0.5]]
"""
import functools
import inspect
from typing import Any, Callable, List, Optional

import numpy as np

from .._image.opencv import BORDER_CONSTANT, INTER_LINEAR, MAX_OPENCV_CHANNELS, OPENCV_DTYPES, apply_per_channel, import_cv2
from ._repr import default_repr
from .encoded import EncodedImage
from .. import image_limits
from ..tensorpack_helpers import log_once  # noqa: F401  (tensorpack's imgaug.transform has it, outside __all__)

__all__ = [
    "Transform", "ResizeTransform", "CropTransform", "WarpAffineTransform", "FlipTransform", "TransposeTransform",
    "NoOpTransform", "PhotometricTransform", "TransformFactory", "TransformList", "LazyTransform",
]


def _keep_channel_axis(src: np.ndarray, out: np.ndarray) -> np.ndarray:
    """OpenCV drops the channel axis of HxWx1 images; put it back."""
    if src.ndim == 3 and out.ndim == 2:
        return out[:, :, np.newaxis]
    return out


def _cv2_if_installed() -> Any:
    """The ``cv2`` module, or None without OpenCV (for transforms that also work without it)."""
    try:
        import cv2
    except ImportError:
        return None
    return cv2


def _float_coords(coords: Any) -> np.ndarray:
    """``coords`` itself when it is a float array (updated in place, as in tensorpack), else a float32 copy."""
    coords = np.asarray(coords)
    if coords.ndim != 2 or coords.shape[1] != 2:
        raise ValueError("Transform.apply_coords: expected an Nx2 array of (x, y), got shape {}".format(coords.shape))
    if not np.issubdtype(coords.dtype, np.floating):
        coords = coords.astype(np.float32)
    return coords


class BaseTransform:
    """Base of every transform (used for ``isinstance`` checks)."""

    def _init(self, params: Optional[dict] = None) -> None:
        if params:
            for key, value in params.items():
                if key != "self" and not key.startswith("_"):
                    setattr(self, key, value)


class Transform(BaseTransform):
    """A deterministic change of an image and of what is attached to it.

    Subclasses implement ``apply_image(img)`` and, when they move pixels, ``apply_coords(coords)``;
    any other ``apply_<thing>`` method they lack raises NotImplementedError naming the transform.

    Example::

        import numpy as np
        from inputpipe.dataflow import imgaug

        class Invert(imgaug.Transform):
            def __init__(self, top=255):
                super().__init__()
                self._init(locals())

            def apply_image(self, img):
                return self.top - img

            def apply_coords(self, coords):
                return coords

        assert Invert().apply_image(np.array([0, 5], np.uint8)).tolist() == [255, 250]
        assert repr(Invert(1)) == "imgaug.Invert(top=1)"
    """

    def __init__(self):
        pass

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        method = cls.__dict__.get("apply_image")
        if inspect.isfunction(method):
            cls.apply_image = _decoding_first(method)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("apply_"):
            def missing(_):
                raise NotImplementedError("{} does not implement {}".format(type(self).__name__, name))
            return missing
        raise AttributeError("{} has no attribute {!r}".format(type(self).__name__, name))

    def __repr__(self) -> str:
        return default_repr(self)

    __str__ = __repr__


def _decoding_first(apply_image: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``apply_image`` for pixels; given an :class:`~inputpipe.dataflow.imgaug.encoded.EncodedImage`,
    the transform's ``apply_encoded`` (a crop or a resize that decodes only what it needs) or, by
    default, ``apply_image`` of the decoded pixels."""
    @functools.wraps(apply_image)
    def apply(self: Any, img: Any) -> Any:
        if isinstance(img, EncodedImage):
            encoded = getattr(type(self), "apply_encoded", None)
            if encoded is not None:
                return encoded(self, img)
            img = img.decode()
        return apply_image(self, img)

    return apply


class ResizeTransform(Transform):
    """Resize an ``h x w`` image to ``new_h x new_w`` with OpenCV interpolation ``interp`` (any real
    dtype and channel count: see :func:`~inputpipe.dataflow._image.opencv.apply_per_channel`).

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug import ResizeTransform
        tfm = ResizeTransform(2, 4, 4, 8, interp=0)   # 0: cv2.INTER_NEAREST
        assert tfm.apply_image(np.zeros((2, 4, 1), np.uint8)).shape == (4, 8, 1)
        assert tfm.apply_coords(np.array([[1.0, 1.0]])).tolist() == [[2.0, 2.0]]
    """

    def __init__(self, h: int, w: int, new_h: int, new_w: int, interp: int):
        super().__init__()
        import_cv2("ResizeTransform")
        if new_h < 1 or new_w < 1:
            raise ValueError("ResizeTransform: the new size (h, w) must be at least (1, 1), got {}".format(
                (new_h, new_w)))
        limit = image_limits.MAX_IMAGE_PIXELS
        if limit is not None and new_h * new_w > limit:
            # e.g. a 1x100000 image whose shortest edge is resized to 224: 224 x 22400000
            raise image_limits.ImageTooLargeError(
                "ResizeTransform: resizing an image of shape {} (h, w) to {} would make {} pixels, over the limit of "
                "{} (image_limits.MAX_IMAGE_PIXELS); is the image that thin?".format(
                    (h, w), (new_h, new_w), new_h * new_w, limit))
        self._init(locals())

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        if img.shape[:2] != (self.h, self.w):
            raise ValueError("ResizeTransform: made for images of shape {} (h, w), got an image of shape {}".format(
                (self.h, self.w), img.shape))
        cv2 = import_cv2("ResizeTransform")
        return _keep_channel_axis(img, apply_per_channel("ResizeTransform", cv2.resize, img, (self.new_w, self.new_h),
                                                         interpolation=self.interp))

    def apply_encoded(self, img: EncodedImage) -> np.ndarray:
        """Decode only the encoded image's window, at a DCT scale when it is at least twice the
        new size, and resize it."""
        if img.shape[:2] != (self.h, self.w):
            raise ValueError("ResizeTransform: made for images of shape {} (h, w), got an image of shape {}".format(
                (self.h, self.w), img.shape))
        return img.resized(self.new_h, self.new_w, self.interp)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = _float_coords(coords)
        coords[:, 0] = coords[:, 0] * (self.new_w * 1.0 / self.w)
        coords[:, 1] = coords[:, 1] * (self.new_h * 1.0 / self.h)
        return coords


class CropTransform(Transform):
    """Take the ``h x w`` window whose top-left pixel is ``(y0, x0)``.

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug import CropTransform
        tfm = CropTransform(1, 2, 2, 2)
        assert tfm.apply_image(np.arange(16).reshape(4, 4)).tolist() == [[6, 7], [10, 11]]
        assert tfm.apply_coords(np.array([[3.0, 2.0]])).tolist() == [[1.0, 1.0]]
    """

    def __init__(self, y0: int, x0: int, h: int, w: int):
        super().__init__()
        self._init(locals())

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return img[self.y0:self.y0 + self.h, self.x0:self.x0 + self.w]

    def apply_encoded(self, img: EncodedImage) -> EncodedImage:
        """Narrow the window to decode (nothing is decoded)."""
        height, width = img.shape[:2]
        y0, x0 = min(self.y0, height), min(self.x0, width)
        return img.crop(y0, x0, min(self.h, height - y0), min(self.w, width - x0))

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = _float_coords(coords)
        coords[:, 0] -= self.x0
        coords[:, 1] -= self.y0
        return coords


class WarpAffineTransform(Transform):
    """``cv2.warpAffine`` with the 2x3 matrix ``mat`` to an output of size ``dsize = (w, h)``, for
    any real dtype and channel count (as :class:`ResizeTransform`).

    ``mat`` maps OpenCV pixel indices (pixel centres at integers); ``apply_coords`` maps
    continuous coordinates (centres at ``+ 0.5``) consistently with it, so a point follows its
    pixel.

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug import WarpAffineTransform
        shift = np.array([[1, 0, 2], [0, 1, 1]], np.float32)      # 2 right, 1 down
        tfm = WarpAffineTransform(shift, (5, 4))
        img = np.zeros((4, 5), np.uint8)
        img[0, 0] = 9
        assert tfm.apply_image(img)[1, 2] == 9
        assert tfm.apply_coords(np.array([[0.5, 0.5]])).tolist() == [[2.5, 1.5]]
    """

    def __init__(self, mat: np.ndarray, dsize: Any, interp: int = INTER_LINEAR,
                 borderMode: int = BORDER_CONSTANT, borderValue: Any = 0):
        super().__init__()
        import_cv2("WarpAffineTransform")
        self._init(locals())

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        cv2 = import_cv2("WarpAffineTransform")
        out = apply_per_channel("WarpAffineTransform", cv2.warpAffine, img, self.mat, tuple(int(v) for v in self.dsize),
                                flags=self.interp, borderMode=self.borderMode, borderValue=self.borderValue)
        return _keep_channel_axis(img, out)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = _float_coords(coords)
        mat = np.asarray(self.mat, dtype=np.float64)
        return (coords - 0.5) @ mat[:, :2].T + mat[:, 2] + 0.5


class FlipTransform(Transform):
    """Mirror an ``h x w`` image left-right (``horiz=True``) or top-bottom.

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug import FlipTransform
        tfm = FlipTransform(2, 3, horiz=True)
        assert tfm.apply_image(np.array([[1, 2, 3], [4, 5, 6]])).tolist() == [[3, 2, 1], [6, 5, 4]]
        assert tfm.apply_coords(np.array([[0.5, 1.0]])).tolist() == [[2.5, 1.0]]
    """

    def __init__(self, h: int, w: int, horiz: bool = True):
        super().__init__()
        self._init(locals())

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        # OpenCV's flip gives a contiguous copy in a few microseconds; the view numpy gives costs
        # a hundred times that when it is copied later (into a batch), element by element
        cv2 = _cv2_if_installed()
        if cv2 is not None and img.dtype.char in OPENCV_DTYPES and img.size and 2 <= img.ndim <= 3 \
                and (img.ndim == 2 or img.shape[2] <= MAX_OPENCV_CHANNELS):
            return _keep_channel_axis(img, cv2.flip(img, 1 if self.horiz else 0))
        return img[:, ::-1] if self.horiz else img[::-1]

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords = _float_coords(coords)
        if self.horiz:
            coords[:, 0] = self.w - coords[:, 0]
        else:
            coords[:, 1] = self.h - coords[:, 1]
        return coords


class TransposeTransform(Transform):
    """Swap the image's rows and columns (HWC stays HWC, any dtype keeps its dtype).

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug import TransposeTransform
        tfm = TransposeTransform()
        assert tfm.apply_image(np.array([[1, 2, 3]], np.uint8)).tolist() == [[1], [2], [3]]
        assert tfm.apply_coords(np.array([[2.5, 0.5]])).tolist() == [[0.5, 2.5]]
    """

    def __init__(self):
        super().__init__()
        import_cv2("TransposeTransform")

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        if img.dtype.char in OPENCV_DTYPES and img.size and (img.ndim < 3 or img.shape[2] <= MAX_OPENCV_CHANNELS):
            return _keep_channel_axis(img, import_cv2("TransposeTransform").transpose(img))
        # what OpenCV does not take (bool, 64-bit integers it would cast to int32, no pixels, more channels)
        return np.ascontiguousarray(img.swapaxes(0, 1))

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return _float_coords(coords)[:, ::-1]


class NoOpTransform(Transform):
    """Leaves everything as it is: every ``apply_*`` returns its argument.

    Example::

        from inputpipe.dataflow.imgaug import NoOpTransform
        assert NoOpTransform().apply_image("anything") == "anything"
    """

    def __getattr__(self, name: str) -> Any:
        if name.startswith("apply_"):
            return _identity
        raise AttributeError("NoOpTransform has no attribute {!r}".format(name))


def _identity(x: Any) -> Any:
    return x


class PhotometricTransform(Transform):
    """Changes pixel values with ``func(img) -> img``; coordinates stay unchanged.

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug import PhotometricTransform
        tfm = PhotometricTransform(lambda img: img * 2, name="double")
        assert tfm.apply_image(np.array([1, 2])).tolist() == [2, 4]
        assert tfm.apply_coords(np.array([[1.0, 2.0]])).tolist() == [[1.0, 2.0]]
        assert repr(tfm) == "imgaug.PhotometricTransform(double)"
    """

    def __init__(self, func: Callable[[np.ndarray], np.ndarray], name: Optional[object] = None):
        # name: usually a str; any object is shown through str(), only when the transform is shown
        super().__init__()
        self._func = func
        self._name = name

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return self._func(img)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return coords

    def __repr__(self) -> str:
        return "imgaug.PhotometricTransform({})".format("" if self._name is None else self._name)

    __str__ = __repr__


class TransformFactory(Transform):
    """A transform made of functions: ``TransformFactory(name, apply_image=f, apply_coords=g)``.

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug import TransformFactory
        tfm = TransformFactory(name="negate", apply_image=lambda img: -img)
        assert tfm.apply_image(np.array([1])).tolist() == [-1]
        try:
            tfm.apply_coords(np.zeros((1, 2)))
        except NotImplementedError as err:
            assert "apply_coords" in str(err)
    """

    def __init__(self, name: Optional[object] = None, **kwargs: Callable):
        # name: usually a str; any object is shown through str(), only when the transform is shown
        super().__init__()
        for key, func in kwargs.items():
            if not key.startswith("apply_"):
                raise KeyError("TransformFactory: expected apply_* functions as keyword arguments, got {!r}".format(
                    key))
            setattr(self, key, _pixels_first(func) if key == "apply_image" else func)
        self._name = name

    def __repr__(self) -> str:
        return "imgaug.TransformFactory({})".format("" if self._name is None else self._name)

    __str__ = __repr__


def _pixels_first(apply_image: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``apply_image`` given the pixels of an :class:`~inputpipe.dataflow.imgaug.encoded.EncodedImage`
    (a function of a TransformFactory, e.g. an old-style augmentor's ``_augment``, expects pixels)."""
    @functools.wraps(apply_image)
    def apply(img: Any) -> Any:
        return apply_image(img.decode() if isinstance(img, EncodedImage) else img)

    return apply


class TransformList(BaseTransform):
    """Apply transforms one after the other; ``+`` joins lists and transforms.

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug import CropTransform, FlipTransform, NoOpTransform
        from inputpipe.dataflow.imgaug import TransformList
        tfm = TransformList([CropTransform(0, 0, 1, 2)]) + FlipTransform(1, 2)
        assert len(tfm.tfms) == 2
        assert tfm.apply_image(np.array([[1, 2, 3]])).tolist() == [[2, 1]]
    """

    def __init__(self, tfms: List[BaseTransform]):
        for tfm in tfms:
            if not isinstance(tfm, BaseTransform):
                raise TypeError("TransformList: expected Transform objects, got {!r}".format(tfm))
        self.tfms = tfms

    def _apply(self, x: Any, method: str) -> Any:
        for tfm in self.tfms:
            x = getattr(tfm, method)(x)
        return x

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        return self._apply(img, "apply_image")

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return self._apply(coords, "apply_coords")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("apply_"):
            return lambda x: self._apply(x, name)
        raise AttributeError("TransformList has no attribute {!r}".format(name))

    def __add__(self, other: BaseTransform) -> "TransformList":
        return TransformList(self.tfms + _as_list(other))

    def __radd__(self, other: BaseTransform) -> "TransformList":
        return TransformList(_as_list(other) + self.tfms)

    def __iadd__(self, other: BaseTransform) -> "TransformList":
        self.tfms.extend(_as_list(other))
        return self

    def __repr__(self) -> str:
        return "imgaug.TransformList([\n{}])".format(",\n".join("  " + repr(tfm) for tfm in self.tfms))

    __str__ = __repr__


def _as_list(tfm: BaseTransform) -> List[BaseTransform]:
    return list(tfm.tfms) if isinstance(tfm, TransformList) else [tfm]


class LazyTransform(BaseTransform):
    """A transform made by ``get_transform(img)`` from the first image given to ``apply_image``
    (used by :class:`~inputpipe.dataflow.imgaug.AugmentorList` for every augmentor after the first).

    Example::

        import numpy as np
        from inputpipe.dataflow.imgaug import CenterCrop, LazyTransform
        tfm = LazyTransform(CenterCrop(2).get_transform)
        assert tfm.apply_image(np.zeros((4, 6))).shape == (2, 2)
        assert tfm.apply_coords(np.array([[2.0, 1.0]])).tolist() == [[0.0, 0.0]]
    """

    def __init__(self, get_transform: Callable[[np.ndarray], BaseTransform]):
        self.get_transform = get_transform
        self._transform: Optional[BaseTransform] = None

    def apply_image(self, img: np.ndarray) -> np.ndarray:
        if self._transform is None:
            self._transform = self.get_transform(img)
        # BaseTransform does not declare apply_image (Transform finds apply_* methods dynamically)
        return self._apply(img, "apply_image")

    def _apply(self, x: Any, method: str) -> Any:
        if self._transform is None:
            raise RuntimeError("LazyTransform({}): {} called before apply_image; the transform is made from the "
                               "first image it is applied to".format(self.get_transform, method))
        return getattr(self._transform, method)(x)

    def apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return self._apply(coords, "apply_coords")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("apply_"):
            return lambda x: self._apply(x, name)
        raise AttributeError("LazyTransform has no attribute {!r}".format(name))

    def __repr__(self) -> str:
        if self._transform is None:
            return "LazyTransform(get_transform={})".format(self.get_transform)
        return repr(self._transform)

    __str__ = __repr__


def __getattr__(name: str) -> Any:
    """``ImageAugmentor`` and ``TransformAugmentorBase`` (tensorpack's legacy name of it), which
    tensorpack's ``imgaug.transform`` has: the augmentors of :mod:`.base` build on the transforms of
    this module, so they are looked up on first use."""
    if name in ("ImageAugmentor", "TransformAugmentorBase"):
        from .base import ImageAugmentor

        return ImageAugmentor
    raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))
