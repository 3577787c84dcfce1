"""The settings of an ``"auto"`` stage and what its controller reports (private; their public
home is :mod:`inputpipe.dataflow.autoscale`): :class:`Autoscale`, the checks of a worker count or
buffer size argument, a stage's history entries (:class:`WorkerCountChange`), the measurements of
an interval (:class:`Measurement`), and the names and the search of auto stages in a chain.

Example::

    from inputpipe.dataflow.autoscale import Autoscale, worker_count
    worker_count("MultiProcessMapData", "num_proc", "auto")      # Autoscale()
"""
import math
from time import monotonic as _monotonic
from typing import Any, Callable, List, NamedTuple, Optional, Tuple, Union

from ...utils import resources

__all__ = ["AUTO", "Autoscale", "Measurement", "WorkerCountChange", "auto_stages", "buffer_setting", "stage_name",
           "worker_count", "WORKERS_PER_CPU", "START_WORKERS", "BUDGET_REFRESH"]

#: The value that asks for a worker count (or buffer size) chosen while running.
AUTO = "auto"
#: Workers of an auto stage per CPU of the budget, at most (workers that wait: each is charged
#: at least :data:`~inputpipe.utils.resources.MIN_CPU_SHARE` of a CPU).
WORKERS_PER_CPU = int(round(1 / resources.MIN_CPU_SHARE))
#: An auto stage without a memory budget starts with this many workers (fewer when the CPU
#: budget is smaller); under a memory budget it starts with one.
START_WORKERS = 2
#: Seconds between readings of the system's CPU budget (the memory budget is read once).
BUDGET_REFRESH = 10.0
#: A change is not judged (undone) when the CPU time per result changed by this factor across it:
#: the work itself changed (a phase of the run), so the rates before and after do not compare.
#: (Workers that contend for the GIL or a disk take longer per result, not more CPU.)
WORK_CHANGED = 1.5


def rate_text(value: float) -> str:
    """A rate for a history entry: ``"2,156"``, ``"3.5"``."""
    return "{:,.0f}".format(value) if value >= 10 else "{:.2g}".format(value)


class WorkerCountChange(NamedTuple):
    """One entry of a stage's ``worker_count_history()``: ``time`` (``time.time()``), the number
    of active ``workers`` from then on, and the ``reason`` in words.

    Example::

        when, workers, reason = df.worker_count_history()[-1]
    """
    time: float
    workers: int
    reason: str


class Measurement(NamedTuple):
    """What the controller measured over one interval of ``seconds``, with ``workers`` active:
    ``wait_share`` (of the time the consumer waited for a result with none ready),
    ``busy_share`` (of the workers' time spent on work), ``delivered_per_s`` (results),
    ``demand_per_s`` (the results per second the consumer would take if it never waited; None
    when it only waited), ``task_seconds`` (a worker's mean time per task), ``cpus_used`` (CPUs
    the workers used, None when unknown), ``memory_bytes`` (the stage's workers and buffers),
    ``cpu_share`` (the share of the workers' working time spent on a CPU, without their waits for
    a CPU held by other work; None when not measured: see
    :func:`inputpipe.utils.resources.cpu_share`) and ``working_share`` (``busy_share`` without
    the workers' waits for a CPU; None when those are not known), ``idle_cpus`` (CPUs of the
    process left unused over the interval, by any program: :mod:`inputpipe.utils.cpu_idle`) and
    ``consumer_seconds`` (the consumer's own time per result, between taking one and asking for
    the next: measured by the parallel maps, else None) and
    ``send_share`` (of the workers' busy time spent sending results: worker processes; else None)."""
    seconds: float
    workers: int
    wait_share: float
    busy_share: float
    delivered_per_s: float
    demand_per_s: Optional[float]
    task_seconds: Optional[float]
    cpus_used: Optional[float]
    memory_bytes: int
    cpu_share: Optional[float] = None
    working_share: Optional[float] = None
    idle_cpus: Optional[float] = None
    consumer_seconds: Optional[float] = None
    send_share: Optional[float] = None


class Autoscale:
    """Settings of an ``"auto"`` stage; pass one wherever ``"auto"`` is accepted.

    Args:
        interval: seconds between decisions (longer when a task takes longer: at least
            three tasks of a worker); 0 decides at every datapoint (for tests).
        start: workers at start (default one under a memory budget, since the size of the
            datapoints is not known yet; else ``min(2, budget)``).
        min_workers, max_workers: the range of the count (default: see below, and the budget's).
            ``min_workers=0`` (the parallel maps only) lets the controller map in the consumer's
            thread when its measurements say that is faster than the workers (a cheap map whose
            results cost more to move than to make): ``map_func`` then also runs in this
            process (see :mod:`~inputpipe.dataflow.autoscale`). The default (None) is 1, except
            that a process map's controller may still choose 0 on that evidence (the moves of
            :mod:`~inputpipe.dataflow._parallel.inline_policy`); ``min_workers=1`` keeps
            ``map_func`` out of this process.
        cpu_budget, memory_budget: a budget of this stage's own, in CPUs and bytes, instead of
            its share of the process' one (:func:`inputpipe.utils.resources.set_budget`, shared
            by every auto stage of the process).
        policy: a function of a :class:`Measurement` returning the worker count wanted (None:
            no change) instead of the built-in rules; the budgets still apply.
        settle_intervals: intervals not measured after a change (also waiting, up to 5 s, for
            the worker added last to deliver); 0 measures and decides at once.

    Example::

        df = MultiThreadMapData(ds, Autoscale(interval=1.0, max_workers=16), read_file)
    """

    def __init__(self, *, interval: float = 0.5, start: Optional[int] = None, min_workers: Optional[int] = None,
                 max_workers: Optional[int] = None, cpu_budget: Optional[int] = None,
                 memory_budget: Optional[int] = None, policy: Optional[Callable[[Measurement], Optional[int]]] = None,
                 settle_intervals: int = 1):
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or not interval >= 0:
            raise ValueError("Autoscale: interval must be a number of seconds >= 0, got {!r}".format(interval))
        for name, value, optional in (("start", start, True), ("min_workers", min_workers, True),
                                      ("max_workers", max_workers, True), ("cpu_budget", cpu_budget, True),
                                      ("memory_budget", memory_budget, True)):
            least = 0 if name == "min_workers" else 1
            if not (optional and value is None) and (not isinstance(value, int) or isinstance(value, bool) or
                                                     value < least):
                raise ValueError("Autoscale: {} must be an int >= {}{}, got {!r}".format(
                    name, least, " or None" if optional else "", value))
        if max_workers is not None and max_workers < (1 if min_workers is None else min_workers):
            raise ValueError("Autoscale: max_workers ({}) is below min_workers ({})".format(max_workers, min_workers))
        if policy is not None and not callable(policy):
            raise TypeError("Autoscale: policy must be callable, got {!r}".format(policy))
        if not isinstance(settle_intervals, int) or settle_intervals < 0:
            raise ValueError("Autoscale: settle_intervals must be an int >= 0, got {!r}".format(settle_intervals))
        self.interval = float(interval)
        self.start = start
        #: The least count, as given (None: the default, see :meth:`least` and :meth:`may_map_inline`).
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.cpu_budget = cpu_budget
        self.memory_budget = memory_budget
        self.policy = policy
        self.settle_intervals = settle_intervals
        self._system_budget: Tuple[int, Optional[int]] = (1, None)
        self._read_at: Optional[float] = None

    def __repr__(self) -> str:
        return "Autoscale(interval={}, start={}, min_workers={}, max_workers={})".format(
            self.interval, self.start, self.min_workers, self.max_workers)

    def least(self) -> int:
        """The least count the controller's own rules choose: ``min_workers``, 1 by default."""
        return 1 if self.min_workers is None else self.min_workers

    def may_map_inline(self, kind: str) -> bool:
        """Whether the controller of a stage of workers of ``kind`` that can map in its consumer's
        thread moves to 0 workers when that delivers more: with ``min_workers=0``, and by default
        for worker processes (threads send nothing a move to 0 would save; ``min_workers=1``
        keeps ``map_func`` in the workers)."""
        return self.min_workers == 0 or (self.min_workers is None and kind == "processes")

    def cpus(self) -> int:
        """The CPU budget: this stage's, else :func:`~inputpipe.utils.resources.set_budget`'s,
        else the system's (read again every :data:`BUDGET_REFRESH` seconds)."""
        if self.cpu_budget is not None:
            return self.cpu_budget
        return resources.overrides().cpus or self._system()[0]

    def memory(self) -> Optional[int]:
        """The memory budget, as :meth:`cpus` (the system's: half the memory available at start)."""
        if self.memory_budget is not None:
            return self.memory_budget
        return resources.overrides().memory_bytes or self._system()[1]

    def _system(self) -> Tuple[int, Optional[int]]:
        now = _monotonic()
        if self._read_at is None or now - self._read_at > BUDGET_REFRESH:
            memory = self._system_budget[1] if self._read_at is not None else resources.memory_budget()
            self._system_budget = (resources.cpu_budget(), memory)
            self._read_at = now
        return self._system_budget

    def limit(self, kind: str) -> int:
        """The most workers of this ``kind`` (``"processes"``, ``"threads"``, ``"actors"``):
        ``max_workers``, else 8 per CPU of the budget for processes and threads (each is charged
        its CPU share, at least an eighth of a CPU), 64 at most."""
        if self.max_workers is not None:
            return self.max_workers
        return 64 if kind == "actors" else min(64, WORKERS_PER_CPU * self.cpus())

    def start_count(self, kind: str, claimed_cpus: float = 0.0) -> int:
        """Workers at start: ``start``; else one when a memory budget applies (nothing is known
        of the datapoints' size yet: the stage grows once it has measured them), and
        ``min(2, budget)`` otherwise (for processes and threads, the budget left by the
        ``claimed_cpus`` of the other stages); within the range."""
        if self.start is not None:
            count = self.start
        elif self.memory() is not None:
            count = 1
        else:
            free = self.cpus() - (claimed_cpus if kind != "actors" else 0.0)
            count = min(START_WORKERS, int(math.floor(free + 1e-9)))
        return max(1, self.least(), min(count, self.limit(kind)))


def worker_count(component: str, name: str, value: Any) -> Union[int, Autoscale]:
    """``value`` checked as a worker count: an int >= 1 (pinned), ``"auto"`` or an
    :class:`Autoscale`; a ValueError naming the component and the argument otherwise."""
    if isinstance(value, Autoscale):
        return value
    if isinstance(value, str) and value == AUTO:
        return Autoscale()
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("{}: {} must be an int >= 1 or 'auto', got {!r}".format(component, name, value))
    return value


def buffer_setting(component: str, value: Any, name: str = "buffer_size") -> Union[int, str]:
    """``value`` checked as a buffer size: an int >= 1 or ``"auto"``."""
    if isinstance(value, str) and value == AUTO:
        return AUTO
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("{}: {} must be an int >= 1 or 'auto', got {!r}".format(component, name, value))
    return value


def stage_name(flow: Any) -> str:
    """A short name of a stage: its class and its function's name, e.g.
    ``"MultiProcessMapData(decode)"``."""
    func = getattr(flow, "map_func", None)
    name = getattr(func, "__name__", None) or (type(func).__name__ if func is not None else None)
    return "{}({})".format(type(flow).__name__, name) if name else type(flow).__name__


def auto_stages(df: Any) -> List[Any]:
    """The stages of the chain ending at ``df`` whose worker count is ``"auto"``, outermost first
    (following ``ds`` and ``df_lists``, as the doctor does)."""
    found: List[Any] = []
    seen = set()
    todo = [df]
    while todo:
        flow = todo.pop(0)
        if id(flow) in seen:
            continue
        seen.add(id(flow))
        if getattr(flow, "autoscaled", False) is True:
            found.append(flow)
        state = getattr(flow, "__dict__", {})
        if state.get("ds") is not None:
            todo.append(state["ds"])
        for entry in state.get("df_lists") or ():
            todo.append(entry[0] if isinstance(entry, tuple) and entry else entry)
    return found
