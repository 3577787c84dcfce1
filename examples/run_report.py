"""The tables train_resnet.py prints: the summary of one training run and the side-by-side
comparison of InputSources.

Every rate in a table comes from one set of steps: the steps after the warm-up steps that
``inputpipe.train.train`` leaves out (graph optimisation, queue filling), so images/s, ms per
step and the input wait agree with each other (``ms/step * steps/s = 1000``). Each table says
how many warm-up steps were left out. No TensorFlow import here.

Example::

    from run_report import RunNumbers, comparison_table
    rows = [RunNumbers("feed", steps=45, warmup_steps=5, seconds=8.8, batch_size=64, wait_ms=105.0),
            RunNumbers("staging", steps=45, warmup_steps=5, seconds=4.6, batch_size=64, wait_ms=2.0)]
    print(comparison_table(rows))
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np
from tabulate import tabulate

#: Below this share of the step spent waiting for input, the input is called hidden ("no").
HIDDEN_FRACTION = 0.05


@dataclass
class RunNumbers:
    """The measured numbers of one run: ``steps`` in all, of which the first ``warmup_steps``
    are left out of every rate; ``seconds`` covers the other steps; ``wait_ms`` is the mean input
    wait of those steps (from the InputSource's statistics), ``None`` when none were counted.

    Example::

        numbers = RunNumbers("staging", steps=105, warmup_steps=5, seconds=12.0, batch_size=64, wait_ms=0.4)
        numbers.ms_per_step          # 120.0
    """

    input: str
    steps: int
    warmup_steps: int
    seconds: float
    batch_size: int
    wait_ms: Optional[float]

    @property
    def timed_steps(self) -> int:
        return self.steps - self.warmup_steps

    @property
    def steps_per_second(self) -> float:
        return self.timed_steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def images_per_second(self) -> float:
        return self.steps_per_second * self.batch_size

    @property
    def ms_per_step(self) -> float:
        return 1e3 * self.seconds / self.timed_steps if self.timed_steps > 0 else 0.0

    @property
    def wait_fraction(self) -> Optional[float]:
        """The share of the (wall-clock) step spent waiting for input."""
        if self.wait_ms is None or self.ms_per_step <= 0:
            return None
        return min(1.0, self.wait_ms / self.ms_per_step)


def numbers_of(input_name: str, summary, stats: dict, batch_size: int) -> RunNumbers:
    """:class:`RunNumbers` from a ``TrainSummary`` and ``source.stats.summary()`` (both leave out
    the same warm-up steps; a run too short for them has no input wait to report)."""
    return RunNumbers(input_name, summary.steps, summary.warmup_steps, summary.seconds, batch_size,
                      stats["mean_wait_ms"] if summary.warmup_steps else None)


def input_bound_verdict(wait_fraction: Optional[float], warn_fraction: float) -> str:
    """"no" / "partly" / "yes", always with how much of the step waited for input.

    ``warn_fraction`` is the library's own threshold (``source.stats.warn_fraction``) above which
    it logs that training is input-bound."""
    if wait_fraction is None:
        return "unknown: no steps after the warm-up (raise --steps)"
    waited = "the step waited for input {:.1f}% of its time".format(100 * wait_fraction)
    if wait_fraction < HIDDEN_FRACTION:
        return "no: " + waited
    if wait_fraction < warn_fraction:
        return "partly: {} (add --workers to hide it)".format(waited)
    return "yes: {}; add --workers, use --lmdb, or a lighter pipeline".format(waited)


def rates_note(numbers: RunNumbers, what: str = "rates over") -> str:
    """Which steps the rates cover, e.g. "rates over the last 595 of 600 steps: 5 warm-up steps left out"."""
    if numbers.warmup_steps:
        return "{} the last {} of {} steps: {} warm-up steps left out".format(
            what, numbers.timed_steps, numbers.steps, numbers.warmup_steps)
    return "{} all {} steps: the run is too short to leave out warm-up steps".format(what, numbers.steps)


def summary_table(numbers: RunNumbers, total_seconds: float, losses: Sequence[float], *,
                  warn_fraction: float, queue: Optional[str], corrupt: Optional[str]) -> str:
    """The summary of one training run. ``queue`` and ``corrupt`` are the text of those rows, or
    ``None`` to leave the row out (no queue; no files read)."""
    tenth = max(1, len(losses) // 10)
    if numbers.wait_ms is None:
        wait = "- (no steps after the warm-up)"
    else:
        wait = "{:.1f} ms of {:.1f} ms per step ({:.1f}%)".format(
            numbers.wait_ms, numbers.ms_per_step, 100 * numbers.wait_fraction)
    rows = [
        ["images/s", "{:.1f}".format(numbers.images_per_second)],
        ["time per step", "{:.1f} ms".format(numbers.ms_per_step)],
        ["waiting for input", wait],
    ]
    if queue is not None:
        rows.append(["queue occupancy (mean)", queue])
    rows.append(["input-bound", input_bound_verdict(numbers.wait_fraction, warn_fraction)])
    rows.append(["loss (first -> last {} steps)".format(tenth), "{:.3f} -> {:.3f}".format(
        float(np.mean(losses[:tenth])), float(np.mean(losses[-tenth:])))])
    if corrupt is not None:
        rows.append(["corrupt images skipped", corrupt])
    rows.append(["steps x batch", "{} x {} in {:.1f} s ({} timed: {:.1f} s)".format(
        numbers.steps, numbers.batch_size, total_seconds, numbers.timed_steps, numbers.seconds)])
    return "\nsummary ({} input; {}):\n{}".format(numbers.input, rates_note(numbers),
                                                 tabulate(rows, tablefmt="simple_outline"))


COMPARISON_HEADERS = ["input", "images/s", "steps/s", "ms/step", "input wait ms/step", "input wait %",
                      "speed-up over {}"]


def comparison_table(runs: Sequence[RunNumbers]) -> str:
    """One row per run, side by side; the speed-up is over ``feed`` if it ran, else the first."""
    base = next((r for r in runs if r.input == "feed"), runs[0])
    headers = COMPARISON_HEADERS[:-1] + [COMPARISON_HEADERS[-1].format(base.input)]
    rows: List[list] = []
    for r in runs:
        wait_ms = "-" if r.wait_ms is None else "{:.1f}".format(r.wait_ms)
        wait_pct = "-" if r.wait_fraction is None else "{:.1f}".format(100 * r.wait_fraction)
        speedup = r.steps_per_second / base.steps_per_second if base.steps_per_second > 0 else float("nan")
        rows.append([r.input, "{:.1f}".format(r.images_per_second), "{:.2f}".format(r.steps_per_second),
                     "{:.1f}".format(r.ms_per_step), wait_ms, wait_pct, "{:.2f}x".format(speedup)])
    return tabulate(rows, headers=headers, tablefmt="simple_outline", disable_numparse=True)


def wait_note(runs: Sequence[RunNumbers]) -> List[str]:
    """How to read the input wait column (it is the time the op producing the step's batch
    blocked, which for staging overlaps the model's compute)."""
    if not any(r.input == "staging" for r in runs):
        return []
    return ["input wait: how long the op producing a batch blocked within the step; staging's op fetches the "
            "next batch while the model computes on the current one, so its wait overlaps the compute"]


def expectation(runs: Sequence[RunNumbers], data_ms: Optional[float]) -> List[str]:
    """What the table should show, from D (one batch of data work, timed alone) and T (the
    dummy run's step), next to what it did show."""
    by_name = {r.input: r for r in runs}
    if data_ms is None or "dummy" not in by_name:
        return []
    step_ms = by_name["dummy"].ms_per_step
    lines = ["D = {:.0f} ms of data work per batch (timed alone), T = {:.0f} ms per step with no input (dummy)"
             .format(data_ms, step_ms),
             "expected: feed about D + T = {:.0f} ms per step; queue and staging about max(D, T) = {:.0f} ms"
             .format(data_ms + step_ms, max(data_ms, step_ms))]
    measured = ["{} {:.0f} ms".format(r.input, r.ms_per_step) for r in runs if r.input != "dummy"]
    if measured:
        lines.append("measured: " + ", ".join(measured))
    return lines
