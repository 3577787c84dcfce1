"""The buffer of a parallel map: how many tasks it keeps in flight (``buffer_size="auto"``), and
the memory the results in flight and the workers take (for the memory budget of ``"auto"``).

Example::

    class MyMap(MapBuffer, ...):
        def __init__(self, ds, num_workers, buffer_size):
            ...
            self._init_buffer("MyMap", buffer_size)     # after self.num_workers is set
"""
import math
from typing import Any, Optional, Tuple

from ..autoscale import AUTO, buffer_setting

#: ``buffer_size="auto"``: seconds of a worker's measured work held in flight for it, the most
#: tasks in flight per worker, and how often (s) the time per task is measured again.
AUTO_BUFFER_SECONDS = 0.05
AUTO_BUFFER_MAX_PER_WORKER = 32
AUTO_BUFFER_REFIT = 0.5
#: The memory a worker's shared-memory segment takes per byte of its results in flight, at most
#: (it grows by a quarter at a time: :mod:`inputpipe.utils.channel`).
SEGMENT_GROWTH = 1.25


class MapBuffer:
    """Sizes a parallel map's buffer (``buffer_size``, a number or ``"auto"``) and accounts for its
    memory. The map provides ``num_workers``, ``ordered``, ``_scaling_counters()``,
    ``_workers_memory(precise)`` and ``_shared_memory()`` (the last two: 0 for workers in this
    process), and sets ``_result_bytes`` from the next result it places once ``_sample_result`` is
    set (at the start, then after every memory reading).

    Example::

        df._buffer_for(2)        # tasks in flight for 2 workers with buffer_size="auto"
    """

    num_workers: int
    ordered: bool
    buffer_size: Any

    def _init_buffer(self, name: str, buffer_size: Any) -> None:
        self._auto_buffer = buffer_setting(name, buffer_size) == AUTO
        self._measured_task_seconds: Optional[float] = None    # buffer_size="auto": a worker's time per task
        self._buffer_counters = (0.0, 0)          # ... its (busy seconds, items) at the last fit
        self._buffer_refit_at = 0.0
        self._result_bytes: Optional[int] = None    # of a result sampled for the memory budget
        self._memory_room: Optional[int] = None     # bytes the stage may hold (the memory budget)
        self._workers_bytes = 0                     # the workers' own memory at the last reading
        self._sample_result = True                  # (the first result, then one per decision)
        self.buffer_size = self._buffer_for(self.num_workers) if self._auto_buffer else buffer_size

    def _buffer_for(self, workers: int) -> int:
        """``buffer_size="auto"``: tasks in flight for ``workers`` workers: per worker, enough
        to hold :data:`AUTO_BUFFER_SECONDS` of its measured work (a worker whose tasks are short
        would otherwise wait for the consumer's thread between them), at least 4 when ordered
        (a slow task holds back the ones after it) and 2 otherwise, at most
        :data:`AUTO_BUFFER_MAX_PER_WORKER`; under a memory budget, no more results than fit
        beside the workers' own memory (one per worker at least)."""
        per_worker = 4 if self.ordered else 2
        task_seconds = self._measured_task_seconds
        if task_seconds is not None and task_seconds > 0:
            per_worker = max(per_worker, min(AUTO_BUFFER_MAX_PER_WORKER,
                                             int(math.ceil(AUTO_BUFFER_SECONDS / task_seconds))))
        tasks = per_worker * workers
        if self._memory_room is not None and self._result_bytes:
            fits = (self._memory_room - self._workers_bytes) / (SEGMENT_GROWTH * self._result_bytes)
            tasks = max(workers, min(tasks, int(fits)))
        return tasks

    def _limit_memory(self, room: Optional[int]) -> None:
        self._memory_room = room
        if self._auto_buffer:
            self.buffer_size = self._buffer_for(self.num_workers)

    def _fit_auto_buffer(self, now: float) -> None:
        """``buffer_size="auto"``: measure the workers' time per task since the last fit (every
        :data:`AUTO_BUFFER_REFIT` s, while the consumer waits) and size the buffer."""
        self._buffer_refit_at = now + AUTO_BUFFER_REFIT
        busy, items = self._scaling_counters()
        last_busy, last_items = self._buffer_counters
        self._buffer_counters = (busy, items)
        if items - last_items >= 2 * max(1, self.num_workers):
            self._measured_task_seconds = max(0.0, busy - last_busy) / (items - last_items)
            self.buffer_size = self._buffer_for(self.num_workers)

    def _workers_memory(self, precise: bool) -> Tuple[int, int]:
        """``(bytes the workers hold, bytes one more would)``, without their shared memory; 0
        for workers in this process."""
        return 0, 0

    def _shared_memory(self) -> int:
        """Bytes the workers' shared-memory segments hold (results in flight live there)."""
        return 0

    def _memory_measured(self) -> bool:
        return self._result_bytes is not None

    def _scaling_memory(self, precise: bool = False) -> Tuple[int, int]:
        self._sample_result = True                 # the next result's size, for the next decision
        workers, per_worker = self._workers_memory(precise)
        self._workers_bytes = workers
        task_bytes = self._result_bytes or 0
        # a worker's segment grows to hold its results in flight (by a quarter at a time)
        per_worker += int(SEGMENT_GROWTH * self._buffer_for(1) * task_bytes) if self._auto_buffer else 0
        return workers + max(self._shared_memory(), self.buffer_size * task_bytes), per_worker

    def _scaling_counters(self) -> Tuple[float, int]:
        raise NotImplementedError
