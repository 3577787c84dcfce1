"""The DataFlow protocol: base classes, the length protocol, the re-entrancy guard and errors.

A DataFlow is an iterable of datapoints (a list/tuple of components, or a dict). Call
``reset_state()`` once, in the process that iterates, before iterating.
"""
import functools
import threading
from typing import Any, Iterator, Optional

import numpy as np

from .seeding import new_rng

__all__ = [
    "DataFlow",
    "RNGDataFlow",
    "ProxyDataFlow",
    "DataFlowTerminated",
    "DataFlowReentrantGuard",
    "DataFlowLengthUnknown",
    "get_length",
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

    __len__._inputpipe_length_protocol = True
    return __len__


def get_length(df: Any, default: Optional[int] = None) -> Optional[int]:
    """``len(df)``, or ``default`` when ``df`` has no length.

    Example::

        n = get_length(df)          # None for an infinite generator flow
    """
    try:
        return len(df)
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


class DataFlow:
    """Base class of every DataFlow: an iterable of datapoints.

    Subclasses implement ``__iter__`` (yield datapoints), optionally ``__len__`` (number of
    datapoints per epoch; raise ``NotImplementedError`` when unknown) and ``reset_state()``
    (per-process initialisation: RNGs, files, sockets).

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

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # tensorpack's pre-0.9 API: a class that defines get_data()/size() and not __iter__/__len__
        # iterates and has a length through them. Only the defining class is patched, so the
        # compatibility get_data/size of DataFlow itself (which call __iter__/__len__) never recurse.
        if "get_data" in cls.__dict__ and "__iter__" not in cls.__dict__:
            cls.__iter__ = cls.__dict__["get_data"]
        if "size" in cls.__dict__ and "__len__" not in cls.__dict__:
            cls.__len__ = cls.__dict__["size"]
        own_len = cls.__dict__.get("__len__")
        if own_len is not None and not getattr(own_len, "_inputpipe_length_protocol", False):
            cls.__len__ = _length_protocol(own_len)

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError("{} does not implement __iter__".format(type(self).__name__))

    def __len__(self) -> int:
        raise DataFlowLengthUnknown("{} has no length".format(type(self).__name__))

    def reset_state(self) -> None:
        """Initialise per-process state. Call once in the process that iterates, before iterating."""

    def close(self) -> None:
        """Stop every thread and process this flow (and the flows it wraps) started.

        A no-op here; parallel flows stop their workers, wrappers forward it to what they wrap.
        Closing the outermost flow of a pipeline closes the whole chain."""

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

    def reset_state(self) -> None:
        self.rng = new_rng(self)


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
        return len(self.ds)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.ds)

    def close(self) -> None:
        """Close the wrapped flow (which stops any workers below it)."""
        close = getattr(self.ds, "close", None)
        if callable(close):
            close()
