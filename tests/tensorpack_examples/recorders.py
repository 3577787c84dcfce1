"""What the tensorpack example scripts here record for tests/test_tensorpack_trainer.py to check:
tensorpack callbacks and inferencers (tensorpack's side of the scripts) and the session init that
restores inputpipe's input position from a ``ModelSaver`` checkpoint (as docs/migrating.md shows).

Example::

    callbacks = [InputRecorder("label"), InferenceRunner(test, [InferenceRecorder("label")])]
"""
import json

import numpy as np
import tensorflow as tf
from tensorpack.callbacks import Callback, Inferencer
from tensorpack.tfutils.sessinit import SessionInit


class InputRecorder(Callback):
    """The values of the input ``name`` that every training step took, per tower (``self.steps``:
    one list of per-tower arrays per step)."""

    def __init__(self, name):
        self.name = name
        self.steps = []

    def _setup_graph(self):
        self._tensors = [tower.get_tensor(self.name) for tower in self.trainer.towers.training()]

    def _before_run(self, ctx):
        return self._tensors

    def _after_run(self, ctx, values):
        self.steps.append([np.asarray(v).tolist() for v in values.results])


class InferenceRecorder(Inferencer):
    """The values of the input ``name`` that each InferenceRunner pass took (``self.passes``)."""

    def __init__(self, name):
        self.name = name
        self.passes = []

    def _before_inference(self):
        self.passes.append([])

    def _get_fetches(self):
        return [self.name]

    def _on_fetches(self, outputs):
        self.passes[-1].extend(np.asarray(outputs[0]).tolist())


class RestoreInputPosition(SessionInit):
    """Restores inputpipe's input position from a checkpoint written by
    ``ModelSaver(var_collections=[GLOBAL_VARIABLES, SAVEABLE_OBJECTS])`` (``SaverRestore`` restores
    global variables only); sources made after the ``ModelSaver`` (an ``InferenceRunner``'s) had
    none saved and start at their beginning."""

    def __init__(self, checkpoint):
        self.checkpoint = checkpoint

    def _setup_graph(self):
        saved = tf.train.load_checkpoint(self.checkpoint).get_variable_to_shape_map()
        positions = [p for p in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS) if p.name in saved]
        self.saver = tf.compat.v1.train.Saver(positions)

    def _run_init(self, sess):
        self.saver.restore(sess, self.checkpoint)


def report(**values):
    """Print the script's observations as one JSON line, for the test to read."""
    print("RESULT " + json.dumps(values), flush=True)
