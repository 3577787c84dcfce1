"""Arrays TensorFlow can share instead of copying: 64-byte aligned memory.

TF's feed path (``session.run(..., feed_dict=...)``) shares the memory of a fed numpy array
whose data is 64-byte aligned and C-contiguous: the tensor in the queue *is* that memory, and
TF keeps a reference to the array until the last tensor using it is gone. Any other array is
copied into a new tensor. numpy aligns large arrays to 16 bytes only, so a batch made by plain
numpy code costs one copy when it is fed; a batch decoded by :mod:`inputpipe.utils.serialize`
from a buffer at an aligned address, stacked by ``BatchData`` (which puts every batch component of
64 KiB or more into aligned memory), or built with :func:`aligned_empty`, costs none.

Because the memory is shared, a DataFlow must not modify an array in place after yielding it
(e.g. refill one preallocated batch buffer): if the array is aligned, the batch waiting in the
queue would change. Yield a new array per batch instead.

The library uses :func:`aligned_empty` where it has to make a new large array anyway (a lossless
dtype conversion, e.g. float64 to float32), so that such a batch is copied once, not twice.

For the large batches that are not aligned, ``QueueInput`` has TF make the one copy that
cannot be avoided in parallel and without the GIL (:mod:`inputpipe.input_source.realign`).

Example::

    batch = aligned_empty((128, 224, 224, 3), np.uint8)
    batch[...] = images            # fed to a QueueInput without another copy
    assert is_aligned(batch)
"""
from typing import Sequence

import numpy as np


__all__ = ["ALIGNMENT", "ALIGN_MIN_BYTES", "is_aligned", "aligned_empty"]

#: The alignment (bytes) TF's feed path needs to share an array's memory (EIGEN_MAX_ALIGN_BYTES).
ALIGNMENT = 64
#: Below this size the library does not bother aligning new arrays: TF's copy of them is cheap.
ALIGN_MIN_BYTES = 64 << 10


def is_aligned(arr: np.ndarray) -> bool:
    """True if ``arr``'s data starts at a multiple of :data:`ALIGNMENT` bytes."""
    return arr.ctypes.data % ALIGNMENT == 0


def aligned_empty(shape: Sequence[int], dtype: "np.dtype | type") -> np.ndarray:
    """A new, uninitialised C-contiguous array whose data is 64-byte aligned.

    Example::

        x = aligned_empty((1024, 1024), np.float32)
        assert x.ctypes.data % 64 == 0
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)
