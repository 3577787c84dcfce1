"""Optional dependencies imported when a part needs them, with a one-line error naming the part
and the install command when they are missing (``import inputpipe.dataflow`` imports none).

Example::

    from inputpipe.utils.optional import import_cv2
    cv2 = import_cv2("draw_boxes")      # ImportError: draw_boxes needs OpenCV, ...; install it with: ...
"""
from types import ModuleType

__all__ = ["import_cv2", "INSTALL_HINT"]

#: What to run to get OpenCV (the augmentors' and ``utils.viz``'s).
INSTALL_HINT = 'pip install "inputpipe[image]"'


def import_cv2(component: str) -> ModuleType:
    """The ``cv2`` module, or an ImportError naming ``component`` and how to install OpenCV.

    Not cached on purpose: ``import`` of a loaded module is a dictionary look-up, and tests can
    hide OpenCV by setting ``sys.modules["cv2"] = None``.

    Example::

        cv2 = import_cv2("Resize")
    """
    try:
        import cv2
    except ImportError as err:
        raise ImportError("{} needs OpenCV, which cannot be imported ({}); install it with: {}".format(
            component, err, INSTALL_HINT)) from None
    return cv2
