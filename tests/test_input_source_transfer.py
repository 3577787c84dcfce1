"""Large batches: TF shares 64-byte aligned arrays (no copy) and keeps them alive while they
are queued, staged or fetched; unaligned arrays are copied once (large ones by TF's concat in
the realigning enqueue op); conversions produce aligned arrays."""
import gc
import weakref

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.dataflow.base import DataFlow
from inputpipe.input_source import BatchQueueInput, QueueInput, StagingInput, hooked_session
from inputpipe.utils.buffers import ALIGN_MIN_BYTES, ALIGNMENT, aligned_empty, is_aligned
from inputpipe.input_source.signature import DatapointConverter

SHAPE = (256, 1024)                         # float32: 1 MiB
SPECS = [tf.TensorSpec(SHAPE, tf.float32, "big"), tf.TensorSpec([], tf.int32, "label")]


class FreshBatches(DataFlow):
    """Yields ``n`` new float32 batches (batch i is all i) and keeps only weak references; each
    starts ``offset`` floats past a 64-byte aligned address (0: aligned, 4: 16 bytes past)."""

    def __init__(self, n, shape=SHAPE, offset=0):
        self.n, self.shape, self.offset = n, shape, offset
        self.yielded = []

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            raw = aligned_empty((np.prod(self.shape) + self.offset,), np.float32)
            batch = raw[self.offset:].reshape(self.shape)
            batch[...] = i
            self.yielded.append(weakref.ref(batch))
            yield [batch, i]
            del batch, raw

    def alive(self):
        return sum(ref() is not None for ref in self.yielded)


class ReusedUnaligned(DataFlow):
    """Yields ``n`` batches in ONE array that is NOT 64-byte aligned, overwritten in place."""

    def __init__(self, n):
        self.n = n
        raw = aligned_empty((np.prod(SHAPE) + 4,), np.float32)
        self.buffer = raw[4:].reshape(SHAPE)             # 16 bytes past an aligned address

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            self.buffer[...] = i
            yield [self.buffer, i]


def _check(results):
    assert [int(r[1]) for r in results] == list(range(len(results)))
    for i, (values, _) in enumerate(results):
        assert values.shape == SHAPE and values.dtype == np.float32
        assert values.min() == i and values.max() == i, "batch {} holds {}..{}".format(i, values.min(), values.max())


def _run_all(source, n, staged=0):
    if staged:
        source = StagingInput(source, nr_stage=staged, device="/cpu:0")
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        big, label = source.get_input_tensors()
    return graph, source, big, label


def test_aligned_batches_are_shared_and_kept_alive_while_queued():
    n = 40
    df = FreshBatches(n)
    source = QueueInput(df, infinite=False)              # capacity 50: all 40 wait in the queue
    graph, source, big, label = _run_all(source, n)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        source._thread.join(10)                          # finite: the thread ends once all are queued
        assert not source._thread.is_alive() and source._thread.enqueued == n
        assert df.alive() == n                           # TF holds every yielded array: shared, not copied
        results = [run([big, label]) for _ in range(n)]
        with pytest.raises(tf.errors.OutOfRangeError):
            run(label)
    _check(results)


@pytest.mark.parametrize("staged", [0, 1, 3])
def test_unaligned_array_reused_in_place_is_copied_so_batches_stay_intact(staged):
    n = 30
    graph, source, big, label = _run_all(QueueInput(ReusedUnaligned(n), infinite=False), n, staged)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        results = [run([big, label]) for _ in range(n)]
        with pytest.raises(tf.errors.OutOfRangeError):
            run(label)
    _check(results)


def test_conversions_make_aligned_arrays_and_matching_arrays_pass_unchanged():
    convert = DatapointConverter(SPECS, "QueueInput")
    as_float64 = np.full(SHAPE, 3.0)                     # float64 -> float32: a new array, aligned
    cast, label = convert([as_float64, 1])
    assert cast.dtype == np.float32 and is_aligned(cast) and cast.flags.c_contiguous
    np.testing.assert_array_equal(cast, np.full(SHAPE, 3.0, np.float32))
    same = np.zeros(SHAPE, np.float32)
    assert convert([same, 1])[0] is same                 # nothing to convert: no copy at all
    small = DatapointConverter([tf.TensorSpec([4], tf.float32, "x")], "QueueInput")
    assert small([np.arange(4.0)])[0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert ALIGN_MIN_BYTES <= np.prod(SHAPE) * 4


@pytest.mark.parametrize("shape,dtype", [((128, 224, 224, 3), np.uint8), ((7,), np.float64), ((5, 3), np.int32)])
def test_aligned_empty(shape, dtype):
    arr = aligned_empty(shape, dtype)
    assert arr.shape == shape and arr.dtype == dtype and arr.flags.c_contiguous and arr.flags.writeable
    assert arr.ctypes.data % ALIGNMENT == 0 and is_aligned(arr)


def test_large_unaligned_batches_are_copied_by_tf_and_stay_intact_while_queued():
    n = 12
    shape = (1024, 1024)                         # 4 MiB, 16 bytes past an aligned address
    df = FreshBatches(n, shape, offset=4)
    source = QueueInput(df, infinite=False)
    graph = tf.Graph()
    with graph.as_default():
        source.setup([tf.TensorSpec(shape, tf.float32, "big"), tf.TensorSpec([], tf.int32, "label")])
        big, label = source.get_input_tensors()
        nothing = tf.constant(0)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        source._thread.join(10)                  # all 12 wait in the queue
        assert not source._thread.is_alive() and source._realign.realigned == n
        sess.run(nothing)                        # lets TF drop the references it still held
        gc.collect()
        assert df.alive() == 0                   # TF copied every batch: none of them is shared
        results = [run([big, label]) for _ in range(n)]
    assert [int(r[1]) for r in results] == list(range(n))
    for i, (values, _) in enumerate(results):
        assert values.shape == shape and values.min() == i and values.max() == i


def test_batch_queue_input_realigns_large_single_datapoints():
    n, shape = 6, (320, 1024)                    # 1.25 MiB each, 16 bytes past an aligned address
    source = BatchQueueInput(FreshBatches(n, shape, offset=4), batch_size=4, infinite=False)
    graph = tf.Graph()
    with graph.as_default():
        source.setup([tf.TensorSpec((None,) + shape, tf.float32, "big"), tf.TensorSpec([None], tf.int32, "label")])
        big, label = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        batches = [run([big, label]) for _ in range(2)]
        with pytest.raises(tf.errors.OutOfRangeError):
            run(label)
        assert source._realign.realigned == n
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5]]
    for values, labels in batches:
        assert values.shape == (len(labels),) + shape
        for image, i in zip(values, labels):
            assert image.min() == i and image.max() == i
