"""Image augmentation with tensorpack's augmentors and transforms (OpenCV-based, the ``image`` extra).

Importing this package needs neither OpenCV nor TensorFlow; an augmentor that needs OpenCV says
how to install it (``pip install "inputpipe[image]"``) when it is built without it.

Example::

    from inputpipe.dataflow import imgaug
    augs = imgaug.AugmentorList([imgaug.ResizeShortestEdge(256), imgaug.CenterCrop(224), imgaug.Flip(horiz=True)])
    out = augs.augment(img)
"""
from .base import *  # noqa: F401,F403
from .transform import *  # noqa: F401,F403
from .meta import *  # noqa: F401,F403
from .misc import *  # noqa: F401,F403
from .crop import *  # noqa: F401,F403
from .paste import *  # noqa: F401,F403
from .geometry import *  # noqa: F401,F403
from .deform import *  # noqa: F401,F403
from .imgproc import *  # noqa: F401,F403
from .noise import *  # noqa: F401,F403
from .convert import *  # noqa: F401,F403
from .external import *  # noqa: F401,F403
from .encoded import EncodedImage, get_dct_method, set_dct_method  # noqa: F401
from .crop_plan import CropPlan, plan_crop  # noqa: F401
from ..image_damage import DamagedImageError, get_decoding, set_decoding  # noqa: F401
from . import base, convert, crop, deform, external, geometry, imgproc, meta, misc, noise, paste, transform

__all__ = [name for module in (base, transform, meta, misc, crop, paste, geometry, deform, imgproc, noise, convert,
                               external) for name in module.__all__] + ["EncodedImage", "CropPlan", "plan_crop",
                                                                    "set_dct_method", "get_dct_method", "set_decoding",
                                                                    "get_decoding", "DamagedImageError"]
