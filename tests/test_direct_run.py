"""DirectRunner: the feeding thread's enqueue without session.run's Python work gives what
session.run gives (values, dtypes, errors, timeouts, a closed session), falls back to session.run
where TensorFlow's internals are not there, and is what QueueInput's feeding thread uses."""
import numpy as np
import pytest
import tensorflow as tf

from inputpipe.input_source import QueueInput, hooked_session
from inputpipe.input_source.direct_run import DirectRunner

from input_source_helpers import SPECS, Counting, build

v1 = tf.compat.v1
pytestmark = pytest.mark.timeout(60)


def _queue_graph():
    graph = tf.Graph()
    with graph.as_default():
        placeholders = [v1.placeholder(tf.float32, [2, 3]), v1.placeholder(tf.string, []),
                        v1.placeholder(tf.bool, [None]), v1.placeholder(tf.int64, [])]
        queue = tf.queue.FIFOQueue(2, [p.dtype for p in placeholders])
        enqueue = queue.enqueue(placeholders)
        dequeue = queue.dequeue()
    return graph, placeholders, enqueue, dequeue


def _options(ms=1000):
    return v1.RunOptions(timeout_in_ms=ms)


def _values(seed):
    return [np.arange(6, dtype=np.float32).reshape(2, 3) + seed, "name{}".format(seed).encode(),
            [True, False, seed % 2 == 0], np.int64(seed)]


def _check(got, seed):
    want = _values(seed)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].dtype == np.float32
    assert got[1] == want[1]
    np.testing.assert_array_equal(got[2], np.array(want[2]))
    assert got[2].dtype == np.bool_
    assert got[3] == seed and got[3].dtype == np.int64


def test_enqueues_what_session_run_would_with_the_values_converted_alike():
    graph, placeholders, enqueue, dequeue = _queue_graph()
    with v1.Session(graph=graph) as sess:
        runner = DirectRunner(sess, _options())
        try:
            assert runner.direct
            runner.run(enqueue, dict(zip(placeholders, _values(1))))      # lists, bytes, numpy scalars
            sess.run(enqueue, feed_dict=dict(zip(placeholders, _values(2))))
            _check(sess.run(dequeue), 1)
            _check(sess.run(dequeue), 2)
        finally:
            runner.close()


def test_a_full_queue_times_out_like_session_run():
    graph, placeholders, enqueue, _ = _queue_graph()
    with v1.Session(graph=graph) as sess:
        runner = DirectRunner(sess, _options(200))
        try:
            for seed in range(2):
                runner.run(enqueue, dict(zip(placeholders, _values(seed))))
            with pytest.raises(tf.errors.DeadlineExceededError):
                runner.run(enqueue, dict(zip(placeholders, _values(3))))
        finally:
            runner.close()


def test_a_closed_session_raises_what_session_run_raises():
    graph, placeholders, enqueue, _ = _queue_graph()
    sess = v1.Session(graph=graph)
    runner = DirectRunner(sess, _options())
    sess.close()
    try:
        with pytest.raises(RuntimeError, match="Attempted to use a closed Session"):
            runner.run(enqueue, dict(zip(placeholders, _values(0))))
    finally:
        runner.close()


def test_ops_added_after_the_session_started_run():
    graph = tf.Graph()
    with graph.as_default():
        first = v1.placeholder(tf.int32, [])
        queue = tf.queue.FIFOQueue(4, [tf.int32])
    with v1.Session(graph=graph) as sess:
        sess.run(queue.size())
        with graph.as_default():
            enqueue = queue.enqueue([first])          # added after the session's first run
        runner = DirectRunner(sess, _options())
        try:
            runner.run(enqueue, {first: 7})
        finally:
            runner.close()
        assert sess.run(queue.dequeue()) == 7


class _SessionLike:
    """Not a tf.compat.v1.Session (e.g. a debugging wrapper): has run() only."""

    def __init__(self, sess):
        self.sess, self.calls = sess, 0

    def run(self, fetches, feed_dict=None, options=None):
        self.calls += 1
        return self.sess.run(fetches, feed_dict=feed_dict, options=options)


def test_another_kind_of_session_is_run_through_its_run_method():
    graph, placeholders, enqueue, dequeue = _queue_graph()
    with v1.Session(graph=graph) as sess:
        wrapper = _SessionLike(sess)
        runner = DirectRunner(wrapper, _options())
        try:
            assert not runner.direct
            runner.run(enqueue, dict(zip(placeholders, _values(4))))
        finally:
            runner.close()
        assert wrapper.calls == 1
        _check(sess.run(dequeue), 4)


def test_after_close_it_runs_through_session_run():
    graph, placeholders, enqueue, dequeue = _queue_graph()
    with v1.Session(graph=graph) as sess:
        runner = DirectRunner(sess, _options())
        runner.close()
        runner.close()                                    # twice is harmless
        assert not runner.direct
        runner.run(enqueue, dict(zip(placeholders, _values(5))))
        _check(sess.run(dequeue), 5)


def test_queue_input_feeds_through_it(monkeypatch):
    runs = []
    original = DirectRunner.run

    def counting_run(self, op, feed):
        runs.append(self.direct)
        return original(self, op, feed)

    monkeypatch.setattr(DirectRunner, "run", counting_run)
    source = QueueInput(Counting(20), infinite=False)
    graph, (x, label) = build(source, SPECS)
    with graph.as_default(), v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        got = [run([x, label]) for _ in range(20)]
    assert [int(lab) for _, lab in got] == list(range(20))
    assert len(runs) == 20 and all(runs)
