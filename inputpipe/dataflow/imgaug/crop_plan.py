"""Crop plans: what shape-only augmentors would do to an encoded image, as numbers for a decoder
elsewhere (TensorFlow's ``decode_and_crop_jpeg`` in the graph).

:func:`plan_crop` runs the augmentors' random choices on the image's size alone (the header)
and folds the transforms they return, crops, resizes and a left-right flip, into one
:class:`CropPlan`: the window of the source image to decode, the size to resize it to and
whether to mirror it. The random draws are those the augmentors make on the decoded pixels, so a
pipeline decoded in the graph sees the same crops and flips as one decoded in Python.

Example::

    from inputpipe.dataflow import imgaug
    from inputpipe.dataflow.imgaug.crop_plan import plan_crop

    augs = [imgaug.GoogleNetRandomCropAndResize(), imgaug.Flip(horiz=True)]
    plan = plan_crop(augs, open("photo.jpg", "rb").read())
    plan.window, plan.size, plan.flip          # (43, 80, 211, 240), (224, 224), True
"""
from typing import Any, Iterator, List, NamedTuple, Sequence, Tuple

import numpy as np

from ..image_limits import check_image_bytes, declared_image_size
from .base import AugmentorList, ImageAugmentor, ImagePlaceholder
from .transform import BaseTransform, CropTransform, FlipTransform, NoOpTransform, ResizeTransform, TransformList

__all__ = ["CropPlan", "plan_crop", "jpeg_size"]


class CropPlan(NamedTuple):
    """A crop window of the source image, the size it becomes, and a left-right flip."""

    #: (y, x, h, w) in the source image's pixels
    window: Tuple[int, int, int, int]
    #: (h, w) after the resize
    size: Tuple[int, int]
    #: mirrored left-right after the resize
    flip: bool


def _flat(augmentors: Sequence[Any]) -> Iterator[ImageAugmentor]:
    for aug in augmentors:
        if isinstance(aug, AugmentorList):
            yield from _flat(aug.augmentors)
        else:
            yield aug


def _transforms(tfm: BaseTransform) -> List[BaseTransform]:
    return list(tfm.tfms) if isinstance(tfm, TransformList) else [tfm]


def jpeg_size(data: Any, component: str) -> Tuple[int, int]:
    """``(height, width)`` a JPEG's frame header declares (as a decoder that ignores the EXIF
    orientation, such as TensorFlow's, decodes it); a ValueError naming ``component`` for data
    that is no JPEG, and an ``ImageTooLargeError`` above the pixel limit."""
    view = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    if view[:3].tobytes() != b"\xff\xd8\xff":
        raise ValueError("{}: expected the bytes of a JPEG file, got {} bytes starting with {!r}".format(
            component, view.size, view[:8].tobytes()))
    check_image_bytes(component, view)
    size = declared_image_size(view)
    if size is None:
        raise ValueError("{}: the JPEG data of {} bytes ends before its frame header (SOF)".format(
            component, view.size))
    return size[1], size[0]


def plan_crop(augmentors: Sequence[Any], image: Any, component: str = "plan_crop") -> CropPlan:
    """The :class:`CropPlan` of ``augmentors`` (a list or an ``AugmentorList``) for the JPEG
    ``image`` (its bytes, or a 1-d uint8 array of them), from the size in its header.

    Every augmentor must choose from the size alone (crops, resizes, flips: ``reads_encoded``)
    and give crops, resizes and left-right flips; anything else is a ValueError naming it."""
    height, width = jpeg_size(image, component)
    top, left, rows, cols = 0.0, 0.0, float(height), float(width)    # the current image, in source pixels
    current = (height, width)
    flip = False
    for aug in _flat(augmentors):
        if not getattr(aug, "reads_encoded", False):
            raise ValueError("{}: {!r} does not choose from the image's size alone (it reads pixels); only crops, "
                             "resizes and flips can be planned for a decoder elsewhere: apply it after the decode"
                             .format(component, aug))
        placeholder: Any = ImagePlaceholder(shape=current + (3,))        # get_transform reads the shape only
        for tfm in _transforms(aug.get_transform(placeholder)):
            if isinstance(tfm, CropTransform):
                y0, x0 = tfm.y0, tfm.x0
                if flip:                            # a crop of the mirrored image, seen in the source
                    x0 = current[1] - x0 - tfm.w
                scale_y, scale_x = rows / current[0], cols / current[1]
                top, left = top + y0 * scale_y, left + x0 * scale_x
                rows, cols = tfm.h * scale_y, tfm.w * scale_x
                current = (tfm.h, tfm.w)
            elif isinstance(tfm, ResizeTransform):
                current = (tfm.new_h, tfm.new_w)
            elif isinstance(tfm, FlipTransform) and tfm.horiz:
                flip = not flip
            elif not isinstance(tfm, NoOpTransform):
                raise ValueError("{}: {!r} gave {!r}; only crops, resizes and left-right flips can be planned for a "
                                 "decoder elsewhere".format(component, aug, tfm))
    y, x = min(height - 1, max(0, int(round(top)))), min(width - 1, max(0, int(round(left))))
    h, w = max(1, min(height - y, int(round(rows)))), max(1, min(width - x, int(round(cols))))
    return CropPlan((y, x, h, w), current, flip)
