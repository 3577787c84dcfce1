"""What an augmentor needs of an image, checked before it draws a transform.

An augmentor class (or instance) sets ``_image_rule`` to an :class:`ImageRule`;
:class:`~inputpipe.dataflow.imgaug.ImageAugmentor` checks it before every ``get_transform(img)``
(the one path every augmentation takes: ``augment``, an ``AugmentorList``, the meta augmentors and
the augmenting DataFlows all call it). An image that breaks the rule is a ValueError (TypeError
for a non-array) naming the augmentor, the rule and the shape and dtype it got, instead of an
OpenCV error, a ZeroDivisionError or an IndexError from deep inside. The check reads a few
attributes of the array and nothing else: it runs for every image.

Example::

    from inputpipe.dataflow.imgaug._image_rule import ImageRule
    rule = ImageRule(ndims=(2, 3), nonempty=True)
    rule.check("Resize", np.zeros((0, 4, 3), np.uint8))
    # ValueError: Resize: expected a non-empty HW or HWC image, got an array of shape (0, 4, 3) and dtype uint8
"""
from typing import Any, Dict, Optional, Tuple

import numpy as np

__all__ = ["ImageRule", "HW_OR_HWC", "NON_EMPTY_HW_OR_HWC", "COLOUR"]

_NO_DTYPE = np.dtype(np.uint8)     # what a shape-only placeholder is checked as
_LAYOUTS: Dict[Optional[Tuple[int, ...]], str] = {None: "array", (0, 1, 2, 3): "array of at most 3 dimensions", (2, 3): "HW or HWC image",
            (3,): "HxWxC image"}


class ImageRule:
    """The images an augmentor accepts: ``ndims`` (allowed numbers of dimensions, None: any),
    ``channels`` (allowed channel counts of an HWC image, None: any), ``nonempty`` (no dimension
    of size 0) and ``kinds`` (allowed numpy dtype kinds, e.g. ``"uif"``; None: any).

    Example::

        ImageRule(ndims=(3,), channels=(3, 4), kinds="uif").check("Hue", img)
    """

    __slots__ = ("ndims", "channels", "nonempty", "kinds", "text")

    def __init__(self, ndims: Optional[Tuple[int, ...]] = (2, 3), channels: Optional[Tuple[int, ...]] = None,
                 nonempty: bool = False, kinds: Optional[str] = None):
        self.ndims = ndims
        self.channels = channels
        self.nonempty = nonempty
        self.kinds = kinds
        self.text = self._describe()

    def _describe(self) -> str:
        layout = _LAYOUTS[self.ndims]
        if self.channels is not None:
            shapes = ["HxWx{}".format(c) for c in self.channels]
            if self.ndims == (2, 3):
                shapes.insert(0, "HW")
            layout = "{} or {} image".format(", ".join(shapes[:-1]), shapes[-1]) if len(shapes) > 1 \
                else shapes[0] + " image"
            if self.ndims not in ((2, 3), (3,)):
                layout = "{} ({} when it has 3)".format(_LAYOUTS[self.ndims], layout.replace(" image", ""))
        text = ("a non-empty " if self.nonempty else "an ") + layout
        if self.kinds is not None:
            text += " of a numeric (not bool) dtype" if sorted(self.kinds) == ["f", "i", "u"] else \
                " of dtype kind {}".format(" or ".join(repr(kind) for kind in self.kinds))
        return text

    def check(self, owner: Any, img: Any) -> None:
        """Raise a ValueError (TypeError when ``img`` has no shape) naming ``owner`` (a name, or the
        augmentor: its class name is looked up only then) unless ``img`` follows the rule. An
        ``ImagePlaceholder`` (a shape only) is checked on its shape."""
        shape = getattr(img, "shape", None)
        if shape is None:
            raise TypeError("{}: expected an image as a numpy array (HW or HWC), got {}".format(
                _name(owner), type(img).__name__))
        ndims = self.ndims
        if (ndims is not None and len(shape) not in ndims) or (self.nonempty and 0 in shape) \
                or (self.channels is not None and len(shape) == 3 and shape[2] not in self.channels):
            self._refuse(owner, img)
        kinds = self.kinds
        if kinds is not None and getattr(img, "dtype", _NO_DTYPE).kind not in kinds:
            self._refuse(owner, img)

    def _refuse(self, owner: Any, img: Any) -> None:
        dtype = getattr(img, "dtype", None)
        got = "an array of shape {}{}".format(tuple(img.shape), "" if dtype is None else " and dtype {}".format(dtype))
        raise ValueError("{}: expected {}, got {}".format(_name(owner), self.text, got))

    def __repr__(self) -> str:
        return "ImageRule({})".format(self.text)


def _name(owner: Any) -> str:
    return owner if isinstance(owner, str) else type(owner).__name__


#: Augmentors that read the image's height and width.
HW_OR_HWC = ImageRule((2, 3))
#: ... and hand it to OpenCV, which takes no empty image.
NON_EMPTY_HW_OR_HWC = ImageRule((2, 3), nonempty=True)
#: Colour augmentors: RGB/BGR, with an alpha channel passed through unchanged.
COLOUR = ImageRule((3,), channels=(3, 4), nonempty=True, kinds="uif")
