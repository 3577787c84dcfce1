"""The tuner's view of a DataFlow chain: the stages it can rebuild ("units"), the part below
them that it runs as it is (the "base"), timed functions, and chains built in a chosen form.
Used by :mod:`inputpipe.dataflow.tuning`; private.

The user's flow objects are never changed: every chain the tuner runs is built of new objects
(copies of the stages it does not know, made with the user's functions) on top of the user's
base, which is read through :class:`Borrowed` (timed, and not closed with the chain).

Example::

    chain = read_chain(df)
    flow = build(chain, [Form("serial")] * len(chain.units))
"""
import copy
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np

from ...utils import resources
from ...utils.arguments import is_dataflow
from ...utils.compat import native_thread_id
from .._core.buffered import CacheData
from .._core.helpers import close_iterators
from .gil import MARKER, MIN_MOMENTS
from ..base import ProxyDataFlow
from ..batch import BatchData
from ..diagnosis import PARALLEL_KINDS, REMOTE
from ..parallel_map import MultiProcessMapAndBatchData, MultiProcessMapData, MultiThreadMapData
from ..profiling import _kind_of
from ..transforms import FilterData, MapData, MapDataComponent

# Unit kinds
WORK, BATCH, FILTER, CACHE, GENERIC = "work", "batch", "filter", "cache", "generic"
# Forms of a work unit
SERIAL, THREADS, PROCESSES = "serial", "threads", "processes"
#: Calls of a map function not counted in its cost (first calls: imports, caches warming).
_SKIPPED_CALLS = 2
#: Calls whose datapoints are measured in bytes: the first ones, then one in ``_SIZE_EVERY``.
_SIZED_CALLS, _SIZE_EVERY = 8, 32
#: Seconds between two reads of the thread's run-queue wait (``/proc/.../schedstat``).
_SCHEDSTAT_EVERY = 0.02


@dataclass
class Unit:
    """One piece of the chain the tuner rebuilds: a map function (``work``: from MapData,
    MapDataComponent or a parallel map), a batching step, a filter, a cache, or another
    single-input stage it copies (``generic``). ``origin`` is the user's stage it comes from."""

    kind: str
    origin: Any
    func: Optional[Callable[[Any], Any]] = None       # work: a function of the whole datapoint
    user_func: Optional[Callable[[Any], Any]] = None  # the function the user wrote (component maps)
    index: Any = None                                 # MapDataComponent's component
    form: str = SERIAL                                # work: how the user runs it
    workers: Optional[int] = None                     # work: the user's number of workers (None: "auto")
    auto: Any = None                                  # work: the user's Autoscale settings of an "auto" count
    options: Dict[str, Any] = field(default_factory=dict)   # work: strict/ordered/... kept from the user
    batch_size: int = 0
    remainder: bool = False
    use_list: bool = False
    in_workers: bool = False                          # batch: done in MultiProcessMapAndBatchData's workers
    shuffle: bool = False                             # cache


@dataclass
class Chain:
    """``base`` (run as it is) and the units above it, from the bottom up."""

    base: Any
    units: List[Unit]

    @property
    def base_has_workers(self) -> bool:
        """Whether the base holds a parallel flow (its workers start when the tuner runs it)."""
        return any(_kind_of(flow, True) in PARALLEL_KINDS + (REMOTE,) for flow in walk(self.base))


@dataclass
class Form:
    """How the tuner builds one unit: ``kind`` (serial/threads/processes for work units),
    ``workers`` and ``merge_batch`` (processes that also batch: the next unit is the batch)."""

    kind: str = SERIAL
    workers: Optional[int] = None
    merge_batch: bool = False


def walk(flow: Any) -> Iterator[Any]:
    """``flow`` and every flow below it (``ds`` and ``df_lists`` inputs), each once."""
    seen, todo = set(), [flow]
    while todo:
        current = todo.pop()
        if id(current) in seen or not is_dataflow(current):
            continue
        seen.add(id(current))
        yield current
        todo.extend(_inputs(current))


def _inputs(flow: Any) -> List[Any]:
    found = [value for value in vars(flow).values() if is_dataflow(value)] if hasattr(flow, "__dict__") else []
    lists = getattr(flow, "__dict__", {}).get("df_lists")
    for entry in lists if isinstance(lists, (list, tuple)) else []:
        target = entry[0] if isinstance(entry, tuple) and entry else entry
        if is_dataflow(target):
            found.append(target)
    return found


class ComponentFunc:
    """``MapDataComponent(ds, func, index)`` as a function of the whole datapoint (for a parallel
    map): ``func`` on the component, the datapoint copied with the result in its place, None
    dropped."""

    def __init__(self, func: Callable[[Any], Any], index: Any):
        self.func = func
        self.index = index
        self.__name__ = getattr(func, "__name__", type(func).__name__)

    def __call__(self, dp: Any) -> Any:
        value = self.func(dp[self.index])
        if value is None:
            return None
        dp = dict(dp) if isinstance(dp, dict) else list(dp)
        dp[self.index] = value
        return dp


def _parallel_options(flow: Any) -> Dict[str, Any]:
    options = {"strict": flow.strict, "ordered": flow.ordered}
    if flow.map_timeout is not None:
        options["map_timeout"] = flow.map_timeout
    if getattr(flow, "_auto_buffer", False):
        options["buffer_size"] = "auto"
    elif type(flow) is not MultiProcessMapAndBatchData and flow.buffer_size != 200:
        options["buffer_size"] = flow.buffer_size
    return options


def _units_of(flow: Any) -> Optional[List[Unit]]:
    """The units of one stage, from the bottom up; None when the tuner cannot rebuild it."""
    cls = type(flow)
    if cls is MapData:
        return [Unit(WORK, flow, func=flow.func, user_func=flow.func)]
    if cls is MapDataComponent:
        return [Unit(WORK, flow, func=ComponentFunc(flow._func, flow._index), user_func=flow._func,
                     index=flow._index)]
    if cls is FilterData:
        return [Unit(FILTER, flow, func=flow.predicate, user_func=flow.predicate)]
    if cls is BatchData:
        return [Unit(BATCH, flow, batch_size=flow.batch_size, remainder=bool(flow.remainder),
                     use_list=bool(flow.use_list))]
    if cls is CacheData:
        return [Unit(CACHE, flow, shuffle=bool(flow.shuffle))]
    if cls in (MultiProcessMapData, MultiThreadMapData, MultiProcessMapAndBatchData):
        auto = getattr(flow, "_autoscale", None) if getattr(flow, "autoscaled", False) else None
        work = Unit(WORK, flow, func=flow.map_func, user_func=flow.map_func,
                    workers=None if auto is not None else flow.num_workers, auto=auto,
                    form=THREADS if cls is MultiThreadMapData else PROCESSES, options=_parallel_options(flow))
        if cls is MultiProcessMapAndBatchData:
            return [work, Unit(BATCH, flow, batch_size=flow._batch_size, in_workers=True)]
        return [work]
    if isinstance(flow, ProxyDataFlow) and _kind_of(flow, True) not in PARALLEL_KINDS + (REMOTE,) \
            and _inputs(flow) == [flow.ds] and not hasattr(flow, "worker_pids"):
        try:
            copy_stage(flow, None)
        except Exception:  # noqa: BLE001 - a stage that cannot be copied is run as it is
            return None
        return [Unit(GENERIC, flow)]
    return None


def read_chain(df: Any) -> Chain:
    """The chain of ``df``: the units the tuner can rebuild (from the top down to the first
    stage it cannot), and that stage with everything below it as the base."""
    units: List[Unit] = []
    flow = df
    while True:
        found = _units_of(flow)
        if found is None:
            break
        units[:0] = found
        flow = flow.ds
    return Chain(flow, units)


def copy_stage(flow: Any, new_input: Any) -> Any:
    """A copy of the single-input stage ``flow`` reading ``new_input`` (its functions shared,
    everything else copied: the user's stage is not changed by running the copy)."""
    memo = {id(flow.ds): new_input}
    return copy.deepcopy(flow, memo)


# ---------------------------------------------------------------------------------------------
# Measuring in the consumer's thread
# ---------------------------------------------------------------------------------------------

def _runqueue_seconds() -> Optional[float]:
    """Seconds the threads of this process waited, runnable, for a CPU so far (Linux schedstat);
    None when not known."""
    found = resources.process_schedstat(os.getpid())
    return None if found is None else found[1]


class ThreadClock:
    """Wall and CPU time of calls made in one thread, and the share of that thread's wall time it
    waited for a CPU: other processes running, not a property of the work, so taken out. The
    waits of every thread of this process count: while the measuring thread hands the GIL to
    another thread (the profiler's) that waits for a CPU, it waits too, and not for its work.
    Nothing is counted while the GIL probe is at work (:mod:`.gil`)."""

    def __init__(self) -> None:
        self.calls = 0
        self.wall = 0.0
        self.cpu = 0.0
        self._first: Optional[tuple] = None     # (perf, runqueue) of the first sample
        self._last: Optional[tuple] = None
        self._next_sample = 0.0
        self._first_calls = (0.0, 0.0)          # (wall, CPU) of the calls not counted

    def add(self, wall: float, cpu: float) -> None:
        if MARKER.probing:                       # the GIL probe perturbs what it would measure
            return
        self.calls += 1
        if self.calls > _SKIPPED_CALLS:
            self.wall += wall
            self.cpu += cpu
        else:
            self._first_calls = (self._first_calls[0] + wall, self._first_calls[1] + cpu)
        now = time.perf_counter()
        if now >= self._next_sample:
            self._next_sample = now + _SCHEDSTAT_EVERY
            waited = _runqueue_seconds()
            if waited is not None:
                if self._first is None:
                    self._first = (now, waited)
                self._last = (now, waited)

    @property
    def counted(self) -> int:
        return max(0, self.calls - _SKIPPED_CALLS)

    @property
    def runqueue_share(self) -> float:
        """Share of the thread's time spent waiting for a CPU between the first and last sample."""
        if self._first is None or self._last is None or self._last[0] - self._first[0] < 0.05:
            return 0.0
        return max(0.0, min(0.99, (self._last[1] - self._first[1]) / (self._last[0] - self._first[0])))

    def per_call(self) -> tuple:
        """``(wall, cpu, work)`` seconds per call: ``work`` is the wall time without the time spent
        waiting for a CPU (at least the CPU time). From the first calls (imports, caches warming)
        only when no other was timed (a slow call on a busy machine)."""
        if self.counted:
            wall, cpu = self.wall / self.counted, self.cpu / self.counted
        elif self.calls:
            wall, cpu = self._first_calls[0] / self.calls, self._first_calls[1] / self.calls
        else:
            return 0.0, 0.0, 0.0
        return wall, cpu, max(cpu, wall * (1.0 - self.runqueue_share))


def nbytes(value: Any, depth: int = 0) -> int:
    """About how many bytes a datapoint holds (arrays, bytes and strings; 8 per other leaf)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return len(value)
    if depth < 4 and isinstance(value, (list, tuple)):
        return sum(nbytes(v, depth + 1) for v in value)
    if depth < 4 and isinstance(value, dict):
        return sum(nbytes(v, depth + 1) for v in value.values())
    return 8


class TimedFunc:
    """A map function that times its calls (wall and this thread's CPU), measures the bytes of
    some of the datapoints it takes and gives (and keeps the last such pair: ``sample``, to time
    moving them through a worker process), and marks itself as running for the GIL probe
    (:mod:`.gil`: ``gil_moments``, ``gil_held``)."""

    def __init__(self, func: Callable[[Any], Any]):
        self.func = func
        self.__name__ = getattr(func, "__name__", type(func).__name__)    # the stage's name in reports
        self.clock = ThreadClock()
        self.sized = 0
        self.in_bytes = 0
        self.out_bytes = 0
        self.called = 0
        self.sample: Optional[tuple] = None       # (a datapoint taken, what it gave)
        self.gil_moments = 0
        self.gil_held = 0

    def __call__(self, dp: Any) -> Any:
        perf, cpu = time.perf_counter, time.thread_time
        start, start_cpu = perf(), cpu()
        outer, MARKER.running = MARKER.running, (self, start)
        try:
            result = self.func(dp)
        finally:
            end, end_cpu = perf(), cpu()
            MARKER.running = outer
            if MARKER.probing:
                MARKER.recent.append((start, end, self, end_cpu - start_cpu))
                if MARKER.thread is None:
                    MARKER.thread = native_thread_id()
        self.clock.add(end - start, end_cpu - start_cpu)
        self.called += 1
        if self.called <= _SIZED_CALLS or self.called % _SIZE_EVERY == 0:
            self.sized += 1
            self.in_bytes += nbytes(dp)
            self.out_bytes += 0 if result is None else nbytes(result)
            if result is not None:
                self.sample = (dp, result)
        return result

    def bytes_per_call(self) -> tuple:
        """``(in, out)`` average bytes of the datapoints measured."""
        return (self.in_bytes / self.sized, self.out_bytes / self.sized) if self.sized else (0.0, 0.0)

    def gil_share(self) -> Optional[float]:
        """The share of the function's wall time that held the GIL (None: too few moments)."""
        return self.gil_held / self.gil_moments if self.gil_moments >= MIN_MOMENTS else None


class Borrowed(ProxyDataFlow):
    """The base of the user's chain, read by a chain the tuner built: ``next()`` timed (wall and
    CPU); ``close()`` does not reach it (the tuner closes its own chains, not the user's base)."""

    def __init__(self, ds: Any):
        super().__init__(ds)
        self.clock = ThreadClock()

    def __iter__(self) -> Iterator[Any]:
        itr = iter(self.ds)
        perf, cpu = time.perf_counter, time.thread_time
        try:
            while True:
                start, start_cpu = perf(), cpu()
                try:
                    dp = next(itr)
                except StopIteration:
                    return
                self.clock.add(perf() - start, cpu() - start_cpu)
                yield dp
        finally:
            close_iterators([itr])

    def close(self) -> None:
        """Nothing: the base belongs to the user (see :func:`inputpipe.dataflow.tuning.tune`)."""


# ---------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------

def new_work_options(unit: Unit, cached: bool = False) -> Dict[str, Any]:
    """The parallel map's options: the user's own for a map that was parallel, else strict and
    ordered (exactly the datapoints of the serial map, in its order). Under a CacheData
    (``cached``) the map is strict: a non-strict map never ends an epoch, so the cache would never
    fill."""
    if unit.form != SERIAL:
        options = dict(unit.options)
        if cached:
            options["strict"] = True
        return options
    return {"strict": True, "ordered": True}


def build(chain: Chain, forms: Sequence[Form], funcs: Optional[Sequence[Optional[Callable]]] = None,
          top: Optional[int] = None, cache_at: Optional[int] = None,
          tap: Optional[Callable[[Any, int], Any]] = None) -> tuple:
    """A new chain of the units (up to unit ``top``, all by default) in ``forms`` on the base read
    through a :class:`Borrowed`; ``funcs`` replaces the units' functions (timed ones);
    ``cache_at`` puts a CacheData on the output of that unit (-1: of the base); ``tap(flow,
    level)`` may wrap the output of each level (-1: the base). Returns ``(flow, borrowed)``."""
    borrowed = Borrowed(chain.base)
    flow: Any = borrowed
    if tap is not None:
        flow = tap(flow, -1)
    if cache_at == -1:
        flow = CacheData(flow)
    units = chain.units if top is None else chain.units[:top + 1]
    k = 0
    while k < len(units):
        unit, form = units[k], forms[k]
        func: Any = funcs[k] if funcs is not None and funcs[k] is not None else unit.func
        if unit.kind == WORK:
            options = new_work_options(unit, cached=cache_at is not None and k <= cache_at)
            count = copy.copy(unit.auto) if unit.auto is not None else form.workers    # "auto" stays auto
            if form.kind == SERIAL:
                flow = MapData(flow, func)
            elif form.kind == THREADS:
                flow = MultiThreadMapData(flow, count, func, **options)
            elif form.merge_batch and k + 1 < len(units):
                flow = MultiProcessMapAndBatchData(flow, count, func, batch_size=units[k + 1].batch_size, **options)
                k += 1
            else:
                flow = MultiProcessMapData(flow, count, func, **options)
        elif unit.kind == BATCH:
            flow = BatchData(flow, unit.batch_size, unit.remainder, unit.use_list)
        elif unit.kind == FILTER:
            flow = FilterData(flow, func)
        elif unit.kind == CACHE:
            flow = CacheData(flow, unit.shuffle)
        else:
            flow = copy_stage(unit.origin, flow)
        if tap is not None:
            flow = tap(flow, k)
        if cache_at == k:
            flow = CacheData(flow)
        k += 1
    return flow, borrowed
