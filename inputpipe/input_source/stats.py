"""Per-step input statistics: queue occupancy, the time the train step waited for input, and
the worker counts of the DataFlow's ``"auto"`` stages.

Each InputSource has an :class:`InputStats` (``source.stats``). Its hook fills it on every step
that consumes inputs, from values fetched in that same ``session.run`` (no extra run). The
``tf.compat.v1.summary`` scalars that show the latest values in TensorBoard read them from
Python (a ``tf.numpy_function``) only in the runs that evaluate them, so a step pays nothing
for them. When the steps spend more than ``warn_fraction`` of their time waiting for input, a
warning is logged (at most once every ``warn_interval`` seconds). The stages of the source's
DataFlow whose worker count is ``"auto"`` (in the training process) are reported too: their
current counts in :meth:`InputStats.summary` (``"workers/<stage>"``) and as the scalars
``input/workers/<stage>``, and how they changed in :meth:`InputStats.worker_history`.

Example::

    print(source.stats.summary())
    # {'steps': 100, 'input_wait_s': 0.4, 'stall_fraction': 0.02, 'mean_queue_size': 37.5, ...}
"""
import collections
import functools
import re
import threading
import time
from typing import Any, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from ..dataflow.autoscale import WorkerCountChange, auto_stages, stage_name
from ..utils.compat import numpy_function
from ..utils.logger import get_logger
from .placement import on_host

__all__ = ["InputStats"]

logger = get_logger(__name__)

#: The feeding thread's cumulative (delivered, dataflow_cpu_s, dataflow_wall_s, feed_cpu_s).
FeedSample = Tuple[int, float, float, float]


class _Record(NamedTuple):
    wait: float
    step_time: float
    queue_size: Optional[float]
    datapoints: int
    feed: Optional[FeedSample]


def _ms(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else 1e3 * seconds


class _Limit:
    """Rates over some steps: ``steps`` counted, their ``wait`` and ``step_time`` (s), the
    ``consumed`` datapoints, and the feeding thread's counters ``first`` and ``last``, which are
    ``feed_steps`` steps apart."""

    def __init__(self, steps: int, wait: float, step_time: float, consumed: int,
                 first: Optional[FeedSample], last: Optional[FeedSample], feed_steps: int,
                 empty_fraction: Optional[float] = None):
        self.steps, self.wait, self.step_time, self.consumed = steps, wait, step_time, consumed
        self.feed_steps = feed_steps
        self.empty_fraction = empty_fraction
        self.feed = None if first is None or last is None else [b - a for a, b in zip(first, last)]

    @property
    def delivered_per_s(self) -> Optional[float]:
        if self.feed is None or self.feed[2] <= 0 or self.feed[0] <= 0:
            return None
        return self.feed[0] / self.feed[2]

    @property
    def consumed_per_s(self) -> Optional[float]:
        busy = self.step_time - self.wait
        return self.consumed / busy if self.consumed and busy > 0 else None

    @property
    def dataflow_cpu_per_step(self) -> Optional[float]:
        return None if self.feed is None or self.feed_steps <= 0 else self.feed[1] / self.feed_steps

    @property
    def feed_cpu_per_step(self) -> Optional[float]:
        return None if self.feed is None or self.feed_steps <= 0 else self.feed[3] / self.feed_steps

    @property
    def data_was_missing(self) -> bool:
        """Whether the steps waited for data that was not there yet: the DataFlow delivers fewer
        datapoints per second than the steps consume, or the queue was empty at some steps. A
        queue never empty while the DataFlow keeps up means the wait was the input's own work in
        the step (its hooks and dequeue), not missing data. True when neither is known."""
        delivered, consumed = self.delivered_per_s, self.consumed_per_s
        if delivered is not None and consumed is not None and delivered < consumed:
            return True
        return self.empty_fraction is None or self.empty_fraction > 0

    def input_bound(self, warn_fraction: float) -> bool:
        fraction = self.wait / self.step_time if self.step_time > 0 else 0.0
        return fraction > 0 and fraction >= warn_fraction and self.data_was_missing

    def describe(self, warn_fraction: float = 0.0) -> str:
        fraction = self.wait / self.step_time if self.step_time > 0 else 0.0
        verdict = "input-bound" if self.input_bound(warn_fraction) else "not input-bound"
        line = "{}: {:.0f}% of step time waiting".format(verdict, 100.0 * fraction)
        if fraction > 0 and not self.data_was_missing:
            line += " (with data always queued: the input's own work in the step)"
        delivered, consumed = self.delivered_per_s, self.consumed_per_s
        if delivered is not None and consumed is not None:
            line += "; the DataFlow delivers {} datapoints/s, the step consumes {}/s".format(
                _rate(delivered), _rate(consumed))
        elif consumed is not None:
            line += "; the step consumes {} datapoints/s".format(_rate(consumed))
        return line


def _rate(value: float) -> str:
    return "{:,.0f}".format(value) if value >= 10 else "{:.2g}".format(value)


def dataflow_in_process(source: Any) -> Optional[Any]:
    """The DataFlow that ``source`` (or the source it wraps) iterates in this process; None when
    it has none or runs it in a worker process (``in_worker=True``)."""
    seen = 0
    while source is not None and seen < 16:
        state = getattr(source, "__dict__", {})
        if state.get("in_worker"):
            return None
        if state.get("ds") is not None:
            return state["ds"]
        source, seen = state.get("_input"), seen + 1
    return None


def _tag(name: str) -> str:
    """A stage name as a summary tag: ``MultiProcessMapData(decode)`` -> ``MultiProcessMapData_decode``."""
    return re.sub(r"[^\w.\-]+", "_", name).strip("_") or "stage"


class InputStats:
    """Statistics of one InputSource, updated once per consuming step.

    Attributes: ``steps`` (consuming steps recorded), ``total_wait`` and ``total_step_time``
    (seconds), ``last`` (the latest values: ``wait_ms``, ``queue_size``, ...), ``history``
    (a bounded deque of the last ``window`` records).

    Example::

        stats = source.stats
        if stats.stall_fraction > 0.1:
            ...   # the model waits for data more than 10 % of the time
    """

    #: summary scalar names, in the order they are created
    SCALARS = ("wait_ms", "queue_size")

    def __init__(self, owner: str, window: int = 50, warn_fraction: float = 0.2,
                 warn_interval: float = 60.0, warmup_steps: int = 5, gil_warn_fraction: float = 0.25):
        self.owner = owner
        self.gil_warn_fraction = gil_warn_fraction
        self.advice: Optional[str] = None
        self.window = window
        self.warn_fraction = warn_fraction
        self.warn_interval = warn_interval
        self.warmup_steps = warmup_steps
        self._lock = threading.Lock()
        self._summaries: List[tf.Tensor] = []
        self._stages: List[Tuple[str, Any]] = []       # (name, flow) of the auto stages watched
        self.reset()

    def reset(self) -> None:
        """Forget everything recorded so far."""
        with self._lock:
            self.steps = 0
            self.total_wait = 0.0
            self.total_step_time = 0.0
            self.queue_size_sum = 0.0
            self.queue_size_steps = 0
            self.empty_steps = 0
            self.consumed = 0                 # datapoints the counted steps took
            self.last: Dict[str, float] = {}
            self.history: Deque[_Record] = collections.deque(maxlen=self.window)
            self._history_wait = 0.0          # sums over ``history``, kept up to date as it slides
            self._history_time = 0.0
            self._history_consumed = 0
            self._feed_first: Optional[FeedSample] = None     # feeding thread's counters after warm-up
            self._feed_last: Optional[FeedSample] = None
            self._last_warning = -float("inf")

    # -- the DataFlow's "auto" stages ------------------------------------------------------------
    def watch_workers(self, df: Any) -> List[str]:
        """Report the worker counts of the ``"auto"`` stages of the chain ending at ``df`` (None:
        none); returns their names, made unique (``"MultiProcessMapData(decode)"``, then ``"#2"``...)."""
        stages: List[Tuple[str, Any]] = []
        for flow in auto_stages(df) if df is not None else []:
            name = stage_name(flow)
            taken = {n for n, _ in stages}
            unique, k = name, 2
            while unique in taken:
                unique, k = "{}#{}".format(name, k), k + 1
            stages.append((unique, flow))
        self._stages = stages
        return [name for name, _ in stages]

    def worker_counts(self) -> Dict[str, int]:
        """``{stage name: workers now}`` of the watched ``"auto"`` stages that have started."""
        return {name: int(flow.worker_count_history()[-1].workers) for name, flow in self._stages
                if flow.worker_count_history()}

    def worker_history(self) -> Dict[str, List[WorkerCountChange]]:
        """``{stage name: [WorkerCountChange(time, count, reason), ...]}`` of the watched stages."""
        return {name: flow.worker_count_history() for name, flow in self._stages}

    def configure(self, advice: Optional[str] = None) -> None:
        """``advice``: the setup that runs the DataFlow outside the training process (e.g.
        ``"QueueInput(df, in_worker=True)"``), named when the DataFlow's work in the training
        process competes with the train step for the GIL; None when it already runs elsewhere."""
        self.advice = advice

    def record(self, wait: float, step_time: float, queue_size: Optional[float] = None, *,
               datapoints: int = 0, feed: Optional[FeedSample] = None) -> None:
        """Record one consuming step: ``wait`` and ``step_time`` in seconds, the ``datapoints``
        it took, and ``feed``, the feeding thread's cumulative counters after it
        (``(delivered, dataflow_cpu_s, dataflow_wall_s, feed_cpu_s)``, see ``EnqueueThread``)."""
        wait, step_time = float(wait), float(step_time)           # plain Python numbers, not numpy scalars
        queue_size = None if queue_size is None else float(queue_size)
        with self._lock:
            self.steps += 1
            self.last = {"wait_ms": wait * 1e3, "step_ms": step_time * 1e3}
            if queue_size is not None:
                self.last["queue_size"] = queue_size
            if self.steps <= self.warmup_steps:
                # the first steps include graph warm-up and queue filling: keep them out of totals
                self._feed_first = feed
                return
            self.total_wait += wait
            self.total_step_time += step_time
            self.consumed += datapoints
            self._feed_last = feed
            if self._feed_first is None:
                self._feed_first = feed
            if queue_size is not None:
                self.queue_size_sum += queue_size
                self.queue_size_steps += 1
                self.empty_steps += int(queue_size == 0)
            if len(self.history) == self.history.maxlen:
                dropped = self.history[0]
                self._history_wait -= dropped.wait
                self._history_time -= dropped.step_time
                self._history_consumed -= dropped.datapoints
            self.history.append(_Record(wait, step_time, queue_size, datapoints, feed))
            self._history_wait += wait
            self._history_time += step_time
            self._history_consumed += datapoints
            self._maybe_warn()

    def _maybe_warn(self) -> None:
        if len(self.history) < min(self.window, 20):
            return
        now = time.monotonic()
        if now - self._last_warning < self.warn_interval:
            return
        steps, waited, spent = len(self.history), self._history_wait, self._history_time
        first, last = self.history[0].feed, self.history[-1].feed
        sizes = [h.queue_size for h in self.history if h.queue_size is not None]
        empty_fraction = sum(s == 0 for s in sizes) / len(sizes) if sizes else None
        limit = _Limit(steps, waited, spent, self._history_consumed, first, last, steps - 1, empty_fraction)
        input_bound = limit.input_bound(self.warn_fraction)
        gil = self._gil_advice(limit)
        if not input_bound and gil is None:
            return
        self._last_warning = now
        if not input_bound:
            logger.warning("%s: %s", self.owner, gil)
            return
        empty = "" if empty_fraction is None else ", the queue was empty at {:.0f}% of them".format(
            100.0 * empty_fraction)
        advice = gil or "Make the DataFlow faster (e.g. run it in parallel) or prefetch more."
        logger.warning("%s: training is %s (over the last %d steps, %.1f ms per step%s). %s", self.owner,
                       limit.describe(), steps, 1e3 * waited / steps, empty, advice)

    def _gil_advice(self, limit: "_Limit") -> Optional[str]:
        """The GIL warning, when the DataFlow's CPU time in the training process is at least
        ``gil_warn_fraction`` of the step time and an out-of-process setup exists."""
        cpu = limit.dataflow_cpu_per_step
        step = limit.step_time / limit.steps if limit.steps else 0.0
        if self.advice is None or cpu is None or step <= 0 or cpu < self.gil_warn_fraction * step:
            return None
        return ("the DataFlow ran {:.0f} ms of Python per step in the training process (step {:.0f} ms), "
                "competing with the train step for the GIL; run it in a worker process: {}".format(
                    1e3 * cpu, 1e3 * step, self.advice))

    @property
    def stall_fraction(self) -> float:
        """Fraction of step time spent waiting for input (after warm-up)."""
        return self.total_wait / self.total_step_time if self.total_step_time > 0 else 0.0

    @property
    def mean_queue_size(self) -> Optional[float]:
        return self.queue_size_sum / self.queue_size_steps if self.queue_size_steps else None

    def _totals(self) -> "_Limit":
        counted = max(self.steps - self.warmup_steps, 0)
        # the last counted step's feed sample against the last warm-up step's (or the first counted one's)
        feed_steps = counted if self.warmup_steps else counted - 1
        empty_fraction = self.empty_steps / self.queue_size_steps if self.queue_size_steps else None
        return _Limit(counted, self.total_wait, self.total_step_time, self.consumed, self._feed_first,
                      self._feed_last, feed_steps, empty_fraction)

    def limit(self) -> str:
        """One line naming the limit of the steps after warm-up, e.g. ``"input-bound: 34% of step
        time waiting; the DataFlow delivers 410 datapoints/s, the step consumes 600/s"``."""
        with self._lock:
            return self._totals().describe(self.warn_fraction)

    def summary(self) -> Dict[str, Any]:
        """A dict of the totals after warm-up (plain Python ``int``/``float``/``str``/None), e.g.
        for logging or a table. Besides the waits: ``delivered_per_s`` (datapoints per second
        the DataFlow delivered to the feeding thread while it was asked for one),
        ``consumed_per_s`` (datapoints per second the steps would take if they never waited),
        ``dataflow_cpu_ms_per_step`` (CPU time the DataFlow took in the training process per
        step) and ``feed_cpu_ms_per_step`` (the feeding thread's CPU time converting and
        enqueueing); None where the source has no feeding thread. :meth:`limit` says it in words."""
        with self._lock:
            counted = max(self.steps - self.warmup_steps, 0)
            totals = self._totals()
            summary = {
                "steps": self.steps,
                "input_wait_s": self.total_wait,
                "mean_wait_ms": 1e3 * self.total_wait / counted if counted else 0.0,
                "stall_fraction": self.stall_fraction,
                "mean_queue_size": self.mean_queue_size,
                "empty_queue_fraction": self.empty_steps / self.queue_size_steps if self.queue_size_steps else None,
                "delivered_per_s": totals.delivered_per_s,
                "consumed_per_s": totals.consumed_per_s,
                "dataflow_cpu_ms_per_step": _ms(totals.dataflow_cpu_per_step),
                "feed_cpu_ms_per_step": _ms(totals.feed_cpu_per_step),
            }
            summary.update(("workers/" + name, count) for name, count in self.worker_counts().items())
            return summary

    # -- TensorBoard ----------------------------------------------------------------------------
    def latest(self, stat: str) -> float:
        """The latest recorded value of ``stat`` (one of :data:`SCALARS`), 0 before any step."""
        return float(self.last.get(stat, 0.0))

    def build_summaries(self, scope: str, scalars: Sequence[str] = SCALARS) -> List[tf.Tensor]:
        """Create ``tf.compat.v1.summary.scalar``\\ s named ``input_source/<scope>/<stat>`` in the
        default graph (added to the SUMMARIES collection, so ``merge_all()`` includes them).
        Each reads :meth:`latest` when it is evaluated: the values of the last consuming step
        that finished. Only ``scalars`` are made (a source without a queue leaves out
        ``queue_size``). Each watched ``"auto"`` stage (:meth:`watch_workers`) gets one more,
        ``input/workers/<stage>``: its worker count when evaluated. Idempotent: a second call
        creates nothing."""
        if self._summaries:
            return []
        for name, _ in self._stages:
            with tf.name_scope("input_source_stats"), on_host():
                value = numpy_function(functools.partial(self._workers_array, name), [], tf.float32,
                                       stateful=True, name="workers_" + _tag(name))
                value.set_shape([])
            self._summaries.append(tf.compat.v1.summary.scalar("input/workers/" + _tag(name), value))
        for stat in [s for s in self.SCALARS if s in scalars]:
            with tf.name_scope("input_source_stats"), on_host():     # numpy_function: no GPU kernel
                value = numpy_function(functools.partial(self._latest_array, stat), [], tf.float32,
                                       stateful=True, name="{}_{}".format(scope, stat))
                value.set_shape([])
            self._summaries.append(tf.compat.v1.summary.scalar("input_source/{}/{}".format(scope, stat), value))
        return list(self._summaries)

    def _latest_array(self, stat: str) -> np.float32:
        return np.float32(self.latest(stat))

    def _workers_array(self, name: str) -> np.float32:
        return np.float32(self.worker_counts().get(name, 0))
