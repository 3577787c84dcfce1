"""Where large datapoints go in a worker's shared-memory segment (see :mod:`inputpipe.utils.channel`).

The segment starts with a table of one state byte per region it can hold, followed by the data.
The worker places each region first-fit into the gaps between live ones, preferring memory the
consumer released most recently (still in the CPU's caches); the parent moves a region's state
from *sent* to *received* when it reads the message and to *free* when the last array using it
is garbage-collected.

Example::

    states = table(bytearray(table_bytes(1 << 20)), 1 << 20)
    regions = Regions(states, 1 << 20)
    rid, offset = regions.allocate(128 << 10)
"""
import bisect
import mmap
import time
from typing import Dict, List, Optional, Tuple

import numpy as np

__all__ = ["Regions", "SHM_MIN_BYTES", "FREE", "SENT", "RECEIVED", "aligned", "table", "table_bytes"]

#: Datapoints whose array frames total less than this go through the pipe (so every region is
#: at least this large).
SHM_MIN_BYTES = 64 << 10
# waiting for a warm region: seconds per byte of the new region, the most, and how many
# allocations skip waiting after a wait in which the consumer kept the region
WARM_WAIT_PER_BYTE = 25e-12
WARM_WAIT_MAX_SECONDS = 0.001
WARM_WAIT_BACKOFF = 8
RECENTLY_RELEASED = 8                 # offsets of released regions remembered for warm placement
ALIGN = 64
# the state of each region, in the segment's table
FREE, SENT, RECEIVED = 0, 1, 2


def aligned(n: int) -> int:
    """``n`` rounded up to the alignment of every array frame in the segment."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


def table_bytes(capacity: int) -> int:
    """Bytes of the region table in front of the data: one state byte per region the segment
    can hold (every region is at least ``SHM_MIN_BYTES``), rounded up to whole pages."""
    slots = capacity // SHM_MIN_BYTES + 1
    return (slots + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


def table(buffer, capacity: int) -> np.ndarray:
    """The state bytes at the start of ``buffer`` (a mapping of the segment)."""
    return np.frombuffer(buffer, np.uint8, count=capacity // SHM_MIN_BYTES + 1)


class Regions:
    """The worker's view of its segment: which regions are live, where, and where a new one fits.

    The parent only ever changes a region's state from *sent* to *received* to *free*; the worker
    reclaims free regions lazily, when it next allocates. A new region goes to the offset of the
    most recently released region whose gap still fits it (warm memory), else to the lowest gap
    that fits.

    Example::

        regions = Regions(table, capacity)
        rid, offset = regions.allocate(4 << 20) or (None, None)
    """

    def __init__(self, states: np.ndarray, capacity: int):
        self._states = states
        self._capacity = capacity
        self._live = np.zeros(len(states), bool)
        self._spare_ids = list(range(len(states) - 1, -1, -1))
        self._starts: List[int] = []            # offsets of the live regions, sorted
        self._ends: List[int] = []              # their ends, in the same order
        self._start_of: Dict[int, int] = {}     # region id -> offset
        self._serial_of: Dict[int, int] = {}    # region id -> allocation number
        self._allocations = 0
        self._last_two: List[Tuple[int, int]] = []    # (region id, allocation number), newest last
        self._released: List[int] = []          # offsets of reclaimed regions, newest last
        self._warm_wait_skips = 0

    @property
    def capacity(self) -> int:
        """Bytes new regions may use (less than the segment after :meth:`limit`)."""
        return self._capacity

    def limit(self, capacity: int) -> None:
        """Place no region beyond ``capacity`` bytes from now on (the memory there cannot be had);
        every live region lies below it."""
        self._capacity = min(self._capacity, capacity)

    def cancel(self, rid: int) -> None:
        """Give back a region that was allocated but never sent."""
        self._states[rid] = FREE

    def _reclaim(self) -> None:
        freed = np.flatnonzero(self._live & (self._states == FREE)).tolist()
        for rid in sorted(freed, key=self._serial_of.__getitem__):     # oldest first
            start = self._start_of.pop(rid)
            index = bisect.bisect_left(self._starts, start)
            del self._starts[index], self._ends[index], self._serial_of[rid]
            self._live[rid] = False
            self._spare_ids.append(rid)
            if start in self._released:
                self._released.remove(start)
            self._released.append(start)
        del self._released[:-RECENTLY_RELEASED]

    def _warm_position(self, size: int) -> Optional[Tuple[int, int]]:
        """``(offset, index in the sorted starts)`` at the most recently released offset whose
        gap has room for ``size`` bytes, or None."""
        for start in reversed(self._released):
            index = bisect.bisect_right(self._starts, start)
            gap_start = self._ends[index - 1] if index else 0
            gap_end = self._starts[index] if index < len(self._starts) else self._capacity
            if gap_start <= start and start + size <= gap_end:
                return start, index
        return None

    def _first_fit(self, size: int) -> Optional[Tuple[int, int]]:
        """``(offset, index in the sorted starts)`` of the lowest gap with room for ``size``."""
        pos = 0
        for i, start in enumerate(self._starts):
            if start - pos >= size:
                return pos, i
            pos = self._ends[i]
        return (pos, len(self._starts)) if pos + size <= self._capacity else None

    def allocate(self, size: int) -> Optional[Tuple[int, int]]:
        """``(region id, offset)`` of ``size`` free bytes, marked *sent*; None if none fit."""
        self._reclaim()
        if not self._spare_ids or size > self._capacity:
            return None
        place = self._warm_position(size) or self._first_fit(size)
        if place is None:
            return None
        pos, index = place
        if pos in self._released:
            self._released.remove(pos)
        rid = self._spare_ids.pop()
        self._starts.insert(index, pos)
        self._ends.insert(index, pos + size)
        self._start_of[rid] = pos
        self._allocations += 1
        self._serial_of[rid] = self._allocations
        self._last_two = (self._last_two + [(rid, self._allocations)])[-2:]
        self._live[rid] = True
        self._states[rid] = SENT
        return rid, pos

    def held_before_last(self) -> Optional[int]:
        """The id of the region allocated before the newest one, if the consumer holds it
        (*received*), else None."""
        if len(self._last_two) < 2:
            return None
        rid, serial = self._last_two[0]
        if self._serial_of.get(rid) != serial or self._states[rid] != RECEIVED:
            return None
        return rid

    def wait_for_warm_region(self, size: int) -> bool:
        """Before allocating ``size`` bytes: give the consumer a moment to release the region
        allocated before the newest one (see the module docstring). Returns whether it did."""
        if self._warm_wait_skips:
            self._warm_wait_skips -= 1
            return False
        rid = self.held_before_last()
        if rid is None:
            return False
        deadline = time.perf_counter() + min(WARM_WAIT_MAX_SECONDS, size * WARM_WAIT_PER_BYTE)
        while self._states[rid] != FREE:
            if time.perf_counter() >= deadline:
                self._warm_wait_skips = WARM_WAIT_BACKOFF
                return False
            time.sleep(0)
        return True

    def awaiting_receipt(self) -> bool:
        """Whether some region was sent and the parent has not read its message yet."""
        return bool(np.any(self._states[self._live] == SENT))
