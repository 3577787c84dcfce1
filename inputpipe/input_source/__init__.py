"""InputSource: move data into a TF1-style graph without making the train step wait for it.

Names and signatures follow ``tensorpack.input_source``. Every source works in any TF1 loop via
``source.get_hooks()`` (``MonitoredTrainingSession``) or :func:`hooked_session` (plain session).

Example::

    from inputpipe.input_source import QueueInput, StagingInput, hooked_session
    source = StagingInput(QueueInput(df), nr_stage=2)
    source.setup(specs)
    x, y = source.get_input_tensors()
    ...
    with tf.compat.v1.Session(graph=g) as sess, hooked_session(sess, source) as run:
        run(train_op)
"""
from .errors import InputSourceError
from .base import FeedfreeInput, InputSource, InputSourceHook, InputStepHook, Tower
from .stats import InputStats
from .session import HookedSession, hooked_session
from .feed import PlaceholderInput, FeedInput
from .queue import QueueInput, BatchQueueInput
from .staging import StagingInput
from .dataset import TFDatasetInput
from .tensor import TensorInput, DummyConstantInput
from .remap import remap_input_source, RemappedInput
from .zmq import ZMQInput
from .jpeg_decode import JpegDecodeInput
from .estimator import EstimatorInput
from . import input_source, input_source_base  # noqa: F401,E402  (tensorpack's module paths)

__all__ = [
    "InputSource", "FeedfreeInput", "InputSourceHook", "InputStepHook", "InputSourceError", "InputStats", "Tower",
    "HookedSession", "hooked_session",
    "PlaceholderInput", "FeedInput", "QueueInput", "BatchQueueInput", "StagingInput",
    "TFDatasetInput", "TensorInput", "DummyConstantInput", "remap_input_source", "RemappedInput", "ZMQInput",
    "JpegDecodeInput", "EstimatorInput",
]
