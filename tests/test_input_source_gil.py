"""GIL-free feeding (``in_worker=True``), the statistics that name the limit, and the leftovers
of the input-source work: StagingInput's default device and QueueInput's queued datapoints
after a DataFlow failure."""
import logging
import os
import re
import time

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.dataflow import DataFromList, seeding
from inputpipe.dataflow.base import DataFlow, DataFlowTerminated
from inputpipe.input_source import (
    BatchQueueInput, InputSourceError, InputStats, QueueInput, StagingInput, hooked_session,
)
from inputpipe.input_source import staging as staging_module
from inputpipe.utils.errors import WorkerError

from input_source_helpers import BATCH_SPECS, SPECS, Counting, Raising, build, expected_x, labels_until_the_end


def _burn(cpu_seconds):
    """Hold the GIL for ``cpu_seconds`` of this thread's CPU time (pure Python)."""
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


class NoLength(DataFlow):
    """``n`` datapoints per pass and no ``__len__``."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        yield from Counting(self.n)


class Pids(DataFlow):
    """Endless datapoints whose label is the pid of the process that made them."""

    def __iter__(self):
        while True:
            yield [np.zeros(3, np.float32), os.getpid()]


class Terminating(DataFlow):
    """Two datapoints, then DataFlowTerminated (a source told to stop)."""

    def __iter__(self):
        yield from Counting(2)
        raise DataFlowTerminated()


class Empty(DataFlow):
    def __iter__(self):
        return iter(())


class BurningCounting(Counting):
    """Counting whose every datapoint costs ``cost`` seconds of pure-Python CPU."""

    def __init__(self, cost):
        super().__init__()
        self.cost = cost

    def __iter__(self):
        for dp in super().__iter__():
            _burn(self.cost)
            yield dp


def _seeded_shuffle_labels(in_worker, make):
    seeding.set_global_seed(7)
    try:
        source = make(DataFromList([[expected_x(i), i] for i in range(12)], shuffle=True), in_worker)
        specs = BATCH_SPECS if isinstance(source, BatchQueueInput) else SPECS
        graph, (x, label) = build(source, specs)
        got = labels_until_the_end(source, graph, label)
        return [int(v) for v in np.ravel(np.concatenate([np.ravel(g) for g in got]))] if specs is BATCH_SPECS else got
    finally:
        seeding.set_global_seed(None)


def _labels(source, specs=SPECS):
    graph, (x, label) = build(source, specs)
    got = []
    with graph.as_default():
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
            while not sess.should_stop():
                got.extend(np.ravel(sess.run(label)).tolist())
    return got


# -- in_worker: same data, other process -----------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda df, w: QueueInput(df, infinite=False, in_worker=w),
    lambda df, w: StagingInput(QueueInput(df, infinite=False, in_worker=w), nr_stage=2),
], ids=["QueueInput", "StagingInput(QueueInput)"])
def test_in_worker_gives_the_same_datapoints_in_the_same_order(make):
    in_process = _seeded_shuffle_labels(False, make)
    in_worker = _seeded_shuffle_labels(True, make)
    assert sorted(in_process) == list(range(12))
    assert in_worker == in_process


def test_batch_queue_input_in_worker_keeps_order_and_the_partial_last_batch():
    source = BatchQueueInput(Counting(10), batch_size=4, infinite=False, in_worker=True)
    assert _labels(source, BATCH_SPECS) == list(range(10))


def test_in_worker_runs_the_dataflow_in_one_worker_process():
    source = QueueInput(Pids(), in_worker=True)
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        pids = {int(run(label)) for _ in range(5)}
        workers = source.worker_pids
    assert len(workers) == 1 and pids == set(workers) and os.getpid() not in pids
    assert source.worker_pids == []         # closed with the session


def test_in_worker_finite_flow_without_length_ends_after_one_pass():
    assert _labels(QueueInput(NoLength(5), infinite=False, in_worker=True)) == [0, 1, 2, 3, 4]


def test_in_worker_infinite_flow_repeats_whole_epochs_in_order():
    source = QueueInput(NoLength(3), in_worker=True)
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        got = [int(run(label)) for _ in range(8)]
    assert got == [0, 1, 2, 0, 1, 2, 0, 1]


def test_in_worker_dataflow_terminated_ends_the_data():
    assert _labels(QueueInput(Terminating(), in_worker=True)) == [0, 1]


def test_in_worker_empty_epoch_of_an_infinite_source_is_an_error():
    source = QueueInput(Empty(), in_worker=True)
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(InputSourceError, match="QueueInput: the DataFlow Empty produced no datapoint in an epoch"):
            with hooked_session(sess, source) as run:
                run(label)


@pytest.mark.parametrize("staged", [False, True])
def test_in_worker_failure_trains_on_what_came_before_and_names_the_worker(staged):
    source = QueueInput(Raising(3), in_worker=True)
    if staged:
        source = StagingInput(source, nr_stage=2)
    graph, (x, label) = build(source)
    got = []
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(InputSourceError) as info:
            with hooked_session(sess, source) as run:
                # known before the first step: a staged restage claimed before the failure is known
                # would wait in its run for a datapoint that never comes (see gil-free-notes.md)
                _wait_for_failure(source)
                for _ in range(10):
                    got.append(int(run(label)))
    assert got == [0, 1, 2]
    assert isinstance(info.value, WorkerError) and isinstance(info.value, ValueError)
    message = str(info.value)
    for fragment in ["QueueInput: WorkerError", "raised ValueError: boom at 3", "Traceback in the worker"]:
        assert fragment in message, (fragment, message)


@pytest.mark.timeout(20)        # a close() that does not stop the worker fails here, not the whole run
def test_in_worker_close_stops_a_worker_busy_in_the_dataflow():
    source = QueueInput(Counting(delay=0.6), in_worker=True)
    graph, (x, label) = build(source)
    sess = tf.compat.v1.Session(graph=graph)
    with hooked_session(sess, source) as run:
        run(label)
        pid = source.worker_pids[0]
        started = time.monotonic()
    closed_in = time.monotonic() - started
    sess.close()
    deadline = time.monotonic() + 2.0
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    assert closed_in < 2.0, closed_in


def _wait_for_failure(source, timeout=20.0):
    deadline = time.monotonic() + timeout
    while source.failure() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert source.failure() is not None


def _alive(pid):
    try:
        with open("/proc/{}/stat".format(pid)) as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


# -- QueueInput alone: queued datapoints survive a DataFlow failure --------------------------------
@pytest.mark.parametrize("make", [
    lambda: QueueInput(Raising(3)),
    lambda: QueueInput(Raising(3), infinite=False),
], ids=["infinite", "finite"])
def test_queue_input_trains_on_what_was_queued_before_the_dataflow_failed(make):
    source = make()
    graph, (x, label) = build(source)
    got = []
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(InputSourceError, match="boom at 3") as info:
            with hooked_session(sess, source) as run:
                _wait_for_failure(source)     # the failure is known before the first step
                for _ in range(10):
                    got.append(int(run(label)))
    assert got == [0, 1, 2]
    assert isinstance(info.value, ValueError)


def test_batch_queue_input_trains_on_whole_batches_queued_before_the_failure():
    source = BatchQueueInput(Raising(5), batch_size=2)
    graph, (x, label) = build(source, BATCH_SPECS)
    got = []
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(InputSourceError, match="boom at 5"):
            with hooked_session(sess, source) as run:
                _wait_for_failure(source)
                for _ in range(10):
                    got.append(run(label).tolist())
    assert got == [[0, 1], [2, 3]]


# -- statistics: how much of the DataFlow ran here, and the limit ------------------------------------
def _run_with_stats(source, steps=30):
    source.stats = InputStats(source.name, window=20, warmup_steps=3)
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        for _ in range(steps):
            run(label)
    return source.stats


@pytest.mark.parametrize("make, advice", [
    (lambda df: QueueInput(df), "QueueInput(df, in_worker=True)"),
    (lambda df: StagingInput(QueueInput(df), nr_stage=1), "StagingInput(QueueInput(df, in_worker=True))"),
], ids=["QueueInput", "StagingInput"])
def test_python_dataflow_in_the_training_process_is_measured_and_named(make, advice, caplog):
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        stats = _run_with_stats(make(BurningCounting(0.005)))
    summary = stats.summary()
    # every datapoint burns 5 ms of the feeding thread's CPU; a step takes one
    assert 4.0 <= summary["dataflow_cpu_ms_per_step"] < 50, summary
    assert summary["delivered_per_s"] < summary["consumed_per_s"], summary
    assert re.fullmatch(r"input-bound: \d+% of step time waiting; the DataFlow delivers [\d,]+ datapoints/s, "
                        r"the step consumes [\d,]+/s", stats.limit()), stats.limit()
    warnings = [r.getMessage() for r in caplog.records if "input-bound" in r.getMessage()]
    assert len(warnings) == 1, warnings
    message = warnings[0]
    assert re.search(r"training is input-bound: \d+% of step time waiting; the DataFlow delivers", message), message
    named = re.search(r"the DataFlow ran \d+ ms of Python per step in the training process \(step \d+ ms\), "
                      r"competing with the train step for the GIL; run it in a worker process: ", message)
    if named is None:
        # the rule: the DataFlow is named when its CPU time is a quarter of the step or more. On a
        # busy machine its thread waits for a CPU most of the step, and the steps wait for it: a
        # step (the time it waited, then its own work) is then more than four times that CPU time
        # (the warning's window against the whole run's totals: a margin of a fifth)
        waited_ms = float(re.search(r"over the last \d+ steps, ([\d.]+) ms per step", message).group(1))
        step_ms = waited_ms + 1e3 / summary["consumed_per_s"]
        assert summary["dataflow_cpu_ms_per_step"] < 0.3 * step_ms, (summary, message)
    else:
        assert message.endswith(advice), message


def test_in_worker_dataflow_work_is_not_counted_in_the_training_process(caplog):
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        stats = _run_with_stats(QueueInput(BurningCounting(0.005), in_worker=True))
    summary = stats.summary()
    assert summary["dataflow_cpu_ms_per_step"] < 2.0, summary        # receiving only
    messages = [r.getMessage() for r in caplog.records]
    assert any("training is input-bound" in m for m in messages), messages
    assert not any("in_worker=True" in m or "GIL" in m for m in messages), messages


def test_gil_warning_without_being_input_bound():
    stats = InputStats("QueueInput", window=20, warmup_steps=0)
    stats.configure(advice="QueueInput(df, in_worker=True)")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("inputpipe").addHandler(handler)
    try:
        for step in range(25):          # 100 ms steps, no wait, 40 ms of DataFlow CPU per step here
            stats.record(0.0, 0.1, datapoints=1, feed=(step, 0.04 * step, 0.05 * step, 0.001 * step))
    finally:
        logging.getLogger("inputpipe").removeHandler(handler)
    messages = [r.getMessage() for r in records]
    assert messages == ["QueueInput: the DataFlow ran 40 ms of Python per step in the training process "
                        "(step 100 ms), competing with the train step for the GIL; run it in a worker process: "
                        "QueueInput(df, in_worker=True)"], messages
    assert stats.limit() == ("not input-bound: 0% of step time waiting; the DataFlow delivers 20 datapoints/s, "
                             "the step consumes 10/s")


# -- StagingInput's default device -----------------------------------------------------------------
def _stage_devices(scope, monkeypatch, gpus):
    real = staging_module.list_physical_devices
    monkeypatch.setattr(staging_module, "list_physical_devices",
                        lambda kind=None: ["fake-gpu"] * gpus if kind == "GPU" else real(kind))
    source = StagingInput(QueueInput(Counting()))
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        with tf.device(scope):
            source.get_input_tensors()
    return {op.device for op in graph.get_operations() if op.type in ("Stage", "Unstage")}


@pytest.mark.parametrize("scope, gpus, expected", [
    (None, 0, "/device:CPU:0"),
    (None, 1, "/device:GPU:0"),
    ("/gpu:1", 2, "/device:GPU:1"),
    ("/cpu:0", 1, "/device:CPU:0"),
])
def test_staging_default_device_only_for_an_empty_caller_scope(scope, gpus, expected, monkeypatch):
    assert _stage_devices(scope, monkeypatch, gpus) == {expected}
