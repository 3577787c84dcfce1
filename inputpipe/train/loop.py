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
import contextlib
import dataclasses
import sys
import time
from typing import Any, Callable, Dict, Optional, Sequence

import tensorflow as tf
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from ..input_source.base import InputSource
from ..input_source.session import hooked_session
from ..utils.logger import get_logger
from .checkpoints import Checkpoints

__all__ = ["train", "TrainSummary"]

logger = get_logger(__name__)


#: Seconds between progress-bar refreshes on a terminal, and when stderr is a file or a pipe
#: (logs, CI), where every refresh would add to the log.
TTY_REFRESH_SECONDS = 0.5
LOG_REFRESH_SECONDS = 60.0


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress_refresh_seconds(stream: Any) -> float:
    """How often a progress bar writing to ``stream`` refreshes: often on a terminal, rarely
    (:data:`LOG_REFRESH_SECONDS`) when the stream is a file or a pipe."""
    return TTY_REFRESH_SECONDS if _is_terminal(stream) else LOG_REFRESH_SECONDS


class _ProgressBar(tqdm):
    """tqdm without its monitor thread (which would outlive the loop), refreshing at
    :func:`progress_refresh_seconds`.

    On a terminal it is tqdm's redrawn bar; lines written with ``tqdm.write`` (and, during
    :func:`train`, log records of the root logger's console handlers) appear above it. In a
    log (not a terminal) each refresh is one plain line, written at most every
    :data:`LOG_REFRESH_SECONDS` plus a last one at the end, and other lines never clear or
    redraw it.

    Example::

        bar = _ProgressBar(total=100, file=io.StringIO())   # a log: one line now, one at close
    """

    monitor_interval = 0

    def __init__(self, *args: Any, **kwargs: Any):
        stream = kwargs.get("file") or sys.stderr
        self._log_lines = not _is_terminal(stream)
        self._last_line_time = -float("inf")
        kwargs.setdefault("mininterval", progress_refresh_seconds(stream))
        super().__init__(*args, **kwargs)

    def display(self, msg: Optional[str] = None, pos: Optional[int] = None) -> bool:
        if not self._log_lines:
            return super().display(msg, pos)
        now = time.monotonic()
        # msg '' only clears the bar; forced redraws (after tqdm.write) wait for the interval
        if msg == "" or now - self._last_line_time < self.mininterval:
            return False
        self._last_line_time = now
        self.fp.write((str(self) if msg is None else msg) + "\n")
        self.fp.flush()
        return True

    def clear(self, nolock: bool = False) -> None:
        if not self._log_lines:
            super().clear(nolock)

    def close(self) -> None:
        if self._log_lines and not self.disable:
            self._last_line_time = -float("inf")  # the final state is always written
            self.display()
            self.leave = False  # the line is written; tqdm's own close adds nothing more
        super().close()


@dataclasses.dataclass
class TrainSummary:
    """What :func:`train` measured. Times in seconds.

    The rates leave out the first ``warmup_steps`` steps (the source's warm-up: graph
    optimisation, queue filling), so ``seconds``, ``steps_per_second``, ``samples_per_second``
    and :attr:`ms_per_step` all cover the same :attr:`timed_steps` steps; a run not longer
    than the warm-up is timed over all its steps (``warmup_steps`` is then 0).
    ``total_seconds`` is the whole loop. ``input_wait_seconds`` and ``stall_fraction`` come
    from the source's statistics, which leave out the same warm-up steps.

    Example::

        summary = train(train_op, source, steps=100, batch_size=32)
        print(summary.timed_steps, summary.ms_per_step, summary.samples_per_second)
    """

    steps: int
    seconds: float
    steps_per_second: float
    samples_per_second: Optional[float]
    input_wait_seconds: float
    stall_fraction: float
    mean_queue_size: Optional[float]
    last_fetches: Dict[str, Any]
    warmup_steps: int = 0
    total_seconds: float = 0.0

    @property
    def timed_steps(self) -> int:
        """The steps the rates cover: all steps after the warm-up."""
        return self.steps - self.warmup_steps

    @property
    def ms_per_step(self) -> float:
        """Mean wall time of a timed step in milliseconds (``1000 / steps_per_second``)."""
        return 1e3 * self.seconds / self.timed_steps if self.timed_steps > 0 else 0.0

    def __str__(self) -> str:
        samples = "" if self.samples_per_second is None else ", {:.1f} samples/s".format(self.samples_per_second)
        queue = "" if self.mean_queue_size is None else ", mean queue size {:.1f}".format(self.mean_queue_size)
        if self.warmup_steps:
            timing = "{} steps in {:.2f} s; the {} after {} warm-up steps".format(
                self.steps, self.total_seconds, self.timed_steps, self.warmup_steps)
        else:
            timing = "{} steps in {:.2f} s".format(self.steps, self.seconds)
        return "{}: {:.2f} steps/s ({:.1f} ms/step){}; waited {:.2f} s for input ({:.1f}% of step time){}".format(
            timing, self.steps_per_second, self.ms_per_step, samples, self.input_wait_seconds,
            100 * self.stall_fraction, queue)


def train(train_op: Any, source: InputSource, steps: int, *, fetches: Optional[Dict[str, Any]] = None,
          batch_size: Optional[int] = None, session: Optional[tf.compat.v1.Session] = None,
          hooks: Sequence[tf.compat.v1.train.SessionRunHook] = (), progress: bool = True,
          callback: Optional[Callable[[int, Dict[str, Any]], None]] = None,
          checkpoint_dir: Optional[str] = None, save_every: Optional[int] = None) -> TrainSummary:
    """Run ``train_op`` (built on ``source.get_input_tensors()``) for ``steps`` steps.

    Without ``session``, a session on the train op's graph is created, global and local
    variables are initialized, and it is closed at the end. ``fetches`` (name -> tensor) are
    fetched with every step, shown in the progress bar and passed to ``callback(step, values)``.
    With ``progress``, a bar on stderr is redrawn every :data:`TTY_REFRESH_SECONDS` on a
    terminal; in a log (stderr is a file or a pipe) it is one line every
    :data:`LOG_REFRESH_SECONDS` and one at the end. Lines printed with ``tqdm.write`` do not
    break it.
    ``hooks`` are extra ``SessionRunHook``\\ s. The source is stopped and closed at the end (also on
    errors); a queue-based source cannot feed the same session again afterwards.
    With ``checkpoint_dir``, the latest checkpoint there is restored before the source starts
    (model, global step and the input position: the data continues after the last datapoint a
    saved step consumed), a checkpoint is saved every ``save_every`` steps and at the end.
    ``steps`` counts the steps of this call, also after a restore.

    Example::

        summary = train(train_op, source, steps=100, fetches={"loss": loss}, batch_size=32)
        assert summary.steps == 100
    """
    if steps < 0:
        raise ValueError("train: steps must be >= 0, got {}".format(steps))
    graph = source._graph
    own_session = session is None
    if session is None:
        session = tf.compat.v1.Session(graph=graph)
        with graph.as_default():
            session.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer()])
    checkpoints = Checkpoints(graph, checkpoint_dir, save_every) if checkpoint_dir else None
    if checkpoints is not None:
        checkpoints.restore(session)
    fetches = dict(fetches or {})
    values: Dict[str, Any] = {}
    bar = _ProgressBar(total=steps, disable=not progress, unit="step", dynamic_ncols=True)
    # on a terminal, log records go through tqdm.write so they do not break the bar
    redirect_logs = logging_redirect_tqdm(tqdm_class=_ProgressBar) if progress and not bar._log_lines \
        else contextlib.nullcontext()
    # Throughput leaves out the same warm-up steps as the source's input statistics (graph
    # optimisation and queue filling), unless the run is too short to have steps after them.
    warmup = source.stats.warmup_steps if steps > source.stats.warmup_steps else 0
    started = ended = loop_started = time.perf_counter()
    try:
        with redirect_logs, hooked_session(session, source, *hooks) as run:
            started = loop_started = time.perf_counter()
            for step in range(steps):
                values = run({"train_op": train_op, "fetches": fetches})["fetches"]
                if step + 1 == warmup:
                    started = time.perf_counter()
                if callback is not None:
                    callback(step, values)
                if checkpoints is not None:
                    checkpoints.step_done(session, step + 1)
                bar.update(1)
                if values:
                    bar.set_postfix({k: _short(v) for k, v in values.items()}, refresh=False)
            ended = time.perf_counter()
            if checkpoints is not None and checkpoints.last_saved_step != steps:
                checkpoints.save(session)
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
        mean_queue_size=stats["mean_queue_size"], last_fetches=values, warmup_steps=warmup,
        total_seconds=ended - loop_started)
    logger.info("%s: %s", source.name, summary)
    return summary


def _short(value: Any) -> str:
    try:
        return "{:.4g}".format(float(value))
    except (TypeError, ValueError):
        return str(value)[:12]
