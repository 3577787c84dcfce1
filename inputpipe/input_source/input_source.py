"""tensorpack's module path ``tensorpack.input_source.input_source``: the same names, from
:mod:`inputpipe.input_source`.

Example::

    from inputpipe.input_source.input_source import QueueInput, StagingInput
"""
from .base import FeedfreeInput
from .dataset import TFDatasetInput
from .feed import FeedInput, PlaceholderInput
from .queue import BatchQueueInput, QueueInput
from .staging import StagingInput
from .tensor import DummyConstantInput, TensorInput
from .zmq import ZMQInput

__all__ = ["PlaceholderInput", "FeedInput", "FeedfreeInput", "QueueInput", "BatchQueueInput",
           "DummyConstantInput", "TensorInput", "ZMQInput", "TFDatasetInput", "StagingInput"]
