"""Writing your own InputSource: a worked example of each protocol.

``CountdownInput`` (inputpipe's protocol) feeds batches made *in the graph* from a counter
variable (a stand-in for any source that builds tensors itself), and shows the three things a
source implements:

1. ``_setup(specs)``: build the ops shared by all towers, once, for the named input signature;
2. ``_build_tower()``: build the tensors of one ``get_input_tensors()`` call and return a
   ``Tower`` saying which op means "this step consumed a batch" (so the statistics and any
   per-step work only run on steps that really take a batch) and which tensors to fetch as
   statistics;
3. ``_start(session, coord)`` / ``_stop(session)``: what to do when a session starts and ends
   (here: reset the counter; a thread-based source starts and stops its thread).

``WordQueueInput`` is written as tensorpack 0.11 code is (tensorpack's protocol, which runs
unchanged): no ``super().__init__()``, a queue built in ``_setup(inputs)`` under
``cached_name_scope()``, ``_get_input_tensors()`` dequeuing from it, ``_size()``, and a thread
that fills the queue, started and stopped by the ``SessionRunHook`` that ``_get_callbacks()``
returns.

Run it: ``python examples/custom_input_source.py``
"""
import logging
import threading

import numpy as np
import tensorflow as tf

from inputpipe.input_source import FeedfreeInput, InputSource, StagingInput, Tower, hooked_session
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


class _Filler(threading.Thread):
    """Enqueues the length of each word, round after round, until stopped."""

    def __init__(self, enqueue_op, close_op, placeholder, words):
        super().__init__(name="WordQueueInput-filler", daemon=True)
        self.enqueue_op, self.close_op, self.placeholder, self.words = enqueue_op, close_op, placeholder, words
        self.stopping = threading.Event()
        self.session = None

    def run(self):
        i = 0
        try:
            while not self.stopping.is_set():
                self.session.run(self.enqueue_op, {self.placeholder: len(self.words[i % len(self.words)])})
                i += 1
        except (tf.errors.CancelledError, tf.errors.OutOfRangeError):
            pass                             # the queue was closed: the session is ending


class _StartFiller(tf.compat.v1.train.SessionRunHook):
    """Starts the filler when the session starts; closes the queue and stops it at the end."""

    def __init__(self, filler):
        self.filler = filler

    def after_create_session(self, session, coord):
        self.filler.session = session
        self.filler.start()

    def end(self, session):
        self.filler.stopping.set()
        session.run(self.filler.close_op)   # cancels an enqueue waiting on a full queue
        self.filler.join(2)


class WordQueueInput(FeedfreeInput):
    """The length of each word of ``words``, one per step, through a queue (tensorpack's protocol)."""

    def __init__(self, words):
        self.words = list(words)

    def _setup(self, inputs):
        (spec,) = inputs
        placeholder = tf.compat.v1.placeholder(spec.dtype, [], name="word_length")
        with self.cached_name_scope():
            self.queue = tf.compat.v1.FIFOQueue(16, [spec.dtype], shapes=[[]], name="input_queue")
            self.filler = _Filler(self.queue.enqueue([placeholder]), self.queue.close(cancel_pending_enqueues=True),
                                  placeholder, self.words)

    def _get_callbacks(self):
        return [_StartFiller(self.filler)]

    def _get_input_tensors(self):
        with tf.device("/cpu:0"), self.cached_name_scope():
            return [self.queue.dequeue(name="dequeue")]

    def _size(self):
        return len(self.words)


def tensorpack_protocol_demo():
    """WordQueueInput under StagingInput in a plain session: the lengths, in order."""
    graph = tf.Graph()
    with graph.as_default():
        source = StagingInput(WordQueueInput(["tensor", "pack", "runs", "unchanged"]), nr_stage=2, device="/cpu:0")
        source.setup([tf.TensorSpec([], tf.int32, "length")])
        (length,) = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        lengths = [int(run(length)) for _ in range(6)]
    print("word lengths:", lengths)
    assert lengths == [6, 4, 4, 9, 6, 4]
    return lengths


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

    # 3. a source written for tensorpack, unchanged, staged by StagingInput
    tensorpack_protocol_demo()


if __name__ == "__main__":
    main()
