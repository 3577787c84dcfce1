"""The small trainer: runs N steps over an InputSource and reports throughput and stalls."""
import io
import logging
import sys

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.input_source import QueueInput, StagingInput
from inputpipe.train import TrainSummary, train

from input_source_helpers import Counting, Raising, build, feeding_threads


def _model(source):
    graph, (x, label) = build(source)
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", [3], initializer=tf.compat.v1.zeros_initializer())
        seen = tf.compat.v1.get_variable("seen", [], tf.int32, initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_sum(tf.square(x - w))
        step = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)
        with tf.control_dependencies([step]):
            train_op = tf.compat.v1.assign_add(seen, label)
    return graph, train_op, loss, seen


def test_train_runs_n_steps_and_reports(caplog):
    source = StagingInput(QueueInput(Counting(10)), nr_stage=2)
    graph, train_op, loss, seen = _model(source)
    seen_values = []
    with caplog.at_level(logging.INFO, logger="inputpipe"):
        summary = train(train_op, source, steps=12, fetches={"loss": loss, "seen": seen}, batch_size=4,
                        progress=False, callback=lambda step, v: seen_values.append(int(v["seen"])))
    assert isinstance(summary, TrainSummary)
    assert summary.steps == 12 and summary.seconds > 0
    assert summary.samples_per_second == pytest.approx(4 * summary.steps_per_second)
    # labels 0..9 then 0, 1: the running sum seen by each step, read in the same run as the step
    labels = list(range(10)) + [0, 1]
    assert seen_values[-1] in (sum(labels), sum(labels[:-1]))
    assert np.isfinite(summary.last_fetches["loss"])
    assert 0.0 <= summary.stall_fraction <= 1.0
    assert "12 steps" in str(summary) and "waited" in str(summary)
    assert any("12 steps" in r.getMessage() for r in caplog.records)
    assert not feeding_threads()


def test_train_propagates_input_failure_and_cleans_up():
    source = QueueInput(Raising(good=2))
    graph, train_op, loss, seen = _model(source)
    with pytest.raises(Exception, match="boom at 2"):
        train(train_op, source, steps=10, progress=False)


def test_train_with_own_session_and_zero_steps():
    source = QueueInput(Counting())
    graph, train_op, loss, seen = _model(source)
    with tf.compat.v1.Session(graph=graph) as sess:
        with graph.as_default():
            sess.run(tf.compat.v1.global_variables_initializer())
        summary = train(train_op, source, steps=3, session=sess, progress=True)
        assert summary.steps == 3 and int(sess.run(seen)) == 0 + 1 + 2
    with pytest.raises(ValueError):
        train(train_op, source, steps=-1)
    source = QueueInput(Counting())
    graph, train_op, loss, seen = _model(source)
    assert train(train_op, source, steps=0, progress=False).steps == 0


def test_throughput_leaves_out_the_warm_up_steps():
    """A slow first step (graph warm-up) must not lower the reported steps/s: only the steps after
    the source's warm-up steps are timed."""
    source = QueueInput(Counting())
    graph, train_op, loss, seen = _model(source)
    calls = []

    def slow_first_call():
        calls.append(1)
        if len(calls) == 1:
            import time
            time.sleep(1.5)
        return np.int32(len(calls))

    with graph.as_default():
        with tf.control_dependencies([train_op]):
            timed_op = tf.numpy_function(slow_first_call, [], tf.int32)
    warmup = source.stats.warmup_steps
    summary = train(timed_op, source, steps=warmup + 10, batch_size=2, progress=False)
    assert len(calls) == warmup + 10
    assert summary.steps == warmup + 10
    assert summary.seconds < 1.5, "the 1.5 s warm-up step was timed"
    assert summary.steps_per_second == pytest.approx(10 / summary.seconds)
    assert summary.samples_per_second == pytest.approx(20 / summary.seconds)


def test_summary_rates_cover_the_same_timed_steps():
    source = QueueInput(Counting())
    graph, train_op, loss, seen = _model(source)
    warmup = source.stats.warmup_steps
    summary = train(train_op, source, steps=warmup + 7, batch_size=3, progress=False)
    assert (summary.steps, summary.warmup_steps, summary.timed_steps) == (warmup + 7, warmup, 7)
    assert summary.ms_per_step == pytest.approx(1e3 * summary.seconds / 7)
    assert summary.ms_per_step * summary.steps_per_second == pytest.approx(1000.0)
    assert summary.samples_per_second == pytest.approx(3 * summary.steps_per_second)
    assert summary.total_seconds >= summary.seconds > 0
    assert str(summary).startswith("{} steps in {:.2f} s; the 7 after {} warm-up steps: {:.2f} steps/s ({:.1f} "
                                   "ms/step), {:.1f} samples/s; waited".format(
                                       warmup + 7, summary.total_seconds, warmup, summary.steps_per_second,
                                       summary.ms_per_step, summary.samples_per_second))
    # not longer than the warm-up: timed over all steps
    source = QueueInput(Counting())
    graph, train_op, loss, seen = _model(source)
    short = train(train_op, source, steps=2, progress=False)
    assert (short.warmup_steps, short.timed_steps) == (0, 2)
    assert short.ms_per_step == pytest.approx(1e3 * short.seconds / 2)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_refreshes_rarely_when_not_a_terminal():
    from inputpipe.train.loop import LOG_REFRESH_SECONDS, TTY_REFRESH_SECONDS, progress_refresh_seconds

    assert progress_refresh_seconds(_Terminal()) == TTY_REFRESH_SECONDS == 0.5
    assert progress_refresh_seconds(io.StringIO()) == LOG_REFRESH_SECONDS == 60.0
    assert progress_refresh_seconds(object()) == LOG_REFRESH_SECONDS  # no isatty at all


def test_progress_in_a_log_is_one_line_at_start_and_one_at_the_end_and_writes_do_not_break_it():
    from tqdm.auto import tqdm

    from inputpipe.train.loop import _ProgressBar

    log = io.StringIO()
    bar = _ProgressBar(total=800, file=log, unit="step")
    for step in range(800):
        bar.update(1)
        bar.set_postfix({"loss": "0.5"}, refresh=False)
        if (step + 1) % 80 == 0:
            tqdm.write("step {} loss 0.5".format(step + 1), file=log)
    bar.close()
    lines = log.getvalue().split("\n")
    assert "\r" not in log.getvalue()
    assert lines[-1] == ""
    bars = [line for line in lines[:-1] if "step/s" in line or "?step/s" in line]
    assert len(bars) == 2, lines
    assert bars[0].startswith("  0%") and "0/800" in bars[0]
    assert bars[1].startswith("100%") and "800/800" in bars[1] and "loss=0.5" in bars[1]
    assert [line for line in lines[:-1] if line not in bars] == ["step {} loss 0.5".format(n)
                                                                 for n in range(80, 801, 80)]


def test_progress_on_a_terminal_redraws_in_place():
    from inputpipe.train.loop import _ProgressBar

    screen = _Terminal()
    bar = _ProgressBar(total=3, file=screen, unit="step", mininterval=0)
    for _ in range(3):
        bar.update(1)
    bar.close()
    out = screen.getvalue()
    assert out.count("\r") >= 4 and out.endswith("\n") and out.count("\n") == 1
    assert "3/3" in out


def test_train_progress_to_a_log_writes_two_lines(capsys):
    source = QueueInput(Counting())
    graph, train_op, loss, seen = _model(source)
    train(train_op, source, steps=30, fetches={"loss": loss}, progress=True)
    err = capsys.readouterr().err
    bars = [line for line in err.split("\n") if "/30" in line]
    assert len(bars) == 2, err
    assert "30/30" in bars[-1] and "loss=" in bars[-1]


def test_log_records_during_training_do_not_break_the_bar_on_a_terminal(monkeypatch):
    """On a terminal, a warning logged mid-run goes through tqdm.write: the bar is cleared, the
    record gets a line of its own, and the bar is redrawn below it."""
    screen = _Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    handler = logging.StreamHandler(screen)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        source = QueueInput(Counting())
        graph, train_op, loss, seen = _model(source)

        def warn_at_step_3(step, values):
            if step == 3:
                logging.getLogger("user").warning("something to say at step 4")

        train(train_op, source, steps=8, fetches={"loss": loss}, progress=True, callback=warn_at_step_3)
        assert root.handlers[-1] is handler  # the console handler is back after the run
    finally:
        root.removeHandler(handler)
    out = screen.getvalue()
    [line] = [line for line in out.split("\n") if "something to say" in line]
    assert line.split("\r")[-1] == "WARNING something to say at step 4"
    assert "8/8" in out.split("something to say at step 4")[1]  # the bar goes on below it
