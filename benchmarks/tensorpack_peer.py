"""tensorpack 0.11's ``QueueInput`` as a benchmark peer, driven without tensorpack's trainer.

Its feeding thread is started the way tensorpack's ``StartProcOrThread`` callback does (under
the session as default session) and stopped by closing the queue. If tensorpack is not
installed or cannot build its graph under the installed TensorFlow, :func:`unavailable_reason`
says why, so a benchmark can print and record the reason instead of silently leaving it out.

Example::

    reason = unavailable_reason()
    if reason is None:
        source, (x,) = tensorpack_queue_tensors(df, specs)     # in the graph being built
        with tf.compat.v1.Session(graph=graph) as sess, run_tensorpack_queue(source, sess):
            sess.run(x)
"""
import contextlib
import traceback
from typing import List, Optional

import tensorflow as tf

__all__ = ["unavailable_reason", "tensorpack_queue_tensors", "run_tensorpack_queue", "tensorpack_staging_tensors",
           "run_tensorpack_staging"]


def unavailable_reason() -> Optional[str]:
    """None if ``tensorpack.input_source.QueueInput`` can be set up here, else why not."""
    try:
        import tensorpack  # noqa: F401
        from tensorpack.input_source import QueueInput  # noqa: F401
    except Exception as err:  # ImportError, or TF API drift at import time
        return "tensorpack.input_source cannot be imported: {}: {}".format(type(err).__name__, err)
    try:
        graph = tf.Graph()
        with graph.as_default():
            tensorpack_queue_tensors(_Empty(), [tf.TensorSpec([1], tf.float32, "probe")])
    except Exception as err:
        return "tensorpack QueueInput cannot be set up under TF {}: {}".format(
            tf.__version__, traceback.format_exception_only(type(err), err)[-1].strip())
    return None


class _Empty:
    def __iter__(self):
        return iter(())


def _as_tensorpack_dataflow(df):
    from tensorpack.dataflow import DataFlow as TPDataFlow

    class Adapter(TPDataFlow):
        """tensorpack's QueueInput accepts only its own DataFlow class."""

        def __iter__(self):
            return iter(df)

    return Adapter()


def tensorpack_queue_tensors(df, specs: List[tf.TensorSpec]):
    """Set up a tensorpack ``QueueInput`` on ``df`` in the default graph; returns
    ``(source, tensors)``."""
    from tensorpack.input_source import QueueInput
    from tensorpack.tfutils.tower import TowerContext

    source = QueueInput(_as_tensorpack_dataflow(df))
    source.setup(specs)
    with TowerContext("", is_training=True):
        tensors = source.get_input_tensors()
    return source, tensors


@contextlib.contextmanager
def run_tensorpack_queue(source, sess: tf.compat.v1.Session):
    """Run the tensorpack source's feeding thread in ``sess`` for the ``with`` block."""
    with sess.as_default():
        source.thread.start()
    try:
        yield
    finally:
        try:
            sess.run(source.thread.close_op)
        finally:
            source.thread.join(5)


def tensorpack_staging_tensors(df, specs: List[tf.TensorSpec], device: str = "/cpu:0"):
    """Set up tensorpack's ``StagingInput(QueueInput(df), nr_stage=1, device=device)`` in the
    default graph; returns ``(source, tensors, hook)``: ``hook`` is tensorpack's staging callback
    as a ``SessionRunHook`` (it prefills on the first step, then stages in every consuming step)."""
    from tensorpack.callbacks.hooks import CallbackToHook
    from tensorpack.input_source import QueueInput, StagingInput
    from tensorpack.tfutils.tower import TowerContext

    source = StagingInput(QueueInput(_as_tensorpack_dataflow(df)), nr_stage=1, device=device)
    source.setup(specs)
    with TowerContext("", is_training=True):
        tensors = source.get_input_tensors()
    staging = [cb for cb in source.get_callbacks() if isinstance(cb, StagingInput.StagingCallback)]
    staging[0].setup_graph(None)           # its _setup_graph needs no trainer
    return source, tensors, CallbackToHook(staging[0])


def run_tensorpack_staging(source, sess: tf.compat.v1.Session):
    """Like :func:`run_tensorpack_queue` for the queue under a tensorpack ``StagingInput``."""
    return run_tensorpack_queue(source._input, sess)
