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
# tensorpack's input_source.input_source also has these (outside __all__): code imports them from here
from ..dataflow import DataFlow, DataFlowTerminated, MapData, RepeatedData  # noqa: F401
from .base import InputSource  # noqa: F401
from .tensorpack_helpers import (Callback, CallbackFactory, EnqueueThread, RunOp, ShareSessionThread,  # noqa: F401
                                 add_moving_summary, build_or_reuse_placeholder, dependency_of_fetches,
                                 get_current_tower_context, get_op_tensor_name)

__all__ = ["PlaceholderInput", "FeedInput", "FeedfreeInput", "QueueInput", "BatchQueueInput",
           "DummyConstantInput", "TensorInput", "ZMQInput", "TFDatasetInput", "StagingInput"]
