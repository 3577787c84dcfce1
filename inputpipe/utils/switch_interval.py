"""Shorten the interpreter's GIL switch interval while a feeding thread runs a DataFlow.

When a thread that runs pure Python (a DataFlow in the training process) holds the GIL, every
other thread that wants it, such as the training thread returning from ``session.run`` or a
``tf.numpy_function`` in the step, waits up to ``sys.getswitchinterval()`` (5 ms by default)
before the interpreter makes the holder let go. A training step needs the GIL a few times, so
at the default a GIL-holding DataFlow adds 10-15 ms to every step. A shorter interval makes
those waits shorter; it costs a little throughput only when several threads run pure Python
at once (about 1% at 1 ms with three such threads on the machine of docs/benchmarks.md).

:func:`shortened_switch_interval` lowers the interval for as long as any caller holds it,
to the smallest interval requested, and puts the previous value back when the last one
leaves, unless someone else changed it meanwhile (then their value stays).

Example::

    with shortened_switch_interval(0.001):
        for datapoint in df:        # the training thread gets the GIL within ~1 ms
            enqueue(datapoint)
"""
import contextlib
import sys
import threading
from typing import Iterator, List, Optional

from .logger import get_logger

__all__ = ["shortened_switch_interval"]

logger = get_logger(__name__)

_lock = threading.Lock()
_requests: List[float] = []          # the intervals requested by the holders now
_original: Optional[float] = None    # the interval before the first holder came
_applied: Optional[float] = None     # the interval this module set last (None: it set none)
_foreign = False                     # someone else changed it while requests were held


def _apply() -> None:
    """Set the interval the current requests ask for (called with ``_lock`` held)."""
    global _original, _applied, _foreign
    current = sys.getswitchinterval()
    if _applied is not None and current != _applied:
        # someone else set it since: theirs stays until the last holder leaves
        logger.debug("the switch interval was changed to %s elsewhere; leaving it", current)
        _foreign, _applied = True, None
    if _requests:
        if _foreign:
            return
        if _original is None:
            _original = current
        wanted = min(min(_requests), _original)
        if wanted != current:
            sys.setswitchinterval(wanted)
        _applied = sys.getswitchinterval()
        return
    if not _foreign and _original is not None and current != _original:
        sys.setswitchinterval(_original)
    _original, _applied, _foreign = None, None, False


@contextlib.contextmanager
def shortened_switch_interval(seconds: Optional[float]) -> Iterator[None]:
    """Keep ``sys.getswitchinterval()`` at most ``seconds`` inside the block (``None``: leave it
    alone). Nested and concurrent holders combine: the smallest request wins, and the value from
    before the first holder comes back after the last one leaves.

    Example::

        with shortened_switch_interval(0.001):
            assert sys.getswitchinterval() <= 0.001
    """
    if seconds is None:
        yield
        return
    if not seconds > 0:
        raise ValueError("switch interval must be a positive number of seconds, got {!r}".format(seconds))
    with _lock:
        _requests.append(float(seconds))
        _apply()
    try:
        yield
    finally:
        with _lock:
            _requests.remove(float(seconds))
            _apply()
