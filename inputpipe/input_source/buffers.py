"""Feed buffers TensorFlow can share instead of copying: 64-byte aligned, reused once released.

TF's feed path (``session.run(..., feed_dict=...)``) shares the memory of a fed numpy array
whose data is 64-byte aligned, and copies any other array into a freshly allocated tensor.
numpy's large arrays are only 16-byte aligned, so every large batch would cost TF an allocation
(page faults on fresh memory) plus a copy, in the feeding thread. :class:`AlignedFeedBuffers`
copies each large component once into a 64-byte aligned buffer that it keeps and reuses, which
TF then shares. Copying is what makes it safe: the DataFlow may reuse or modify its arrays after
yielding them, the queued batch is the library's own copy.

A buffer is reused only when nothing refers to it any more. TF keeps a reference to the fed
array for as long as any tensor made from it lives (in a queue, a staging area, a fetched
result), and every view of a buffer refers to it, so the buffer's reference count says exactly
whether a batch in it may still be read. When every buffer is in use and the pool is full, the
array is fed as it is (TF copies it): slower, never wrong, never waiting.

Arrays that are already 64-byte aligned and read-only (e.g. decoded by
:mod:`inputpipe.utils.serialize` from a buffer at an aligned address) are passed through
without any copy; nothing in the library writes to them, and the DataFlow must not change their
memory through another, writable view after yielding them.

Example::

    buffers = AlignedFeedBuffers(max_buffers=58)
    feed = {ph: buffers.prepare(arr) for ph, arr in zip(placeholders, arrays)}
    session.run(enqueue_op, feed_dict=feed)
"""
import collections
import sys
from typing import Deque, Optional

import numpy as np

__all__ = ["AlignedFeedBuffers", "ALIGNMENT", "MIN_POOLED_BYTES", "is_aligned"]

#: The alignment (bytes) TF's feed path needs to share an array's memory (EIGEN_MAX_ALIGN_BYTES).
ALIGNMENT = 64
#: Smaller arrays are fed as they are: TF's copy of them is cheap (warm malloc memory).
MIN_POOLED_BYTES = 1 << 20


def is_aligned(arr: np.ndarray) -> bool:
    """True if ``arr``'s data starts at a multiple of :data:`ALIGNMENT` bytes."""
    return arr.ctypes.data % ALIGNMENT == 0


def _refcount(pool: Deque[np.ndarray], index: int) -> int:
    return sys.getrefcount(pool[index])


# What _refcount() reports for a buffer that only the pool refers to (measured, not assumed).
_UNUSED_REFS = _refcount(collections.deque([np.empty(1, np.uint8)]), 0)


class AlignedFeedBuffers:
    """A bounded pool of 64-byte aligned buffers for the arrays one feeding thread feeds.

    ``prepare(arr)`` returns what to feed for ``arr``: an aligned copy in a free buffer, ``arr``
    itself when it is small, non-numeric, or aligned and read-only, or (pool exhausted) ``arr``
    for TF to copy. At most ``max_buffers`` buffers are kept. Counters: ``copies``,
    ``shared`` (passed through without a copy) and ``fallbacks`` (pool exhausted).
    Not thread-safe: one pool per feeding thread.

    Example::

        buffers = AlignedFeedBuffers(max_buffers=16)
        fed = buffers.prepare(np.zeros((128, 224, 224, 3), np.uint8))
        assert fed.ctypes.data % 64 == 0
    """

    def __init__(self, max_buffers: int, min_bytes: int = MIN_POOLED_BYTES):
        if max_buffers < 1:
            raise ValueError("AlignedFeedBuffers: max_buffers must be >= 1, got {}".format(max_buffers))
        self.max_buffers = int(max_buffers)
        self.min_bytes = int(min_bytes)
        # least recently handed out first: in FIFO training that is the one released first
        self._pool: Deque[np.ndarray] = collections.deque()
        self.copies = 0
        self.shared = 0
        self.fallbacks = 0

    @property
    def buffers(self) -> int:
        """How many buffers the pool holds."""
        return len(self._pool)

    def in_use(self) -> int:
        """How many buffers something (a queued tensor, a fetched result) still refers to."""
        return sum(_refcount(self._pool, i) > _UNUSED_REFS for i in range(len(self._pool)))

    def prepare(self, arr: np.ndarray) -> np.ndarray:
        """The array to feed in place of ``arr`` (same dtype, shape and values)."""
        if arr.nbytes < self.min_bytes or arr.dtype.kind not in "biufc":
            return arr
        if not arr.flags.writeable and arr.flags.c_contiguous and is_aligned(arr):
            self.shared += 1
            return arr
        buffer = self._acquire(arr.nbytes)
        if buffer is None:
            self.fallbacks += 1
            return arr
        start = (-buffer.ctypes.data) % ALIGNMENT
        out = buffer[start:start + arr.nbytes].view(arr.dtype).reshape(arr.shape)
        np.copyto(out, arr, casting="no")
        self.copies += 1
        return out

    def _acquire(self, nbytes: int) -> Optional[np.ndarray]:
        """A free buffer of at least ``nbytes`` usable bytes, moved to the back of the pool."""
        pool = self._pool
        too_small = None
        for i in range(len(pool)):
            if _refcount(pool, 0) == _UNUSED_REFS:
                if pool[0].nbytes - ALIGNMENT >= nbytes:
                    buffer = pool.popleft()
                    pool.rotate(i)            # the others back in their order
                    pool.append(buffer)
                    return buffer
                too_small = i if too_small is None else too_small
            pool.rotate(-1)
        if len(pool) >= self.max_buffers:
            if too_small is None:
                return None
            del pool[too_small]               # free, but too small for this array: replace it
        buffer = np.empty(nbytes + ALIGNMENT, np.uint8)
        pool.append(buffer)
        return buffer
