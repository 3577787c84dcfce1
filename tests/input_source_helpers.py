"""Small DataFlows and graph helpers shared by the InputSource and trainer tests."""
import threading
import time

import numpy as np
import tensorflow as tf

from inputpipe.dataflow.base import DataFlow

SPECS = [tf.TensorSpec([3], tf.float32, "x"), tf.TensorSpec([], tf.int32, "label")]
BATCH_SPECS = [tf.TensorSpec([None, 3], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "label")]


class Counting(DataFlow):
    """Datapoint i is [x = [i, i+0.5, -i] (float32), label = i]; ``n`` per epoch (None: endless)."""

    def __init__(self, n=None, delay=0.0):
        self.n = n
        self.delay = delay
        self.resets = 0

    def reset_state(self):
        self.resets += 1

    def __len__(self):
        if self.n is None:
            raise NotImplementedError()
        return self.n

    def __iter__(self):
        i = 0
        while self.n is None or i < self.n:
            if self.delay:
                time.sleep(self.delay)
            yield [np.array([i, i + 0.5, -i], np.float32), i]
            i += 1


class Raising(DataFlow):
    """Yields ``good`` valid datapoints, then raises ValueError('boom at <good>')."""

    def __init__(self, good=3):
        self.good = good

    def __iter__(self):
        for dp in Counting(self.good):
            yield dp
        raise ValueError("boom at {}".format(self.good))


class Fixed(DataFlow):
    """Yields the given datapoints once per epoch."""

    def __init__(self, datapoints):
        self.datapoints = list(datapoints)

    def __len__(self):
        return len(self.datapoints)

    def __iter__(self):
        return iter(self.datapoints)


def expected_x(i):
    return np.array([i, i + 0.5, -i], np.float32)


def build(source, specs=SPECS):
    """A fresh graph with ``source`` set up; returns (graph, input tensors)."""
    graph = tf.Graph()
    with graph.as_default():
        source.setup(specs)
        tensors = source.get_input_tensors()
    return graph, tensors


def labels_until_the_end(source, graph, label):
    """Run ``label`` in a MonitoredTrainingSession with ``source``'s hooks until it stops
    (finite data); returns the labels in the order they came."""
    got = []
    with graph.as_default():
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
            while not sess.should_stop():
                got.append(int(sess.run(label)))
    return got


def feeding_threads():
    return [t for t in threading.enumerate() if t.name.endswith("EnqueueThread") and t.is_alive()]
