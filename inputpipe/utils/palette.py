"""tensorpack's ``utils.palette`` at the same path: :data:`PALETTE_RGB`, 128 colours far apart
from each other, to tell classes apart when drawing boxes or masks (``PALETTE_RGB[class_id]``).

The colours are chosen here, not tensorpack's list (the same shape and dtype, other colours):
black first, for the background, then each time the colour of a 16-level RGB grid farthest from
those chosen (no two are closer than 51 in RGB distance, of 0-255 channels).

Example::

    from inputpipe.utils.palette import PALETTE_RGB
    color = tuple(int(c) for c in PALETTE_RGB[label][::-1])     # BGR, for OpenCV
"""
import numpy as np

__all__ = ["PALETTE_RGB"]

_COLOURS = 128
_LEVELS = np.linspace(0, 255, 16).round().astype(np.int32)


def _palette() -> np.ndarray:
    grid = np.stack(np.meshgrid(_LEVELS, _LEVELS, _LEVELS, indexing="ij"), -1).reshape(-1, 3)
    chosen = [0]                                         # black: (0, 0, 0) is the grid's first colour
    nearest = ((grid - grid[0]) ** 2).sum(1)             # squared distance to the closest chosen colour
    for _ in range(_COLOURS - 1):
        best = int(np.argmax(nearest))                   # (the first of equals: the same on every machine)
        chosen.append(best)
        nearest = np.minimum(nearest, ((grid - grid[best]) ** 2).sum(1))
    return grid[chosen].astype(np.int32)


#: ``(128, 3)`` int32 RGB colours in [0, 255]; the first is black.
PALETTE_RGB = _palette()
