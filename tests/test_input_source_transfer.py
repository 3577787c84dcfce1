"""Large batches are fed through 64-byte aligned buffers that TF shares; a buffer is reused only
once nothing refers to it, so queued, staged and fetched batches keep their values."""
import numpy as np
import pytest
import tensorflow as tf

from inputpipe.dataflow.base import DataFlow
from inputpipe.input_source import QueueInput, StagingInput, hooked_session
from inputpipe.input_source.buffers import ALIGNMENT, MIN_POOLED_BYTES, AlignedFeedBuffers

SHAPE = (256, 1024)                         # float32: 1 MiB, large enough to be pooled
SPECS = [tf.TensorSpec(SHAPE, tf.float32, "big"), tf.TensorSpec([], tf.int32, "label")]
assert np.prod(SHAPE) * 4 >= MIN_POOLED_BYTES


class ReusedBuffer(DataFlow):
    """Yields ``n`` batches, all in ONE writable array that it overwrites in place (batch i is all i)."""

    def __init__(self, n):
        self.n = n
        self.buffer = np.empty(SHAPE, np.float32)

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            self.buffer[...] = i
            yield [self.buffer, i]


class ReadOnlyAligned(DataFlow):
    """Yields ``n`` fresh read-only batches at 64-byte aligned addresses (like decoded wire data)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        nbytes = int(np.prod(SHAPE)) * 4
        for i in range(self.n):
            raw = np.empty(nbytes + ALIGNMENT, np.uint8)
            start = (-raw.ctypes.data) % ALIGNMENT
            arr = raw[start:start + nbytes].view(np.float32).reshape(SHAPE)
            arr[...] = i
            arr.flags.writeable = False
            yield [arr, i]


class SmallQueueInput(QueueInput):
    default_capacity = 4
    spare_feed_buffers = 2


def _check(values, labels):
    assert [int(v) for v in labels] == list(range(len(labels)))
    for i, v in enumerate(values):
        assert v.shape == SHAPE and v.dtype == np.float32
        assert v.min() == i and v.max() == i, "batch {} holds {}..{}".format(i, v.min(), v.max())


def test_many_queued_batches_keep_their_values_when_the_dataflow_reuses_its_array():
    n = 40
    source = QueueInput(ReusedBuffer(n), infinite=False)       # capacity 50: all 40 wait in the queue
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        big, label = source.get_input_tensors()
        size = source.queue.size()
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        source._thread.join(10)                                  # finite: the thread ends once all are queued
        assert sess.run(size) == n
        results = [run([big, label]) for _ in range(n)]
        with pytest.raises(tf.errors.OutOfRangeError):
            run(label)
    _check([r[0] for r in results], [r[1] for r in results])
    buffers = source._buffers
    assert (buffers.copies, buffers.shared, buffers.fallbacks) == (n, 0, 0)
    assert buffers.buffers == n                                  # none reused while queued


@pytest.mark.parametrize("staged", [0, 1, 3])
def test_buffers_are_reused_only_after_release_and_fetched_batches_stay_intact(staged):
    n = 60
    source = SmallQueueInput(ReusedBuffer(n), infinite=False)   # at most 2 x (4 + 2) buffers
    if staged:
        source = StagingInput(source, nr_stage=staged, device="/cpu:0")
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        big, label = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        results = [run([big, label]) for _ in range(n)]         # every fetched batch is kept
        with pytest.raises(tf.errors.OutOfRangeError):
            run(label)
    _check([r[0] for r in results], [r[1] for r in results])
    buffers = (source._input if staged else source)._buffers
    assert buffers.copies + buffers.fallbacks == n and buffers.shared == 0
    assert buffers.buffers <= 12 and buffers.copies > buffers.buffers    # recycled, bounded


def test_read_only_aligned_arrays_are_shared_without_copy():
    n = 6
    source = QueueInput(ReadOnlyAligned(n), infinite=False)
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        big, label = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        results = [run([big, label]) for _ in range(n)]
    _check([r[0] for r in results], [r[1] for r in results])
    buffers = source._buffers
    assert (buffers.copies, buffers.shared, buffers.buffers) == (0, n, 0)


def test_aligned_feed_buffers_pool_rules():
    pool = AlignedFeedBuffers(max_buffers=2)
    small = np.arange(10, dtype=np.float32)
    assert pool.prepare(small) is small                        # small: TF's own copy is cheap
    strings = np.array(["a" * MIN_POOLED_BYTES], object)
    assert pool.prepare(strings) is strings
    src = np.arange(MIN_POOLED_BYTES // 4, dtype=np.int32)[::-1]   # not contiguous, any alignment
    first, second = pool.prepare(src), pool.prepare(src)
    for out in (first, second):
        assert out.ctypes.data % ALIGNMENT == 0 and out.flags.c_contiguous
        np.testing.assert_array_equal(out, src)
        assert not np.shares_memory(out, src)
    assert not np.shares_memory(first, second)
    assert pool.prepare(src) is src and pool.fallbacks == 1    # both buffers in use: TF copies
    del first
    third = pool.prepare(src)                                  # the released buffer comes back
    assert pool.buffers == 2 and pool.in_use() == 2 and pool.copies == 3
    del second, third
    bigger = np.ones(MIN_POOLED_BYTES * 2, np.uint8)
    out = pool.prepare(bigger)                                 # free but too small: replaced
    assert pool.buffers == 2 and out.nbytes == bigger.nbytes and int(out.sum()) == bigger.size
    with pytest.raises(ValueError, match="max_buffers"):
        AlignedFeedBuffers(0)
