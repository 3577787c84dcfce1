"""The worker's side of its channel's shared-memory segment: where a datapoint's array frames go.

:mod:`inputpipe.utils.channel` describes the segment (its regions, their states, how it grows and
what happens when it is full); this module holds the worker's half of it: placing a datapoint's
frames in a free region (waiting while the consumer is about to free one), backing the segment
with memory as it is used, and arrays built in place for the next datapoint sent.

Example::

    segment = WorkerSegment(fd, capacity, check_parent=lambda: None)
    slot, why = segment.place(nbytes)      # (region id, offset), or (None, why it goes by pipe)
"""
import errno
import mmap
import os
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _shm_files as shm_files
from .compat import madvise
from .copying import ParallelCopier
from ._regions import SHM_MIN_BYTES, Regions, aligned as _aligned, table as _table, table_bytes as _table_bytes

_SHM_POLL_SECONDS = (0.0002, 0.002)   # a full segment is re-checked this often (backing off)
#: A segment full of datapoints the parent received is waited on this long for one to be freed.
_HELD_WAIT_SECONDS = 0.2
#: The segment's memory is reserved in steps of at least this (then a quarter of what it has: the
#: memory budget of "auto" stages counts what the segments hold).
_MIN_COMMIT_BYTES = 1 << 20
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)    # Linux >= 5.14
# why a large datapoint came through the pipe: the consumer holds the segment, the datapoint is
# larger than the segment, /dev/shm has no room to grow the segment
HELD, TOO_BIG, NO_SPACE = "held", "big", "space"


def uses_shared_memory(lengths: List[int]) -> bool:
    """Whether a datapoint with array frames of these sizes goes through shared memory."""
    return sum(_aligned(n) for n in lengths) >= SHM_MIN_BYTES


class WorkerSegment:
    """A worker's mapping of its shared-memory segment (the file descriptor ``fd`` of
    ``capacity`` data bytes); ``check_parent()`` raises when waiting for room is pointless (the
    parent closed the channel).

    Example::

        segment = WorkerSegment(fd, capacity, check_parent=end.check_open)
        batch = segment.empty((64, 224, 224, 3), np.uint8)   # None: use an ordinary array
    """

    def __init__(self, fd: int, capacity: int, check_parent: Callable[[], None]):
        self.fd = fd
        self.capacity = capacity
        self._check_parent = check_parent
        self.mm = mmap.mmap(fd, _table_bytes(capacity) + capacity, flags=mmap.MAP_SHARED)
        self.regions = Regions(_table(self.mm, capacity), capacity)
        self.committed = 0            # bytes at the start of the data area backed by memory
        self.held_gave_up = False     # a wait for a received region to be freed ended without one
        self.prepared: Dict[int, Tuple[int, int]] = {}    # offset in the mapping -> (region id, base)
        self._copier = ParallelCopier(name="inputpipe-worker-copy")

    def empty(self, shape: Sequence[int], dtype: np.dtype) -> Optional[np.ndarray]:
        """A new array in the segment, remembered as prepared (see
        :meth:`~inputpipe.utils.channel.WorkerEnd.shared_empty`); None when it is small or has no room."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not uses_shared_memory([nbytes]):
            return None
        slot, _ = self.place(_aligned(nbytes))
        if slot is None:
            return None
        rid, base = slot
        pos = _table_bytes(self.capacity) + base
        self.prepared[pos] = (rid, base)
        return np.frombuffer(self.mm, dtype, nbytes // max(1, dtype.itemsize), pos).reshape(shape)

    def write(self, payload: List[memoryview], slot: Tuple[int, int]) -> None:
        """Copy the frames ``payload`` into the region ``slot``, one after the other (aligned)."""
        pos = _table_bytes(self.capacity) + slot[1]
        for part in payload:
            self._copier.copy(np.frombuffer(self.mm, np.uint8, part.nbytes, pos), np.frombuffer(part, np.uint8))
            pos += _aligned(part.nbytes)

    def _allocate_waiting(self, size: int) -> Optional[Tuple[int, int]]:
        """A region of ``size`` bytes as ``(region id, offset)``, or None: use the pipe.

        When the segment is full, wait (polling, backing off) as long as part of it is still on
        its way to the parent; the consumer then takes it and frees what it no longer holds.
        When the parent has received everything, wait up to :data:`_HELD_WAIT_SECONDS` for a
        region to be freed (what the parent received may still be queued on its way to the
        consumer); after such a wait that ended without one, return None at once until a region
        is free again (the consumer keeps what it got)."""
        regions = self.regions
        regions.wait_for_warm_region(size)
        slot = regions.allocate(size)
        pause = _SHM_POLL_SECONDS[0]
        while slot is None and size <= regions.capacity and regions.awaiting_receipt():
            slot = self._poll(regions, size, pause)
            pause = min(2 * pause, _SHM_POLL_SECONDS[1])
        if slot is None and size <= regions.capacity and not self.held_gave_up:
            deadline = time.monotonic() + _HELD_WAIT_SECONDS
            while slot is None and time.monotonic() < deadline:
                slot = self._poll(regions, size, pause)
                pause = min(2 * pause, _SHM_POLL_SECONDS[1])
            self.held_gave_up = slot is None
        elif slot is not None:
            self.held_gave_up = False
        return slot

    def _poll(self, regions: Regions, size: int, pause: float) -> Optional[Tuple[int, int]]:
        self._check_parent()
        time.sleep(pause)
        return regions.allocate(size)

    def _commit(self, end: int) -> bool:
        """Back the data area up to ``end`` with memory (reserved and pre-faulted), growing by a
        quarter at least. False when the file system has no room: the segment then stays at what
        it has, and what does not fit goes through the pipe."""
        if end <= self.committed:
            return True
        table = _table_bytes(self.capacity)
        step = max(end, self.committed + self.committed // 4, _MIN_COMMIT_BYTES)
        wanted = min(self.capacity, shm_files.page_rounded(step))
        for target in sorted({wanted, min(self.capacity, shm_files.page_rounded(end))}, reverse=True):
            try:
                os.posix_fallocate(self.fd, table + self.committed, target - self.committed)
            except OSError as err:
                if err.errno not in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                    raise
                continue
            self._prefault(table + self.committed, target - self.committed)
            self.committed = target
            return True
        self.regions.limit(self.committed)
        return False

    def shared_bytes(self) -> int:
        """Bytes of memory the segment holds: its region table and the data area backed so far
        (it never gives memory back while the worker lives)."""
        return _table_bytes(self.capacity) + self.committed

    def _prefault(self, offset: int, length: int) -> None:
        """Map the pages of a newly reserved range now, so copies into it never stop on a page
        fault (``MADV_POPULATE_WRITE``, else writing one byte per page; nothing lives there yet)."""
        try:
            if madvise(self.mm, _MADV_POPULATE_WRITE, offset, length):
                return
        except (OSError, ValueError):
            pass
        np.frombuffer(self.mm, np.uint8, length, offset)[::mmap.PAGESIZE] = 0

    def place(self, total: int) -> Tuple[Optional[Tuple[int, int]], Optional[str]]:
        """``(slot, None)`` for a datapoint of ``total`` array bytes in shared memory, or
        ``(None, why)`` when it goes through the pipe."""
        regions = self.regions
        if total > self.capacity:
            return None, TOO_BIG
        if total > regions.capacity:
            return None, NO_SPACE
        slot = self._allocate_waiting(total)
        if slot is None:
            return None, (NO_SPACE if total > regions.capacity else HELD)
        if not self._commit(slot[1] + total):
            regions.cancel(slot[0])
            return None, NO_SPACE
        return slot, None

    def prepared_slot(self, payload: List[memoryview]) -> Optional[Tuple[int, int]]:
        """The region of an array from :meth:`empty` that is this datapoint's one frame."""
        if len(payload) != 1 or not self.prepared:
            return None
        start = np.frombuffer(payload[0], np.uint8).ctypes.data - np.frombuffer(self.mm, np.uint8, 1).ctypes.data
        return self.prepared.pop(start, None)

    def release_prepared(self) -> None:
        """Give back the regions of arrays from :meth:`empty` that were not sent."""
        if self.prepared:
            for rid, _ in self.prepared.values():
                self.regions.cancel(rid)
            self.prepared.clear()
