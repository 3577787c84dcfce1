"""A flow that completes its output across passes (BatchDataByShape's groups) is repeated, not
refused, when one pass yields nothing; a chain that can never yield is still refused."""
import numpy as np
import pytest
import tensorflow as tf

from inputpipe.dataflow import (BatchDataByShape, DataFlow, DataFromGenerator, FixedSizeData, MapData,
                                MultiProcessRunnerZMQ, MultiThreadRunner, RepeatedData)
from inputpipe.dataflow.base import EMPTY_PASSES_ALLOWED, empty_passes_mean_stuck
from inputpipe.input_source import InputSourceError, QueueInput, hooked_session
from inputpipe.utils.errors import WorkerError


class OneOfEachShape(DataFlow):
    """Six datapoints a pass, [zeros((i + 1, 2)), i]: every shape once, so a batch of two
    same-shaped datapoints forms only from two passes."""

    def __len__(self):
        return 6

    def __iter__(self):
        for i in range(6):
            yield [np.zeros((i + 1, 2), np.float32), i]


def _by_shape():
    return BatchDataByShape(OneOfEachShape(), 2, idx=0)


def _summary(batches):
    return [(b[0].shape, b[1].tolist()) for b in batches]


EXPECTED = [((2, i + 1, 2), [i, i]) for i in range(6)]    # pass 2 completes the groups of pass 1


def _first(flow, n):
    """The first ``n`` datapoints of ``flow``, over as many of its epochs as that takes (a runner of
    BatchDataByShape cuts epochs at the estimated length, 3 batches here)."""
    flow.reset_state()
    try:
        out = []
        while len(out) < n:
            out += [dp for _, dp in zip(range(n - len(out)), flow)]
        return out
    finally:
        close = getattr(flow, "close", None)
        if close:
            close()


def test_the_stuck_rule():
    assert not empty_passes_mean_stuck(OneOfEachShape(), 0)
    assert empty_passes_mean_stuck(OneOfEachShape(), 1)                      # nothing gathers: one is enough
    assert empty_passes_mean_stuck(MapData(OneOfEachShape(), lambda dp: dp), 1)
    gathering = MapData(_by_shape(), lambda dp: dp)                           # found anywhere in the chain
    assert not empty_passes_mean_stuck(gathering, EMPTY_PASSES_ALLOWED - 1)
    assert empty_passes_mean_stuck(gathering, EMPTY_PASSES_ALLOWED)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", [
    lambda: RepeatedData(_by_shape(), -1),
    lambda: MultiProcessRunnerZMQ(_by_shape(), 1),
    lambda: MultiThreadRunner(_by_shape, 4, 1),
    lambda: FixedSizeData(_by_shape(), 6),
], ids=["RepeatedData", "MultiProcessRunnerZMQ", "MultiThreadRunner", "FixedSizeData"])
def test_batches_that_form_across_passes_come_out(make):
    assert _summary(_first(make(), 6)) == EXPECTED


@pytest.mark.timeout(60)
def test_a_gathering_chain_that_never_yields_is_still_refused():
    never = lambda: BatchDataByShape(DataFromGenerator(lambda: iter(())), 2, idx=0)   # noqa: E731
    with pytest.raises(RuntimeError, match=r"RepeatedData\(num=-1\): its input produced no datapoints in "
                                           r"{} epochs in a row".format(EMPTY_PASSES_ALLOWED)):
        _first(RepeatedData(never(), -1), 1)
    with pytest.raises(WorkerError, match="BatchDataByShape produced no datapoints in {} passes in a row; a parallel "
                                          "runner would loop forever on it".format(EMPTY_PASSES_ALLOWED)):
        _first(MultiProcessRunnerZMQ(never(), 1), 1)
    source = QueueInput(never())
    with tf.Graph().as_default() as graph:
        source.setup([tf.TensorSpec([None, None, 2], tf.float32, "x"), tf.TensorSpec([None], tf.int64, "i")])
        x, i = source.get_input_tensors()
        with tf.compat.v1.Session(graph=graph) as sess:
            with pytest.raises(InputSourceError, match="QueueInput: the DataFlow BatchDataByShape produced no datapoint "
                                                       "in {} epochs in a row".format(EMPTY_PASSES_ALLOWED)):
                with hooked_session(sess, source) as run:
                    run(i)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("in_worker", [False, True])
def test_queue_input_feeds_batches_that_form_across_epochs(in_worker):
    source = QueueInput(_by_shape(), in_worker=in_worker)
    with tf.Graph().as_default() as graph:
        source.setup([tf.TensorSpec([None, None, 2], tf.float32, "x"), tf.TensorSpec([None], tf.int64, "i")])
        x, i = source.get_input_tensors()
        with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
            got = [run([x, i]) for _ in range(6)]
    source.close()
    assert [(a.shape, b.tolist()) for a, b in got] == EXPECTED


def test_the_doctor_profiles_a_chain_whose_first_epoch_is_empty():
    from inputpipe.dataflow.profiling import profile

    report = profile(MapData(_by_shape(), lambda dp: dp), seconds=5, warmup=0, max_datapoints=12)
    assert not report.ended and report.datapoints == 12
    assert report.stage("BatchDataByShape(2)").datapoints == 12
    assert report.stage("OneOfEachShape").datapoints == 24        # two passes of six make six batches
