"""The DataFlow protocol: base classes, the length protocol, the re-entrancy guard and errors.

A DataFlow is an iterable of datapoints (a list/tuple of components, or a dict). Call
``reset_state()`` once, in the process that iterates, before iterating.
"""
import functools
import operator
import threading
from abc import ABCMeta, abstractmethod
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

from ._core.state import StatePlan, StateMismatchError, check_state
from ..utils.concurrency import stop_requested
from ..utils.utils import get_rng  # noqa: F401  (tensorpack's dataflow.base has it, outside __all__)
from .seeding import new_rng

__all__ = [
    "DataFlow",
    "RNGDataFlow",
    "ProxyDataFlow",
    "DataFlowTerminated",
    "DataFlowReentrantGuard",
    "DataFlowLengthUnknown",
    "get_length",
    "NotResumableError",
    "StateMismatchError",
    "is_resumable",
    "check_state",
    "raise_if_stopping",
]


class DataFlowTerminated(BaseException):
    """Raised inside a DataFlow to say it was told to stop (e.g. its source was closed).

    It derives from ``BaseException`` (as in tensorpack) so that a bare ``except Exception``
    in user code does not swallow it.

    Example::

        def __iter__(self):
            while True:
                if self._closed:
                    raise DataFlowTerminated()
                yield self._next()
    """


def raise_if_stopping(flow: Any) -> None:
    """Raise :class:`DataFlowTerminated` when the thread iterating ``flow`` was asked to stop (a
    :class:`~inputpipe.utils.concurrency.StoppableThread`, such as an InputSource's feeding
    thread, whose source is closing or whose training coordinator stopped). Long loops inside a
    flow that wait on nothing a stop would interrupt call it between items: a restore that
    re-reads its input to reach the saved position, a consumer polling its workers. In any
    other thread it does nothing.

    Example::

        def _replay(self, count):
            for _ in range(count):
                raise_if_stopping(self)
                next(self._input)
    """
    if stop_requested():
        raise DataFlowTerminated("{}: the thread iterating it was asked to stop".format(type(flow).__name__))


class NotResumableError(TypeError):
    """Raised by ``get_state()``/``set_state()`` of a DataFlow that cannot save and restore its
    position (see ``docs/resuming.md``); the message names the flow and what to use instead.

    Example::

        try:
            state = df.get_state()
        except NotResumableError as err:
            state = None          # the data starts over after a restart
    """


def _default_not_resumable(cls: type) -> str:
    return ("{} is not resumable: it does not implement get_state()/set_state(). Implement both (a "
            "small dict with \"type\" and the position after the last datapoint it yielded, see "
            "docs/resuming.md) or build the pipeline from library flows that are resumable (e.g. "
            "DataFromList instead of a generator, MapData instead of a custom ProxyDataFlow)".format(
                cls.__name__))


def _not_resumable(flow: Any) -> "NotResumableError":
    cls = type(flow)
    reason = cls.__dict__.get("_not_resumable_reason") or _default_not_resumable(cls)
    return NotResumableError(reason)


class DataFlowLengthUnknown(NotImplementedError, TypeError):
    """Raised by ``len(df)`` when a DataFlow has no length.

    It is both a ``NotImplementedError`` (tensorpack's documented contract, so existing
    ``except NotImplementedError`` code keeps working) and a ``TypeError`` (Python's protocol
    for "no length", so ``list(df)``, ``len()``-probing helpers and ``operator.length_hint``
    work on flows without a length).

    Example::

        try:
            n = len(df)
        except DataFlowLengthUnknown:
            n = None
    """


def _length_protocol(len_method):
    """Wrap a subclass' ``__len__`` so a bare ``NotImplementedError`` becomes
    :class:`DataFlowLengthUnknown` (which ``list()`` understands)."""

    @functools.wraps(len_method)
    def __len__(self):
        try:
            return len_method(self)
        except DataFlowLengthUnknown:
            raise
        except NotImplementedError as err:
            raise DataFlowLengthUnknown(
                "{} has no length: {}".format(type(self).__name__, err or "__len__ not implemented")
            ) from None

    __len__.__dict__["_inputpipe_length_protocol"] = True      # (a function attribute mypy does not model)
    return __len__


def call_len(df: Any) -> int:
    """``len(df)`` as tensorpack's wrappers asked it, ``df.__len__()``: a ``__len__`` assigned
    to the instance (``ds.__len__ = lambda: n``, which ``len()`` ignores) counts too."""
    method = getattr(df, "__len__", None)
    if method is None:
        raise TypeError("object of type {!r} has no len()".format(type(df).__name__))
    length = operator.index(method())
    if length < 0:
        raise ValueError("{}.__len__() should return >= 0, got {}".format(type(df).__name__, length))
    return length


def get_length(df: Any, default: Optional[int] = None) -> Optional[int]:
    """``len(df)``, or ``default`` when ``df`` has no length.

    Example::

        n = get_length(df)          # None for an infinite generator flow
    """
    try:
        return call_len(df)
    except (TypeError, NotImplementedError):
        return default


class DataFlowReentrantGuard:
    """A context manager that refuses to be entered twice at the same time.

    DataFlows that are not re-entrant (they hold one iteration state, e.g. a socket or a
    shared generator) enter it in ``__iter__``, so a second concurrent iteration raises a
    clear error instead of silently interleaving datapoints.

    Example::

        class MyFlow(DataFlow):
            def __init__(self):
                self._guard = DataFlowReentrantGuard()

            def __iter__(self):
                with self._guard:
                    yield from self._source()
    """

    def __init__(self, owner: str = "DataFlow"):
        self._owner = owner
        self._lock = threading.Lock()

    def __enter__(self):
        if not self._lock.acquire(blocking=False):
            raise RuntimeError(
                "{} is not re-entrant: it is already being iterated (by another thread, or an "
                "unfinished iterator in this one). Finish or close() the first iterator before "
                "iterating again.".format(self._owner)
            )
        return self

    def __exit__(self, exc_type, exc, tb):
        self._lock.release()
        return False

    # A DataFlow is pickled when it is sent to a spawned worker process; a lock cannot be, so a
    # copy gets a fresh, unheld guard (the copy is not being iterated).
    def __getstate__(self):
        return {"_owner": self._owner}

    def __setstate__(self, state):
        self._owner = state["_owner"]
        self._lock = threading.Lock()


#: tensorpack's metaclass of DataFlow (outside its ``__all__``). Here DataFlow's metaclass is ABCMeta
#: itself: the pre-0.9 compatibility that tensorpack's metaclass added (``get_data()``/``size()``)
#: is done by ``DataFlow.__init_subclass__``.
DataFlowMeta = ABCMeta


class DataFlow(metaclass=ABCMeta):
    """Base class of every DataFlow: an iterable of datapoints.

    Subclasses implement ``__iter__`` (yield datapoints), optionally ``__len__`` (number of
    datapoints per epoch; raise ``NotImplementedError`` when unknown) and ``reset_state()``
    (per-process initialisation: RNGs, files, sockets).

    As in tensorpack, the class is abstract (``ABCMeta``, ``__iter__`` abstract): ``DataFlow()``
    and a subclass without ``__iter__`` (or tensorpack's older ``get_data``) raise ``TypeError``
    when instantiated, and a subclass's own ``@abstractmethod`` methods are enforced.

    Example::

        class Squares(DataFlow):
            def __len__(self):
                return 10

            def __iter__(self):
                for i in range(10):
                    yield [i, i * i]

        df = Squares()
        df.reset_state()
        assert list(df)[3] == [3, 9]
    """

    #: Why this class is not resumable, when the generic message would not say it (set per class).
    _not_resumable_reason: Optional[str] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # tensorpack's pre-0.9 API: a class that defines get_data()/size() and not __iter__/__len__
        # iterates and has a length through them. Only the defining class is patched, so the
        # compatibility get_data/size of DataFlow itself (which call __iter__/__len__) never recurse.
        if "get_data" in cls.__dict__ and "__iter__" not in cls.__dict__:
            cls.__iter__ = cls.__dict__["get_data"]  # type: ignore[method-assign]
        if "size" in cls.__dict__ and "__len__" not in cls.__dict__:
            cls.__len__ = cls.__dict__["size"]  # type: ignore[method-assign]
        own_len = cls.__dict__.get("__len__")
        if own_len is not None and not getattr(own_len, "_inputpipe_length_protocol", False):
            cls.__len__ = _length_protocol(own_len)  # type: ignore[method-assign]
        # A subclass that changes what is yielded (its own __iter__) but keeps an inherited state
        # would save a position that does not describe its output: it is not resumable until it
        # implements get_state/set_state itself.
        if "__iter__" in cls.__dict__ and "get_state" not in cls.__dict__ \
                and cls.get_state is not DataFlow.get_state:
            owner = next(c for c in cls.__mro__[1:] if "get_state" in c.__dict__)
            cls._not_resumable_reason = (
                "{} is not resumable: it overrides __iter__ of {} but not get_state()/set_state(), so "
                "{}'s state would not describe what it yields; implement both (they may build on "
                "super().get_state())".format(cls.__name__, owner.__name__, owner.__name__))
            cls.get_state = DataFlow.get_state  # type: ignore[method-assign]
            cls.set_state = DataFlow.set_state  # type: ignore[method-assign]
            cls.check_resumable = DataFlow.check_resumable  # type: ignore[method-assign]

    @abstractmethod
    def __iter__(self) -> Iterator[Any]:
        """Yield the datapoints of one epoch (a finite flow ends; an endless one never does)."""

    def __len__(self) -> int:
        raise DataFlowLengthUnknown("{} has no length".format(type(self).__name__))

    def reset_state(self) -> None:  # noqa: B027  (optional: a no-op unless a flow needs it)
        """Initialise per-process state. Call once in the process that iterates, before iterating."""

    def close(self) -> None:  # noqa: B027  (optional: a no-op unless a flow needs it)
        """Stop every thread and process this flow (and the flows it wraps) started.

        A no-op here; parallel flows stop their workers, wrappers forward it to what they wrap.
        Closing the outermost flow of a pipeline closes the whole chain."""

    def get_state(self) -> Dict[str, Any]:
        """A small JSON-serialisable dict: the position after the last datapoint this flow yielded
        (epoch, position, seeds and the states of its inputs; never data).

        Call it between datapoints from the iterating thread, or when no iteration runs. This
        default raises :class:`NotResumableError`; resumable flows override it (and
        :meth:`set_state`, or ``_check_state``)."""
        raise _not_resumable(self)

    get_state._inputpipe_resumable = False  # type: ignore[attr-defined]

    def set_state(self, state: Dict[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`get_state` of an equal flow): call it after
        ``reset_state()`` and before iterating. Raises :class:`StateMismatchError` for a state of
        another flow, :class:`NotResumableError` when the flow is not resumable.

        The whole state is checked before anything changes (see ``inputpipe.dataflow._core.state``):
        a refused state leaves this flow and every flow it reads from as they were. Library flows
        implement ``_check_state(state, plan)``; a flow may instead override this method."""
        if not getattr(type(self).get_state, "_inputpipe_resumable", True):
            raise _not_resumable(self)
        plan = StatePlan()
        self._check_state(state, plan)
        plan.apply()

    set_state._inputpipe_two_phase = True  # type: ignore[attr-defined]

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        """Check ``state`` completely (raise :class:`StateMismatchError` naming this flow) and
        register the changes it makes with ``plan.then()``; change nothing here."""
        raise _not_resumable(self)

    def check_resumable(self) -> None:
        """Raise :class:`NotResumableError` (saying why) unless this flow and every flow it reads
        from can save and restore their state; see :func:`is_resumable`."""
        if type(self).get_state is DataFlow.get_state:
            raise _not_resumable(self)
        for df in self._state_inputs():
            if not isinstance(df, DataFlow):
                raise NotResumableError("{} is not resumable: its input is a {}, not a DataFlow".format(
                    type(self).__name__, type(df).__name__))
            df.check_resumable()

    def _state_inputs(self) -> List["DataFlow"]:
        """The flows whose states this flow's state holds (none for a source)."""
        return []

    # tensorpack's pre-0.9 names, kept so old user code keeps running.
    def get_data(self) -> Iterator[Any]:
        return self.__iter__()

    def size(self) -> int:
        return self.__len__()


class RNGDataFlow(DataFlow):
    """A DataFlow with a ``self.rng`` (``numpy.random.RandomState``) set by ``reset_state()``.

    Each ``reset_state()`` gives a fresh RNG: different in every process by default, or derived
    deterministically from :func:`inputpipe.dataflow.seeding.set_global_seed` when a global seed
    is set (see the seeding docs).

    Example::

        class RandomInts(RNGDataFlow):
            def __iter__(self):
                while True:
                    yield [self.rng.randint(10)]
    """

    rng = None
    #: One seed per flow drawn from ``self.rng`` at ``reset_state()``; resumable flows derive each
    #: epoch's random stream from (base_seed, epoch) and save it in their state.
    base_seed: Optional[int] = None

    def reset_state(self) -> None:
        self.rng = new_rng(self)
        self.base_seed = int(self.rng.randint(0, 2 ** 32, dtype=np.int64))


def require_rng(flow: RNGDataFlow) -> np.random.RandomState:
    """``flow.rng``, or a clear error when ``reset_state()`` was not called yet."""
    if flow.rng is None:
        raise RuntimeError(
            "{} has no RNG yet: call reset_state() once before iterating it".format(type(flow).__name__)
        )
    return flow.rng


class ProxyDataFlow(DataFlow):
    """Base class for a DataFlow that wraps another one; forwards everything to it by default.

    Example::

        class Doubled(ProxyDataFlow):
            def __iter__(self):
                for dp in self.ds:
                    yield [dp[0] * 2]
    """

    def __init__(self, ds: DataFlow):
        self.ds = ds

    def reset_state(self) -> None:
        self.ds.reset_state()

    def __len__(self) -> int:
        return call_len(self.ds)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.ds)

    def close(self) -> None:
        """Close the wrapped flow (which stops any workers below it)."""
        close = getattr(self.ds, "close", None)
        if callable(close):
            close()

    # get_state/set_state are NOT forwarded: a proxy may yield a different number of datapoints
    # than it reads. Library proxies that know their mapping implement them.
    def _state_inputs(self) -> List[DataFlow]:
        return [self.ds]


#: Passes in a row without a datapoint after which even a flow that gathers datapoints across
#: passes (see :func:`empty_passes_mean_stuck`) is taken to never produce one.
EMPTY_PASSES_ALLOWED = 1000


def empty_passes_mean_stuck(ds: Any, empty_in_a_row: int) -> bool:
    """Whether ``empty_in_a_row`` passes of ``ds`` in a row without a datapoint mean that it will
    never produce one (an exhausted generator, an empty source), so that repeating it would spin.

    One empty pass is enough, unless a flow in the chain gathers datapoints across passes (its
    class sets ``gathers_across_passes = True``, as :class:`BatchDataByShape` does: a group not
    yet full at the end of a pass is completed in a later one); then only
    :data:`EMPTY_PASSES_ALLOWED` empty passes in a row are.

    Example::

        empty = 0 if produced else empty + 1
        if empty_passes_mean_stuck(ds, empty):
            raise RuntimeError("the flow produces nothing")
    """
    if empty_in_a_row < 1:
        return False
    return empty_in_a_row >= EMPTY_PASSES_ALLOWED or not _gathers_across_passes(ds)


def empty_passes_text(count: int, one: str, unit: str) -> str:
    """How an error names ``count`` empty passes: ``one`` for a single one (``"an epoch"``), else
    ``"<count> <unit> in a row"``.

    Example::

        assert empty_passes_text(1000, "an epoch", "epochs") == "1000 epochs in a row"
    """
    return one if count == 1 else "{} {} in a row".format(count, unit)


def _gathers_across_passes(ds: Any) -> bool:
    seen, todo = set(), [ds]
    while todo:
        flow = todo.pop()
        if flow is None or id(flow) in seen:
            continue
        seen.add(id(flow))
        if getattr(type(flow), "gathers_across_passes", False):
            return True
        inputs = getattr(flow, "_state_inputs", None)
        todo.extend(inputs() if callable(inputs) else [getattr(flow, "ds", None)])
    return False


def is_resumable(df: Any) -> bool:
    """Whether ``df`` and every flow it reads from implement ``get_state()``/``set_state()``.

    It inspects the classes (and the flows each one names as its inputs) without iterating;
    ``df.check_resumable()`` raises :class:`NotResumableError` with the reason instead.

    Example::

        if not is_resumable(df):
            logger.warning("the data will start over after a restart")
    """
    check = getattr(df, "check_resumable", None)
    if check is None:
        return False
    try:
        check()
    except NotResumableError:
        return False
    return True
