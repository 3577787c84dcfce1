"""Per-step input statistics: queue occupancy and the time the train step waited for input.

Each InputSource has an :class:`InputStats` (``source.stats``). Its hook fills it on every step
that consumes inputs, from values fetched in that same ``session.run`` (no extra run). The
``tf.compat.v1.summary`` scalars that show the latest values in TensorBoard read them from
Python (a ``tf.numpy_function``) only in the runs that evaluate them, so a step pays nothing
for them. When the steps spend more than ``warn_fraction`` of their time waiting for input, a
warning is logged (at most once every ``warn_interval`` seconds).

Example::

    print(source.stats.summary())
    # {'steps': 100, 'input_wait_s': 0.4, 'stall_fraction': 0.02, 'mean_queue_size': 37.5, ...}
"""
import collections
import functools
import threading
import time
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from ..utils.logger import get_logger
from .placement import on_host

__all__ = ["InputStats"]

logger = get_logger(__name__)


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
                 warn_interval: float = 60.0, warmup_steps: int = 5):
        self.owner = owner
        self.window = window
        self.warn_fraction = warn_fraction
        self.warn_interval = warn_interval
        self.warmup_steps = warmup_steps
        self._lock = threading.Lock()
        self._summaries: List[tf.Tensor] = []
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
            self.last: Dict[str, float] = {}
            self.history = collections.deque(maxlen=self.window)
            self._history_wait = 0.0          # sums over ``history``, kept up to date as it slides
            self._history_time = 0.0
            self._last_warning = -float("inf")

    def record(self, wait: float, step_time: float, queue_size: Optional[float] = None) -> None:
        """Record one consuming step: ``wait`` and ``step_time`` in seconds."""
        wait, step_time = float(wait), float(step_time)           # plain Python numbers, not numpy scalars
        queue_size = None if queue_size is None else float(queue_size)
        with self._lock:
            self.steps += 1
            if self.steps <= self.warmup_steps:
                # the first steps include graph warm-up and queue filling: keep them out of totals
                self.last = {"wait_ms": wait * 1e3, "step_ms": step_time * 1e3}
                if queue_size is not None:
                    self.last["queue_size"] = float(queue_size)
                return
            self.total_wait += wait
            self.total_step_time += step_time
            self.last = {"wait_ms": wait * 1e3, "step_ms": step_time * 1e3}
            if queue_size is not None:
                self.last["queue_size"] = float(queue_size)
                self.queue_size_sum += queue_size
                self.queue_size_steps += 1
                self.empty_steps += int(queue_size == 0)
            if len(self.history) == self.history.maxlen:
                dropped_wait, dropped_time, _ = self.history[0]
                self._history_wait -= dropped_wait
                self._history_time -= dropped_time
            self.history.append((wait, step_time, queue_size))
            self._history_wait += wait
            self._history_time += step_time
            self._maybe_warn()

    def _maybe_warn(self) -> None:
        if len(self.history) < min(self.window, 20):
            return
        waited, spent = self._history_wait, self._history_time
        if spent <= 0 or waited / spent < self.warn_fraction:
            return
        now = time.monotonic()
        if now - self._last_warning < self.warn_interval:
            return
        self._last_warning = now
        sizes = [h[2] for h in self.history if h[2] is not None]
        empty = "" if not sizes else ", the queue was empty at {:.0f}% of them".format(
            100.0 * sum(s == 0 for s in sizes) / len(sizes))
        logger.warning(
            "%s: training is input-bound: over the last %d steps the train step waited for input "
            "%.0f%% of the time (%.1f ms per step%s). Make the DataFlow faster (e.g. run it in "
            "parallel) or prefetch more.", self.owner, len(self.history), 100.0 * waited / spent,
            1e3 * waited / len(self.history), empty)

    @property
    def stall_fraction(self) -> float:
        """Fraction of step time spent waiting for input (after warm-up)."""
        return self.total_wait / self.total_step_time if self.total_step_time > 0 else 0.0

    @property
    def mean_queue_size(self) -> Optional[float]:
        return self.queue_size_sum / self.queue_size_steps if self.queue_size_steps else None

    def summary(self) -> Dict[str, Optional[float]]:
        """A dict of the totals (plain Python ``int``/``float``/None), e.g. for logging or a table."""
        counted = max(self.steps - self.warmup_steps, 0)
        return {
            "steps": self.steps,
            "input_wait_s": self.total_wait,
            "mean_wait_ms": 1e3 * self.total_wait / counted if counted else 0.0,
            "stall_fraction": self.stall_fraction,
            "mean_queue_size": self.mean_queue_size,
            "empty_queue_fraction": self.empty_steps / self.queue_size_steps if self.queue_size_steps else None,
        }

    # -- TensorBoard ----------------------------------------------------------------------------
    def latest(self, stat: str) -> float:
        """The latest recorded value of ``stat`` (one of :data:`SCALARS`), 0 before any step."""
        return float(self.last.get(stat, 0.0))

    def build_summaries(self, scope: str, scalars: Sequence[str] = SCALARS) -> List[tf.Tensor]:
        """Create ``tf.compat.v1.summary.scalar``\\ s named ``input_source/<scope>/<stat>`` in the
        default graph (added to the SUMMARIES collection, so ``merge_all()`` includes them).
        Each reads :meth:`latest` when it is evaluated: the values of the last consuming step
        that finished. Only ``scalars`` are made (a source without a queue leaves out
        ``queue_size``). Idempotent: a second call creates nothing."""
        if self._summaries:
            return []
        for stat in [s for s in self.SCALARS if s in scalars]:
            with tf.name_scope("input_source_stats"), on_host():     # numpy_function: no GPU kernel
                value = tf.numpy_function(functools.partial(self._latest_array, stat), [], tf.float32,
                                          stateful=True, name="{}_{}".format(scope, stat))
                value.set_shape([])
            self._summaries.append(tf.compat.v1.summary.scalar("input_source/{}/{}".format(scope, stat), value))
        return list(self._summaries)

    def _latest_array(self, stat: str) -> np.ndarray:
        return np.float32(self.latest(stat))
