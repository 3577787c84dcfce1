"""tensorpack's ``utils.timer`` at the same path: time a block, a loop or a whole run.

- :func:`timed_operation` logs how long a block took;
- :func:`total_timer` adds a block's time to a named total, which :func:`print_total_timer`
  logs (at exit too, as in tensorpack);
- :class:`Timer` measures seconds with pauses; :class:`IterSpeedCounter` logs how often a point
  of the code is reached.

Times are ``time.perf_counter`` seconds; messages go to the ``inputpipe`` logger at INFO.

Example::

    from inputpipe.utils.timer import Timer, timed_operation
    with timed_operation("loading the annotations"):
        annotations = load()
    timer = Timer()
    ...
    print(timer.seconds())
"""
import atexit
import contextlib
import threading
import time
from collections import defaultdict
from typing import DefaultDict, Iterator, Optional, Union

from .logger import get_logger
from .stats import StatCounter

__all__ = ["timed_operation", "IterSpeedCounter", "Timer"]

logger = get_logger(__name__)

#: tensorpack's name for the clock its timers read (``from tensorpack.utils.timer import timer``).
timer = time.perf_counter


@contextlib.contextmanager
def timed_operation(msg: str, log_start: bool = False) -> Iterator[None]:
    """Log how long the block took (``"<Msg> finished, time:1.2345 sec."``), and its start when
    ``log_start``.

    Example::

        with timed_operation("loading the index"):
            index = load_index()
    """
    if not msg:
        raise ValueError("timed_operation: msg must be a non-empty message")
    if log_start:
        logger.info("Start %s ...", msg)
    start = time.perf_counter()
    yield
    logger.info("%s finished, time:%.4f sec.", msg[0].upper() + msg[1:], time.perf_counter() - start)


_TOTAL_TIMER_DATA: DefaultDict[str, StatCounter] = defaultdict(StatCounter)
_total_lock = threading.Lock()


@contextlib.contextmanager
def total_timer(msg: str) -> Iterator[None]:
    """Add the block's seconds to the total named ``msg`` (see :func:`print_total_timer`).

    Example::

        for image in images:
            with total_timer("decode"):
                decode(image)
    """
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        with _total_lock:
            _TOTAL_TIMER_DATA[msg].feed(elapsed)


def print_total_timer() -> None:
    """Log each total of :func:`total_timer` (seconds, times, seconds per time); nothing when
    there is none. Also called when the program exits.

    Example::

        print_total_timer()      # "Total Time: decode -> 1.52 sec, 100 times, 0.0152 sec/time"
    """
    with _total_lock:
        totals = [(name, counter.sum, counter.count, counter.average) for name, counter in _TOTAL_TIMER_DATA.items()]
    for name, seconds, count, average in totals:
        logger.info("Total Time: %s -> %.2f sec, %d times, %.3g sec/time", name, seconds, count, average)


atexit.register(print_total_timer)


class IterSpeedCounter:
    """Log, every ``print_every`` calls, the seconds since the first call and per call.

    Example::

        speed = IterSpeedCounter(100, "reader")
        for record in records:
            speed()
    """

    def __init__(self, print_every: int, name: Optional[str] = None):
        self.cnt = 0
        self.print_every = int(print_every)
        if self.print_every < 1:
            raise ValueError("IterSpeedCounter: print_every must be at least 1, got {!r}".format(print_every))
        self.name = name if name else "IterSpeed"
        self.start = time.perf_counter()

    def reset(self) -> None:
        """Start timing again from now."""
        self.start = time.perf_counter()

    def __call__(self) -> None:
        if self.cnt == 0:
            self.reset()
        self.cnt += 1
        if self.cnt % self.print_every:
            return
        elapsed = time.perf_counter() - self.start
        logger.info("%s: %.2f sec, %d times, %.3g sec/time", self.name, elapsed, self.cnt, elapsed / self.cnt)


class Timer:
    """Seconds since it was made or reset, without the time it spent paused.

    Example::

        t = Timer()
        t.pause(); wait_for_input(); t.resume()
        busy = t.seconds()
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start from zero, not paused."""
        self._start = time.perf_counter()
        self._paused: Union[bool, float] = False
        self._total_paused = 0.0

    def pause(self) -> None:
        """Stop counting (``RuntimeError`` when already paused)."""
        if self._paused is not False:
            raise RuntimeError("Timer.pause: the timer is already paused")
        self._paused = time.perf_counter()

    def is_paused(self) -> bool:
        return self._paused is not False

    def resume(self) -> None:
        """Count again (``RuntimeError`` when not paused)."""
        if self._paused is False:
            raise RuntimeError("Timer.resume: the timer is not paused")
        self._total_paused += time.perf_counter() - self._paused
        self._paused = False

    def seconds(self) -> float:
        """The seconds counted so far (up to the pause, when paused)."""
        end = self._paused if self._paused is not False else time.perf_counter()
        return end - self._start - self._total_paused
