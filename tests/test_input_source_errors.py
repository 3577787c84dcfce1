"""Bad datapoints and failing DataFlows become clear errors in the training thread, fast."""
import time

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.input_source import (
    BatchQueueInput, FeedInput, InputSourceError, QueueInput, StagingInput, TFDatasetInput, TensorInput,
    hooked_session,
)

from input_source_helpers import BATCH_SPECS, SPECS, Fixed, Raising, build, expected_x

GOOD = [expected_x(0), 0]
BAD = {
    "components": ([expected_x(1)], ["2 (x, label)", "has 1 components"]),
    "shape": ([np.zeros(4, np.float32), 1], ["'x'", "(3,)", "(4,)"]),
    "dtype": ([expected_x(1), 1.5], ["'label'", "int32", "float64", "lose data"]),
    "float_array_to_int": ([expected_x(1), np.array(2.0)], ["'label'", "int32", "float64"]),
    "int_overflow": ([expected_x(1), 2 ** 40], ["'label'", "int32", "int64"]),
}
SOURCES = {
    "QueueInput": lambda df: QueueInput(df),
    "FeedInput": lambda df: FeedInput(df),
    "StagingInput": lambda df: StagingInput(QueueInput(df), nr_stage=1),
}


@pytest.mark.parametrize("kind", sorted(BAD))
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_bad_datapoint_is_a_clear_error_in_the_training_thread(name, kind):
    bad, fragments = BAD[kind]
    source = SOURCES[name](Fixed([GOOD, bad]))
    graph, (x, label) = build(source)
    started = time.monotonic()
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(InputSourceError) as info:
            with hooked_session(sess, source) as run:
                for _ in range(5):
                    run(label)
    assert time.monotonic() - started < 5
    message = str(info.value)
    expected_name = "QueueInput" if name == "StagingInput" else name
    for fragment in [expected_name] + fragments:
        assert fragment in message, (fragment, message)


def test_lossless_conversions_are_accepted():
    datapoints = [[[0, 0.5, 0], 0], [np.array([1, 1.5, -1], np.float64), np.int64(1)], [[2, 2.5, -2], np.uint8(2)]]
    source = QueueInput(Fixed(datapoints))
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        results = [run([x, label]) for _ in range(3)]
    for i, (xv, lv) in enumerate(results):
        np.testing.assert_array_equal(xv, expected_x(i))
        assert int(lv) == i


def test_dataflow_to_dataset_rejects_lossy_datapoint_naming_component():
    graph = tf.Graph()
    with graph.as_default():
        ds = TFDatasetInput.dataflow_to_dataset(Fixed([[expected_x(0), 0.5]]), [tf.float32, tf.int32])
        source = TFDatasetInput(ds)
        source.setup(SPECS)
        _, label = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        with pytest.raises(tf.errors.OpError, match="component1.*int32.*float"):
            run(label)


def test_tf_dataset_input_checks_element_spec_and_graph():
    eager_ds = tf.data.Dataset.from_tensors((np.zeros(3, np.float32), np.int32(0)))
    graph = tf.Graph()
    with graph.as_default():
        with pytest.raises(InputSourceError, match="outside this graph"):
            TFDatasetInput(eager_ds).setup(SPECS)
        wrong = tf.data.Dataset.from_tensors((np.zeros(3, np.float32), np.int64(0)))
        with pytest.raises(InputSourceError, match="'label'.*int32.*int64"):
            TFDatasetInput(wrong).setup(SPECS)
        three = tf.data.Dataset.from_tensors((np.zeros(3, np.float32), np.int32(0), np.int32(0)))
        with pytest.raises(InputSourceError, match="3 components"):
            TFDatasetInput(three).setup(SPECS)


def test_tensor_input_checks_tensors():
    graph = tf.Graph()
    with graph.as_default():
        source = TensorInput(lambda: [tf.zeros([3]), tf.zeros([], tf.float32)])
        source.setup(SPECS)
        with pytest.raises(InputSourceError, match="TensorInput.*'label'.*int32.*float32"):
            source.get_input_tensors()


def test_queue_with_wrong_dtypes_is_rejected():
    graph = tf.Graph()
    with graph.as_default():
        queue = tf.queue.FIFOQueue(5, [tf.float32, tf.int64])
        with pytest.raises(InputSourceError, match="int64"):
            QueueInput(Fixed([GOOD]), queue=queue).setup(SPECS)
        with pytest.raises(InputSourceError, match="every other dimension known"):
            BatchQueueInput(Fixed([GOOD]), 2).setup([tf.TensorSpec([None, None], tf.float32, "x")])


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_raising_dataflow_reaches_training_thread_within_a_second(name):
    source = SOURCES[name](Raising(good=2))
    graph, (x, label) = build(source)
    got = []
    # the failure may even arrive during StagingInput's prefill, before any step succeeds
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(InputSourceError) as info:
            failed_at = time.monotonic()
            with hooked_session(sess, source) as run:
                failed_at = time.monotonic()
                while True:
                    got.append(int(run(label)))
                    failed_at = time.monotonic()
    assert time.monotonic() - failed_at < 1.0
    assert "boom at 2" in str(info.value)
    assert ("FeedInput" if name == "FeedInput" else "QueueInput") in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)      # the original exception, with its traceback
    assert info.value.__cause__.__traceback__ is not None
    assert got == [0, 1][:len(got)]


def test_raising_dataflow_in_monitored_session():
    source = QueueInput(Raising(good=2))
    graph, (x, label) = build(source)
    got = []
    with graph.as_default():
        with pytest.raises(InputSourceError, match="boom at 2"):
            with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
                for _ in range(10):
                    got.append(int(sess.run(label)))
    assert got == [0, 1][:len(got)]


def test_exhausted_generator_dataflow_is_an_error_not_a_spin():
    class OneShot(Fixed):
        def __init__(self):
            super().__init__([])
            self.it = iter([GOOD])

        def __iter__(self):
            return self.it

    source = QueueInput(OneShot())
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(InputSourceError, match="no datapoint in an epoch"):
            with source.session(sess) as run:
                for _ in range(3):
                    run(label)


def test_batch_queue_bad_datapoint_names_component():
    source = BatchQueueInput(Fixed([[expected_x(0), 0], [expected_x(1)[:2], 1]]), batch_size=2)
    graph, (x, label) = build(source, BATCH_SPECS)
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(InputSourceError, match=r"BatchQueueInput.*'x'.*\(3,\).*\(2,\)"):
            with source.session(sess) as run:
                run(x)
