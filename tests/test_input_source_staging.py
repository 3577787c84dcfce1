"""StagingInput over finite data: every datapoint reaches a step exactly once, in order, then a
clean OutOfRangeError; never a batch thrown away by a failing dequeue at the end."""
import time

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.dataflow.base import DataFlow
from inputpipe.input_source import (
    BatchQueueInput, FeedInput, InputSourceError, QueueInput, StagingInput, TFDatasetInput, hooked_session,
)

from input_source_helpers import BATCH_SPECS, SPECS, Counting, build, expected_x, labels_until_the_end

INNER = {
    "QueueInput": lambda df: QueueInput(df, infinite=False),
    "FeedInput": lambda df: FeedInput(df, infinite=False),
}


def _labels_until_out_of_range(run, label, limit=50):
    got = []
    with pytest.raises(tf.errors.OutOfRangeError):
        for _ in range(limit):
            got.append(run(label).tolist())
    return got


def _staged_dataset(make_dataset, nr_stage, specs=SPECS):
    """StagingInput(TFDatasetInput(make_dataset())) set up in a fresh graph: (source, graph, tensors)."""
    graph = tf.Graph()
    with graph.as_default():
        source = StagingInput(TFDatasetInput(make_dataset()), nr_stage=nr_stage, device="/cpu:0")
        source.setup(specs)
        tensors = source.get_input_tensors()
    return source, graph, tensors


def _counting_dataset(n):
    return lambda: TFDatasetInput.dataflow_to_dataset(Counting(n), [tf.float32, tf.int32], shapes=[[3], []])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inner", sorted(INNER) + ["TFDatasetInput"])
@pytest.mark.parametrize("n", [0, 1, 2, 7])
@pytest.mark.parametrize("nr_stage", [1, 2, 3])
def test_every_datapoint_once_in_order_then_out_of_range(nr_stage, n, inner):
    if inner == "TFDatasetInput":            # the dataset must be built in the model's graph
        source, graph, (x, label) = _staged_dataset(_counting_dataset(n), nr_stage)
    else:
        source = StagingInput(INNER[inner](Counting(n)), nr_stage=nr_stage, device="/cpu:0")
        graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        got = []
        with pytest.raises(tf.errors.OutOfRangeError, match="end of data"):
            for _ in range(n + 5):
                xv, lv = run([x, label])
                np.testing.assert_array_equal(xv, expected_x(int(lv)))
                got.append(int(lv))
        with pytest.raises(tf.errors.OutOfRangeError):     # and it stays ended
            run(label)
    assert got == list(range(n))
    assert source.stats.steps == n


@pytest.mark.parametrize("n", [2, 7, 9])
@pytest.mark.parametrize("nr_stage", [1, 2, 3])
def test_batch_queue_input_last_partial_batch_is_staged_too(nr_stage, n):
    source = StagingInput(BatchQueueInput(Counting(n), batch_size=3, infinite=False), nr_stage=nr_stage)
    graph, (x, label) = build(source, BATCH_SPECS)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        batches = _labels_until_out_of_range(run, label)
    assert batches == [list(range(i, min(i + 3, n))) for i in range(0, n, 3)]


class SlowEnd(DataFlow):
    """Yields ``n`` datapoints at once, then takes ``pause`` seconds to find out it has ended:
    a step waiting for "one more, or the end" must not start a dequeue that then fails."""

    def __init__(self, n, pause):
        self.n = n
        self.pause = pause

    def __len__(self):
        return self.n

    def __iter__(self):
        yield from Counting(self.n)
        time.sleep(self.pause)


@pytest.mark.parametrize("nr_stage", [1, 3])
def test_slow_end_of_data_loses_nothing(nr_stage):
    source = StagingInput(QueueInput(SlowEnd(4, pause=0.3), infinite=False), nr_stage=nr_stage)
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        got = _labels_until_out_of_range(run, label)
    assert got == [0, 1, 2, 3]


@pytest.mark.parametrize("nr_stage", [1, 2, 3])
def test_monitored_training_session_stops_cleanly_after_the_last_batch(nr_stage):
    source = StagingInput(QueueInput(Counting(5), infinite=False), nr_stage=nr_stage)
    graph, (x, label) = build(source)
    assert labels_until_the_end(source, graph, label) == [0, 1, 2, 3, 4]


def test_non_consuming_steps_at_the_end_take_nothing():
    source = StagingInput(QueueInput(Counting(3), infinite=False), nr_stage=2)
    graph, (x, label) = build(source)
    with graph.as_default():
        unrelated = tf.constant(7)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        got = [int(run(label))]
        assert [run(unrelated) for _ in range(3)] == [7, 7, 7]
        got += _labels_until_out_of_range(run, label)
        assert run(unrelated) == 7                # after the end, other runs still work
    assert got == [0, 1, 2]


def test_failed_step_resynchronises_and_never_hangs():
    source = StagingInput(QueueInput(Counting(8), infinite=False), nr_stage=2)
    graph, (x, label) = build(source)
    with graph.as_default():
        ok = tf.compat.v1.placeholder_with_default(True, [])
        with tf.control_dependencies([tf.debugging.Assert(ok, [label])]):
            checked = tf.identity(label)
    started = time.monotonic()
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        got = [int(run(checked)) for _ in range(2)]
        with pytest.raises(tf.errors.InvalidArgumentError):
            run(checked, feed_dict={ok: False})       # this step's batch (2) is consumed by the failure
        got += _labels_until_out_of_range(run, checked)
    assert time.monotonic() - started < 10
    assert got[:2] == [0, 1] and 2 not in got
    assert got == sorted(set(got)) and got[-1] <= 7 and len(got) >= 6


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nr_stage", [1, 3])
def test_tf_dataset_last_partial_batch_reaches_a_step_in_monitored_session(nr_stage):
    def batches():
        labels = np.arange(8, dtype=np.int32)
        xs = np.stack([expected_x(i) for i in labels])
        return tf.data.Dataset.from_tensor_slices((xs, labels)).batch(3)
    source, graph, (x, label) = _staged_dataset(batches, nr_stage, BATCH_SPECS)
    got = []
    with graph.as_default():
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
            while not sess.should_stop():
                got.append(sess.run(label).tolist())
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7]]


@pytest.mark.timeout(60)
def test_tf_dataset_two_towers_share_the_elements_and_stop_together():
    graph = tf.Graph()
    with graph.as_default():
        source = StagingInput(TFDatasetInput(_counting_dataset(5)()), nr_stage=2, device="/cpu:0")
        source.setup(SPECS)
        _, first = source.get_input_tensors()
        _, second = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        pairs = []
        with pytest.raises(tf.errors.OutOfRangeError, match="end of data"):
            for _ in range(10):
                pairs.append(tuple(int(v) for v in run([first, second])))
    seen = sorted(label for pair in pairs for label in pair)
    assert seen == [0, 1, 2, 3]         # 4 was staged in tower 0 alone: a two-tower step needs two
    assert pairs == [(0, 2), (1, 3)]                    # prefill: tower 0 takes 0, 1; tower 1 takes 2, 3


def test_tf_dataset_cannot_feed_staged_and_unstaged_towers():
    graph = tf.Graph()
    with graph.as_default():
        inner = TFDatasetInput(_counting_dataset(3)())
        inner.setup(SPECS)
        inner.get_input_tensors()
        with pytest.raises(InputSourceError, match="TFDatasetInput: its tensors were already taken without "
                                                   "StagingInput"):
            staged = StagingInput(inner)
            staged.setup(SPECS)
            staged.get_input_tensors()


class PeekLabel(tf.compat.v1.train.SessionRunHook):
    """While ``active``, adds the label to every run: consumption StagingInput's own hook cannot
    see when the run's own fetches do not depend on the inputs."""

    def __init__(self, label):
        self.label = label
        self.active = False
        self.seen = []

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self.label) if self.active else None

    def after_run(self, run_context, run_values):
        if self.active:
            self.seen.append(int(run_values.results))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nr_stage", [1, 2, 3])
def test_batches_another_hook_takes_unseen_are_refilled_and_the_end_never_hangs(nr_stage):
    source = StagingInput(QueueInput(Counting(12), infinite=False), nr_stage=nr_stage)
    graph, (x, label) = build(source)
    with graph.as_default():
        unrelated = tf.constant(7)
    peek = PeekLabel(label)

    def unseen(runs):
        peek.active = True
        assert [run(unrelated) for _ in range(runs)] == [7] * runs
        peek.active = False

    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source, peek) as run:
        got = [int(run(label)) for _ in range(2)]
        unseen(1)                                       # takes 2
        got.append(int(run(label)))
        assert sess.run(source._area_sizes) == [nr_stage]       # refilled after the step
        unseen(nr_stage)                                # takes every staged batch: 4 .. 3 + nr_stage
        got += _labels_until_out_of_range(run, label)
        assert sess.run(source._area_sizes) == [0]
    taken = list(range(2, 3)) + list(range(4, 4 + nr_stage))
    assert peek.seen == taken
    assert got == [i for i in range(12) if i not in taken]
