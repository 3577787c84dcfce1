"""Timing probes: stand-ins for a stage's input that pass every datapoint on unchanged and time
``next()``. Used by :mod:`inputpipe.dataflow.profiling`; private.

Example::

    timer = Timer()
    probe = make_probe(source, timer, threading.get_ident())
    for dp in probe:          # the datapoints of source, in order
        ...
    timer.seconds, timer.count
"""
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .._core.helpers import close_iterators
from ..base import DataFlow

_CALIBRATION_CALLS = 4000



class Timer:
    """Counters of one stage, written by its probe. Only calls made in the profiling thread count
    towards ``seconds``; calls from other threads are kept apart (they overlap in time)."""

    __slots__ = ("seconds", "count", "ends", "other_thread_seconds", "other_thread_count", "entered_at", "active")

    def __init__(self) -> None:
        self.active = True
        self.entered_at: Optional[float] = None
        self.reset()

    def reset(self) -> None:
        self.seconds = 0.0
        self.count = 0
        self.ends = 0
        self.other_thread_seconds = 0.0
        self.other_thread_count = 0


def timed(iterator: Iterator[Any], timer: Timer, thread_id: int) -> Iterator[Any]:
    """The datapoints of ``iterator``, unchanged and in order, timing every ``next()``."""
    clock, ident = time.perf_counter, threading.get_ident
    try:
        while timer.active:
            start = clock()
            mine = ident() == thread_id
            if mine:
                timer.entered_at = start
            try:
                dp = next(iterator)
            except StopIteration:
                if mine:
                    timer.entered_at = None
                    timer.seconds += clock() - start
                    timer.ends += 1
                return
            finally:
                if mine:
                    timer.entered_at = None
            elapsed = clock() - start
            if mine:
                timer.seconds += elapsed
                timer.count += 1
            else:
                timer.other_thread_seconds += elapsed
                timer.other_thread_count += 1
            yield dp
        yield from iterator       # the profile is over: pass the rest through untimed
    finally:
        close_iterators([iterator])


class _Probe(DataFlow):
    """Stands in for a stage's input while profiling: the same datapoints, with ``next()`` timed.
    Everything else (length, ``reset_state``, ``close``, attributes) goes to the real input.
    A subclass named like the input is made per input class, so error messages that name the
    input's class read the same while profiling."""

    def __init__(self, flow: Any, timer: Timer, thread_id: int):
        self.__dict__["_probed"] = flow
        self.__dict__["_timer"] = timer
        self.__dict__["_thread_id"] = thread_id

    def __iter__(self) -> Iterator[Any]:
        return timed(iter(self._probed), self._timer, self._thread_id)

    def __len__(self) -> int:
        return len(self._probed)

    def reset_state(self) -> None:
        self._probed.reset_state()

    def close(self) -> None:
        close = getattr(self._probed, "close", None)
        if callable(close):
            close()

    def _state_inputs(self) -> List[Any]:
        inputs = getattr(self._probed, "_state_inputs", None)
        return inputs() if callable(inputs) else []

    def __getattr__(self, name: str) -> Any:
        probed = self.__dict__.get("_probed")
        if probed is None:
            raise AttributeError(name)
        return getattr(probed, name)


_PROBE_CLASSES: Dict[type, type] = {}


def make_probe(flow: Any, timer: Timer, thread_id: int) -> _Probe:
    cls = _PROBE_CLASSES.get(type(flow))
    if cls is None:
        cls = type(type(flow).__name__, (_Probe,), {
            "__module__": __name__, "gathers_across_passes": getattr(type(flow), "gathers_across_passes", False)})
        _PROBE_CLASSES[type(flow)] = cls
    return cls(flow, timer, thread_id)


def calibrate() -> Tuple[float, float]:
    """What a probe costs per ``next()``, in seconds: ``(inside, outside)``. ``inside`` is its
    bookkeeping within the window it times (counted in the probed stage's time), ``outside`` the
    rest (counted in the time of the stage that reads through it). Both are taken off the stages'
    own times. The best of three runs over a list, so a busy machine inflates them the least."""
    items = [None] * _CALIBRATION_CALLS
    inside, outside = float("inf"), float("inf")
    clock = time.perf_counter
    for _ in range(3):
        start = clock()
        for _ in iter(items):
            pass
        plain = clock() - start
        timer = Timer()
        start = clock()
        for _ in timed(iter(items), timer, threading.get_ident()):
            pass
        probed = clock() - start
        inside = min(inside, (timer.seconds - plain) / _CALIBRATION_CALLS)
        outside = min(outside, (probed - timer.seconds - plain) / _CALIBRATION_CALLS)
    return max(inside, 0.0), max(outside, 0.0)
