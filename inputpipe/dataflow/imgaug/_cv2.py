"""The one place the image augmentors import OpenCV, lazily (OpenCV is the ``image`` extra).

``import inputpipe.dataflow.imgaug`` never imports ``cv2``; an augmentor or transform that needs it
calls :func:`import_cv2` when it is built or used, and gets a one-line ImportError saying how to
install it when it is missing. The flag constants below equal OpenCV's, so they can serve as
default arguments without importing OpenCV.

Example::

    from inputpipe.dataflow.imgaug._cv2 import import_cv2, INTER_LINEAR
    cv2 = import_cv2("Resize")
    assert cv2.INTER_LINEAR == INTER_LINEAR
"""
from types import ModuleType

__all__ = []

#: What to run to get OpenCV for the augmentors.
INSTALL_HINT = 'pip install "inputpipe[image]"'

# OpenCV's interpolation flags (cv2.INTER_*) and border modes (cv2.BORDER_*), fixed by its ABI.
INTER_NEAREST = 0
INTER_LINEAR = 1
INTER_CUBIC = 2
INTER_AREA = 3
INTER_LANCZOS4 = 4
BORDER_CONSTANT = 0
BORDER_REPLICATE = 1
BORDER_REFLECT = 2
BORDER_WRAP = 3
BORDER_REFLECT_101 = 4


def import_cv2(component: str) -> ModuleType:
    """The ``cv2`` module, or an ImportError naming ``component`` and how to install OpenCV.

    Not cached on purpose: ``import`` of a loaded module is a dictionary look-up, and tests can
    hide OpenCV by setting ``sys.modules["cv2"] = None``.
    """
    try:
        import cv2
    except ImportError as err:
        raise ImportError("{} needs OpenCV, which cannot be imported ({}); install it with: {}".format(
            component, err, INSTALL_HINT)) from None
    return cv2
