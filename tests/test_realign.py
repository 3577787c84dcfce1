"""The realigning enqueue op: large unaligned arrays fed as an unaligned head and a shared
aligned body, joined, bitcast and reshaped in the graph; every byte, dtype and shape survives."""
import numpy as np
import pytest
import tensorflow as tf

from inputpipe.input_source.realign import REALIGN_MIN_BYTES, RealigningEnqueue
from inputpipe.utils.buffers import ALIGNMENT, aligned_empty, is_aligned


def _at_offset(shape, dtype, offset, rng):
    """Random values of ``dtype`` in an array whose data starts ``offset`` bytes past a
    64-byte aligned address."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = aligned_empty((nbytes + ALIGNMENT,), np.uint8)
    raw[...] = rng.integers(0, 256, raw.shape, dtype=np.uint8)
    arr = raw[offset:offset + nbytes].view(dtype).reshape(shape)
    assert arr.ctypes.data % ALIGNMENT == offset % ALIGNMENT
    return arr


def _queue_graph(dtypes, shapes):
    graph = tf.Graph()
    with graph.as_default(), tf.device("/cpu:0"):
        placeholders = [tf.compat.v1.placeholder(d, s) for d, s in zip(dtypes, shapes)]
        queue = tf.queue.FIFOQueue(4, dtypes, shapes if all(s is not None for s in shapes) else None)
        realign = RealigningEnqueue(queue, placeholders)
        dequeue = queue.dequeue()
    return graph, realign, dequeue


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dtype", [tf.uint8, tf.int8, tf.float16, tf.bfloat16, tf.int32, tf.float32, tf.float64,
                                   tf.int64, tf.complex64])
@pytest.mark.parametrize("offset", [1, 16, 48])
def test_every_byte_dtype_and_shape_arrives(dtype, offset):
    rng = np.random.default_rng(offset)
    shape = (4, 256, 1024 // dtype.size + 1)             # over 1 MiB for every dtype
    arr = _at_offset(shape, dtype.as_numpy_dtype, offset, rng)
    graph, realign, dequeue = _queue_graph([dtype], [shape])
    assert realign.needed([arr])
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(realign.enqueue_op, feed_dict=realign.feed([arr]))
        out = sess.run(dequeue)
    out = out[0] if isinstance(out, list) else out
    assert out.dtype == arr.dtype and out.shape == shape
    assert out.tobytes() == arr.tobytes()
    assert realign.realigned == 1


@pytest.mark.timeout(60)
def test_a_mixed_datapoint_keeps_every_component():
    rng = np.random.default_rng(0)
    big = _at_offset((512, 1024), np.float32, 16, rng)   # 2 MiB, realigned
    mask = _at_offset((1 << 21,), np.bool_, 16, rng) & True   # large bool: not bitcastable, fed as it is
    small = np.arange(10, dtype=np.int16)[1:]               # small and unaligned: fed as bytes, copied
    label = np.int32(7)                                     # 0-d
    name = np.array(b"batch-7", dtype=object)
    dtypes = [tf.float32, tf.bool, tf.int16, tf.int32, tf.string]
    shapes = [big.shape, mask.shape, (9,), (), ()]
    graph, realign, dequeue = _queue_graph(dtypes, shapes)
    datapoint = [big, mask, small, label, name]
    assert realign.needed(datapoint)
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(realign.enqueue_op, feed_dict=realign.feed(datapoint))
        got = sess.run(dequeue)
    np.testing.assert_array_equal(got[0], big)
    np.testing.assert_array_equal(got[1], mask)
    assert got[2].tolist() == list(range(1, 10)) and got[2].dtype == np.int16
    assert got[3] == 7 and got[3].dtype == np.int32 and got[3].shape == ()
    assert got[4] == b"batch-7"


def test_only_large_contiguous_unaligned_bitcastable_arrays_need_it():
    rng = np.random.default_rng(1)
    graph, realign, _ = _queue_graph([tf.uint8, tf.bool], [None, None])
    unaligned = _at_offset((REALIGN_MIN_BYTES,), np.uint8, 16, rng)
    aligned = aligned_empty((REALIGN_MIN_BYTES,), np.uint8)
    small = unaligned[:REALIGN_MIN_BYTES - 1]
    strided = _at_offset((2 * REALIGN_MIN_BYTES,), np.uint8, 16, rng)[::2]
    bools = _at_offset((REALIGN_MIN_BYTES,), np.bool_, 16, rng)
    assert is_aligned(aligned) and not is_aligned(small) and not strided.flags.c_contiguous
    assert realign.needed([unaligned, np.zeros(3, bool)])
    for plain in ([aligned, bools], [small, bools], [strided, bools]):
        assert not realign.needed(plain)
    assert realign.realigned == 0
