"""Checkpoints for :func:`inputpipe.train.train`: restore the latest one before the input source
starts, save every N steps and at the end. A default ``Saver`` holds the model's variables and
the input position of the library's sources, so a restarted run continues the data too.

Example::

    checkpoints = Checkpoints(graph, "logs/run1", save_every=100)
    restored = checkpoints.restore(session)       # path of the checkpoint, or None (first run)
    ...
    checkpoints.step_done(session, step)           # saves every 100 steps
    checkpoints.save(session)
"""
import os
from typing import Optional

import tensorflow as tf

from ..utils.logger import get_logger

__all__ = ["Checkpoints"]

logger = get_logger(__name__)


class Checkpoints:
    """A ``tf.compat.v1.train.Saver`` over ``graph``'s variables and input positions, writing
    ``<directory>/model.ckpt-<global step>`` (the step counted by the saver when the graph has no
    global step), keeping the last ``keep``.

    Example::

        checkpoints = Checkpoints(graph, directory, save_every=50)
    """

    def __init__(self, graph: tf.Graph, directory: str, save_every: Optional[int] = None, keep: int = 3):
        if save_every is not None and save_every <= 0:
            raise ValueError("train: save_every must be a positive number of steps, got {}".format(save_every))
        self.directory = directory
        self.save_every = save_every
        self.graph = graph
        with graph.as_default():
            self.saver = tf.compat.v1.train.Saver(max_to_keep=keep)
            self.global_step = tf.compat.v1.train.get_global_step()
        self._count = 0
        self.last_saved: Optional[str] = None
        self.last_saved_step: Optional[int] = None     # steps of this run at the last save

    def restore(self, session: tf.compat.v1.Session) -> Optional[str]:
        """Restore the latest checkpoint of the directory (call it before the input source
        starts); returns its path, or None when there is none yet."""
        path = tf.train.latest_checkpoint(self.directory)
        if path is None:
            return None
        with self.graph.as_default():           # the Saver runs in graph mode, not eagerly
            self.saver.restore(session, path)
        logger.info("train: restored %s", path)
        return path

    def step_done(self, session: tf.compat.v1.Session, steps: int) -> None:
        """Called after each step with the number of steps run in this call."""
        if self.save_every is not None and steps % self.save_every == 0:
            self.save(session)
            self.last_saved_step = steps

    def save(self, session: tf.compat.v1.Session) -> str:
        os.makedirs(self.directory, exist_ok=True)
        self._count += 1
        step = self.global_step if self.global_step is not None else self._count
        with self.graph.as_default():
            self.last_saved = self.saver.save(session, os.path.join(self.directory, "model.ckpt"), global_step=step)
        return self.last_saved
