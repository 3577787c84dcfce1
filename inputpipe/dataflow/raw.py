"""Sources: DataFlows that produce datapoints from Python objects, queues or random numbers.

Example::

    from inputpipe.dataflow import DataFromList
    df = DataFromList([[i, i * i] for i in range(10)], shuffle=False)
    df.reset_state()
    assert list(df)[3] == [3, 9]
"""
import collections.abc
import queue as queue_module
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Sized, Union, cast

import numpy as np

from ..utils.concurrency import POLL_INTERVAL
from ._core.helpers import EpochCursor, epoch_rng, indexed_epoch, indexed_state, check_indexed
from ._core.state import SEED, StatePlan
from .base import (
    DataFlow, DataFlowLengthUnknown, DataFlowTerminated, NotResumableError, RNGDataFlow, StateMismatchError,
    check_state, raise_if_stopping,
)

__all__ = ["DataFromList", "DataFromGenerator", "DataFromIterable", "DataFromQueue", "FakeData"]


class DataFromList(RNGDataFlow):
    """The elements of a list, each one a datapoint; shuffled every epoch when ``shuffle=True``.

    The list is not copied, and datapoints are yielded as they are stored (not copied either).
    Epoch ``e`` is shuffled with a RandomState seeded from (this flow's base seed, ``e``), so
    :meth:`get_state` (epoch, position, list size and base seed) restores the same order.

    Example::

        df = DataFromList([[1, "a"], [2, "b"]], shuffle=False)
        df.reset_state()
        assert list(df) == [[1, "a"], [2, "b"]]
    """

    def __init__(self, lst: Sequence[Any], shuffle: bool = True):
        super().__init__()
        self.lst = lst
        self.shuffle = shuffle
        self._cursor = EpochCursor()

    def __len__(self) -> int:
        return len(self.lst)

    def reset_state(self) -> None:
        super().reset_state()
        self._cursor.reset()

    def __iter__(self) -> Iterator[Any]:
        lst = self.lst
        order, token = indexed_epoch(self, self._cursor, len(lst), self.shuffle)
        if not self.shuffle:
            items = iter(lst) if isinstance(order, range) and not order.start else map(lst.__getitem__, order)
        else:
            # Gathering the shuffled references in one tight loop is 5-8% faster for a whole
            # pipeline than a lazy map: the random reads into the list overlap instead of
            # alternating with the downstream work. It costs one list of references.
            items = iter([lst[i] for i in order])
        return self._cursor.track(items, token)

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "size", "seed"}``: epochs completed, datapoints yielded
        in the current one, the list's length and the base seed (None without shuffling)."""
        return indexed_state(self, self._cursor, len(self.lst), self.shuffle)

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        check_indexed(self, self._cursor, state, len(self.lst), self.shuffle, plan)


class _OneShotIterable:
    """Iterates an iterable; refuses a second pass over an iterator that was already consumed
    (which would otherwise be a silent empty epoch, and a busy loop under ``RepeatedData(-1)``)."""

    def __init__(self, iterable: Iterable[Any], owner: str):
        self._iterable = iterable
        self._owner = owner
        self._is_iterator = isinstance(iterable, collections.abc.Iterator)
        self._started = False
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[Any]:
        if not self._is_iterator:
            return iter(self._iterable)
        with self._lock:
            if self._started:
                raise RuntimeError(
                    "{} was given an iterator ({}), which can only be iterated once and is already "
                    "used; pass a generator function or a re-iterable object (e.g. a list) to iterate "
                    "it more than once".format(self._owner, type(self._iterable).__name__)
                )
            self._started = True
        return cast(Iterator[Any], self._iterable)    # an iterator: checked in __init__

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()


class DataFromGenerator(DataFlow):
    """Datapoints from a generator function (called once per epoch) or a generator (one epoch).

    It has no length. A generator object can be iterated only once; a second epoch raises a
    RuntimeError instead of silently producing nothing (pass the generator function instead).

    Example::

        def squares():
            for i in range(5):
                yield [i * i]

        df = DataFromGenerator(squares)
        df.reset_state()
        assert list(df) == [[0], [1], [4], [9], [16]]

    Not resumable: a generator cannot be positioned (use :class:`DataFromList` or a
    :class:`DataFlow` with ``get_state``/``set_state`` for a pipeline that resumes).
    """

    _not_resumable_reason = (
        "DataFromGenerator is not resumable: a generator cannot be restarted at a position, nor be "
        "known to give the same datapoints again; use DataFromList (or DataFromIterable over a list), "
        "or write a DataFlow with get_state()/set_state()")

    def __init__(self, gen: Union[Callable[[], Iterable[Any]], Iterable[Any]]):
        self._gen = gen
        self._once = None if callable(gen) else _OneShotIterable(gen, "DataFromGenerator")

    def __iter__(self) -> Iterator[Any]:
        if self._once is not None:
            return iter(self._once)
        gen = self._gen
        assert callable(gen)        # _once is None only for a generator function
        return iter(gen())

    def __len__(self) -> int:
        raise DataFlowLengthUnknown("DataFromGenerator has no length")


class DataFromIterable(DataFlow):
    """Datapoints from an iterable; its length is ``len(iterable)`` when it has one.

    An iterator (e.g. a generator object) can be iterated only once; a second epoch raises a
    RuntimeError instead of silently producing nothing.

    Resumable only over a sequence (``list``, ``tuple``, ``range``, any
    ``collections.abc.Sequence``): the state is (epoch, position) and a restore indexes into it.
    Any other iterable (a generator, a set, a file, a custom iterable) is not resumable:
    it cannot be positioned, nor be known to give the same items in the same order again.

    Example::

        df = DataFromIterable(([i] for i in range(3)))   # one epoch only
        df.reset_state()
        assert list(df) == [[0], [1], [2]]
    """

    def __init__(self, iterable: Iterable[Any]):
        self._iterable = _OneShotIterable(iterable, "DataFromIterable")
        self._sequence = iterable if isinstance(iterable, collections.abc.Sequence) else None
        self._cursor = EpochCursor()
        self._len: Optional[int]
        try:
            self._len = len(cast(Sized, iterable))      # probed: not every iterable has a length
        except (TypeError, NotImplementedError):
            self._len = None

    def __len__(self) -> int:
        if self._len is None:
            raise DataFlowLengthUnknown("DataFromIterable: the iterable has no length")
        return self._len

    def reset_state(self) -> None:
        self._cursor.reset()

    def __iter__(self) -> Iterator[Any]:
        sequence = self._sequence
        if sequence is None:
            return iter(self._iterable)
        _, start, token = self._cursor.begin()
        items = iter(sequence) if start == 0 else map(sequence.__getitem__, range(start, len(sequence)))
        return self._cursor.track(items, token)

    def check_resumable(self) -> None:
        if self._sequence is None:
            raise NotResumableError(
                "DataFromIterable is not resumable over a {}: only a sequence (list, tuple, range, ...) can "
                "be positioned and gives the same items again; pass a list, or use DataFromList".format(
                    type(self._iterable._iterable).__name__))

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "size"}`` over a sequence; NotResumableError otherwise."""
        self.check_resumable()
        return {"type": "DataFromIterable", "epoch": self._cursor.epoch, "position": self._cursor.position,
                "size": self._len}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        self.check_resumable()
        state = check_state(self, state, {"epoch": int, "position": int, "size": int})
        if state["size"] != self._len or not 0 <= state["position"] <= state["size"]:
            raise StateMismatchError("DataFromIterable.set_state: the state is of {} items at position {}, "
                                     "but this flow has {}".format(state["size"], state["position"], self._len))
        plan.then(lambda: self._cursor.restore(state["epoch"], state["position"]))


class DataFromQueue(DataFlow):
    """Datapoints taken from a queue (``queue.Queue``, ``multiprocessing.Queue``, or anything with
    ``get(timeout=...)`` raising ``queue.Empty``), forever.

    The wait polls every ``POLL_INTERVAL`` seconds; :meth:`stop` (from any thread) makes a
    waiting or later iteration raise :class:`DataFlowTerminated` within one poll interval, so a
    consumer never hangs on a queue nobody fills any more. ``reset_state()`` clears the stop.
    Items still in the queue when it stops stay in the queue.

    Example::

        q = queue.Queue()
        q.put([1])
        df = DataFromQueue(q)
        df.reset_state()
        assert next(iter(df)) == [1]
        df.stop()

    Not resumable: what was taken from the queue is gone, and nothing can be re-read.
    """

    _not_resumable_reason = (
        "DataFromQueue is not resumable: datapoints taken from a queue are gone and cannot be re-read; "
        "make the producer of the queue resumable instead, or read from a DataFlow with get_state()")

    def __init__(self, queue: Any):
        self.queue = queue
        self._stop_event = threading.Event()

    def reset_state(self) -> None:
        self._stop_event.clear()

    def stop(self) -> None:
        """Make iteration raise :class:`DataFlowTerminated` within one poll interval."""
        self._stop_event.set()

    def __iter__(self) -> Iterator[Any]:
        get = self.queue.get
        stopped = self._stop_event.is_set
        while True:
            if stopped():
                raise DataFlowTerminated("DataFromQueue was stopped")
            try:
                dp = get(timeout=POLL_INTERVAL)
            except queue_module.Empty:
                continue
            yield dp  # outside the try: an exception thrown in by the consumer is not swallowed

    # A copy sent to another process starts unstopped (an Event cannot be pickled).
    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_stop_event"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._stop_event = threading.Event()


def _per_component(value: Any, count: int, is_single: Callable[[Any], bool], what: str) -> List[Any]:
    if is_single(value):
        return [value] * count
    values = list(value)
    if len(values) != count:
        raise ValueError(
            "FakeData: {} has {} entries but there are {} shapes".format(what, len(values), count)
        )
    return values


def _is_single_domain(domain: Any) -> bool:
    return len(domain) == 2 and all(isinstance(x, (int, float, np.integer, np.floating)) for x in domain)


class FakeData(RNGDataFlow):
    """``size`` datapoints of random arrays with the given shapes, dtypes and value domains.

    ``dtype`` is one dtype for every component or a list with one per component; ``domain`` is
    one ``(low, high)`` pair or a list of pairs. Floating components are uniform in
    ``[low, high)``, integer components are uniform integers in ``[low, high)`` (so the default
    domain ``(0, 1)`` gives zeros), bool components are fair coin flips. With ``random=False``
    one datapoint is drawn per epoch and repeated ``size`` times (as new lists sharing the
    arrays), which costs nearly nothing.

    Epoch ``e`` draws from a RandomState seeded from (base seed, ``e``); its state is (epoch,
    position, base seed), and a restore mid-epoch redraws the skipped datapoints of that epoch.

    Example::

        df = FakeData([[32, 32, 3], [1]], size=100, dtype=["float32", "int64"],
                      domain=[(0, 1), (0, 10)])
        df.reset_state()
        image, label = next(iter(df))       # float32 (32, 32, 3), int64 (1,)
    """

    def __init__(self, shapes: Sequence[Sequence[int]], size: int = 1000, random: bool = True,
                 dtype: Any = "float32", domain: Any = (0, 1)):
        super().__init__()
        self.shapes = [tuple(int(d) for d in shape) for shape in shapes]
        self._size = int(size)
        if self._size < 0:
            raise ValueError("FakeData: size must be >= 0, got {}".format(size))
        self.random = random
        count = len(self.shapes)
        dtypes = _per_component(dtype, count, lambda v: isinstance(v, (str, type, np.dtype)), "dtype")
        self.dtype = [np.dtype(d) for d in dtypes]
        self.domain = [tuple(d) for d in _per_component(domain, count, _is_single_domain, "domain")]
        for k, (dt, (low, high)) in enumerate(zip(self.dtype, self.domain)):
            if dt.kind not in "biuf":
                raise ValueError("FakeData: component {} has dtype {}; only bool, integer and float "
                                 "dtypes are supported".format(k, dt))
            if not low < high:
                raise ValueError("FakeData: component {} has domain ({}, {}); low must be < high"
                                 .format(k, low, high))
            if dt.kind in "iu":
                info = np.iinfo(dt)
                if low < info.min or high - 1 > info.max:
                    raise ValueError("FakeData: component {} has domain ({}, {}), but its dtype {} holds "
                                     "only {}..{}".format(k, low, high, dt, info.min, info.max))

    def __len__(self) -> int:
        return self._size

    def reset_state(self) -> None:
        super().reset_state()
        self._cursor = EpochCursor()

    def _draw(self, rng: np.random.RandomState) -> List[np.ndarray]:
        datapoint = []
        for shape, dt, (low, high) in zip(self.shapes, self.dtype, self.domain):
            if dt.kind == "b":
                value = rng.random_sample(shape) < 0.5
            elif dt.kind in "iu":
                value = rng.randint(low, high, size=shape, dtype=dt)
            else:
                value = np.asarray(rng.uniform(low, high, size=shape), dtype=dt)
            datapoint.append(value)
        return datapoint

    def __iter__(self) -> Iterator[List[np.ndarray]]:
        cursor = self._require_cursor()
        epoch, start, token = cursor.begin()
        return cursor.track(self._epoch(epoch_rng(self, self.base_seed, epoch), start), token)

    def _epoch(self, rng: np.random.RandomState, start: int) -> Iterator[List[np.ndarray]]:
        if self.random:
            for _ in range(start):  # replay the draws of the datapoints yielded before the state
                raise_if_stopping(self)
                self._draw(rng)
            for _ in range(start, self._size):
                yield self._draw(rng)
        else:
            fixed = self._draw(rng)
            for _ in range(start, self._size):
                yield list(fixed)

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "seed"}``."""
        cursor = self._require_cursor()
        return {"type": type(self).__name__, "epoch": cursor.epoch, "position": cursor.position,
                "seed": self.base_seed}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        cursor = self._require_cursor()
        state = check_state(self, state, {"epoch": int, "position": int, "seed": SEED})
        if not 0 <= state["position"] <= self._size:
            raise StateMismatchError("FakeData.set_state: position {} is outside an epoch of {} datapoints"
                                     .format(state["position"], self._size))

        def restore() -> None:
            cursor.restore(state["epoch"], state["position"])
            self.base_seed = state["seed"]
        plan.then(restore)

    def _require_cursor(self) -> EpochCursor:
        if self.base_seed is None:
            raise RuntimeError("FakeData has no RNG yet: call reset_state() once before iterating it or "
                               "using its state")
        return self._cursor
