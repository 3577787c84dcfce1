"""Shutdown (threads stop within 2 s), staging semantics and per-step statistics."""
import logging
import threading
import time

import pytest
import tensorflow as tf

from inputpipe.input_source import FeedInput, InputStats, QueueInput, StagingInput, hooked_session

from input_source_helpers import Counting, build, feeding_threads


def _wait_no_feeders(seconds=2.0):
    deadline = time.monotonic() + seconds
    while feeding_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return not feeding_threads()


def test_leaving_the_with_block_stops_the_thread_while_enqueue_blocks():
    source = QueueInput(Counting())           # endless: the queue fills up and the enqueue blocks
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        run(label)
        time.sleep(0.2)
        assert len(feeding_threads()) == 1
        started = time.monotonic()
    assert _wait_no_feeders() and time.monotonic() - started < 2


def test_exception_in_training_loop_stops_the_thread():
    source = StagingInput(QueueInput(Counting()), nr_stage=2)
    graph, (x, label) = build(source)
    with pytest.raises(KeyError):
        with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
            run(label)
            raise KeyError("user bug")
    assert _wait_no_feeders()


def test_closing_the_plain_session_under_the_thread_stops_it():
    source = QueueInput(Counting())
    graph, (x, label) = build(source)
    sess = tf.compat.v1.Session(graph=graph)
    source.get_hooks()[0].after_create_session(sess, None)   # started by hand, never stopped by a hook
    time.sleep(0.2)
    sess.close()                                              # the enqueue is blocked on a full queue
    assert _wait_no_feeders()
    source.close()
    source.close()                                            # idempotent


def test_exception_in_monitored_session_stops_the_thread():
    source = QueueInput(Counting())
    graph, (x, label) = build(source)
    with graph.as_default():
        with pytest.raises(ZeroDivisionError):
            with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks(),
                                                             stop_grace_period_secs=2) as sess:
                sess.run(label)
                raise ZeroDivisionError("an error in the training loop")
    assert _wait_no_feeders()


def test_source_context_manager_closes():
    with QueueInput(Counting()) as source:
        graph, (x, label) = build(source)
        sess = tf.compat.v1.Session(graph=graph)
        for hook in source.get_hooks():
            hook.after_create_session(sess, None)
        assert int(sess.run(label)) == 0
    assert _wait_no_feeders()
    sess.close()


@pytest.mark.parametrize("nr_stage", [1, 2, 3])
def test_staging_places_ops_on_device_prefills_and_skips_non_consuming_steps(nr_stage):
    inner = QueueInput(Counting())
    source = StagingInput(inner, nr_stage=nr_stage, device="/cpu:0")
    graph, (x, label) = build(source)
    stage_ops = [op for op in graph.get_operations() if op.type in ("Stage", "Unstage")]
    assert {op.type for op in stage_ops} == {"Stage", "Unstage"}
    assert all(op.device == "/device:CPU:0" for op in stage_ops), [op.device for op in stage_ops]
    with graph.as_default():
        unrelated = tf.constant(5)
        size = inner.queue.size()
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        # prefilled before the first step: nr_stage datapoints left the queue already
        deadline = time.monotonic() + 2
        while run(size) < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        got = [int(run(label))]
        for _ in range(3):
            assert run(unrelated) == 5          # fetches nothing from the inputs: consumes nothing
        got += [int(run(label)) for _ in range(nr_stage + 2)]
    assert got == list(range(nr_stage + 3))


def test_statistics_every_step_without_extra_runs(caplog):
    source = QueueInput(Counting(delay=0.03))      # slow data: the step waits ~30 ms for input
    source.stats.warmup_steps = 2
    graph, (x, label) = build(source)


    class CountingSession(tf.compat.v1.Session):
        main_runs = 0

        def run(self, *args, **kwargs):
            if threading.current_thread() is threading.main_thread():
                CountingSession.main_runs += 1
            return super().run(*args, **kwargs)

    with graph.as_default():
        merged = tf.compat.v1.summary.merge_all()
    assert merged is None                           # summaries are made by the hook's begin()
    steps = 25
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        with CountingSession(graph=graph) as sess, hooked_session(sess, source) as run:
            runs_at_start = CountingSession.main_runs     # one: the input position record's reset
            for _ in range(steps):
                run(label)
            runs_for_steps = CountingSession.main_runs - runs_at_start
            with graph.as_default():
                merged = tf.compat.v1.summary.merge_all()
            summary = tf.compat.v1.Summary.FromString(run(merged))
    assert runs_at_start == 1
    assert runs_for_steps == steps                  # stats rode along in the training runs
    stats = source.stats
    assert stats.steps == steps                     # running the summaries consumed no batch
    assert stats.summary()["mean_wait_ms"] > 10
    assert 0.3 < stats.stall_fraction <= 1.0
    assert stats.mean_queue_size is not None and stats.mean_queue_size < 1.0
    assert set(stats.last) >= {"wait_ms", "queue_size", "step_ms"}
    values = {v.tag: v.simple_value for v in summary.value}
    assert set(values) == {"input_source/QueueInput/wait_ms", "input_source/QueueInput/queue_size"}
    assert values["input_source/QueueInput/wait_ms"] > 10
    assert any("input-bound" in r.getMessage() and "QueueInput" in r.getMessage() for r in caplog.records)


def test_no_input_bound_warning_when_data_is_ready(caplog):
    source = StagingInput(QueueInput(Counting()), nr_stage=1)
    graph, (x, label) = build(source)
    with graph.as_default():
        slow = tf.numpy_function(lambda v: (time.sleep(0.005), v)[1], [label], tf.int32)
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
            time.sleep(0.3)
            for _ in range(30):
                run(slow)
    assert not [r for r in caplog.records if "input-bound" in r.getMessage()]
    assert source.stats.mean_queue_size > 10
    assert source.stats.stall_fraction < 0.2


def _tiny_steps(stats, queue_sizes, delivered_per_step, wait=0.00011):
    """60 steps of 0.5 ms, ``wait`` of each waiting for input; the DataFlow delivers
    ``delivered_per_step`` datapoints per 0.1 ms of its wall time."""
    for step, size in zip(range(60), queue_sizes):
        delivered = delivered_per_step * (step + 1)
        stats.record(wait, 0.0005, size, datapoints=1, feed=(delivered, 0.0, 1e-4 * (step + 1), 0.0))


def test_a_wait_with_data_always_queued_is_not_called_input_bound(caplog):
    stats = InputStats("QueueInput", warn_interval=0.0, warmup_steps=0)
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        _tiny_steps(stats, [40] * 60, delivered_per_step=10)
    assert not [r for r in caplog.records if "input-bound" in r.getMessage()]
    assert stats.limit() == ("not input-bound: 22% of step time waiting (with data always queued: the input's own "
                             "work in the step); the DataFlow delivers 100,000 datapoints/s, the step consumes "
                             "2,564/s")


@pytest.mark.parametrize("queue_sizes, delivered_per_step", [
    ([0, 1] * 30, 10),            # the queue ran empty at half of the steps
    ([1] * 60, 0.1),              # never empty when measured, but the DataFlow delivers 1,000/s of the 2,564/s
])
def test_a_wait_for_missing_data_is_input_bound(queue_sizes, delivered_per_step, caplog):
    stats = InputStats("QueueInput", warn_interval=0.0, warmup_steps=0)
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        _tiny_steps(stats, queue_sizes, delivered_per_step)
    assert [r for r in caplog.records if "training is input-bound: 22% of step time waiting" in r.getMessage()]
    assert stats.limit().startswith("input-bound: 22% of step time waiting; the DataFlow delivers ")


def test_feed_input_wait_is_measured_in_python():
    source = FeedInput(Counting(delay=0.02))
    source.stats.warmup_steps = 0
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        for _ in range(3):
            run(label)
    assert source.stats.steps == 3 and source.stats.total_wait >= 0.05
