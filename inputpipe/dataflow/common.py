"""Transforms: DataFlows that batch, map, filter, repeat, mix, join, shuffle, cache or inspect
other DataFlows.

Example::

    from inputpipe.dataflow import BatchData, DataFromList, MapData
    df = DataFromList([[i] for i in range(10)], shuffle=False)
    df = MapData(df, lambda dp: [dp[0] * 2])
    df = BatchData(df, 4)
    df.reset_state()
    assert [b[0].tolist() for b in df] == [[0, 2, 4, 6], [8, 10, 12, 14]]
"""
import copy
import itertools
import operator
import time
from collections import deque
from typing import Any, Callable, Dict, Hashable, Iterator, List, Optional, Sequence, Union

import numpy as np

from ..utils.buffers import ALIGN_MIN_BYTES, aligned_empty
from ..utils.logger import get_logger
from .base import (
    DataFlow, DataFlowLengthUnknown, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow, get_length, require_rng,
)
from .seeding import new_rng

__all__ = [
    "BatchData", "BatchDataByShape", "FixedSizeData", "MapData", "MapDataComponent", "FilterData",
    "RepeatedData", "RepeatedDataPoint", "RandomChooseData", "RandomMixData", "ConcatData",
    "JoinData", "SelectComponent", "LocallyShuffleData", "CacheData", "PrintData", "TestDataSpeed",
]

logger = get_logger(__name__)

_END = object()


def _length_of(owner: DataFlow, ds: Any, what: str = "its input") -> int:
    """``len(ds)``, or DataFlowLengthUnknown saying that ``owner`` has no length because of ``ds``."""
    try:
        return len(ds)
    except (TypeError, NotImplementedError) as err:
        raise DataFlowLengthUnknown("{} has no length because {} has none ({})".format(
            type(owner).__name__, what, err)) from None


def _close(iterators: Sequence[Iterator[Any]]) -> None:
    """Close unfinished generators now, so that their re-entrancy guards and resources are freed."""
    for itr in iterators:
        close = getattr(itr, "close", None)
        if close is not None:
            close()


def _check_positive_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError("{}: {} must be a positive int, got {!r}".format(owner, name, value))
    return int(value)


# ---------------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------------

_LIST_AND_TUPLE = frozenset((list, tuple))
_PYTHON_NUMBER_DTYPES = (np.dtype(bool), np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.complex128))


def _describe_value(value: Any) -> str:
    """A short description of one component value for error messages."""
    if isinstance(value, np.ndarray):
        return "a numpy array of shape {} and dtype {}".format(value.shape, value.dtype)
    if isinstance(value, np.generic):
        return "a numpy {} scalar".format(value.dtype)
    if isinstance(value, int) and not isinstance(value, bool) and not -2 ** 63 <= value < 2 ** 63:
        return "the python int {} (outside int64)".format(value)
    return "a python {}".format(type(value).__name__)


def _mismatch(key: Hashable, values: Sequence[Any], bad: int) -> ValueError:
    return ValueError("BatchData: cannot batch component {!r}: datapoint {} of the batch has {} but "
                      "datapoint 0 has {}".format(key, bad, _describe_value(values[bad]),
                                                   _describe_value(values[0])))


_get_dtype = operator.attrgetter("dtype")


def _stack(values: Sequence[Any], first: Any) -> np.ndarray:
    """Stack same-shape values; a large batch goes into 64-byte aligned memory, which TensorFlow's
    feed path shares instead of copying (see :mod:`inputpipe.utils.buffers`)."""
    if isinstance(first, np.ndarray) and first.nbytes * len(values) >= ALIGN_MIN_BYTES:
        return np.stack(values, out=aligned_empty((len(values),) + first.shape, first.dtype))
    return np.asarray(values)


def _batch_numpy(values: Sequence[Any], key: Hashable) -> np.ndarray:
    """Stack numpy arrays / numpy scalars that all have the first one's dtype and shape."""
    first = values[0]
    try:
        same_dtype = list(map(_get_dtype, values)).count(first.dtype) == len(values)
        batch = _stack(values, first) if same_dtype else None
    except (AttributeError, ValueError, TypeError):
        batch = None
    if batch is None or batch.shape[1:] != first.shape:
        for i, value in enumerate(values):
            if not isinstance(value, (np.ndarray, np.generic)) or value.dtype != first.dtype \
                    or value.shape != first.shape:
                raise _mismatch(key, values, i)
        batch = np.asarray(values)
    return batch


def _is_number(value: Any, allow_numpy: bool) -> bool:
    """A python bool/int/float/complex (an int within int64), or with ``allow_numpy`` a numpy one."""
    if isinstance(value, np.generic):
        return allow_numpy and isinstance(value, (np.number, np.bool_))
    if not isinstance(value, (bool, int, float, complex)):
        return False
    return not isinstance(value, int) or -2 ** 63 <= value < 2 ** 63


def _is_inexact(value: Any) -> bool:
    return isinstance(value, (float, complex, np.inexact))


def _integers_as_int64(values: Sequence[Any], key: Hashable) -> np.ndarray:
    """An int64 batch of integer values (python, numpy signed or unsigned), without rounding;
    a value outside int64 is an error naming the component and the datapoint."""
    for i, value in enumerate(values):
        if not -2 ** 63 <= int(value) < 2 ** 63:
            raise ValueError("BatchData: cannot batch component {!r}: datapoint {} of the batch has the "
                             "{} value {}, outside int64, and datapoint 0 has {}; a column of "
                             "integers is batched as int64 (give every datapoint a np.uint64 to keep "
                             "such values)".format(key, i, type(value).__name__, int(value),
                                                  _describe_value(values[0])))
    return np.array([int(value) for value in values], dtype=np.int64)


def _batch_python(values: Sequence[Any], key: Hashable) -> np.ndarray:
    """Batch python scalars: bools -> bool; ints (with bools) -> int64; with a float -> float64;
    with a complex -> complex128; str -> numpy str; bytes -> object array (keeps every byte)."""
    first = values[0]
    if isinstance(first, (str, bytes)):
        kind = str if isinstance(first, str) else bytes
        for i, value in enumerate(values):
            if not isinstance(value, kind):
                raise _mismatch(key, values, i)
        if kind is str:
            return np.asarray(values)
        batch = np.empty(len(values), dtype=object)
        batch[:] = values
        return batch
    try:
        batch = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        batch = None
    if batch is not None and batch.ndim == 1 and batch.dtype in _PYTHON_NUMBER_DTYPES:
        if batch.dtype.kind in "fc" and not any(map(_is_inexact, values)):
            # Only integers, yet numpy chose float: a numpy uint64 among signed ints. Keep the
            # documented int64 of an integer column, exactly, or refuse.
            return _integers_as_int64(values, key)
        return batch
    # The culprit is a value that is no number at all or, failing that, a numpy scalar that does not
    # combine into those dtypes (numpy makes them from any mix of python numbers within int64).
    bad = next((i for i, v in enumerate(values) if not _is_number(v, allow_numpy=True)), None)
    if bad is None:
        bad = next(i for i, v in enumerate(values) if not _is_number(v, allow_numpy=False))
    raise _mismatch(key, values, bad)


def _batch_component(values: Sequence[Any], key: Hashable) -> np.ndarray:
    first = values[0]
    if isinstance(first, (np.ndarray, np.generic)):
        return _batch_numpy(values, key)
    if isinstance(first, (bool, int, float, complex, str, bytes)):
        return _batch_python(values, key)
    raise TypeError("BatchData: cannot batch component {!r}: datapoint 0 of the batch has {}, which "
                    "is not a numpy array or a python scalar; convert it to a numpy array first, or "
                    "use use_list=True".format(key, _describe_value(first)))


def _aggregate(holder: List[Any], use_list: bool) -> Union[List[Any], Dict[Any, Any]]:
    first = holder[0]
    if isinstance(first, dict):
        keys = first.keys()
        for i, dp in enumerate(holder):
            if not isinstance(dp, dict) or dp.keys() != keys:
                raise ValueError("BatchData: datapoint {} of the batch has {} but datapoint 0 has "
                                 "{}".format(i, _keys_of(dp), _keys_of(first)))
        if use_list:
            return {key: [dp[key] for dp in holder] for key in keys}
        return {key: _batch_component([dp[key] for dp in holder], key) for key in keys}
    if not isinstance(first, (list, tuple)):
        raise TypeError("BatchData: a datapoint must be a list, tuple or dict, got {} "
                        "(datapoint 0 of the batch)".format(type(first).__name__))
    size = len(first)
    types = set(map(type, holder))
    sequences = types <= _LIST_AND_TUPLE or all(issubclass(t, (list, tuple)) for t in types)
    if not sequences or len(set(map(len, holder))) != 1:
        for i, dp in enumerate(holder):
            if not isinstance(dp, (list, tuple)) or len(dp) != size:
                raise ValueError("BatchData: datapoint {} of the batch has {} but datapoint 0 has {} "
                                 "components".format(i, _components_of(dp), size))
    columns = zip(*holder)
    if use_list:
        return [list(column) for column in columns]
    return [_batch_component(column, k) for k, column in enumerate(columns)]


def _keys_of(dp: Any) -> str:
    if isinstance(dp, dict):
        return "keys [{}]".format(", ".join(sorted(map(repr, dp.keys()))))
    return "no keys (it is a {})".format(type(dp).__name__)


def _components_of(dp: Any) -> str:
    if isinstance(dp, (list, tuple)):
        return "{} components".format(len(dp))
    return "no components list (it is a {})".format(type(dp).__name__)


class BatchData(ProxyDataFlow):
    """Stack ``batch_size`` consecutive datapoints into one: each component gets a new first axis.

    Datapoints are lists/tuples (batched into a list) or dicts (batched into a dict with the same
    keys). With ``use_list=True`` each component of the batch is the plain list of the values.
    Otherwise each component becomes one numpy array, by these rules:

    - numpy arrays and numpy scalars: every datapoint must have exactly the dtype and shape of the
      first one in the batch; the batch has that dtype (nothing is cast).
    - python scalars: bools give ``bool``; ints (with bools) give ``int64``; with any float
      ``float64``; with any complex ``complex128``; an int outside int64 is an error (numpy
      scalars among them are accepted when the result is still one of these dtypes; numpy
      integers among python ints, ``uint64`` included, give ``int64`` when every value fits and
      an error otherwise, never a rounded ``float64``).
    - ``str`` gives a numpy ``str_`` array; ``bytes`` gives an ``object`` array of the bytes.

    Anything else, or a mismatch, raises a ValueError (TypeError for an unsupported type) that
    names the component (index or key), the datapoint's index in the batch, and both shapes and
    dtypes. With ``remainder=True`` the last, smaller batch of an epoch is produced too;
    otherwise it is dropped. The input may have no length (then neither has the BatchData).

    Example::

        df = BatchData(DataFromList([[np.zeros(3, "float32"), i] for i in range(10)]), 4)
        df.reset_state()
        images, labels = next(iter(df))      # float32 (4, 3), int64 (4,)
    """

    def __init__(self, ds: DataFlow, batch_size: int, remainder: bool = False, use_list: bool = False):
        super().__init__(ds)
        self.batch_size = _check_positive_int(type(self).__name__, "batch_size", batch_size)
        self.remainder = remainder
        self.use_list = use_list
        if not remainder:
            size = get_length(ds)
            if size is not None and self.batch_size > size:
                raise ValueError("{}: batch_size={} is larger than the length of its input ({}), so "
                                 "it would produce no batch; use remainder=True or a smaller "
                                 "batch_size".format(type(self).__name__, self.batch_size, size))

    def __len__(self) -> int:
        size = _length_of(self, self.ds)
        batches, rest = divmod(size, self.batch_size)
        return batches + int(bool(rest) and self.remainder)

    def __iter__(self) -> Iterator[Any]:
        itr = iter(self.ds)
        batch_size, use_list = self.batch_size, self.use_list
        while True:
            holder = list(itertools.islice(itr, batch_size))
            if len(holder) < batch_size:
                if holder and self.remainder:
                    yield _aggregate(holder, use_list)
                return
            yield _aggregate(holder, use_list)
            # drop the batched datapoints now, not once the next batch is complete: a parallel
            # DataFlow's shared memory behind them is then free while the next batch is collected
            del holder

    @staticmethod
    def aggregate_batch(data_holder: List[Any], use_list: bool = False) -> Union[List[Any], Dict[Any, Any]]:
        """Batch a list of datapoints (lists or dicts) into one, by the rules of :class:`BatchData`.

        Example::

            batch = BatchData.aggregate_batch([[1, 2.0], [3, 4.0]])   # [int64 [1, 3], float64 [2., 4.]]
        """
        if not data_holder:
            raise ValueError("BatchData.aggregate_batch: got no datapoints")
        return _aggregate(list(data_holder), use_list)


class BatchDataByShape(BatchData):
    """Batch together datapoints whose component ``idx`` has the same shape.

    Datapoints are grouped by ``dp[idx].shape``; a group is produced as a batch (by the rules of
    :class:`BatchData`) as soon as it has ``batch_size`` datapoints. Groups that are not full at
    the end of an epoch are kept and continue in the next epoch (until ``reset_state()``), so this
    flow is not re-entrant and has no length.

    Example::

        df = BatchDataByShape(images_of_various_sizes, 8, idx=0)
    """

    def __init__(self, ds: DataFlow, batch_size: int, idx: Hashable):
        super().__init__(ds, batch_size)
        self.idx = idx
        self._groups: Dict[Any, List[Any]] = {}
        self._guard = DataFlowReentrantGuard("BatchDataByShape")

    def reset_state(self) -> None:
        super().reset_state()
        self._groups = {}

    def __len__(self) -> int:
        raise DataFlowLengthUnknown("BatchDataByShape has no length: it depends on the shapes")

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            groups, idx, batch_size = self._groups, self.idx, self.batch_size
            for dp in self.ds:
                shape = np.shape(dp[idx])
                group = groups.setdefault(shape, [])
                group.append(dp)
                if len(group) == batch_size:
                    # Taken out of the groups before it is batched and yielded: a consumer that
                    # stops at this batch, or a batching error, must not leave a full group behind
                    # (it would never reach batch_size again and would grow without bound).
                    del groups[shape]
                    yield _aggregate(group, self.use_list)


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
            _close([self._itr])
        self._itr = None

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            if self._itr is None or not self._keep_state:
                self._itr = iter(self.ds)
            try:
                for _ in range(self._size):
                    dp = next(self._itr, _END)
                    if dp is _END:
                        self._itr = iter(self.ds)
                        dp = next(self._itr, _END)
                        if dp is _END:
                            raise RuntimeError("FixedSizeData: its input produced no datapoints, so "
                                               "{} cannot be produced".format(self._size))
                    yield dp
            finally:
                if not self._keep_state:
                    _close([self._itr])
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
        return _length_of(self, self.ds) * self.num

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
        self.num = _check_positive_int("RepeatedDataPoint", "num", num)

    def __len__(self) -> int:
        return _length_of(self, self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        return itertools.chain.from_iterable(map(itertools.repeat, self.ds, itertools.repeat(self.num)))


# ---------------------------------------------------------------------------------------------
# Combining several flows
# ---------------------------------------------------------------------------------------------

def _check_flows(owner: str, df_lists: Sequence[Any]) -> List[Any]:
    flows = list(df_lists)
    if not flows:
        raise ValueError("{}: needs at least one DataFlow, got none".format(owner))
    return flows


class RandomChooseData(RNGDataFlow):
    """Each datapoint comes from one of several flows, chosen at random; stops when the chosen
    flow is exhausted.

    ``df_lists`` is a list of DataFlows (chosen with equal probability) or of
    ``(DataFlow, probability)`` pairs whose probabilities sum to 1. No length.

    Example::

        df = RandomChooseData([(DataFromList(a), 0.8), (DataFromList(b), 0.2)])
    """

    def __init__(self, df_lists: Sequence[Any]):
        super().__init__()
        entries = _check_flows("RandomChooseData", df_lists)
        pairs = [isinstance(e, (list, tuple)) for e in entries]
        if any(pairs) and not all(pairs):
            raise ValueError("RandomChooseData: give either DataFlows or (DataFlow, probability) "
                             "pairs, not a mix of both")
        if all(pairs):
            self.df_lists = [(df, float(prob)) for df, prob in entries]
            total = sum(prob for _, prob in self.df_lists)
            if abs(total - 1.0) > 1e-6 or any(prob < 0 for _, prob in self.df_lists):
                raise ValueError("RandomChooseData: probabilities must be >= 0 and sum to 1, got {}"
                                 .format([prob for _, prob in self.df_lists]))
        else:
            self.df_lists = [(df, 1.0 / len(entries)) for df in entries]

    def reset_state(self) -> None:
        super().reset_state()
        for df, _ in self.df_lists:
            df.reset_state()

    def __len__(self) -> int:
        raise DataFlowLengthUnknown("RandomChooseData has no length: it stops at a random point")

    def __iter__(self) -> Iterator[Any]:
        rng = require_rng(self)
        iterators = [iter(df) for df, _ in self.df_lists]
        probs = np.array([prob for _, prob in self.df_lists])
        probs /= probs.sum()  # accepted within 1e-6 of 1; numpy's choice() needs ~1e-8
        try:
            while True:
                for k in rng.choice(len(iterators), size=256, p=probs).tolist():
                    dp = next(iterators[k], _END)
                    if dp is _END:
                        return
                    yield dp
        finally:
            _close(iterators)


class RandomMixData(RNGDataFlow):
    """All datapoints of several flows, interleaved in a random order (each flow keeps its own
    order); the length is the sum of the inputs' lengths, which every input must have.

    An input that produces fewer or more datapoints than its length is an error.

    Example::

        df = RandomMixData([DataFromList(a), DataFromList(b)])   # len(a) + len(b) datapoints
    """

    def __init__(self, df_lists: Sequence[DataFlow]):
        super().__init__()
        self.df_lists = _check_flows("RandomMixData", df_lists)
        self._sizes()

    def _sizes(self) -> List[int]:
        return [_length_of(self, df, "its input {} ({})".format(k, type(df).__name__))
                for k, df in enumerate(self.df_lists)]

    def reset_state(self) -> None:
        super().reset_state()
        for df in self.df_lists:
            df.reset_state()

    def __len__(self) -> int:
        return sum(self._sizes())

    def __iter__(self) -> Iterator[Any]:
        sizes = self._sizes()
        order = np.repeat(np.arange(len(sizes)), sizes)
        require_rng(self).shuffle(order)
        iterators = [iter(df) for df in self.df_lists]
        produced = [0] * len(sizes)
        try:
            for k in order.tolist():
                dp = next(iterators[k], _END)
                if dp is _END:
                    raise RuntimeError("RandomMixData: input {} ({}) produced {} datapoints but its "
                                       "length is {}".format(k, type(self.df_lists[k]).__name__,
                                                             produced[k], sizes[k]))
                produced[k] += 1
                yield dp
            for k, itr in enumerate(iterators):
                if next(itr, _END) is not _END:
                    raise RuntimeError("RandomMixData: input {} ({}) produced more datapoints than "
                                       "its length {}".format(k, type(self.df_lists[k]).__name__, sizes[k]))
        finally:
            _close(iterators)


class ConcatData(DataFlow):
    """All datapoints of the first flow, then of the second, and so on.

    Example::

        df = ConcatData([DataFromList([[0]], shuffle=False), DataFromList([[1]], shuffle=False)])
        df.reset_state()
        assert list(df) == [[0], [1]]
    """

    def __init__(self, df_lists: Sequence[DataFlow]):
        self.df_lists = _check_flows("ConcatData", df_lists)

    def reset_state(self) -> None:
        for df in self.df_lists:
            df.reset_state()

    def __len__(self) -> int:
        return sum(_length_of(self, df, "its input {} ({})".format(k, type(df).__name__))
                   for k, df in enumerate(self.df_lists))

    def __iter__(self) -> Iterator[Any]:
        return itertools.chain.from_iterable(self.df_lists)


class JoinData(DataFlow):
    """Iterate several flows together and join their datapoints into one: lists/tuples are
    concatenated, dicts are merged (a key in two inputs is an error). Stops when the shortest
    input is exhausted; the length is the smallest input length.

    Example::

        df = JoinData([DataFromList([[1, 2]], shuffle=False), DataFromList([[3]], shuffle=False)])
        df.reset_state()
        assert list(df) == [[1, 2, 3]]
    """

    def __init__(self, df_lists: Sequence[DataFlow]):
        self.df_lists = _check_flows("JoinData", df_lists)
        sizes = [get_length(df) for df in self.df_lists]
        if len({s for s in sizes if s is not None}) > 1:
            logger.warning("JoinData: the inputs have different lengths %s; it stops at the shortest", sizes)

    def reset_state(self) -> None:
        for df in self.df_lists:
            df.reset_state()

    def __len__(self) -> int:
        return min(_length_of(self, df, "its input {} ({})".format(k, type(df).__name__))
                   for k, df in enumerate(self.df_lists))

    def __iter__(self) -> Iterator[Any]:
        iterators = [iter(df) for df in self.df_lists]
        try:
            for parts in zip(*iterators):
                yield self._join(parts)
        finally:
            _close(iterators)

    @staticmethod
    def _join(parts: Sequence[Any]) -> Any:
        if all(isinstance(p, dict) for p in parts):
            joined = {}
            for k, part in enumerate(parts):
                for key in part:
                    if key in joined:
                        raise ValueError("JoinData: key {!r} of input {} is also produced by an earlier "
                                         "input".format(key, k))
                joined.update(part)
            return joined
        first_is_dict = isinstance(parts[0], dict)
        for k, part in enumerate(parts):
            if isinstance(part, dict) != first_is_dict or not isinstance(part, (dict, list, tuple)):
                raise ValueError("JoinData: input {} produced a {} but input 0 produced a {}; all inputs "
                                 "must produce lists/tuples, or all dicts".format(
                                     k, type(part).__name__, type(parts[0]).__name__))
        return list(itertools.chain.from_iterable(parts))


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
        self.buffer_size = _check_positive_int("LocallyShuffleData", "buffer_size", buffer_size)
        self.num_reuse = _check_positive_int("LocallyShuffleData", "num_reuse", num_reuse)
        if shuffle_interval is None:
            shuffle_interval = max(1, self.buffer_size // 3)
        self.shuffle_interval = _check_positive_int("LocallyShuffleData", "shuffle_interval", shuffle_interval)
        self._guard = DataFlowReentrantGuard("LocallyShuffleData")
        self._buffer: deque = deque()
        self._source: Optional[Iterator[Any]] = None
        self._entries = 0

    def reset_state(self) -> None:
        ProxyDataFlow.reset_state(self)
        RNGDataFlow.reset_state(self)
        if self._source is not None:
            _close([self._source])
        self._buffer = deque()
        self._source = None
        self._entries = 0

    def __len__(self) -> int:
        return _length_of(self, self.ds) * self.num_reuse

    def _entries_forever(self) -> Iterator[Any]:
        """Input datapoints, each ``num_reuse`` times, epoch after epoch; ``_END`` between epochs."""
        while True:
            for dp in self.ds:
                for _ in range(self.num_reuse):
                    yield dp
            yield _END

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
                if dp is _END:
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
        return _length_of(self, self.ds)

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


# ---------------------------------------------------------------------------------------------
# Inspection
# ---------------------------------------------------------------------------------------------

def _describe_tree(value: Any, label: Any, depth: int, max_depth: int, max_list: int) -> List[str]:
    indent = "  " * depth
    head = "{}{}: ".format(indent, label)
    if isinstance(value, np.ndarray):
        text = "ndarray:{} of shape {}".format(value.dtype, value.shape)
        if value.size and value.dtype.kind in "biuf":
            text += " in range [{}, {}]".format(value.min(), value.max())
        return [head + text]
    if isinstance(value, np.generic):
        return [head + "{} with value {}".format(value.dtype, value)]
    if isinstance(value, (bool, int, float, complex)):
        return [head + "{} with value {}".format(type(value).__name__, value)]
    if isinstance(value, (str, bytes)):
        shown = value if len(value) <= 40 else value[:40]
        return [head + "{} of len {}: {!r}{}".format(type(value).__name__, len(value), shown,
                                                     "..." if len(value) > 40 else "")]
    if isinstance(value, (list, tuple, dict)):
        lines = [head + "{} of len {}".format(type(value).__name__, len(value))]
        items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        if depth + 1 >= max_depth:
            if items:
                lines.append("  " * (depth + 1) + "...")
            return lines
        for key, sub in items[:max_list]:
            lines.extend(_describe_tree(sub, key, depth + 1, max_depth, max_list))
        if len(items) > max_list:
            lines.append("  " * (depth + 1) + "...")
        return lines
    return [head + type(value).__name__]


class PrintData(ProxyDataFlow):
    """Pass datapoints through unchanged, logging the structure, shapes, dtypes and value ranges
    of the first ``num`` datapoints after ``reset_state()`` (at INFO level, via ``logging``).

    ``max_depth`` limits how deep nested lists/dicts are described, ``max_list`` how many of
    their items.

    Example::

        logging.basicConfig(level=logging.INFO)
        df = PrintData(df, num=2, name="after augmentation")
    """

    def __init__(self, ds: DataFlow, num: int = 1, name: Optional[str] = None, max_depth: int = 3,
                 max_list: int = 3):
        super().__init__(ds)
        self.num = num
        self.name = name
        self.max_depth = max_depth
        self.max_list = max_list
        self._count = 0

    def reset_state(self) -> None:
        super().reset_state()
        self._count = 0

    def describe(self, dp: Any) -> str:
        """The text logged for one datapoint."""
        label = " ({})".format(self.name) if self.name is not None else ""
        lines = ["datapoint {}/{}{}: {} with {} components".format(
            self._count, self.num, label, type(dp).__name__, len(dp))]
        items = dp.items() if isinstance(dp, dict) else enumerate(dp)
        for key, value in items:
            lines.extend(_describe_tree(value, key, 1, self.max_depth + 1, self.max_list))
        return "\n".join(lines)

    def __iter__(self) -> Iterator[Any]:
        for dp in self.ds:
            if self._count < self.num:
                logger.info("%s", self.describe(dp))
                self._count += 1
            yield dp


# ---------------------------------------------------------------------------------------------
# Speed test
# ---------------------------------------------------------------------------------------------

def _array_bytes(dp: Any) -> int:
    """Bytes held by the numpy components of a datapoint (top-level components only)."""
    values = dp.values() if isinstance(dp, dict) else dp
    return sum(v.nbytes for v in values if isinstance(v, (np.ndarray, np.generic)))


class TestDataSpeed(ProxyDataFlow):
    """Measure how fast a DataFlow produces datapoints, with a tqdm progress bar.

    :meth:`start` calls ``reset_state()`` on the input, takes ``warmup`` datapoints untimed,
    then times up to ``size`` datapoints (fewer if the input ends first), logs a table
    (datapoints/s, and MB/s when components are numpy arrays) and returns the numbers.
    Iterating a TestDataSpeed runs the test first and then produces the input's datapoints.

    Example::

        stats = TestDataSpeed(df, size=1000).start()
        print(stats["datapoints_per_sec"])
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, ds: DataFlow, size: int = 5000, warmup: int = 0):
        super().__init__(ds)
        self.test_size = int(size)
        self.warmup = int(warmup)

    def start(self) -> Dict[str, Any]:
        """Run the test; returns ``datapoints``, ``seconds``, ``datapoints_per_sec``, ``bytes``
        and ``bytes_per_sec`` (the last two None when no component is a numpy array)."""
        from tabulate import tabulate
        from tqdm import tqdm

        class ProgressBar(tqdm):
            monitor_interval = 0  # no tqdm monitor thread left running after the test

        self.ds.reset_state()
        itr = iter(self.ds)
        try:
            for _ in itertools.islice(itr, self.warmup):
                pass
            count, nbytes = 0, 0
            with ProgressBar(total=self.test_size, leave=True, smoothing=0.2, desc="TestDataSpeed") as bar:
                started = time.perf_counter()
                for dp in itertools.islice(itr, self.test_size):
                    nbytes += _array_bytes(dp)
                    count += 1
                    bar.update()
                seconds = time.perf_counter() - started
        finally:
            _close([itr])
        has_bytes = nbytes > 0
        stats = {
            "datapoints": count,
            "seconds": seconds,
            "datapoints_per_sec": count / seconds if seconds > 0 else float("inf"),
            "bytes": nbytes if has_bytes else None,
            "bytes_per_sec": (nbytes / seconds if seconds > 0 else float("inf")) if has_bytes else None,
        }
        rows = [["datapoints", count], ["seconds", "{:.3f}".format(seconds)],
                ["datapoints/s", "{:.1f}".format(stats["datapoints_per_sec"])]]
        if has_bytes:
            rows.append(["MB/s", "{:.1f}".format(stats["bytes_per_sec"] / 1e6)])
        logger.info("TestDataSpeed of %s:\n%s", type(self.ds).__name__, tabulate(rows, tablefmt="simple"))
        return stats

    def __iter__(self) -> Iterator[Any]:
        self.start()
        yield from self.ds
