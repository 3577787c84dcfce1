"""Per-datapoint transforms and epoch shaping: map, filter, select, fixed size, repeat, local
shuffle and cache.

Example::

    from inputpipe.dataflow import DataFromList, MapData, RepeatedData
    df = RepeatedData(MapData(DataFromList([[1], [2]], shuffle=False), lambda dp: [dp[0] * 10]), 2)
    df.reset_state()
    assert list(df) == [[10], [20], [10], [20]]
"""
import copy
import itertools
from collections import deque
from typing import Any, Callable, Hashable, Iterator, List, Optional, Sequence

import numpy as np

from ._helpers import END, check_positive_int, close_iterators, length_of
from .base import (
    DataFlow, DataFlowLengthUnknown, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow, get_length, require_rng,
)
from .seeding import new_rng

__all__ = [
    "MapData", "MapDataComponent", "FilterData", "SelectComponent", "FixedSizeData", "RepeatedData",
    "RepeatedDataPoint", "LocallyShuffleData", "CacheData",
]

# ---------------------------------------------------------------------------------------------
# Mapping and filtering
# ---------------------------------------------------------------------------------------------

def _shallow_copy(dp: Any) -> Any:
    cls = type(dp)
    if cls is list:
        return dp[:]
    if cls is tuple:
        return dp
    if cls is dict:
        return dp.copy()
    return copy.copy(dp)


class MapData(ProxyDataFlow):
    """Apply ``func`` to every datapoint; a datapoint for which ``func`` returns None is dropped.

    ``func`` receives a shallow copy of the datapoint (a new list or dict holding the same
    components), so replacing a component in place does not change the input flow's data; it
    must still not modify the component objects (e.g. arrays) in place. The length is the
    input's length, which is too large when datapoints are dropped (use :class:`FilterData` for
    a flow that says its length is unknown).

    Example::

        df = MapData(DataFromList([[1], [2], [3]], shuffle=False),
                     lambda dp: None if dp[0] == 2 else [dp[0] * 10])
        df.reset_state()
        assert list(df) == [[10], [30]]
    """

    def __init__(self, ds: DataFlow, func: Callable[[Any], Any]):
        super().__init__(ds)
        self.func = func

    def __iter__(self) -> Iterator[Any]:
        func = self.func
        for dp in self.ds:
            # The copy is inlined for lists, the common case: this loop is the hot path.
            dp = func(dp[:] if dp.__class__ is list else _shallow_copy(dp))
            if dp is not None:
                yield dp


class MapDataComponent(MapData):
    """Apply ``func`` to one component (``index``: a list index or a dict key) of every datapoint.

    The datapoint is copied (a tuple becomes a list) before the component is replaced, so the
    input flow's data is not changed. Returning None drops the datapoint.

    Example::

        df = MapDataComponent(DataFromList([[1, "a"], [2, "b"]], shuffle=False), lambda x: x * 10)
        df.reset_state()
        assert list(df) == [[10, "a"], [20, "b"]]
    """

    def __init__(self, ds: DataFlow, func: Callable[[Any], Any], index: Hashable = 0):
        self._func = func
        self._index = index
        super().__init__(ds, self._map_component)

    def _map_component(self, dp: Any) -> Any:
        value = self._func(dp[self._index])
        if value is None:
            return None
        dp = list(dp) if isinstance(dp, tuple) else _shallow_copy(dp)
        dp[self._index] = value
        return dp

    def __iter__(self) -> Iterator[Any]:
        map_one = self._map_component
        for dp in self.ds:
            dp = map_one(dp)
            if dp is not None:
                yield dp


class FilterData(ProxyDataFlow):
    """Keep only the datapoints for which ``predicate(dp)`` is true.

    Not in tensorpack (where one returns None from a :class:`MapData`); unlike that, it says
    that its length is unknown instead of reporting the input's.

    Example::

        df = FilterData(DataFromList([[i] for i in range(6)], shuffle=False), lambda dp: dp[0] % 2)
        df.reset_state()
        assert list(df) == [[1], [3], [5]]
    """

    def __init__(self, ds: DataFlow, predicate: Callable[[Any], Any]):
        super().__init__(ds)
        self.predicate = predicate

    def __len__(self) -> int:
        raise DataFlowLengthUnknown("FilterData has no length: it depends on the predicate")

    def __iter__(self) -> Iterator[Any]:
        return filter(self.predicate, self.ds)


class SelectComponent(MapData):
    """Keep the components ``idxs`` (list indices or dict keys), in that order, as a list.

    Example::

        df = SelectComponent(DataFromList([[1, 2, 3]], shuffle=False), [2, 0])
        df.reset_state()
        assert list(df) == [[3, 1]]
    """

    def __init__(self, ds: DataFlow, idxs: Sequence[Hashable]):
        self.idxs = list(idxs)
        super().__init__(ds, self._select)

    def _select(self, dp: Any) -> List[Any]:
        return [dp[i] for i in self.idxs]

    def __iter__(self) -> Iterator[Any]:
        return map(self._select, self.ds)


# ---------------------------------------------------------------------------------------------
# Sizes and repetition
# ---------------------------------------------------------------------------------------------

class FixedSizeData(ProxyDataFlow):
    """Exactly ``size`` datapoints per epoch, restarting the input when it runs out.

    With ``keep_state=True`` the next epoch continues the input where the last one stopped
    (so this flow is not re-entrant); otherwise every epoch starts the input afresh.

    Example::

        df = FixedSizeData(DataFromList([[0], [1], [2]], shuffle=False), 2)
        df.reset_state()
        assert list(df) == [[0], [1]] and list(df) == [[2], [0]]
    """

    def __init__(self, ds: DataFlow, size: int, keep_state: bool = True):
        super().__init__(ds)
        self._size = int(size)
        if self._size < 0:
            raise ValueError("FixedSizeData: size must be >= 0, got {!r}".format(size))
        self._keep_state = keep_state
        self._itr: Optional[Iterator[Any]] = None
        self._guard = DataFlowReentrantGuard("FixedSizeData")

    def reset_state(self) -> None:
        super().reset_state()
        if self._itr is not None:
            close_iterators([self._itr])
        self._itr = None

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            if self._itr is None or not self._keep_state:
                self._itr = iter(self.ds)
            try:
                for _ in range(self._size):
                    dp = next(self._itr, END)
                    if dp is END:
                        self._itr = iter(self.ds)
                        dp = next(self._itr, END)
                        if dp is END:
                            raise RuntimeError("FixedSizeData: its input produced no datapoints, so "
                                               "{} cannot be produced".format(self._size))
                    yield dp
            finally:
                if not self._keep_state:
                    close_iterators([self._itr])
                    self._itr = None


class RepeatedData(ProxyDataFlow):
    """The input flow ``num`` times in a row (``num=-1``: forever, and then no length).

    Repeating forever an input that produces no datapoints raises a RuntimeError instead of
    spinning.

    Example::

        df = RepeatedData(DataFromList([[0], [1]], shuffle=False), 2)
        df.reset_state()
        assert list(df) == [[0], [1], [0], [1]]
    """

    def __init__(self, ds: DataFlow, num: int):
        super().__init__(ds)
        if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < -1:
            raise ValueError("RepeatedData: num must be an int >= 0, or -1 for forever, got {!r}".format(num))
        self.num = int(num)

    def __len__(self) -> int:
        if self.num == -1:
            raise DataFlowLengthUnknown("RepeatedData(num=-1) has no length: it repeats forever")
        return length_of(self, self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        if self.num != -1:
            return itertools.chain.from_iterable(itertools.repeat(self.ds, self.num))
        return self._forever()

    def _forever(self) -> Iterator[Any]:
        while True:
            empty = True
            for dp in self.ds:
                empty = False
                yield dp
            if empty:
                raise RuntimeError("RepeatedData(num=-1): its input produced no datapoints in an "
                                   "epoch, so repeating it forever would never produce any")


class RepeatedDataPoint(ProxyDataFlow):
    """Every datapoint ``num`` times in a row (the same object each time).

    Example::

        df = RepeatedDataPoint(DataFromList([[0], [1]], shuffle=False), 2)
        df.reset_state()
        assert list(df) == [[0], [0], [1], [1]]
    """

    def __init__(self, ds: DataFlow, num: int):
        super().__init__(ds)
        self.num = check_positive_int("RepeatedDataPoint", "num", num)

    def __len__(self) -> int:
        return length_of(self, self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        return itertools.chain.from_iterable(map(itertools.repeat, self.ds, itertools.repeat(self.num)))


# ---------------------------------------------------------------------------------------------
# Shuffling and caching
# ---------------------------------------------------------------------------------------------

class LocallyShuffleData(ProxyDataFlow, RNGDataFlow):
    """Shuffle through a buffer of ``buffer_size`` datapoints, for inputs too big to shuffle whole.

    Each input datapoint enters the buffer ``num_reuse`` times; once the buffer is full, every
    new entry pushes out the oldest one, which is produced. The buffer is shuffled after every
    ``shuffle_interval`` input datapoints (default ``buffer_size // 3``). The input is iterated
    continuously and the buffer is kept from one epoch to the next (so the first epoch reads
    ahead by ``buffer_size``), hence this flow is not re-entrant.

    An epoch has ``len(ds) * num_reuse`` datapoints. Unlike tensorpack (whose iterator never
    ends although it has a length), iteration stops there; an input without a length makes an
    epoch end when the input's epoch ends.

    Example::

        df = LocallyShuffleData(DataFromList(records, shuffle=False), buffer_size=1000)
    """

    def __init__(self, ds: DataFlow, buffer_size: int, num_reuse: int = 1, shuffle_interval: Optional[int] = None):
        ProxyDataFlow.__init__(self, ds)
        self.buffer_size = check_positive_int("LocallyShuffleData", "buffer_size", buffer_size)
        self.num_reuse = check_positive_int("LocallyShuffleData", "num_reuse", num_reuse)
        if shuffle_interval is None:
            shuffle_interval = max(1, self.buffer_size // 3)
        self.shuffle_interval = check_positive_int("LocallyShuffleData", "shuffle_interval", shuffle_interval)
        self._guard = DataFlowReentrantGuard("LocallyShuffleData")
        self._buffer: deque = deque()
        self._source: Optional[Iterator[Any]] = None
        self._entries = 0

    def reset_state(self) -> None:
        ProxyDataFlow.reset_state(self)
        RNGDataFlow.reset_state(self)
        if self._source is not None:
            close_iterators([self._source])
        self._buffer = deque()
        self._source = None
        self._entries = 0

    def __len__(self) -> int:
        return length_of(self, self.ds) * self.num_reuse

    def _entries_forever(self) -> Iterator[Any]:
        """Input datapoints, each ``num_reuse`` times, epoch after epoch; ``END`` between epochs."""
        while True:
            for dp in self.ds:
                for _ in range(self.num_reuse):
                    yield dp
            yield END

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            rng = require_rng(self)
            target = get_length(self)
            if self._source is None:
                self._source = self._entries_forever()
            buffer, interval = self._buffer, self.shuffle_interval * self.num_reuse
            produced, since_epoch = 0, 0
            while target is None or produced < target:
                dp = next(self._source)
                if dp is END:
                    if target is None:
                        return
                    if since_epoch == 0:
                        raise RuntimeError("LocallyShuffleData: its input produced no datapoints in an "
                                           "epoch, so {} cannot be produced".format(target))
                    since_epoch = 0
                    continue
                since_epoch += 1
                self._entries += 1
                if self._entries % interval == 0:
                    rng.shuffle(buffer)
                if len(buffer) < self.buffer_size:
                    buffer.append(dp)
                    continue
                oldest = buffer.popleft()
                buffer.append(dp)
                produced += 1
                yield oldest


class CacheData(ProxyDataFlow):
    """Keep the first complete epoch of the input in memory and produce later epochs from it
    (shuffled every epoch when ``shuffle=True``).

    The cache is kept only once a first epoch ran to its end; an interrupted first epoch is
    discarded and the next one reads the input again (tensorpack would keep the partial cache
    and silently lose the rest of the data). ``reset_state()`` empties the cache.

    Example::

        df = CacheData(MapData(DataFromList(files, shuffle=False), expensive_decode), shuffle=True)
    """

    def __init__(self, ds: DataFlow, shuffle: bool = False):
        super().__init__(ds)
        self.shuffle = shuffle
        self.rng = None
        self._cache: Optional[List[Any]] = None
        self._guard = DataFlowReentrantGuard("CacheData (while filling its cache)")

    def reset_state(self) -> None:
        super().reset_state()
        if self.shuffle:
            self.rng = new_rng(self)
        self._cache = None

    def __len__(self) -> int:
        if self._cache is not None:
            return len(self._cache)
        return length_of(self, self.ds)

    def __iter__(self) -> Iterator[Any]:
        cache = self._cache
        if cache is None:
            return self._fill()
        if not self.shuffle:
            return iter(cache)
        return map(cache.__getitem__, require_rng(self).permutation(len(cache)).tolist())

    def _fill(self) -> Iterator[Any]:
        with self._guard:
            cache = []
            for dp in self.ds:
                cache.append(dp)
                yield dp
            self._cache = cache
