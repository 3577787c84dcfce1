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
from typing import Any, Callable, Iterable, Iterator, List, Sequence, Union

import numpy as np

from ..utils.concurrency import POLL_INTERVAL
from .base import DataFlow, DataFlowLengthUnknown, DataFlowTerminated, RNGDataFlow, require_rng

__all__ = ["DataFromList", "DataFromGenerator", "DataFromIterable", "DataFromQueue", "FakeData"]


class DataFromList(RNGDataFlow):
    """The elements of a list, each one a datapoint; shuffled every epoch when ``shuffle=True``.

    The list is not copied, and datapoints are yielded as they are stored (not copied either).

    Example::

        df = DataFromList([[1, "a"], [2, "b"]], shuffle=False)
        df.reset_state()
        assert list(df) == [[1, "a"], [2, "b"]]
    """

    def __init__(self, lst: Sequence[Any], shuffle: bool = True):
        super().__init__()
        self.lst = lst
        self.shuffle = shuffle

    def __len__(self) -> int:
        return len(self.lst)

    def __iter__(self) -> Iterator[Any]:
        if not self.shuffle:
            return iter(self.lst)
        order = require_rng(self).permutation(len(self.lst)).tolist()
        lst = self.lst
        # Gathering the shuffled references in one tight loop is 5-8% faster for a whole pipeline
        # than a lazy map: the random reads into the list overlap instead of alternating with the
        # downstream work. It costs one list of references (8 bytes per datapoint).
        return iter([lst[i] for i in order])


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
        return self._iterable

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
    """

    def __init__(self, gen: Union[Callable[[], Iterable[Any]], Iterable[Any]]):
        self._gen = gen
        self._once = None if callable(gen) else _OneShotIterable(gen, "DataFromGenerator")

    def __iter__(self) -> Iterator[Any]:
        if self._once is not None:
            return iter(self._once)
        return iter(self._gen())

    def __len__(self) -> int:
        raise DataFlowLengthUnknown("DataFromGenerator has no length")


class DataFromIterable(DataFlow):
    """Datapoints from an iterable; its length is ``len(iterable)`` when it has one.

    An iterator (e.g. a generator object) can be iterated only once; a second epoch raises a
    RuntimeError instead of silently producing nothing.

    Example::

        df = DataFromIterable(([i] for i in range(3)))   # one epoch only
        df.reset_state()
        assert list(df) == [[0], [1], [2]]
    """

    def __init__(self, iterable: Iterable[Any]):
        self._iterable = _OneShotIterable(iterable, "DataFromIterable")
        try:
            self._len = len(iterable)
        except (TypeError, NotImplementedError):
            self._len = None

    def __len__(self) -> int:
        if self._len is None:
            raise DataFlowLengthUnknown("DataFromIterable: the iterable has no length")
        return self._len

    def __iter__(self) -> Iterator[Any]:
        return iter(self._iterable)


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
    """

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
        rng = require_rng(self)
        if self.random:
            for _ in range(self._size):
                yield self._draw(rng)
        else:
            fixed = self._draw(rng)
            for _ in range(self._size):
                yield list(fixed)
