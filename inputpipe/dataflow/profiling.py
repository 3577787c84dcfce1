"""The bottleneck doctor: run a DataFlow chain once and name the stage that limits its throughput.

tensorpack's performance-tuning advice is to benchmark the chain piece by piece with
``TestDataSpeed`` (the reader alone, then with each preprocessing step, then with more
processes) and compare. :func:`profile` gets the same answer from ONE run: while the chain runs,
every stage's input is read through a timing probe, so the time spent inside each stage's
``next()`` minus the time spent inside its inputs' ``next()`` is that stage's own work.

Example::

    from inputpipe.dataflow import BatchData, DataFromList, MapData
    from inputpipe.dataflow.profiling import profile
    df = BatchData(MapData(DataFromList([[i] for i in range(1000)], shuffle=False),
                           lambda dp: [dp[0] * 2]), 10)
    report = profile(df, seconds=0.5, warmup=0.1)
    print(report)               # table, limiting stage, suggestion
"""
import linecache
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from ..utils.arguments import is_dataflow
from ..utils.concurrency import POLL_INTERVAL, StoppableThread
from ..utils.logger import get_logger
from ._core.helpers import close_iterators
from ._tuning.probes import Timer, calibrate, make_probe
from .base import DataFlow, DataFlowTerminated, empty_passes_mean_stuck
from .diagnosis import (
    BATCH, COMBINE, IMAGE, MAP, OTHER, PARALLEL_MAP, REMOTE, RUNNER, SHUFFLE, SOURCE, THREAD_MAP, ProfileReport,
    StageProfile, choose_limiting, cpu_count, suggest,
)

__all__ = ["profile", "ProfileReport", "StageProfile"]

logger = get_logger(__name__)

# Class names (anywhere in a stage's MRO) -> kind of stage. Names, not imports: the doctor must
# not care which module a class lives in, and must know user subclasses by their base.
_KINDS_BY_CLASS = [
    (("MultiProcessRunnerZMQ", "MultiProcessRunner", "MultiThreadRunner"), RUNNER),
    (("MultiProcessMapData",), PARALLEL_MAP),
    (("MultiThreadMapData",), THREAD_MAP),
    (("RemoteDataZMQ",), REMOTE),
    (("AugmentImageComponent", "AugmentImageComponents", "AugmentImageCoordinates", "ImageFromFile"), IMAGE),
    (("BatchData",), BATCH),
    (("MapData", "FilterData"), MAP),
    (("LocallyShuffleData",), SHUFFLE),
    (("ConcatData", "JoinData", "RandomMixData", "RandomChooseData"), COMBINE),
]
# Flows whose input is iterated in worker processes: the probes cannot follow it there.
_INPUT_IN_WORKERS = ("MultiProcessRunnerZMQ",)


def _kind_of(flow: Any, has_inputs: bool) -> str:
    names = {cls.__name__ for cls in type(flow).__mro__}
    for classes, kind in _KINDS_BY_CLASS:
        if names.intersection(classes):
            if kind == IMAGE and not has_inputs:
                return SOURCE
            return kind
    return OTHER if has_inputs else SOURCE


def _func_name(func: Any) -> Optional[str]:
    name = getattr(func, "__name__", None) or getattr(type(func), "__name__", None)
    return name if isinstance(name, str) else None


def _stage_name(flow: Any, kind: str) -> str:
    """A readable name: the class, with the user's function and the number of workers."""
    name = type(flow).__name__
    details = []
    if kind in (MAP, PARALLEL_MAP, THREAD_MAP) and type(flow).__name__ not in ("SelectComponent",):
        func = flow.__dict__.get("_func") or flow.__dict__.get("map_func") or flow.__dict__.get("func") \
            or flow.__dict__.get("predicate")
        func_name = _func_name(func)
        if func_name:
            details.append(func_name)
    augmentors = getattr(flow.__dict__.get("augs"), "augmentors", None)
    if kind == IMAGE and isinstance(augmentors, (list, tuple)):
        details.extend(type(aug).__name__ for aug in augmentors[:3])
        if len(augmentors) > 3:
            details.append("...")
    if kind == BATCH and isinstance(getattr(flow, "batch_size", None), int):
        details.append(str(flow.batch_size))
    return "{}({})".format(name, ", ".join(details)) if details else name


def _workers_of(flow: Any) -> Tuple[Optional[int], str]:
    for attr, unit in (("num_proc", "processes"), ("num_workers", None), ("num_thread", "threads")):
        value = flow.__dict__.get(attr)
        if isinstance(value, int):
            if unit is None:
                unit = "threads" if _kind_of(flow, True) == THREAD_MAP else "processes"
            return value, unit
    dfs = flow.__dict__.get("_dfs")           # MultiThreadRunner keeps one copy per thread
    if isinstance(dfs, list) and dfs:
        return len(dfs), "threads"
    return None, ""


# ---------------------------------------------------------------------------------------------
# Walking the chain
# ---------------------------------------------------------------------------------------------

class _Node:
    """One stage: the flow, its timer and where its probe was put (to take it out again)."""

    def __init__(self, flow: Any, path: str, depth: int):
        self.flow = flow
        self.path = path
        self.depth = depth
        self.timer = Timer()
        self.children: List["_Node"] = []
        self.note = ""
        self.cpu_start: Optional[float] = None
        self.stats_start: Optional[List[Dict[str, float]]] = None


def _input_slots(flow: Any) -> List[Tuple[str, Any]]:
    """Where ``flow`` keeps its inputs: ``("ds", input)`` or ``("df_lists", index)`` entries."""
    slots: List[Tuple[str, Any]] = []
    ds = flow.__dict__.get("ds")
    if ds is not None and is_dataflow(ds):
        slots.append(("ds", None))
    df_lists = flow.__dict__.get("df_lists")
    if isinstance(df_lists, (list, tuple)):
        for k, entry in enumerate(df_lists):
            target = entry[0] if isinstance(entry, tuple) and entry and is_dataflow(entry[0]) else entry
            if is_dataflow(target):
                slots.append(("df_lists", k))
    return slots


class _Instrumented:
    """The chain with probes on every stage's inputs; :meth:`restore` puts the inputs back."""

    def __init__(self, root: Any, thread_id: int):
        self.thread_id = thread_id
        self.nodes: List[_Node] = []
        self._undo: List[Tuple[Any, str, Any]] = []
        self.root = self._visit(root, "df", 0)
        self.root_probe = make_probe(root, self.root.timer, thread_id)

    def _visit(self, flow: Any, path: str, depth: int) -> _Node:
        node = _Node(flow, path, depth)
        self.nodes.append(node)
        if any(c.__name__ in _INPUT_IN_WORKERS for c in type(flow).__mro__):
            inner = flow.__dict__.get("ds")
            if inner is not None:
                node.note = "its input {} runs in the workers (not timed)".format(type(inner).__name__)
            return node
        if "_dfs" in flow.__dict__ and _kind_of(flow, False) == RUNNER:
            node.note = "its copies run in threads (not timed)"
        if id(flow) in {id(n.flow) for n in self.nodes[:-1]}:
            return node                       # the same flow object twice (e.g. JoinData([df, df]))
        slots = _input_slots(flow)
        lists = None
        for attr, key in slots:
            if attr == "ds":
                child = self._visit(flow.ds, path + ".ds", depth)
                self._undo.append((flow, "ds", flow.ds))
                flow.__dict__["ds"] = make_probe(flow.ds, child.timer, self.thread_id)
            else:
                if lists is None:
                    lists = list(flow.df_lists)
                    self._undo.append((flow, "df_lists", flow.df_lists))
                entry = lists[key]
                target = entry[0] if isinstance(entry, tuple) else entry
                child = self._visit(target, "{}.df_lists[{}]".format(path, key), depth + 1)
                probe = make_probe(target, child.timer, self.thread_id)
                lists[key] = (probe,) + tuple(entry[1:]) if isinstance(entry, tuple) else probe
            node.children.append(child)
        if lists is not None:
            flow.__dict__["df_lists"] = lists
        return node

    def restore(self) -> None:
        for flow, attr, original in reversed(self._undo):
            flow.__dict__[attr] = original
        self._undo = []
        for node in self.nodes:
            node.timer.active = False

    def reset_timers(self) -> None:
        for node in self.nodes:
            node.timer.reset()

    def innermost_active(self) -> Optional[_Node]:
        """The deepest stage the profiling thread is inside of right now (where it is stuck)."""
        found = None
        for node in self.nodes:
            if node.timer.entered_at is not None and not any(c.timer.entered_at is not None for c in node.children):
                found = node
        if found is None and self.root.timer.entered_at is not None:
            found = self.root
        return found


# ---------------------------------------------------------------------------------------------
# Worker measurements from the consumer's side
# ---------------------------------------------------------------------------------------------

_CLOCK_TICKS = None


def _process_cpu_seconds(pids: List[int]) -> Optional[float]:
    """User + system CPU seconds of the processes ``pids`` (Linux /proc); None where unavailable."""
    global _CLOCK_TICKS
    try:
        import os

        if _CLOCK_TICKS is None:
            _CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in pids:
            with open("/proc/{}/stat".format(pid), "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])     # utime, stime (fields 14 and 15 of stat)
        return total / _CLOCK_TICKS
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _worker_stats(flow: Any) -> Optional[List[Dict[str, float]]]:
    """The parallel flow's own account of its workers' busy time, if it offers one."""
    method = getattr(flow, "worker_stats", None)
    if not callable(method):
        return None
    try:
        return list(method())
    except Exception as err:  # noqa: BLE001 - a diagnostic must not break the profile
        logger.warning("profile: %s.worker_stats() failed (%s); busy share not reported", type(flow).__name__, err)
        return None


def _sample_workers(nodes: List[_Node]) -> Dict[int, Tuple[Optional[float], Any]]:
    samples = {}
    for k, node in enumerate(nodes):
        if _workers_of(node.flow)[0] is None:
            continue
        pids = getattr(node.flow, "worker_pids", None)
        cpu = _process_cpu_seconds(list(pids)) if pids else None
        samples[k] = (cpu, _worker_stats(node.flow))
    return samples


def _busy_share(before: Any, after: Any, seconds: float, workers: int) -> Optional[float]:
    if not before and not after or after is None or seconds <= 0:
        return None
    busy_before = sum(float(w.get("busy_seconds", 0.0)) for w in (before or []))
    busy_after = sum(float(w.get("busy_seconds", 0.0)) for w in after)
    return max(0.0, min(1.0, (busy_after - busy_before) / (seconds * workers)))


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------

class _ProfileRun(StoppableThread):
    """Resets the chain (``reset``), then iterates it instrumented, epoch after epoch, until
    stopped or out of datapoints. A stop that comes while ``reset_state()`` blocks takes effect
    when it returns: the chain is then not iterated."""

    def __init__(self, df: Any, warmup: float, max_datapoints: Optional[int], reset: bool):
        super().__init__(name="inputpipe-profile")
        self.df = df
        self.warmup = warmup
        self.max_datapoints = max_datapoints
        self.reset = reset
        self.reset_done = threading.Event()  # reset_state() returned (or raised, or was not asked for)
        self.ready = threading.Event()     # instrumented (or failed): the caller may watch it
        self.measuring = threading.Event()
        self.chain: Optional[_Instrumented] = None
        self.error: Optional[BaseException] = None
        self.started_at = time.perf_counter()
        self.window_start = self.window_end = self.last_output = 0.0
        self.datapoints = 0
        self.ended = False
        self.samples_start: Dict[int, Any] = {}
        self.samples_end: Optional[Dict[int, Any]] = None

    def run(self) -> None:
        try:
            if self.reset:
                self.df.reset_state()
        except BaseException as err:  # reported to the caller, which raises it
            self.error = err
            return
        finally:
            self.started_at = time.perf_counter()
            self.reset_done.set()
        if self.stopped():                 # the caller gave up while reset_state() blocked
            return
        try:
            self.chain = _Instrumented(self.df, threading.get_ident())
        except BaseException as err:  # reported to the caller
            self.error = err
            self.ready.set()
            return
        self.ready.set()
        try:
            self._iterate()
        except BaseException as err:  # reported to the caller, which raises it
            if not (isinstance(err, DataFlowTerminated) and self.stopped()):   # (the profile's own stop)
                self.error = err
        finally:
            if self.samples_end is None:
                self._end_window()
            self.chain.restore()

    @property
    def instrumented(self) -> _Instrumented:
        if self.chain is None:
            raise RuntimeError("profile: the chain is not instrumented yet")
        return self.chain

    def _start_window(self) -> None:
        self.instrumented.reset_timers()
        self.samples_start = _sample_workers(self.instrumented.nodes)
        self.datapoints = 0
        self.window_start = self.last_output = time.perf_counter()
        self.measuring.set()

    def _end_window(self) -> None:
        self.window_end = time.perf_counter()
        self.samples_end = _sample_workers(self.instrumented.nodes)

    def _iterate(self) -> None:
        self.started_at = time.perf_counter()
        warmup_end = self.started_at + self.warmup
        if self.warmup <= 0:
            self._start_window()
        empty = 0                           # epochs in a row without a datapoint
        while not self.stopped():
            produced = 0
            itr = iter(self.instrumented.root_probe)
            try:
                for _ in itr:
                    produced += 1
                    if self.measuring.is_set():
                        self.datapoints += 1
                        self.last_output = time.perf_counter()
                    elif time.perf_counter() >= warmup_end:
                        self._start_window()
                    if self.stopped() or (self.max_datapoints is not None and self.datapoints >= self.max_datapoints):
                        self._end_window()
                        self.stop()
                        return
            finally:
                close_iterators([itr])
            empty = 0 if produced else empty + 1
            if empty_passes_mean_stuck(self.df, empty):
                self._end_window()
                self.ended = True
                return


def profile(df: DataFlow, seconds: float = 10.0, *, warmup: float = 1.0, max_datapoints: Optional[int] = None,
            stall_timeout: float = 30.0, reset: bool = True) -> ProfileReport:
    """Run ``df`` for ``seconds`` and report, per stage, datapoints/s, own time per datapoint and
    share of the time, the stage that limits throughput and a suggestion to make it faster.

    The chain is iterated (epoch after epoch) in a thread of this process, like a trainer's
    feeding thread would. Each stage's inputs (``ds`` of proxy flows, ``df_lists`` of
    Concat/Join/RandomMix/RandomChooseData) are read through timing probes while it runs; the
    probes are taken out before this returns (also on error), and the datapoints, their order and
    every stage's behaviour are those of an ordinary run. The first ``warmup`` seconds are not
    measured (workers start, caches fill). A flow that keeps an input iterator across epochs
    (FixedSizeData, LocallyShuffleData, parallel maps with ``strict=False``) reads the rest of
    that iterator through an untimed pass-through until its next epoch or ``reset_state()``.

    Args:
        df: the DataFlow (the outermost stage of the chain).
        seconds: how long to measure after the warm-up.
        warmup: seconds run before measuring.
        max_datapoints: stop earlier after this many output datapoints.
        stall_timeout: if no output datapoint comes for this many seconds, stop waiting and
            report the stage the chain is stuck in (``report.stalled``). Closing ``df`` then
            ends the iterating thread.
        reset: call ``df.reset_state()`` first (as ``TestDataSpeed`` does), in the profiling
            thread, within ``stall_timeout``: a ``reset_state()`` that blocks longer (a mount, a
            lock, a download) gives a report naming the flow and the line it waits at
            (``report.stalled_in``). Pass False when it was called already (a second call
            restarts the RNGs of some flows).

    Worker processes and threads of parallel flows are not timed inside: their stage's own time
    is the time the consumer waited for them. Their CPU share (processes, Linux) is read from
    ``/proc``; a busy share is shown when the flow offers ``worker_stats()``. ``profile`` does
    not close ``df``: call ``df.close()`` when done with it.

    Example::

        df = MapData(DataFromList([[i] for i in range(100)], shuffle=False), lambda dp: dp)
        report = profile(df, seconds=0.5, warmup=0.1)
        assert report.limiting is not None and report.datapoints > 0
    """
    if not is_dataflow(df):
        got = "the class {} (make an instance)".format(df.__name__) if isinstance(df, type) else "a " + type(df).__name__
        raise TypeError("profile: expected a DataFlow (an iterable with reset_state()), got {}".format(got))
    if not seconds > 0:
        raise ValueError("profile: seconds must be > 0, got {!r}".format(seconds))
    if not stall_timeout > 0:
        raise ValueError("profile: stall_timeout must be > 0, got {!r}".format(stall_timeout))
    cost = calibrate()
    run = _ProfileRun(df, max(0.0, float(warmup)), max_datapoints, reset)
    run.start()
    stalled = False
    try:
        stalled = _wait(run, seconds, stall_timeout)
    finally:
        run.stop()
    if not run.reset_done.is_set():
        return _reset_stall_report(run, stall_timeout)
    if not stalled:
        run.join(timeout=stall_timeout)
        stalled = run.is_alive()
    if stalled and run.chain is not None:
        run.chain.restore()           # the stuck thread passes the rest through untimed, once it wakes
    if run.error is not None and not stalled:
        raise run.error
    return _report(run, cost, stalled)


def _wait(run: _ProfileRun, seconds: float, stall_timeout: float) -> bool:
    """Wait for the measuring window to end; True if the chain stalled instead (in
    ``reset_state()`` for ``stall_timeout`` seconds, or without output afterwards)."""
    started = time.perf_counter()
    while run.is_alive():
        now = time.perf_counter()
        if not run.reset_done.is_set():
            if now - started > stall_timeout:
                return True
        elif run.measuring.is_set():
            if now - run.window_start >= seconds:
                return False
            if now - run.last_output > stall_timeout:
                return True
        elif now - run.started_at > run.warmup + stall_timeout:
            return True
        run.join(timeout=POLL_INTERVAL)
    return False


def _reset_stall_report(run: _ProfileRun, stall_timeout: float) -> ProfileReport:
    """The report of a chain whose ``reset_state()`` did not return within the stall timeout:
    which flow's ``reset_state()`` the thread is inside of (the innermost), who called it and
    the line it waits at, read from the thread's stack."""
    calls: List[Tuple[Any, Any]] = []   # (flow, frame) of every DataFlow reset_state() on the stack, innermost first
    frame = sys._current_frames().get(run.ident or -1)
    while frame is not None:
        owner = frame.f_locals.get("self") if frame.f_code.co_name == "reset_state" else None
        if owner is not None and is_dataflow(owner):
            calls.append((owner, frame))
        frame = frame.f_back
    if not calls:
        calls = [(run.df, None)]

    def call_name(flow: Any) -> str:
        return "{}.reset_state()".format(_stage_name(flow, _kind_of(flow, bool(_input_slots(flow)))))

    stuck, where = calls[0]
    stalled_in = call_name(stuck)
    detail = stalled_in
    if len(calls) > 1:
        detail += " (called by {})".format(call_name(calls[1][0]))
    detail += " did not return within the stall timeout ({:g} s)".format(stall_timeout)
    if where is not None:
        filename, line = where.f_code.co_filename, where.f_lineno
        code = linecache.getline(filename, line).strip()
        detail += ": it waits at {}:{}{}".format(os.path.basename(filename), line, " ({})".format(code) if code else "")
    alive = run.is_alive()
    detail += ". Nothing was profiled."
    if alive:
        detail += (" The thread running it cannot be stopped from Python: it is a daemon thread (it does not keep "
                   "the process alive) and ends, without iterating the flow, when reset_state() returns.")
    report = ProfileReport(stages=[], seconds=0.0, datapoints=0, consumer_seconds=0.0, probe_overhead_us=0.0,
                           stalled=True, cpu_count=cpu_count(), stalled_in=stalled_in, stall_detail=detail,
                           thread_left_running=alive)
    report.suggestion = suggest(report)
    return report


def _report(run: _ProfileRun, cost: Tuple[float, float], stalled: bool) -> ProfileReport:
    inside, outside = cost
    chain = run.chain
    if chain is None:
        raise RuntimeError("profile: the chain could not be instrumented")
    end = time.perf_counter() if stalled else run.window_end
    if not run.measuring.is_set():            # stalled or ended in the warm-up: report all of it
        run.window_start = run.started_at
    window = max(end - run.window_start, 1e-9)
    samples_end = run.samples_end if run.samples_end is not None and not stalled else _sample_workers(chain.nodes)
    stuck = chain.innermost_active() if stalled else None
    order = _post_order(chain.root)
    index = {id(node): k for k, node in enumerate(order)}
    totals = {id(node): _total_seconds(node, end if stalled else None, run.window_start) for node in order}
    stages = []
    for node in order:
        timer = node.timer
        calls_in = sum(c.timer.count + c.timer.ends for c in node.children)
        total = totals[id(node)]
        own = max(0.0, total - sum(totals[id(c)] for c in node.children) - outside * calls_in
                  - inside * (timer.count + timer.ends))
        kind = _kind_of(node.flow, bool(node.children) or bool(node.note))
        stage = StageProfile(
            name=_stage_name(node.flow, kind), kind=kind, type_name=type(node.flow).__name__, path=node.path,
            depth=node.depth, datapoints=timer.count, datapoints_per_sec=timer.count / window, seconds=total,
            own_seconds=own, own_ms_per_datapoint=own / timer.count * 1e3 if timer.count else None,
            share=min(1.0, own / window), inputs=[index[id(c)] for c in node.children], note=node.note)
        workers, unit = _workers_of(node.flow)
        if workers is not None:
            stage.workers, stage.worker_unit = workers, unit
            k = chain.nodes.index(node)
            cpu0, stats0 = run.samples_start.get(k, (None, None))
            cpu1, stats1 = samples_end.get(k, (None, None))
            if cpu0 is not None and cpu1 is not None:
                stage.worker_cpu_share = max(0.0, (cpu1 - cpu0) / (window * workers))
            stage.busy_share = _busy_share(stats0, stats1, window, workers)
        if timer.other_thread_count:
            stage.note = (stage.note + "; " if stage.note else "") + "{} datapoints read by other threads".format(
                timer.other_thread_count)
        stages.append(stage)
    report = ProfileReport(stages=stages, seconds=window, datapoints=run.datapoints,
                           consumer_seconds=max(0.0, window - totals[id(chain.root)]),
                           probe_overhead_us=(inside + outside) * 1e6, stalled=stalled, ended=run.ended,
                           cpu_count=cpu_count())
    if stalled and stuck is not None:
        report.limiting_index = index[id(stuck)]
    elif run.datapoints > 0:              # with no output there is no throughput to limit
        report.limiting_index = choose_limiting(stages)
    report.suggestion = suggest(report)
    return report


def _total_seconds(node: _Node, stalled_at: Optional[float], window_start: float) -> float:
    """Seconds spent inside the stage's ``next()``, with the call it is stuck in when stalled."""
    entered = node.timer.entered_at
    if stalled_at is None or entered is None:
        return node.timer.seconds
    return node.timer.seconds + stalled_at - max(entered, window_start)


def _post_order(root: _Node) -> List[_Node]:
    """Stages from the sources to the output: every stage after its inputs."""
    order: List[_Node] = []

    def visit(node: _Node) -> None:
        for child in node.children:
            visit(child)
        order.append(node)

    visit(root)
    return order
