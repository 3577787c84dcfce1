"""Every InputSource: values intact and in order, plain Session and MonitoredTrainingSession."""
import numpy as np
import pytest
import tensorflow as tf

from inputpipe.input_source import (
    BatchQueueInput, DummyConstantInput, FeedInput, PlaceholderInput, QueueInput, StagingInput,
    TensorInput, TFDatasetInput, hooked_session, remap_input_source,
)

from input_source_helpers import BATCH_SPECS, SPECS, Counting, Fixed, build, expected_x, labels_until_the_end

N_STEPS = 7


def _check_sequence(results, start=0):
    for step, (x, label) in enumerate(results):
        i = start + step
        assert x.dtype == np.float32 and x.shape == (3,)
        np.testing.assert_array_equal(x, expected_x(i))
        assert int(label) == i


SOURCES = {
    "FeedInput": lambda: FeedInput(Counting(5)),
    "QueueInput": lambda: QueueInput(Counting(5)),
    "Staging1(Queue)": lambda: StagingInput(QueueInput(Counting(5)), nr_stage=1, device="/cpu:0"),
    "Staging2(Queue)": lambda: StagingInput(QueueInput(Counting(5)), nr_stage=2, device="/cpu:0"),
    "Staging3(Feed)": lambda: StagingInput(FeedInput(Counting(5)), nr_stage=3),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_values_in_order_plain_session_and_epochs_repeat(name):
    source = SOURCES[name]()
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        results = [run([x, label]) for _ in range(N_STEPS)]
    # 5 per epoch, infinite by default: 0..4, 0, 1
    for step, (xv, lv) in enumerate(results):
        np.testing.assert_array_equal(xv, expected_x(step % 5))
        assert int(lv) == step % 5 and xv.dtype == np.float32
    assert source.size() == 5


@pytest.mark.parametrize("name", ["QueueInput", "Staging2(Queue)", "FeedInput"])
def test_values_in_order_monitored_training_session(name):
    source = SOURCES[name]()
    graph, (x, label) = build(source)
    with graph.as_default():
        tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
            results = [sess.run([x, label]) for _ in range(4)]
    _check_sequence(results)


def test_batch_queue_input_batches_in_order_and_finite_last_partial_batch():
    source = BatchQueueInput(Counting(7), batch_size=3, infinite=False)
    graph, (x, label) = build(source, BATCH_SPECS)
    assert x.shape.as_list() == [None, 3]
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        batches = [run(label) for _ in range(3)]
        with pytest.raises(tf.errors.OutOfRangeError):
            run(label)
    assert [b.tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    assert source.size() == 2


def test_batch_queue_input_infinite_has_static_batch_dimension():
    source = BatchQueueInput(Counting(4), batch_size=3)
    graph, (x, label) = build(source, BATCH_SPECS)
    assert x.shape.as_list() == [3, 3]
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        xs, labels = run([x, label])
        assert labels.tolist() == [0, 1, 2]
        np.testing.assert_array_equal(xs[1], expected_x(1))
        assert run(label).tolist() == [3, 0, 1]


@pytest.mark.parametrize("cls", [QueueInput, FeedInput])
def test_finite_dataflow_ends_with_clean_out_of_range(cls):
    source = cls(Counting(3), infinite=False)
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        results = [run([x, label]) for _ in range(3)]
        with pytest.raises(tf.errors.OutOfRangeError):
            run(label)
    _check_sequence(results)


def test_finite_dataflow_in_monitored_session_ends_cleanly():
    source = QueueInput(Counting(3), infinite=False)
    graph, (x, label) = build(source)
    assert labels_until_the_end(source, graph, label) == [0, 1, 2]


def test_tf_dataset_input_from_dataflow_list_datapoints():
    graph = tf.Graph()
    with graph.as_default():
        ds = TFDatasetInput.dataflow_to_dataset(Counting(4), [tf.float32, tf.int32], shapes=[[3], []])
        assert ds.element_spec[0].shape.as_list() == [3]
        source = TFDatasetInput(ds)
        source.setup(SPECS)
        x, label = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        results = [run([x, label]) for _ in range(4)]
        with pytest.raises(tf.errors.OutOfRangeError):
            run(x)
        source.reset_state()                 # starts the dataset again
        assert int(run(label)) == 0
    _check_sequence(results)


def test_tf_dataset_input_dict_datapoints_any_key_order():
    datapoints = [{"label": i, "x": expected_x(i)} for i in range(3)]
    graph = tf.Graph()
    with graph.as_default():
        ds = TFDatasetInput.dataflow_to_dataset(
            Fixed(datapoints), {"label": tf.TensorSpec([], tf.int32), "x": tf.TensorSpec([3], tf.float32)})
        source = TFDatasetInput(ds.repeat())
        source.setup(SPECS)
        x, label = source.get_input_tensors()
    with graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
        results = [sess.run([x, label]) for _ in range(5)]
    assert [int(r[1]) for r in results] == [0, 1, 2, 0, 1]
    np.testing.assert_array_equal(results[2][0], expected_x(2))


def test_tf_dataset_input_plain_tf2_dataset():
    xs = np.arange(12, dtype=np.float32).reshape(4, 3)
    graph = tf.Graph()
    with graph.as_default():
        ds = tf.data.Dataset.from_tensor_slices((xs, np.arange(4, dtype=np.int32))).batch(2)
        source = TFDatasetInput(ds)
        source.setup(BATCH_SPECS)
        x, label = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        first, second = run([x, label]), run([x, label])
    np.testing.assert_array_equal(first[0], xs[:2])
    assert second[1].tolist() == [2, 3]


def test_tensor_input_and_dummy_constant_input():
    counter_graph = tf.Graph()
    with counter_graph.as_default():
        source = TensorInput(lambda: [tf.fill([3], 1.5), tf.constant(4, tf.int32)], size=10)
        source.setup(SPECS)
        x, label = source.get_input_tensors()
        dummy = DummyConstantInput([[2, 3], [2]])
        dummy.setup(BATCH_SPECS)
        dx, dlabel = dummy.get_input_tensors()
    assert dx.shape.as_list() == [2, 3] and dlabel.dtype == tf.int32
    with tf.compat.v1.Session(graph=counter_graph) as sess, hooked_session(sess, source, dummy) as run:
        xv, lv, dxv, dlv = run([x, label, dx, dlabel])
    np.testing.assert_array_equal(xv, [1.5, 1.5, 1.5])
    assert int(lv) == 4 and source.size() == 10
    assert dxv.tolist() == [[0, 0, 0], [0, 0, 0]] and dlv.tolist() == [0, 0]
    with pytest.raises(NotImplementedError):
        dummy.size()


def test_placeholder_input_is_fed_by_the_user():
    source = PlaceholderInput()
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        assert int(run(label * 2, feed_dict={label: 21})) == 42


def test_remap_input_source_adds_placeholders_and_reorders():
    specs = [tf.TensorSpec([], tf.float32, "score"), SPECS[1], SPECS[0]]
    inner = QueueInput(Counting(5))
    source = remap_input_source(inner, ["x", "label"])
    graph, (score, label, x) = build(source, specs)
    assert score.op.type == "Placeholder"
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        results = [run([x, label, score * 2], feed_dict={score: 1.0}) for _ in range(3)]
    _check_sequence([(r[0], r[1]) for r in results])
    assert results[0][2] == 2.0
    assert source.stats is inner.stats and inner.stats.steps == 3


def test_staging_of_remapped_source():
    source = StagingInput(remap_input_source(QueueInput(Counting(5)), ["x", "label"]), nr_stage=2)
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        results = [run([x, label]) for _ in range(4)]
    _check_sequence(results)


def test_two_towers_each_get_their_own_batches():
    source = QueueInput(Counting())
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        _, label0 = source.get_input_tensors()
        _, label1 = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        pairs = [sorted(int(v) for v in run([label0, label1])) for _ in range(3)]
        only_first = int(run(label0))
    assert sorted(sum(pairs, [])) == list(range(6))
    assert only_first == 6


def test_setup_rejects_unnamed_specs_and_double_setup():
    source = QueueInput(Counting(2))
    graph = tf.Graph()
    with graph.as_default():
        with pytest.raises(ValueError, match="has no name"):
            source.setup([tf.TensorSpec([3], tf.float32)])
        source.setup(SPECS)
        with pytest.raises(RuntimeError, match="already"):
            source.setup(SPECS)
    with pytest.raises(RuntimeError, match="setup"):
        QueueInput(Counting(2)).get_input_tensors()


def test_zmq_input_receives_pushed_datapoints_in_order():
    import threading

    from inputpipe.dataflow.remote import send_dataflow_zmq
    from inputpipe.input_source import ZMQInput

    source = ZMQInput("tcp://127.0.0.1:*", hwm=10)
    graph, (x, label) = build(source)
    source.reset_state()
    sender = threading.Thread(target=send_dataflow_zmq, args=(Counting(6), source.endpoints[0]),
                              kwargs={"num_epochs": 1}, name="test-sender")
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        sender.start()
        results = [run([x, label]) for _ in range(6)]
    sender.join(5)
    assert not sender.is_alive()
    _check_sequence(results)
    assert source.stats.steps == 6
    source.close()
    source.close()


def test_zmq_input_fails_clearly_when_producers_fall_silent(caplog):
    """Producers that die leave the trainer waiting: with ``timeout`` the step fails with an error
    naming the source and the address within about that time, after one datapoint arrived."""
    import logging
    import threading
    import time

    from inputpipe.dataflow.remote import send_dataflow_zmq
    from inputpipe.input_source import InputSourceError, ZMQInput

    source = ZMQInput("tcp://127.0.0.1:*", hwm=10, timeout=0.6, warn_after=0.25)
    graph, (x, label) = build(source)
    source.reset_state()
    sender = threading.Thread(target=send_dataflow_zmq, args=(Counting(1), source.endpoints[0]),
                              kwargs={"num_epochs": 1}, name="test-sender")
    received = []
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        with pytest.raises(InputSourceError) as info:
            with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
                sender.start()
                received.append(run([x, label]))
                started = time.monotonic()
                run([x, label])  # the producer sent its only datapoint: silence, then the error
        waited = time.monotonic() - started
    sender.join(5)
    source.close()
    assert len(received) == 1 and int(received[0][1]) == 0
    assert waited < 0.6 + 2.0, "the error plus shutdown took {:.2f} s".format(waited)
    message = str(info.value)
    assert "ZMQInput" in message and source.endpoints[0] in message and "none arrived" in message
    assert any("no datapoint arrived" in r.getMessage() for r in caplog.records)


def test_zmq_input_rejects_bad_health_settings():
    from inputpipe.input_source import ZMQInput

    with pytest.raises(ValueError, match="ZMQInput: timeout must be a positive"):
        ZMQInput("tcp://127.0.0.1:*", hwm=10, timeout=0)
    with pytest.raises(ValueError, match="ZMQInput: warn_after must be a positive"):
        ZMQInput("tcp://127.0.0.1:*", hwm=10, warn_after=-1)
