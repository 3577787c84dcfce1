"""Enqueue large unaligned arrays with one copy that TensorFlow makes in parallel, off the GIL.

TF's feed path shares the memory of a 64-byte aligned, C-contiguous array: the enqueued tensor
*is* that memory (see :mod:`inputpipe.utils.buffers`). Any other array is copied into a new
tensor, by one thread that holds the GIL all along. numpy aligns large arrays to 16 bytes only,
so every batch made by plain numpy code would take that slow way, and the training thread could
not run Python meanwhile.

:class:`RealigningEnqueue` adds a second enqueue op for such datapoints. A large, C-contiguous
component whose data is not aligned is fed as two pieces of its bytes: the *head*, the bytes
before its first 64-byte aligned address (under 64 of them, copied by TF), and the aligned
*body*, which TF shares. In the graph, a ``concat`` joins them into a new tensor (TF's concat
kernel copies with the intra-op thread pool while the feeding thread waits with the GIL
released) and a ``bitcast`` and ``reshape`` give the component its dtype and shape back. The
other components of that datapoint are fed as a body alone, or through their usual placeholder
when their dtype has no fixed-size binary form (bool, string). A datapoint without a large
unaligned component uses the plain enqueue op: nothing changes for it.

Example::

    realign = RealigningEnqueue(queue, placeholders)      # next to queue.enqueue(placeholders)
    arrays = convert(datapoint)
    if realign.needed(arrays):
        session.run(realign.enqueue_op, feed_dict=realign.feed(arrays))
"""
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from ..utils.buffers import ALIGNMENT

__all__ = ["RealigningEnqueue", "REALIGN_MIN_BYTES"]

#: Unaligned arrays from this size on are realigned; TF's own copy of smaller ones is cheap.
REALIGN_MIN_BYTES = 1 << 20

# dtypes that tf.bitcast turns bytes into
_BITCASTABLE = frozenset([tf.uint8, tf.int8, tf.uint16, tf.int16, tf.uint32, tf.int32, tf.uint64, tf.int64,
                          tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.complex64, tf.complex128])


class _BytesInput:
    """The placeholders of one component fed as bytes (head, body, shape) and the tensor that
    rebuilds the component from them."""

    def __init__(self, placeholder: tf.Tensor, index: int):
        dtype, shape = placeholder.dtype, placeholder.shape
        self.head = tf.compat.v1.placeholder(tf.uint8, [None], name="component{}_head".format(index))
        self.body = tf.compat.v1.placeholder(tf.uint8, [None], name="component{}_body".format(index))
        self.shape = tf.compat.v1.placeholder(tf.int64, [shape.rank] if shape.rank is not None else [None],
                                              name="component{}_shape".format(index))
        data = tf.concat([self.head, self.body], 0)
        itemsize = dtype.size
        if itemsize > 1:
            data = tf.reshape(data, [-1, itemsize])
        if dtype != tf.uint8:
            data = tf.bitcast(data, dtype)
        self.value = tf.reshape(data, self.shape)
        self.value.set_shape(shape)


class RealigningEnqueue:
    """A second enqueue op for ``queue``, taking large unaligned components as an unaligned head
    and a shared aligned body (see the module docstring). ``placeholders`` are those of the plain
    enqueue op, in component order; ``realigned`` counts the datapoints :meth:`feed` prepared.

    Example::

        realign = RealigningEnqueue(queue, placeholders)
        op, feed = (realign.enqueue_op, realign.feed(arrays)) if realign.needed(arrays) else (plain_op, plain_feed)
    """

    def __init__(self, queue: tf.queue.QueueBase, placeholders: Sequence[tf.Tensor],
                 min_bytes: int = REALIGN_MIN_BYTES, name: str = "enqueue_realigned"):
        self.placeholders = list(placeholders)
        self.min_bytes = int(min_bytes)
        self.realigned = 0
        with tf.name_scope(name):
            self._bytes: List[Optional[_BytesInput]] = [
                _BytesInput(ph, i) if ph.dtype in _BITCASTABLE else None for i, ph in enumerate(self.placeholders)]
        values = [b.value if b is not None else ph for b, ph in zip(self._bytes, self.placeholders)]
        self.enqueue_op = queue.enqueue(values, name=name)

    def _realigns(self, index: int, arr: Any) -> bool:
        return (self._bytes[index] is not None and isinstance(arr, np.ndarray) and arr.nbytes >= self.min_bytes
                and arr.flags.c_contiguous and arr.ctypes.data % ALIGNMENT != 0)

    def needed(self, arrays: Sequence[Any]) -> bool:
        """True if a component is large, C-contiguous, unaligned and of a bitcastable dtype."""
        return any(self._realigns(i, arr) for i, arr in enumerate(arrays))

    def feed(self, arrays: Sequence[Any]) -> Dict[tf.Tensor, Any]:
        """The feed_dict of :attr:`enqueue_op` for the converted components ``arrays``."""
        feed: Dict[tf.Tensor, Any] = {}
        for i, arr in enumerate(arrays):
            pieces = self._bytes[i]
            if pieces is None:
                feed[self.placeholders[i]] = arr
                continue
            arr = np.asarray(arr, order="C")          # keeps 0-d arrays 0-d, unlike ascontiguousarray
            data = arr.reshape(-1).view(np.uint8)
            split = (-data.ctypes.data) % ALIGNMENT if self._realigns(i, arr) else 0
            feed[pieces.head] = data[:split]
            feed[pieces.body] = data[split:]
            feed[pieces.shape] = np.asarray(arr.shape, np.int64)
        self.realigned += 1
        return feed
