"""What the parallel flows with a variable worker count share (:class:`ResizableStage`): the
worker-count argument, the controller of :mod:`.autoscale`, ``set_num_workers`` and
``worker_count_history``.

Example::

    class MyFlow(ResizableStage, ProxyDataFlow):
        _worker_kind = "threads"
        ...                      # _active_workers, _grow_one, _shrink_one, _scaling_counters
"""
import collections
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, Union

from ...utils.logger import get_logger
from ..autoscale import HISTORY_LIMIT, Autoscale, Controller, WorkerCountChange, _Registry, stage_name, worker_count

__all__ = ["ResizableStage", "WorkerClocks"]

logger = get_logger(__name__)


class _Request:
    """A worker count asked for with ``set_num_workers`` on a pinned stage: applied once, at the
    next datapoint, in the consumer's thread."""
    due = 0.0

    def __init__(self, stage: Any):
        self.stage = stage

    def run(self) -> None:
        stage = self.stage
        stage._scaling = None
        requested, stage._requested = stage._requested, None
        if requested is not None:
            stage._resize_to(requested, "requested")


class WorkerClocks:
    """The seconds a changing set of workers spent on a CPU and waiting for one so far, from
    ``reader(worker id) -> (CPU seconds, run-queue seconds)``: each worker's last reading is
    kept after it ended, so the totals only grow.

    Example::

        clocks = WorkerClocks(process_schedstat)
        cpu, runqueue = clocks.total(pool.pids)
    """

    def __init__(self, reader: Callable[[int], Optional[Tuple[float, float]]]):
        self._reader = reader
        self._last: Dict[int, Tuple[float, float]] = {}

    def total(self, ids: List[int]) -> Tuple[Optional[float], Optional[float]]:
        for worker in ids:
            value = self._reader(worker)
            if value is not None:
                self._last[worker] = value
        if not self._last:
            return None, None
        return sum(v[0] for v in self._last.values()), sum(v[1] for v in self._last.values())


class ResizableStage:
    """What a parallel flow with a variable worker count shares: the setting (pinned or
    ``"auto"``), the controller, :meth:`set_num_workers` and :meth:`worker_count_history`.

    The flow provides ``_active_workers()``, ``_grow_one()``, ``_shrink_one()`` (each returns
    whether it changed anything), ``_scaling_counters()`` (cumulative busy seconds and items of
    all its workers), and may override ``_scaling_memory()``, ``_memory_measured()``, ``_limit_memory()``,
    ``_scaling_cpu()``, ``_workers_starting()`` and ``_worker_capacity()``. It adds the seconds its consumer waited
    for a result to ``_waited`` and calls ``_scaling.run()`` when ``time.monotonic() >=
    _scaling.due`` (``_scaling`` is None for a pinned stage).

    Example::

        class MyFlow(ResizableStage, ProxyDataFlow):
            _worker_kind = "threads"
    """

    _worker_kind = "processes"
    #: Whether the stage can run with 0 workers, its consumer's thread doing the work
    #: (``_enter_inline()``, ``_leave_inline(target)``, ``_parked_workers()``).
    _maps_inline = False
    _scaling: Optional[Union[Controller, _Request]] = None
    _controller: Optional[Controller] = None
    _autoscale: Optional[Autoscale] = None
    _requested: Optional[int] = None
    _waited = 0.0

    def _init_workers(self, component: str, name: str, value: Any) -> int:
        """Check the worker-count argument; returns the count to start with."""
        setting = worker_count(component, name, value)
        self._history: Deque[WorkerCountChange] = collections.deque(maxlen=HISTORY_LIMIT)
        self._waited = 0.0
        if isinstance(setting, int):
            self._autoscale = None
            return setting
        if setting.min_workers == 0 and not self._maps_inline:
            raise ValueError("{}: Autoscale(min_workers=0) lets a parallel map run with 0 workers, mapping in the "
                             "consumer's thread; {} has nothing to do there: min_workers must be >= 1".format(
                                 component, component))
        self._autoscale = setting
        return setting.start_count(self._worker_kind)

    @property
    def autoscaled(self) -> bool:
        """Whether the worker count is chosen while running (``"auto"``)."""
        return self._autoscale is not None

    def _start_workers(self, pinned: int) -> int:
        """The count to start with: ``pinned``, or for ``"auto"`` one under a memory budget, else
        ``min(2, budget)`` of what the other auto stages of the process left (asked just before
        the workers start)."""
        if self._autoscale is None:
            return pinned
        shared = self._autoscale.cpu_budget is None
        return self._autoscale.start_count(self._worker_kind, _Registry.claimed_cpus() if shared else 0.0)

    def _begin_scaling(self) -> None:
        """The workers have started: record the count and start the controller."""
        self._history.append(WorkerCountChange(time.time(), self._active_workers(),
                                               "start (auto)" if self._autoscale else "start (pinned)"))
        if self._autoscale is not None:
            self._scaling = self._controller = Controller(self, self._autoscale, self._worker_kind)
        if self._requested is not None:
            self.set_num_workers(self._requested)

    def _end_scaling(self) -> None:
        if isinstance(self._scaling, Controller):
            self._scaling.close()
        self._scaling = None

    def set_num_workers(self, num: int) -> None:
        """Ask for ``num`` workers: applied at the next datapoint, in the thread that iterates
        (workers beyond ``num`` stop once the work they hold is done, none of it lost). An
        ``"auto"`` stage keeps adjusting from there, within its ``min_workers``. The parallel
        maps also take 0: the thread that iterates maps, one datapoint at a time, and the workers
        wait, parked, until the count rises again (see :mod:`~inputpipe.dataflow.autoscale`).
        Safe to call from any thread.

        Example::

            df.set_num_workers(1)      # e.g. while the trainer evaluates
        """
        least = 0 if self._maps_inline else 1
        if not isinstance(num, int) or isinstance(num, bool) or num < least:
            raise ValueError("{}.set_num_workers: num must be an int >= {}, got {!r}".format(
                type(self).__name__, least, num))
        self._requested = num
        scaling = self._scaling
        if isinstance(scaling, Controller):
            scaling.request()
        elif scaling is None and getattr(self, "_history", None):
            self._scaling = _Request(self)

    def worker_count_history(self) -> List[WorkerCountChange]:
        """The worker count over time: one :class:`WorkerCountChange` at start and one per change
        (the last 1000), with the reason (the controller's measurements, ``"requested"``).

        Example::

            for when, count, reason in df.worker_count_history():
                print(time.ctime(when), count, reason)
        """
        return list(getattr(self, "_history", ()))

    def autoscale_cost(self) -> Dict[str, float]:
        """The controller's own cost, in CPU time of the consumer's thread: ``decisions`` made,
        ``cpu_seconds`` spent measuring and deciding, ``resize_seconds`` spent starting and
        retiring workers. Zeros for a pinned stage."""
        controller = self._controller
        if controller is not None:
            return {"decisions": float(controller.decisions), "cpu_seconds": controller.decision_seconds,
                    "resize_seconds": controller.resize_seconds}
        return {"decisions": 0.0, "cpu_seconds": 0.0, "resize_seconds": 0.0}

    def _resize_to(self, target: int, reason: str) -> int:
        """Add or retire workers until ``target`` are active (or the stage cannot); record it."""
        before = self._active_workers()
        if self._maps_inline and target == 0 and before > 0:
            self._enter_inline()
        elif self._maps_inline and target > 0 and before == 0:
            self._leave_inline(target)
        while self._active_workers() < target and self._grow_one():
            pass
        while self._active_workers() > max(1, target) and self._shrink_one():
            pass
        after = self._active_workers()
        if after != before:
            self._history.append(WorkerCountChange(time.time(), after, reason))
            logger.debug("%s: %d -> %d workers: %s", stage_name(self), before, after, reason)
        return after

    # -- what the flow provides -----------------------------------------------------------------
    def _active_workers(self) -> int:
        raise NotImplementedError

    def _grow_one(self) -> bool:
        raise NotImplementedError

    def _shrink_one(self) -> bool:
        raise NotImplementedError

    def _enter_inline(self) -> None:
        raise NotImplementedError

    def _leave_inline(self, target: int) -> None:
        raise NotImplementedError

    def _parked_workers(self) -> int:
        """Workers parked while the consumer's thread maps (0 workers)."""
        return 0

    def _scaling_send(self) -> Optional[float]:
        """Seconds the workers spent sending results so far, of their busy seconds (None: not known)."""
        return None

    def _scaling_counters(self) -> Tuple[float, int]:
        raise NotImplementedError

    def _scaling_memory(self) -> Tuple[int, int]:
        """``(bytes the stage's workers and buffers hold, bytes one more worker would add)``."""
        return 0, 0

    def _limit_memory(self, room: Optional[int]) -> None:
        """The controller's memory budget: the bytes the stage's workers and buffers may hold
        (None: no budget). A stage whose buffer grows between decisions keeps it within."""

    def _scaling_cpu(self) -> Tuple[Optional[float], Optional[float]]:
        """``(CPU seconds, run-queue seconds)`` of the workers so far: the time they ran on a CPU
        and the time they waited, runnable, for a CPU held by other work (taken out of their busy
        time when their CPU share is measured); None for what is unknown."""
        return None, None

    def _memory_measured(self) -> bool:
        """Whether :meth:`_scaling_memory` has measured a result (before that, what one more
        worker would take is unknown and the controller does not grow the stage)."""
        return True

    def _workers_starting(self) -> bool:
        """Whether a worker added last has not delivered yet (the controller waits for it)."""
        return False

    def _worker_capacity(self) -> Optional[int]:
        """The most workers the stage can run now (e.g. what a Ray cluster can place), or None."""
        return None
