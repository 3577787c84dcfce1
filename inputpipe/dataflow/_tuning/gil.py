"""How much of a map function's time holds the GIL: the part of its work that threads cannot run
side by side. Used by the tuner (:mod:`inputpipe.dataflow.tuning`); private.

While the tuner runs the chain with every map in one thread, in the last part of that run (the
maps' times are taken before it: the probe makes a thread that runs Python code hand it the GIL
now and then, which on a busy machine costs that thread a wait for the probe to get a CPU), a
probe thread wakes at moments drawn at random in advance (1 ms apart on average, so they do not
depend on what the measured thread does). To run, the probe needs the GIL. When the measured
thread is inside a call that releases it (a file or network read, a sleep, OpenCV, large numpy
operations), the probe runs at once; when the measured thread runs Python code, the probe waits
until it releases the GIL or the interpreter's switch interval makes it.

A moment at which the probe waited for the GIL (beyond its own wait for a CPU, read from
schedstat) fell in a stretch that held the GIL, unless the measured thread's own wait for a CPU
explains it and the call used next to no CPU: a thread preempted while it holds the GIL (on a
busy machine, often just after a sleep or a read ended and it took the GIL back) keeps the probe
out without running its function's code. Each moment counts for the map function running when
the probe asked for the GIL, once its own wait for a CPU ended (each call records when it ran in
:data:`MARKER`; the probe may get the GIL only during a later call): its GIL share is its held
moments over its moments.

Example::

    with GilProbe(delay=2.0):
        ...                       # the chain runs; each TimedFunc marks itself while it runs
    share = timed_func.gil_share()
"""
import collections
import random
import time
from typing import Any, Callable, Deque, List, Optional, Sequence, Tuple

from ...utils import resources
from ...utils.compat import native_thread_id
from ...utils.concurrency import StoppableThread

__all__ = ["GilProbe", "MARKER", "MIN_MOMENTS", "maps_timed"]

#: Mean seconds between two moments of the probe.
PROBE_PERIOD = 0.001
#: A probe that got the GIL this much later than its moment (its wait for a CPU taken out)
#: waited for the GIL: the moment was in a GIL-held stretch.
HELD_AFTER = 0.00015
#: The measured thread's wait for a CPU since the probe's last count that may explain a moment's
#: wait for the GIL (its wake-ups wait some microseconds on a quiet machine).
HOLDER_QUEUED = HELD_AFTER / 2
#: A function's GIL share is known once this many moments fell in its calls.
MIN_MOMENTS = 20
#: Seconds between two looks at whether the probe may begin (``ready``).
READY_POLL = 0.01


class _Marker:
    """What the measured thread records for the probe: ``running``, the timed map function
    running now and when it began (``(func, start)``, None between calls), ``recent``, the last
    calls that ended (``(start, end, func, CPU seconds of the call)``), ``thread``, the kernel's id
    of the thread that runs them (one: the tuner's serial run); ``probing``: the probe is at work
    (the timed functions and clocks do not count what they measure meanwhile)."""

    running: Optional[Tuple[Any, float]] = None
    recent: Deque[Tuple[float, float, Any, float]] = collections.deque(maxlen=256)
    thread: Optional[int] = None
    probing = False

    def at(self, moment: float, running: Optional[Tuple[Any, float]],
           recent: List[Tuple[float, float, Any, float]]) -> Tuple[Any, Optional[float]]:
        """The function that was running at ``moment`` (None: none was) and the CPU seconds of
        that call (None while it runs)."""
        if running is not None and running[1] <= moment:
            return running[0], None
        for start, end, func, cpu in reversed(recent):
            if start <= moment <= end:
                return func, cpu
            if end < moment:
                return None, None
        return None, None


MARKER = _Marker()


class GilProbe(StoppableThread):
    """The probe thread (see the module doc), at work from ``delay`` seconds after it starts once
    ``ready()`` is true (the maps' times were taken: on a busy machine the calls come slower than
    the delay assumed), until it stops; a context manager that starts and stops it. Each moment
    adds to ``gil_moments`` and, when held, ``gil_held`` of the function running at it.

    Example::

        with GilProbe(delay=2.0, ready=lambda: timed_func.clock.counted >= 5):
            profile(flow, seconds)
    """

    def __init__(self, delay: float = 0.0, period: float = PROBE_PERIOD, seed: int = 0,
                 ready: Callable[[], bool] = lambda: True):
        super().__init__(name="inputpipe-gil-probe")
        self.delay = delay
        self.ready = ready
        self.period = period
        self._rng = random.Random(seed)
        self._moment = 0.0               # the next moment (time.perf_counter())
        self.moments = 0

    def __enter__(self) -> "GilProbe":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self.join(timeout=1.0)
        MARKER.probing = False
        MARKER.recent.clear()            # (its entries hold the timed functions and their samples)
        MARKER.thread = None

    def _queued(self, native_id: Optional[int]) -> float:
        found = resources.thread_schedstat(native_id) if native_id is not None else None
        return 0.0 if found is None else found[1]

    def run(self) -> None:
        if self.wait_stopped(self.delay):
            return
        while not self.ready():
            if self.wait_stopped(READY_POLL):
                return
        MARKER.probing = True
        try:
            self._probe()
        finally:
            MARKER.probing = False

    def _probe(self) -> None:
        native_id = native_thread_id()
        perf = time.perf_counter
        queued = self._queued(native_id)
        measured, measured_queued = MARKER.thread, self._queued(MARKER.thread)
        self._moment = perf() + self._rng.uniform(0.0, 2.0 * self.period)
        while not self.stopped():
            delay = self._moment - perf()
            if delay > 0:
                time.sleep(delay)
            got_gil = perf()
            now_queued = self._queued(native_id)
            now_measured = MARKER.thread
            now_measured_queued = self._queued(now_measured)
            holder_queued = now_measured_queued - measured_queued if now_measured == measured else 0.0
            self.count(got_gil, now_queued - queued, MARKER.running, list(MARKER.recent), holder_queued)
            queued, measured, measured_queued = now_queued, now_measured, now_measured_queued

    def count(self, got_gil: float, queued: float, running: Optional[Tuple[Any, float]],
              recent: List[Tuple[float, float, Any, float]], holder_queued: float = 0.0) -> None:
        """Count the moments up to ``got_gil`` (when the probe got the GIL, having waited
        ``queued`` seconds for a CPU since it last got it), each for the function running at it
        (``running``, ``recent``: see :class:`_Marker`), then draw the next moment. The probe
        asked for the GIL once its wait for a CPU ended (``attempt``, its first moment plus
        ``queued``): the first moment counts for the function running then, the moments while
        it waited for a CPU are not counted (nothing was tested at them: on a busy machine the
        measured thread's next call may have begun meanwhile), and the moments from ``attempt``
        to ``got_gil - HELD_AFTER`` fell in a stretch that held the GIL.

        ``holder_queued`` is the measured thread's wait for a CPU since the last count. A thread
        preempted while it holds the GIL keeps the probe out without running its function's code:
        a moment whose wait is explained by the holder's (longer than ``HELD_AFTER`` in all, and
        its wait less the holder's not) counts as held only when the call it fell in used more
        than ``HELD_AFTER`` of CPU (a sleep or a read that took the GIL back and was preempted
        did not; a call still running at ``got_gil`` is taken to have)."""
        attempt = self._moment + queued
        held_until = got_gil - HELD_AFTER
        explained = max(holder_queued, 0.0) if holder_queued > HOLDER_QUEUED else 0.0
        first = True
        while self._moment <= got_gil:
            moment = max(self._moment, attempt)
            if first or self._moment >= attempt:
                self.moments += 1
                holder, call_cpu = MARKER.at(moment, running, recent)
                if holder is not None:
                    held = moment < held_until
                    if held and moment >= held_until - explained and call_cpu is not None:
                        held = call_cpu > HELD_AFTER
                    holder.gil_moments += 1
                    holder.gil_held += held
            first = False
            self._moment += self._rng.uniform(0.0, 2.0 * self.period)


def maps_timed(clocks: Sequence[Any], calls: int, latest: float) -> Callable[[], bool]:
    """A ``ready`` for :class:`GilProbe`: true once every clock (a map's ``ThreadClock``) has
    timed ``calls`` calls, or, from ``latest`` seconds on, at least one (a map behind a filter that
    lets few datapoints through). A map not timed at all holds the probe back: its time is worth
    more than its GIL share, which without the probe is taken as all of its CPU.

    Example::

        GilProbe(delay=1.0, ready=maps_timed([timed_func.clock], 5, latest=2.0))
    """
    latest_at = time.monotonic() + latest

    def ready() -> bool:
        if all(clock.counted >= calls for clock in clocks):
            return True
        return time.monotonic() >= latest_at and all(clock.calls >= 1 for clock in clocks)
    return ready
