"""Threads that can always be stopped, and queue operations that never block forever.

Every background thread in inputpipe is a :class:`StoppableThread`: it is a daemon, it checks a
stop event, and its blocking queue operations poll with a timeout so ``stop()`` takes effect
within one poll interval.

Example::

    class Producer(StoppableThread):
        def __init__(self, out):
            super().__init__(name="producer")
            self.out = out

        def run(self):
            i = 0
            while self.queue_put_stoppable(self.out, i):
                i += 1

    t = Producer(queue.Queue(maxsize=10)); t.start(); ...; t.stop(); t.join(2)
"""
import queue
import threading
from typing import Any, Optional

from .compat import Thread

__all__ = ["StoppableThread", "POLL_INTERVAL", "stop_requested"]

#: Seconds between health checks of every blocking wait in the library.
POLL_INTERVAL = 0.05

_STOPPED = object()


class StoppableThread(Thread):
    """A daemon thread with a stop event and stoppable, polling queue put/get.

    Example::

        t = StoppableThread(target=work, name="feeder")
        t.start()
        t.stop()
        t.join(timeout=2)
    """

    def __init__(self, target=None, name: Optional[str] = None, args=(), kwargs=None, daemon: bool = True):
        super().__init__(target=target, name=name, args=args, kwargs=kwargs or {}, daemon=daemon)
        self._stop_event = threading.Event()

    def stop(self) -> None:
        """Ask the thread to stop; its stoppable waits return within ``POLL_INTERVAL``."""
        self._stop_event.set()

    def stopped(self) -> bool:
        return self._stop_event.is_set()

    def should_stop(self) -> bool:
        """Whether the thread's work should end: it was stopped (subclasses add other reasons,
        e.g. a training coordinator that asked every thread to stop). See :func:`stop_requested`."""
        return self.stopped()

    def wait_stopped(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early when stopped; returns ``stopped()``."""
        return self._stop_event.wait(timeout)

    def queue_put_stoppable(self, q: "queue.Queue", obj: Any, poll: float = POLL_INTERVAL) -> bool:
        """Put ``obj`` in ``q``, waiting while it is full; False if stopped before it fit."""
        while not self.stopped():
            try:
                q.put(obj, timeout=poll)
                return True
            except queue.Full:
                continue
        return False

    def queue_get_stoppable(self, q: "queue.Queue", poll: float = POLL_INTERVAL) -> Any:
        """Get from ``q``, waiting while it is empty; raises ``queue.Empty`` if stopped first."""
        while not self.stopped():
            try:
                return q.get(timeout=poll)
            except queue.Empty:
                continue
        raise queue.Empty("{} was stopped while waiting on a queue".format(self.name))


def stop_requested() -> bool:
    """Whether the calling thread is a :class:`StoppableThread` whose ``should_stop()`` is true.

    Long loops that wait on nothing the thread's stop would interrupt (a DataFlow re-reading its
    input to restore a position) call it between items to end within one item of a stop.

    Example::

        for dp in reread:
            if stop_requested():
                break
    """
    thread = threading.current_thread()
    return isinstance(thread, StoppableThread) and thread.should_stop()
