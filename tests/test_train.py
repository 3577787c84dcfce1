"""The small trainer: runs N steps over an InputSource and reports throughput and stalls."""
import logging

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
