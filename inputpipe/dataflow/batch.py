"""Batching: BatchData stacks consecutive datapoints, BatchDataByShape groups them by shape first.

Example::

    from inputpipe.dataflow import BatchData, DataFromList
    df = BatchData(DataFromList([[i, float(i)] for i in range(10)], shuffle=False), 4)
    df.reset_state()
    assert [b[0].tolist() for b in df] == [[0, 1, 2, 3], [4, 5, 6, 7]]
"""
import itertools
import operator
from collections import deque
from typing import Any, Callable, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..utils.buffers import ALIGN_MIN_BYTES, aligned_empty
from ._core.helpers import close_iterators, check_positive_int, length_of
from ._core.state import MAX_STATE_COUNT, IntRange, ListOf, StatePlan, check_input_state
from .base import (
    DataFlow, DataFlowReentrantGuard, ProxyDataFlow, StateMismatchError, check_state,
    empty_passes_mean_stuck, empty_passes_text, get_length, is_resumable, raise_if_stopping,
)

__all__ = ["BatchData", "BatchDataByShape", "BatchBuilder"]

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
_END = object()


def _stack(values: Sequence[Any], first: Any) -> np.ndarray:
    """Stack same-shape values; a large batch goes into 64-byte aligned memory, which TensorFlow's
    feed path shares instead of copying (see :mod:`inputpipe.utils.buffers`)."""
    if isinstance(first, np.ndarray) and first.nbytes * len(values) >= ALIGN_MIN_BYTES:
        return np.stack(values, out=aligned_empty((len(values),) + first.shape, first.dtype))
    return np.asarray(values)


def _keeps_every_value(value: Any, dtype: np.dtype) -> bool:
    """Whether ``value`` (an array, a numpy scalar or a python number) becomes ``dtype`` with no
    value changed but by the rounding of a narrower float: a safe cast, a float or complex of
    another precision, integers (and bools) that fit, integers a float holds exactly."""
    array = np.asarray(value)
    if array.dtype.kind not in "biufc" or dtype.kind not in "biufc":
        return False
    if np.can_cast(array.dtype, dtype, "safe"):
        return True
    if array.dtype.kind in "fc":
        return dtype.kind == "c" or (array.dtype.kind == "f" and dtype.kind == "f")
    if array.size == 0:
        return dtype.kind != "b"
    low, high = int(array.min()), int(array.max())
    if dtype.kind in "iu":
        limits = np.iinfo(dtype)
        return limits.min <= low and high <= limits.max
    if dtype.kind in "fc":
        exact = 2 ** (np.finfo(dtype).nmant + 1)
        return -exact <= low and high <= exact
    return False


def _batch_numpy(values: Sequence[Any], key: Hashable) -> np.ndarray:
    """Stack numpy arrays / numpy scalars of the first one's shape into its dtype. Values of
    another dtype (or python numbers) are cast as tensorpack does, where no value changes but by
    the rounding of a narrower float (:func:`_keeps_every_value`); anything else is an error."""
    first = values[0]
    try:
        same_dtype = list(map(_get_dtype, values)).count(first.dtype) == len(values)
        batch = _stack(values, first) if same_dtype else None
    except (AttributeError, ValueError, TypeError):
        batch = None
    if batch is None or batch.shape[1:] != first.shape:
        for i, value in enumerate(values):
            if np.shape(value) != first.shape or not isinstance(value, (np.ndarray, np.generic, bool, int, float,
                                                                        complex)):
                raise _mismatch(key, values, i)
            if getattr(value, "dtype", None) != first.dtype and not _keeps_every_value(value, first.dtype):
                raise ValueError("{}; casting it to the batch's {} would change its values".format(
                    _mismatch(key, values, i), first.dtype))
        batch = np.stack([np.asarray(value, first.dtype) for value in values])
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
    numbers: Optional[np.ndarray]
    try:
        numbers = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        numbers = None
    if numbers is not None and numbers.ndim == 1 and numbers.dtype in _PYTHON_NUMBER_DTYPES:
        if numbers.dtype.kind in "fc" and not any(map(_is_inexact, values)):
            # Only integers, yet numpy chose float: a numpy uint64 among signed ints. Keep the
            # documented int64 of an integer column, exactly, or refuse.
            return _integers_as_int64(values, key)
        return numbers
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

    - numpy arrays and numpy scalars: the batch has the first datapoint's dtype and every
      datapoint must have its shape. A value of another dtype (or a python number) is cast to it,
      as tensorpack does, when that changes no value but by the rounding of a narrower float:
      ``float64`` into ``float32``, ``int64`` into ``int32`` when every value fits, ``uint8`` into
      ``float32``; ``float`` into an integer dtype, a negative into an unsigned one or an integer
      that does not fit is an error.
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

    Its state is the input's state (a batch is yielded right after its last datapoint was
    read) and whether the epoch's last, partial batch was the last thing yielded.

    Example::

        df = BatchData(DataFromList([[np.zeros(3, "float32"), i] for i in range(10)]), 4)
        df.reset_state()
        images, labels = next(iter(df))      # float32 (4, 3), int64 (4,)
    """

    def __init__(self, ds: DataFlow, batch_size: int, remainder: bool = False, use_list: bool = False):
        super().__init__(ds)
        self.batch_size = check_positive_int(type(self).__name__, "batch_size", batch_size)
        self.remainder = remainder
        self.use_list = use_list
        self._ended = False
        self._resume_ended = False
        if not remainder:
            size = get_length(ds)
            if size is not None and self.batch_size > size:
                raise ValueError("{}: batch_size={} is larger than the length of its input ({}), so "
                                 "it would produce no batch; use remainder=True or a smaller "
                                 "batch_size".format(type(self).__name__, self.batch_size, size))

    def __len__(self) -> int:
        size = length_of(self, self.ds)
        batches, rest = divmod(size, self.batch_size)
        return batches + int(bool(rest) and self.remainder)

    def reset_state(self) -> None:
        super().reset_state()
        self._ended = self._resume_ended = False

    def __iter__(self) -> Iterator[Any]:
        ended, self._resume_ended = self._resume_ended, False
        self._ended = False
        if ended:  # restored after the epoch's partial batch: the epoch's end comes next
            return iter(())
        return self._batches()

    def _batches(self) -> Iterator[Any]:
        itr = iter(self.ds)
        batch_size, use_list = self.batch_size, self.use_list
        while True:
            holder = list(itertools.islice(itr, batch_size))
            if len(holder) < batch_size:
                if holder and self.remainder:
                    self._ended = True
                    try:
                        yield _aggregate(holder, use_list)
                    finally:
                        self._ended = False
                return
            yield _aggregate(holder, use_list)
            # drop the batched datapoints now, not once the next batch is complete: a parallel
            # DataFlow's shared memory behind them is then free while the next batch is collected
            del holder

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "input", "ended"}``."""
        return {"type": type(self).__name__, "input": self.ds.get_state(), "ended": self._ended or self._resume_ended}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        state = check_state(self, state, {"input": dict, "ended": bool})
        check_input_state(self, self.ds, state["input"], plan)
        plan.then(lambda: setattr(self, "_resume_ended", state["ended"]))

    @staticmethod
    def aggregate_batch(data_holder: List[Any], use_list: bool = False) -> Union[List[Any], Dict[Any, Any]]:
        """Batch a list of datapoints (lists or dicts) into one, by the rules of :class:`BatchData`.

        Example::

            batch = BatchData.aggregate_batch([[1, 2.0], [3, 4.0]])   # [int64 [1, 3], float64 [2., 4.]]
        """
        if not data_holder:
            raise ValueError("BatchData.aggregate_batch: got no datapoints")
        return _aggregate(list(data_holder), use_list)


class BatchBuilder:
    """Assemble one batch datapoint by datapoint: large numpy components are copied into the
    batch's (64-byte aligned) arrays as each datapoint arrives, while it is still in the CPU's
    caches; the rest is batched at the end. :meth:`batch` equals
    ``BatchData.aggregate_batch(datapoints)`` (the same values, dtypes and errors): a datapoint that
    does not fit the first one's layout makes it fall back to that.

    Assembling a batch of images after the last one is made reads every image back from memory;
    the parallel map-and-batch workers build their batches this way instead.

    Example::

        builder = BatchBuilder(64)
        for image, label in results:
            builder.add([image, label])
        batch = builder.batch()               # [uint8 (n, h, w, 3), int64 (n,)], or None
    """

    #: Components of at least this many bytes are copied as they arrive.
    EAGER_BYTES = 4096

    def __init__(self, capacity: int, allocate: Callable[[Tuple[int, ...], np.dtype], np.ndarray] = aligned_empty):
        self.capacity = int(capacity)
        self._allocate = allocate       # makes the batch's arrays (a worker's: in its shared memory)
        self._held: List[Any] = []
        self._arrays: Optional[List[Optional[np.ndarray]]] = None     # None: batch the held ones at the end

    def add(self, dp: Any) -> None:
        """Add the next datapoint (at most ``capacity``)."""
        count = len(self._held)
        if count >= self.capacity:
            raise ValueError("BatchBuilder: the batch already has its {} datapoints".format(self.capacity))
        self._held.append(dp)
        if count == 0:
            self._arrays = self._layout(dp)
        arrays = self._arrays
        if arrays is None:
            return
        if type(dp) not in _LIST_AND_TUPLE or len(dp) != len(arrays):
            self._arrays = None
            return
        for array, value in zip(arrays, dp):
            if array is not None:
                if type(value) is not np.ndarray or value.shape != array.shape[1:] or value.dtype != array.dtype:
                    self._arrays = None         # BatchData's rules decide (a cast, or the error)
                    return
                array[count] = value

    def _layout(self, dp: Any) -> Optional[List[Optional[np.ndarray]]]:
        if type(dp) not in _LIST_AND_TUPLE:
            return None
        arrays = [self._allocate((self.capacity,) + value.shape, value.dtype)
                  if type(value) is np.ndarray and value.nbytes >= self.EAGER_BYTES else None for value in dp]
        return arrays if any(array is not None for array in arrays) else None

    def batch(self) -> Optional[Union[List[Any], Dict[Any, Any]]]:
        """The batch of the datapoints added (None when there are none)."""
        held = self._held
        if not held:
            return None
        if self._arrays is None:
            return _aggregate(held, False)
        count = len(held)
        return [array[:count] if array is not None else _batch_component([dp[k] for dp in held], k)
                for k, array in enumerate(self._arrays)]


class BatchDataByShape(BatchData):
    """Batch together datapoints whose component ``idx`` has the same shape.

    Datapoints are grouped by ``dp[idx].shape``; a group is produced as a batch (by the rules of
    :class:`BatchData`) as soon as it has ``batch_size`` datapoints. Groups that are not full at
    the end of an epoch are kept and continue in the next epoch (until ``reset_state()``), so this
    flow is not re-entrant.

    Its length is tensorpack's estimate, ``len(ds) // batch_size``: the number of full batches
    one epoch of the input could make. An epoch yields fewer when groups are left unfilled and
    more when groups from earlier epochs fill up, so count epochs by ``len()`` only to size a
    schedule (e.g. steps per epoch), not to check the data.

    Resuming: the state holds no data, only the numbers of the datapoints waiting in groups and
    the input's state from before the oldest of them was read. A restore re-reads the input from
    there to where it was (across epochs if the groups are that old), puts the waiting
    datapoints back into their groups, and continues; nothing is yielded twice.

    Example::

        df = BatchDataByShape(images_of_various_sizes, 8, idx=0)
    """

    #: a group not full at the end of a pass is completed in a later pass, so a pass may yield nothing
    gathers_across_passes = True

    def __init__(self, ds: DataFlow, batch_size: int, idx: Hashable):
        super().__init__(ds, batch_size)
        self.idx = idx
        self._guard = DataFlowReentrantGuard("BatchDataByShape")
        self._clear()

    def _clear(self) -> None:
        self._groups: Dict[Any, List[Any]] = {}    # shape -> [(datapoint number, datapoint)]
        self._read = 0                              # input datapoints read since reset_state()
        self._before: deque = deque()               # (datapoint number, input state before it)
        self._restore: Optional[Dict[str, Any]] = None

    def reset_state(self) -> None:
        super().reset_state()
        self._clear()

    def __len__(self) -> int:
        """``len(ds) // batch_size`` (an estimate, as in tensorpack: see the class docstring)."""
        return length_of(self, self.ds) // self.batch_size

    def __iter__(self) -> Iterator[Any]:
        restore, self._restore = self._restore, None
        return self._by_shape(restore)

    def _next(self, itr: Iterator[Any], record: bool) -> Any:
        if record:
            self._before.append((self._read, self.ds.get_state()))
        dp = next(itr, _END)
        if dp is _END:
            if record:
                self._before.pop()
        else:
            self._read += 1
        return dp

    def _replay(self, restore: Dict[str, Any], record: bool) -> Iterator[Any]:
        """Re-read from the restored anchor; returns the input iterator positioned where it was."""
        wanted = set(restore["held"])
        self._read = restore["anchor_index"]
        itr = iter(self.ds)
        empty, read_before = 0, self._read
        while self._read < restore["read"]:
            raise_if_stopping(self)
            dp = self._next(itr, record)
            if dp is _END:
                empty, read_before = (0 if self._read > read_before else empty + 1), self._read
                if empty_passes_mean_stuck(self.ds, empty):
                    raise RuntimeError("BatchDataByShape: restoring a state, its input produced no datapoints in "
                                       "{}, so the {} datapoints the state had read cannot be read again".format(
                                           empty_passes_text(empty, "a pass", "passes"),
                                           restore["read"] - restore["anchor_index"]))
                itr = iter(self.ds)
                continue
            if self._read - 1 in wanted:
                self._groups.setdefault(np.shape(dp[self.idx]), []).append((self._read - 1, dp))
        return itr

    def _by_shape(self, restore: Optional[Dict[str, Any]]) -> Iterator[Any]:
        with self._guard:
            record = is_resumable(self.ds)
            itr = self._replay(restore, record) if restore is not None else iter(self.ds)
            try:
                groups, idx, batch_size = self._groups, self.idx, self.batch_size
                while True:
                    dp = self._next(itr, record)
                    if dp is _END:
                        return
                    shape = np.shape(dp[idx])
                    group = groups.setdefault(shape, [])
                    group.append((self._read - 1, dp))
                    if len(group) == batch_size:
                        # Taken out of the groups before it is batched and yielded: a consumer that
                        # stops at this batch, or a batching error, must not leave a full group behind
                        # (it would never reach batch_size again and would grow without bound).
                        del groups[shape]
                        self._prune()
                        yield _aggregate([member for _, member in group], self.use_list)
            finally:
                close_iterators([itr])

    def _prune(self) -> Optional[int]:
        """Forget input states older than the oldest waiting datapoint; returns its number."""
        oldest = min((group[0][0] for group in self._groups.values()), default=None)
        before = self._before
        while before and (oldest is None or before[0][0] < oldest):
            before.popleft()
        return oldest

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "anchor", "anchor_index", "read", "held"}``: the input's state before datapoint
        number ``anchor_index``, how many were read, and the numbers of the waiting ones (a restored
        state not iterated yet is that state)."""
        if self._restore is not None:
            return dict(self._restore)
        oldest = self._prune()
        if oldest is None:
            anchor, anchor_index = self.ds.get_state(), self._read
        else:
            anchor_index, anchor = self._before[0]
        held = sorted(number for group in self._groups.values() for number, _ in group)
        return {"type": "BatchDataByShape", "anchor": anchor, "anchor_index": anchor_index, "read": self._read,
                "held": held}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        state = check_state(self, state, {"anchor": dict, "anchor_index": int, "read": int, "held": list})
        anchor, read, held = state["anchor_index"], state["read"], state["held"]
        size = get_length(self.ds)
        # Every epoch brings each shape it has at least once, so the oldest waiting datapoint is
        # less than batch_size epochs old: a restore re-reads at most that.
        most = MAX_STATE_COUNT if size is None else self.batch_size * size
        if not 0 <= read - anchor <= most:
            raise StateMismatchError("BatchDataByShape.set_state: the state re-reads datapoints {}..{}, but with an "
                                     "input of {} a restore re-reads at most {} (batch_size epochs)".format(
                                         anchor, read, "unknown length" if size is None else size, most))
        problem = ListOf(IntRange(anchor, read - 1), most=read - anchor, ascending=True).problem(held)
        if problem is None and (held[0] if held else read) != anchor:
            problem = "the oldest waiting datapoint is {}, not the anchor {}".format(held[0] if held else None, anchor)
        if problem is not None:
            raise StateMismatchError("BatchDataByShape.set_state: field 'held' must be the ascending numbers of "
                                     "the waiting datapoints in {}..{}, the first one the anchor: got {}".format(
                                         anchor, read - 1, problem))
        check_input_state(self, self.ds, state["anchor"], plan)

        def restore() -> None:
            self._clear()
            self._restore = state
        plan.then(restore)
