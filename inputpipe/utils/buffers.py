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

For the batches that are not aligned, :class:`AlignedStaging` makes the one copy that cannot be
avoided fast: it copies each large array into an aligned buffer that is already mapped and,
when the consumer keeps up, still in the CPU's caches, with two threads
(:class:`~inputpipe.utils.copying.ParallelCopier`), and reuses a buffer as soon as nothing
refers to it any more (TF drops its reference when the last tensor sharing the memory is gone).

Example::

    batch = aligned_empty((128, 224, 224, 3), np.uint8)
    batch[...] = images            # fed to a QueueInput without another copy
    assert is_aligned(batch)
"""
import sys
from typing import List, Optional, Sequence

import numpy as np

from .copying import ParallelCopier

__all__ = ["ALIGNMENT", "ALIGN_MIN_BYTES", "STAGE_MIN_BYTES", "is_aligned", "aligned_empty", "AlignedStaging"]

#: The alignment (bytes) TF's feed path needs to share an array's memory (EIGEN_MAX_ALIGN_BYTES).
ALIGNMENT = 64
#: Below this size the library does not bother aligning new arrays: TF's copy of them is cheap.
ALIGN_MIN_BYTES = 64 << 10
#: :class:`AlignedStaging` copies unaligned arrays of at least this size; TF copies smaller ones.
STAGE_MIN_BYTES = 1 << 20


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


class _StagingBuffer:
    """One aligned buffer: ``owner`` owns the memory; arrays handed out are views of it."""

    __slots__ = ("owner", "offset", "nbytes", "idle_refs")

    def __init__(self, nbytes: int):
        self.owner = np.empty(nbytes + ALIGNMENT, np.uint8)
        self.owner.fill(0)                               # map every page now, not during a copy
        self.offset = (-self.owner.ctypes.data) % ALIGNMENT
        self.nbytes = nbytes
        self.idle_refs = self.refs()

    def refs(self) -> int:
        return sys.getrefcount(self.owner)

    def idle(self) -> bool:
        """True when no view of the memory exists any more (every view refers to ``owner``)."""
        return self.refs() <= self.idle_refs

    def view(self, shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
        return self.owner[self.offset:self.offset + self.nbytes].view(dtype).reshape(shape)


class AlignedStaging:
    """Aligned copies of large unaligned arrays, in buffers reused once nothing refers to them.

    :meth:`aligned` returns an array as it is when it is aligned, small (below ``min_bytes``) or
    not C-contiguous, and otherwise a 64-byte aligned copy of it that TF shares when it is fed.
    A buffer is reused only when no array viewing it exists any more (CPython reference counts),
    so data still referenced by a queued tensor is never overwritten. At most ``max_idle`` idle
    buffers are kept; more are released. Call :meth:`close` to stop the copier's helper threads.
    One thread at a time may use it.

    Example::

        staging = AlignedStaging()
        feed = {placeholder: staging.aligned(batch)}     # TF shares the aligned copy
        session.run(enqueue_op, feed_dict=feed)
        staging.close()
    """

    def __init__(self, copier: Optional[ParallelCopier] = None, min_bytes: int = STAGE_MIN_BYTES,
                 max_idle: int = 2):
        self.copier = copier if copier is not None else ParallelCopier(name="inputpipe-staging-copy")
        self.min_bytes = int(min_bytes)
        self.max_idle = int(max_idle)
        self._buffers: List[_StagingBuffer] = []
        self.copies = 0

    def _buffer(self, nbytes: int) -> _StagingBuffer:
        """An idle buffer of ``nbytes``, the most recently used one (its memory is the most
        likely to be cached), or a new one. Keeps ``self._buffers`` ordered by last use."""
        idle = [b for b in reversed(self._buffers) if b.idle()]       # most recently used first
        for extra in idle[self.max_idle:]:
            self._buffers.remove(extra)
        fitting = [b for b in idle[:self.max_idle] if b.nbytes == nbytes]
        if fitting:
            buffer = fitting[0]
            self._buffers.remove(buffer)
        else:
            buffer = _StagingBuffer(nbytes)
        self._buffers.append(buffer)
        return buffer

    def aligned(self, arr: np.ndarray) -> np.ndarray:
        """``arr`` if TF can share it already (or copying it is not worth it), else an aligned copy."""
        if arr.nbytes < self.min_bytes or is_aligned(arr) or not arr.flags.c_contiguous:
            return arr
        out = self._buffer(arr.nbytes).view(arr.shape, arr.dtype)
        self.copier.copy(out, arr)
        self.copies += 1
        return out

    def close(self) -> None:
        """Stop the copier's helper threads; arrays handed out stay valid."""
        self.copier.close()
        self._buffers = []
