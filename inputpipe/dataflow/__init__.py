"""DataFlow: data loading in plain Python. Never imports TensorFlow.

Example::

    from inputpipe.dataflow import DataFromList, MapData, BatchData
    df = BatchData(MapData(DataFromList([[i] for i in range(100)], shuffle=False),
                           lambda dp: [dp[0] * 2]), 10)
    df.reset_state()
    for batch in df:
        ...
"""
from . import seeding
from .base import *  # noqa: F401,F403
from .raw import *  # noqa: F401,F403
from .common import *  # noqa: F401,F403
from .parallel import *  # noqa: F401,F403
from .parallel_map import *  # noqa: F401,F403
from .remote import *  # noqa: F401,F403
from .serialize import *  # noqa: F401,F403
from .format import *  # noqa: F401,F403
from .image import *  # noqa: F401,F403
from . import imgaug, dataset  # noqa: F401  (tensorpack: ``from tensorpack.dataflow import imgaug, dataset``)
