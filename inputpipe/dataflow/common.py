"""tensorpack's ``dataflow.common`` module path: the transforms, re-exported from the modules
that hold them (:mod:`.batch`, :mod:`.transforms`, :mod:`._core.buffered`, :mod:`.combine`, :mod:`.debug`).

Example::

    from inputpipe.dataflow.common import BatchData, MapData
    from inputpipe.dataflow import DataFromList
    df = BatchData(MapData(DataFromList([[i] for i in range(10)], shuffle=False), lambda dp: [dp[0] * 2]), 4)
    df.reset_state()
    assert [b[0].tolist() for b in df] == [[0, 2, 4, 6], [8, 10, 12, 14]]
"""
from ._core.buffered import CacheData, LocallyShuffleData
from .batch import BatchData, BatchDataByShape
from .combine import ConcatData, JoinData, RandomChooseData, RandomMixData
from .debug import PrintData, TestDataSpeed
from .transforms import (
    FilterData, FixedSizeData, MapData, MapDataComponent, RepeatedData, RepeatedDataPoint, SelectComponent,
)
# tensorpack's dataflow.common also has these (outside __all__): scripts import them from here
from .base import DataFlow, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow  # noqa: F401
from .tensorpack_helpers import get_rng, get_tqdm, get_tqdm_kwargs  # noqa: F401

__all__ = [
    "BatchData", "BatchDataByShape", "FixedSizeData", "MapData", "MapDataComponent", "FilterData",
    "RepeatedData", "RepeatedDataPoint", "RandomChooseData", "RandomMixData", "ConcatData",
    "JoinData", "SelectComponent", "LocallyShuffleData", "CacheData", "PrintData", "TestDataSpeed",
]
