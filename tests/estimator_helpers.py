"""What tf.estimator does with an input_fn, without tf.estimator (which the current TF no longer
has): a new graph per call, the input_fn under ``/cpu:0``, a MonitoredTrainingSession that restores
the latest checkpoint and saves every few steps (train), or a MonitoredSession that runs until the
data ends (evaluate). The tests with the real Estimator are in test_estimator_tf.py."""
import numpy as np
import tensorflow as tf

from inputpipe.dataflow.base import DataFlow


def train_session(est_input, steps, checkpoint_dir=None, save_steps=None, hooks=True, seen=None):
    """Build a new graph, call ``input_fn(mode="train")`` and run ``steps`` steps; returns the ids
    the steps consumed (one list per step), appended to ``seen`` as they come when it is given."""
    seen = [] if seen is None else seen
    with tf.Graph().as_default():
        with tf.device("/cpu:0"):
            features, labels = est_input.input_fn(mode="train")
        ids = labels if labels is not None else features["id"]
        step = tf.compat.v1.assign_add(tf.compat.v1.train.get_or_create_global_step(), 1)
        with tf.control_dependencies([step]):
            fetch = tf.identity(ids)
        with tf.compat.v1.train.MonitoredTrainingSession(
                checkpoint_dir=checkpoint_dir, save_checkpoint_steps=save_steps, save_checkpoint_secs=None,
                save_summaries_steps=None, save_summaries_secs=None, log_step_count_steps=None,
                hooks=est_input.hooks if hooks else []) as sess:
            for _ in range(steps):
                seen.append(sess.run(fetch).tolist())
    tf.compat.v1.summary.FileWriterCache.clear()       # its writer threads (the checkpoint hook writes the graph)
    return seen


def evaluate_session(est_input, steps=None, mode="eval"):
    """Build a new graph, call ``input_fn(mode=mode)`` and run until the data ends (or ``steps``);
    returns the ids per step."""
    seen = []
    with tf.Graph().as_default():
        with tf.device("/cpu:0"):
            features, labels = est_input.input_fn() if mode is None else est_input.input_fn(mode=mode)
        fetch = labels if labels is not None else features["id"]
        with tf.compat.v1.train.MonitoredSession(hooks=est_input.hooks) as sess:
            while not sess.should_stop() and (steps is None or len(seen) < steps):
                seen.append(sess.run(fetch).tolist())
    return seen


def flat(batches):
    return [i for batch in batches for i in batch]


class Ids(DataFlow):
    """Batches ``[ids, x]`` of ``batch`` consecutive ids from 0 to n-1 (resumable), x = ids as float32."""

    def __init__(self, n, batch):
        self.n, self.batch = n, batch
        self._next = 0

    def __len__(self):
        return (self.n + self.batch - 1) // self.batch

    def __iter__(self):
        while self._next < self.n:
            ids = np.arange(self._next, min(self._next + self.batch, self.n), dtype=np.int64)
            self._next = int(ids[-1]) + 1
            yield [ids, ids.astype(np.float32)[:, None]]
        self._next = 0

    def get_state(self):
        return {"type": "Ids", "next": self._next}

    def set_state(self, state):
        self._next = state["next"]


SPECS = [tf.TensorSpec([None], tf.int64, "id"), tf.TensorSpec([None, 1], tf.float32, "x")]
