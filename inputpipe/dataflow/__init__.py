"""DataFlow: data loading in plain Python. Never imports TensorFlow.

Example::

    from inputpipe.dataflow import DataFromList, MapData, BatchData
    df = BatchData(MapData(DataFromList([[i] for i in range(100)], shuffle=False),
                           lambda dp: [dp[0] * 2]), 10)
    df.reset_state()
    for batch in df:
        ...
"""
from types import ModuleType as _ModuleType

from . import seeding
from .base import *  # noqa: F401,F403
from .raw import *  # noqa: F401,F403
from .common import *  # noqa: F401,F403
from .parallel import *  # noqa: F401,F403
from .parallel_map import *  # noqa: F401,F403
from .autoscale import Autoscale  # noqa: F401
from .remote import *  # noqa: F401,F403
from .serialize import *  # noqa: F401,F403
from .format import *  # noqa: F401,F403
from .image import *  # noqa: F401,F403
from .image_crops import *  # noqa: F401,F403
from .profiling import profile, ProfileReport, StageProfile  # noqa: F401
from .tuning import tune, TuneResult, StageChoice  # noqa: F401

_SUBPACKAGES = ("imgaug", "dataset")
# The Ray flows (the ``ray`` extra) live in inputpipe.dataflow.ray and load on first use.
_RAY_NAMES = ("RayMapData", "RayMapAndBatchData", "RayShardedData", "start_local_ray")
# ``from inputpipe.dataflow import *`` gives what ``from tensorpack.dataflow import *`` gives: every
# public DataFlow name (not the modules), the ``imgaug`` and ``dataset`` subpackages, and the Ray flows.
_FLOW_NAMES = sorted(name for name, value in globals().items()
                     if not name.startswith("_") and not isinstance(value, _ModuleType))
__all__ = list(_FLOW_NAMES)
__all__.extend(_SUBPACKAGES)
__all__.extend(_RAY_NAMES)


def __getattr__(name):
    """``inputpipe.dataflow.imgaug`` and ``.dataset`` (tensorpack: ``from tensorpack.dataflow import
    imgaug, dataset``) and the Ray flows are imported on first use, so importing the DataFlow core
    stays fast."""
    import importlib

    if name in _SUBPACKAGES:
        return importlib.import_module("." + name, __name__)
    if name in _RAY_NAMES:
        return getattr(importlib.import_module(".ray", __name__), name)
    raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))
