"""Writing your own InputSource: a worked example.

``CountdownInput`` feeds batches made *in the graph* from a counter variable (a stand-in for any
source that builds tensors itself), and shows the three things a source implements:

1. ``_setup(specs)``: build the ops shared by all towers, once, for the named input signature;
2. ``_build_tower()``: build the tensors of one ``get_input_tensors()`` call and return a
   ``Tower`` saying which op means "this step consumed a batch" (so the statistics and any
   per-step work only run on steps that really take a batch) and which tensors to fetch as
   statistics;
3. ``_start(session, coord)`` / ``_stop(session)``: what to do when a session starts and ends
   (here: reset the counter; a thread-based source starts and stops its thread).

Run it: ``python examples/custom_input_source.py``
"""
import logging

import numpy as np
import tensorflow as tf

from inputpipe.input_source import InputSource, Tower, hooked_session
from inputpipe.input_source.base import timed_input
from inputpipe.train import train


class CountdownInput(InputSource):
    """Batches ``[start, start-1, ...]`` of ``batch_size`` integers, counting down by step."""

    def __init__(self, start: int, batch_size: int):
        super().__init__()
        self.start = start
        self.batch_size = batch_size

    def size(self) -> int:
        return self.start // self.batch_size

    def _setup(self, specs):
        (spec,) = specs                     # this source provides exactly one input
        if spec.dtype != tf.int64:
            raise TypeError("CountdownInput makes int64 batches, the signature wants {}".format(spec.dtype))
        self.counter = tf.compat.v1.get_variable(
            "countdown", [], tf.int64, initializer=tf.compat.v1.constant_initializer(self.start),
            trainable=False, collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
        self.reset_op = self.counter.initializer

    def _build_tower(self):
        def next_batch():
            top = tf.compat.v1.assign_sub(self.counter, self.batch_size) + self.batch_size
            return top - tf.range(self.batch_size, dtype=tf.int64)

        batch, wait = timed_input(next_batch)   # the time this op took counts as "input wait"
        return Tower([batch], consume_op=batch.op, stat_tensors={"wait": wait})

    def _start(self, session, coord):
        session.run(self.reset_op)


def main():
    logging.basicConfig(level=logging.INFO)
    graph = tf.Graph()
    with graph.as_default():
        source = CountdownInput(start=1000, batch_size=4)
        source.setup([tf.TensorSpec([4], tf.int64, "numbers")])
        (numbers,) = source.get_input_tensors()
        total = tf.reduce_sum(numbers)

    # 1. a plain session: two lines
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        print("first batches:", run(numbers), run(numbers))

    # 2. the small trainer (here "training" just sums the batch)
    summary = train(total, source, steps=50, batch_size=4, fetches={"sum": total}, progress=False)
    print(summary)
    assert np.isclose(summary.last_fetches["sum"], sum(range(1000 - 49 * 4 - 3, 1000 - 49 * 4 + 1)))


if __name__ == "__main__":
    main()
