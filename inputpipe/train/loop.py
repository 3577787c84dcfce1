"""``train()``: run a train op for N steps over an InputSource with a progress bar, then report
throughput and how long the steps waited for input.

Example::

    graph = tf.Graph()
    with graph.as_default():
        source = StagingInput(QueueInput(df))
        source.setup(specs)
        x, y = source.get_input_tensors()
        loss = ...
        train_op = tf.compat.v1.train.AdamOptimizer().minimize(loss)
    summary = train(train_op, source, steps=500, batch_size=64, fetches={"loss": loss})
"""
import dataclasses
import time
from typing import Any, Callable, Dict, Optional, Sequence

import tensorflow as tf
from tqdm.auto import tqdm

from ..input_source.base import InputSource
from ..input_source.session import hooked_session
from ..utils.logger import get_logger

__all__ = ["train", "TrainSummary"]

logger = get_logger(__name__)


class _ProgressBar(tqdm):
    """tqdm without its monitor thread (which would outlive the loop)."""

    monitor_interval = 0


@dataclasses.dataclass
class TrainSummary:
    """What :func:`train` measured. Times in seconds. ``seconds``, ``steps_per_second`` and
    ``samples_per_second`` cover the steps after the source's warm-up steps (all steps when the run
    is not longer than the warm-up); ``stall_fraction`` is the share of step time spent waiting
    for input, from the source's statistics over the same steps."""

    steps: int
    seconds: float
    steps_per_second: float
    samples_per_second: Optional[float]
    input_wait_seconds: float
    stall_fraction: float
    mean_queue_size: Optional[float]
    last_fetches: Dict[str, Any]

    def __str__(self) -> str:
        samples = "" if self.samples_per_second is None else ", {:.1f} samples/s".format(self.samples_per_second)
        queue = "" if self.mean_queue_size is None else ", mean queue size {:.1f}".format(self.mean_queue_size)
        return ("{} steps in {:.2f} s: {:.2f} steps/s{}; waited {:.2f} s for input ({:.1f}% of step time){}".format(
            self.steps, self.seconds, self.steps_per_second, samples, self.input_wait_seconds,
            100 * self.stall_fraction, queue))


def train(train_op: Any, source: InputSource, steps: int, *, fetches: Optional[Dict[str, Any]] = None,
          batch_size: Optional[int] = None, session: Optional[tf.compat.v1.Session] = None,
          hooks: Sequence[tf.compat.v1.train.SessionRunHook] = (), progress: bool = True,
          callback: Optional[Callable[[int, Dict[str, Any]], None]] = None) -> TrainSummary:
    """Run ``train_op`` (built on ``source.get_input_tensors()``) for ``steps`` steps.

    Without ``session``, a session on the train op's graph is created, global and local
    variables are initialized, and it is closed at the end. ``fetches`` (name -> tensor) are
    fetched with every step, shown in the progress bar and passed to ``callback(step, values)``.
    ``hooks`` are extra ``SessionRunHook``\\ s. The source is stopped and closed at the end (also on
    errors); a queue-based source cannot feed the same session again afterwards.

    Example::

        summary = train(train_op, source, steps=100, fetches={"loss": loss}, batch_size=32)
        assert summary.steps == 100
    """
    if steps < 0:
        raise ValueError("train: steps must be >= 0, got {}".format(steps))
    graph = source._graph
    own_session = session is None
    if own_session:
        session = tf.compat.v1.Session(graph=graph)
        with graph.as_default():
            session.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
    fetches = dict(fetches or {})
    values: Dict[str, Any] = {}
    bar = _ProgressBar(total=steps, disable=not progress, unit="step", dynamic_ncols=True)
    # Throughput leaves out the same warm-up steps as the source's input statistics (graph
    # optimisation and queue filling), unless the run is too short to have steps after them.
    warmup = source.stats.warmup_steps if steps > source.stats.warmup_steps else 0
    started = ended = time.perf_counter()
    try:
        with hooked_session(session, source, *hooks) as run:
            started = time.perf_counter()
            for step in range(steps):
                values = run({"train_op": train_op, "fetches": fetches})["fetches"]
                if step + 1 == warmup:
                    started = time.perf_counter()
                if callback is not None:
                    callback(step, values)
                bar.update(1)
                if values:
                    bar.set_postfix({k: _short(v) for k, v in values.items()}, refresh=False)
            ended = time.perf_counter()
        seconds = ended - started
        timed_steps = steps - warmup
    finally:
        bar.close()
        if own_session:
            session.close()
    stats = source.stats.summary()
    summary = TrainSummary(
        steps=steps, seconds=seconds, steps_per_second=timed_steps / seconds if seconds > 0 else 0.0,
        samples_per_second=timed_steps * batch_size / seconds if batch_size and seconds > 0 else None,
        input_wait_seconds=stats["input_wait_s"], stall_fraction=stats["stall_fraction"],
        mean_queue_size=stats["mean_queue_size"], last_fetches=values)
    logger.info("%s: %s", source.name, summary)
    return summary


def _short(value: Any) -> str:
    try:
        return "{:.4g}".format(float(value))
    except (TypeError, ValueError):
        return str(value)[:12]
