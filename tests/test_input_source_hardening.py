"""Hardening of the InputSources: bad remote datapoints, run-time shape checks of datasets,
closing what runs under a source, staged batches before a failure, matching dict keys by name,
and the input-bound warning after recovery."""
import logging
import threading
import time

import numpy as np
import psutil
import pytest
import tensorflow as tf

from inputpipe.dataflow import BatchData, MultiProcessMapData, MultiProcessRunnerZMQ
from inputpipe.dataflow.remote import send_dataflow_zmq
from inputpipe.input_source import (
    BatchQueueInput, FeedInput, InputSourceError, InputStats, QueueInput, StagingInput, TFDatasetInput, ZMQInput, hooked_session,
)

from input_source_helpers import BATCH_SPECS, SPECS, Counting, Fixed, build, expected_x


def _good(i):
    return [expected_x(i), i]


# -- B1: one bad datapoint from a remote sender does not stop ZMQInput ------------------------------
def _push(datapoints, address):
    thread = threading.Thread(target=send_dataflow_zmq, args=(Fixed(datapoints), address),
                              kwargs={"num_epochs": 1}, name="test-sender")
    thread.start()
    return thread


def test_zmq_input_drops_and_counts_bad_datapoints_and_trains_on(caplog):
    bad = [[np.zeros(4, np.float32), 1],          # wrong shape
           [expected_x(1), 1.5],                  # lossy dtype
           [expected_x(1)],                       # wrong number of components
           {"x": expected_x(1)}]                  # dict missing a key
    datapoints = [_good(0), bad[0], _good(1), bad[1], bad[2], _good(2), bad[3], _good(3)]
    source = ZMQInput("tcp://127.0.0.1:*", hwm=20)
    graph, (x, label) = build(source)
    source.reset_state()
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
            sender = _push(datapoints, source.endpoints[0])
            got = [run([x, label]) for _ in range(4)]
    sender.join(5)
    assert [int(v) for _, v in got] == [0, 1, 2, 3]
    np.testing.assert_array_equal(got[2][0], expected_x(2))
    assert source.rejected == 4
    dropped = [r.getMessage() for r in caplog.records if "dropped a datapoint" in r.getMessage()]
    assert len(dropped) == 1, dropped                    # rate-limited: one warning for the burst
    assert "ZMQInput" in dropped[0] and "'x'" in dropped[0] and "(3,)" in dropped[0] and "(4,)" in dropped[0]
    assert source.failure() is None
    source.close()


def test_none_datapoint_is_rejected_and_counted():
    source = ZMQInput("tcp://127.0.0.1:*", hwm=20)
    graph, (x, label) = build(source)
    source.reset_state()
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        sender = _push([_good(0), None, _good(1)], source.endpoints[0])
        got = [int(run(label)) for _ in range(2)]
    sender.join(5)
    assert got == [0, 1] and source.rejected == 1
    source.close()


def test_local_sources_still_raise_on_a_bad_datapoint():
    source = QueueInput(Fixed([_good(0), [np.zeros(4, np.float32), 1]]))
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(InputSourceError, match="QueueInput: component 'x'"):
            with hooked_session(sess, source) as run:
                for _ in range(3):
                    run(label)


# -- B2: TFDatasetInput checks open shapes at run time ----------------------------------------------
@pytest.mark.parametrize("staged", [False, True])
def test_tf_dataset_input_checks_shapes_the_dataset_leaves_open(staged):
    specs = [tf.TensorSpec([None], tf.float32, "x"), tf.TensorSpec([2], tf.int32, "label")]
    datapoints = [[np.arange(3, dtype=np.float32), [0, 0]], [np.zeros((2, 3), np.float32), [1, 1]]]
    graph = tf.Graph()
    with graph.as_default():
        ds = TFDatasetInput.dataflow_to_dataset(Fixed(datapoints), [tf.float32, tf.int32])   # shapes unknown
        source = TFDatasetInput(ds)
        if staged:
            source = StagingInput(source, nr_stage=1)
        source.setup(specs)
        x, label = source.get_input_tensors()
    assert x.shape.as_list() == [None] and label.shape.as_list() == [2]
    got = []
    # unstaged, TF's check fails the step; staged, the bad element is read one step early, so the
    # check is recorded and the step that would take it raises it: the good batch before is trained on
    expected = InputSourceError if staged else tf.errors.InvalidArgumentError
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(expected) as info:
            with hooked_session(sess, source) as run:
                for _ in range(3):
                    got.append(run(x))
    assert len(got) == 1
    np.testing.assert_array_equal(got[0], np.arange(3, dtype=np.float32))
    message = str(info.value)
    shape = "got a value of shape [2 3]" if staged else "got a value of shape] [2 3]"
    for fragment in ["TFDatasetInput: component x (#0): expected shape (None,)", shape]:
        assert fragment in message, (fragment, message)


def test_tf_dataset_input_with_known_shapes_adds_no_check():
    graph = tf.Graph()
    with graph.as_default():
        ds = tf.data.Dataset.from_tensors((np.zeros(3, np.float32), np.int32(0)))
        source = TFDatasetInput(ds)
        source.setup(SPECS)
        source.get_input_tensors()
    assert not [op for op in graph.get_operations() if op.type == "Assert"]


# -- B3: close() stops every process and thread under the source within 2 s --------------------------
def _square(dp):
    return [dp[0] * dp[0], dp[1]]


def _children():
    alive = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(child.cmdline()):
                alive.add(child.pid)
        except psutil.Error:
            pass
    return alive


def _gone_within(pids, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not (pids & _children()):
            return True
        time.sleep(0.02)
    return False


FLOWS = {
    "MultiProcessRunnerZMQ": lambda: MultiProcessRunnerZMQ(Counting(), num_proc=2),
    "MultiProcessMapData": lambda: MultiProcessMapData(Counting(), num_proc=2, map_func=_square),
    "BatchData(MultiProcessMapData)": lambda: BatchData(MultiProcessMapData(Counting(), num_proc=2,
                                                                            map_func=_square), 2),
}


@pytest.mark.parametrize("end", ["close", "with_block", "monitored_session"])
@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_closing_stops_the_dataflows_worker_processes(flow, end):
    before = _children()
    source = QueueInput(FLOWS[flow]())
    graph, (x, label) = build(source, BATCH_SPECS if flow.startswith("BatchData") else SPECS)
    if end == "monitored_session":
        with graph.as_default():
            with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
                sess.run(label)
                workers = _children() - before
            ended = time.monotonic()
    else:
        sess = tf.compat.v1.Session(graph=graph)
        with hooked_session(sess, source) as run:
            run(label)
            workers = _children() - before
            if end == "close":
                ended = time.monotonic()
                source.close()
        if end == "with_block":
            ended = time.monotonic()
        sess.close()
    assert len(workers) >= 2
    assert _gone_within(workers, 2.0 - (time.monotonic() - ended)), "workers alive 2 s after the end"
    source.close()


# -- B4: StagingInput uses the batches staged before a bad datapoint ----------------------------------
STAGED_OVER = {
    "QueueInput(finite)": lambda df: QueueInput(df, infinite=False),
    "QueueInput(infinite)": lambda df: QueueInput(df),
    "FeedInput": lambda df: FeedInput(df),
}


@pytest.mark.parametrize("inner", sorted(STAGED_OVER))
@pytest.mark.parametrize("nr_stage", [1, 2, 3])
def test_staging_trains_on_the_batches_before_a_bad_datapoint(nr_stage, inner):
    good = 5
    datapoints = [_good(i) for i in range(good)] + [[np.zeros(4, np.float32), 99]]
    wrapped = STAGED_OVER[inner](Fixed(datapoints))
    source = StagingInput(wrapped, nr_stage=nr_stage)
    graph, (x, label) = build(source)
    got = []
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(InputSourceError, match="component 'x'") as info:
            with hooked_session(sess, source) as run:
                if inner != "FeedInput":      # let the feeding thread meet the bad datapoint first
                    deadline = time.monotonic() + 5
                    while wrapped.failure() is None and time.monotonic() < deadline:
                        time.sleep(0.01)
                for _ in range(good + 2):
                    got.append(int(run(label)))
    assert got == list(range(good)), "steps before the bad batch must train on the good ones"
    assert "(4,)" in str(info.value)


class LateFailure(Counting):
    """Yields ``good`` datapoints, then raises after ``pause`` seconds: the failure comes while
    the steps wait for the next batch (the dequeue of a restage already claimed, if any)."""

    def __init__(self, good, pause):
        super().__init__(good)
        self.pause = pause

    def __iter__(self):
        yield from super().__iter__()
        time.sleep(self.pause)
        raise KeyError("no file for datapoint {}".format(self.n))


LATE_SOURCES = {
    "QueueInput": lambda df: QueueInput(df),
    "QueueInput(finite)": lambda df: QueueInput(df, infinite=False),
    "BatchQueueInput": lambda df: BatchQueueInput(df, 2),
    "FeedInput": lambda df: FeedInput(df),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inner", sorted(LATE_SOURCES))
@pytest.mark.parametrize("nr_stage", [0, 1, 2, 3])
def test_a_failure_that_comes_while_the_step_waits_loses_no_batch_before_it(nr_stage, inner):
    good = 6
    wrapped = LATE_SOURCES[inner](LateFailure(good, pause=0.5))
    source = wrapped if nr_stage == 0 else StagingInput(wrapped, nr_stage=nr_stage, device="/cpu:0")
    graph, (x, label) = build(source, BATCH_SPECS if inner == "BatchQueueInput" else SPECS)
    got = []
    with graph.as_default():
        with pytest.raises(KeyError, match="no file for datapoint 6") as info:
            with tf.compat.v1.train.MonitoredSession(hooks=source.get_hooks()) as sess:
                for _ in range(good + 3):
                    got.append(sess.run(label).tolist())
    assert isinstance(info.value, InputSourceError)
    expected = [[0, 1], [2, 3], [4, 5]] if inner == "BatchQueueInput" else list(range(good))
    assert got == expected, "every batch before the failure reaches a step, then the failure is raised"


# -- B6: dict datapoints are matched by name, not position --------------------------------------------
DICT_SOURCES = {
    "FeedInput": lambda df: FeedInput(df),
    "QueueInput": lambda df: QueueInput(df),
    "StagingInput(QueueInput)": lambda df: StagingInput(QueueInput(df)),
    "TFDatasetInput(DataFlow)": lambda df: TFDatasetInput(df),
}


@pytest.mark.parametrize("name", sorted(DICT_SOURCES))
def test_dict_datapoints_in_another_key_order_are_matched_by_name(name):
    specs = [tf.TensorSpec([2, 2], tf.float32, "image"), tf.TensorSpec([2, 2], tf.float32, "mask")]
    image = np.array([[1, 2], [3, 4]], np.float32)
    mask = np.array([[0, 1], [1, 0]], np.float32)
    source = DICT_SOURCES[name](Fixed([{"mask": mask, "image": image}]))
    graph, (image_t, mask_t) = build(source, specs)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        got_image, got_mask = run([image_t, mask_t])
    np.testing.assert_array_equal(got_image, image)
    np.testing.assert_array_equal(got_mask, mask)


# -- B6: the input-bound warning reflects the recent window --------------------------------------------
def test_no_input_bound_warning_after_recovery(caplog):
    stats = InputStats("QueueInput", window=50, warn_fraction=0.2, warn_interval=0.0, warmup_steps=0)
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        for _ in range(50):
            stats.record(wait=0.09, step_time=0.1)           # 90% waiting
        slow = len(caplog.records)
        for step in range(100):
            if step == 50:
                caplog.clear()
            stats.record(wait=0.0, step_time=0.01)
    assert slow > 0                                           # the slow phase was reported
    assert [r.getMessage() for r in caplog.records] == []     # the last 50 fast steps are not
    assert stats._history_wait == pytest.approx(0.0, abs=1e-9)
