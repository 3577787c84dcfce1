"""Threads that can always be stopped, and queue operations that never block forever.

Every background thread in inputpipe is a :class:`StoppableThread`: it is a daemon, it checks a
stop event, and its blocking queue operations poll with a timeout so ``stop()`` takes effect
within one poll interval.

tensorpack's ``utils.concurrency`` names are here too: :class:`LoopThread`, and the process helpers
:func:`ensure_proc_terminate`, :func:`start_proc_mask_signal`, :func:`mask_sigint`,
:func:`enable_death_signal` and :class:`DIE` (``ShareSessionThread``, a TensorFlow thread, is in
:mod:`inputpipe.input_source.input_source`, as tensorpack's input sources imported it).

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
import atexit
import contextlib
import ctypes
import multiprocessing.process
import queue
import signal
import sys
import threading
import weakref
from typing import Any, Callable, Iterator, List, Optional

from .compat import Thread
from .logger import get_logger

__all__ = ["StoppableThread", "LoopThread", "ensure_proc_terminate", "start_proc_mask_signal", "POLL_INTERVAL",
           "stop_requested"]

logger = get_logger(__name__)

#: Seconds between health checks of every blocking wait in the library.
POLL_INTERVAL = 0.05
#: Seconds :func:`ensure_proc_terminate` waits for a terminated process before it kills it.
_TERMINATE_GRACE_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1


class StoppableThread(Thread):
    """A daemon thread with a stop event and stoppable, polling queue put/get.

    As in tensorpack, the stop event may be given (``StoppableThread(event)`` or ``evt=event``):
    threads made with one event stop together.

    Example::

        t = StoppableThread(target=work, name="feeder")
        t.start()
        t.stop()
        t.join(timeout=2)
    """

    def __init__(self, target=None, name: Optional[str] = None, args=(), kwargs=None, daemon: bool = True,
                 evt: Optional[threading.Event] = None):
        if isinstance(target, threading.Event):      # tensorpack's StoppableThread(evt)
            if evt is not None:
                raise TypeError("StoppableThread: got a stop event twice (as target and as evt)")
            target, evt = None, target
        super().__init__(target=target, name=name, args=args, kwargs=kwargs or {}, daemon=daemon)
        self._stop_event = threading.Event() if evt is None else evt

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


class LoopThread(StoppableThread):
    """A daemon thread that calls ``func`` again and again until stopped; with ``pausable``,
    :meth:`pause` holds it before its next call and :meth:`resume` lets it go on.

    Example::

        t = LoopThread(lambda: q.put(read_one()))
        t.start(); t.pause(); t.resume(); t.stop(); t.join(2)
    """

    def __init__(self, func: Callable[[], Any], pausable: bool = True):
        super().__init__(name="LoopThread")
        self._func = func
        self._pausable = pausable
        self._running = threading.Event()
        self._running.set()

    def run(self) -> None:
        while not self.stopped():
            if not self._running.is_set():            # paused (only a pausable loop is)
                self._running.wait(POLL_INTERVAL)
                continue
            self._func()

    def pause(self) -> None:
        """Hold the loop before its next call (``RuntimeError`` when not pausable)."""
        self._check_pausable("pause")
        self._running.clear()

    def resume(self) -> None:
        """Let a paused loop go on."""
        self._check_pausable("resume")
        self._running.set()

    def _check_pausable(self, action: str) -> None:
        if not self._pausable:
            raise RuntimeError("LoopThread.{}: the thread was made with pausable=False".format(action))


def is_main_thread() -> bool:
    """Whether the calling thread is the interpreter's main thread (where signal handlers are set)."""
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def mask_sigint() -> Iterator[bool]:
    """In the main thread: a block with SIGINT ignored (the handler before it is put back after
    it), yielding True; elsewhere a block where nothing changes, yielding False.

    Example::

        with mask_sigint():
            worker.start()          # the worker ignores Ctrl-C; the parent stops it
    """
    if not is_main_thread():
        yield False
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield True
    finally:
        signal.signal(signal.SIGINT, previous)


def _set_parent_death_signal() -> None:
    """Ask Linux to SIGKILL this process when the thread that started it exits."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            logger.debug("prctl(PR_SET_PDEATHSIG) failed with errno %d", ctypes.get_errno())
    except (OSError, AttributeError) as err:
        logger.debug("prctl(PR_SET_PDEATHSIG) is not available: %s", err)


def enable_death_signal(_warn: bool = True) -> None:
    """Have Linux kill this process (SIGKILL) when its parent dies, as inputpipe does in every
    worker it starts; a no-op elsewhere. ``_warn`` is accepted for tensorpack's signature.

    Example::

        def worker_main():
            enable_death_signal()
            ...
    """
    _set_parent_death_signal()


def _check_processes(component: str, proc: Any) -> List[multiprocessing.process.BaseProcess]:
    processes = list(proc) if isinstance(proc, (list, tuple)) else [proc]
    for p in processes:
        if not isinstance(p, multiprocessing.process.BaseProcess):
            raise TypeError("{}: expected a multiprocessing.Process or a list of them, got {!r}".format(component, p))
    return processes


def _stop_at_exit(ref: "weakref.ReferenceType[multiprocessing.process.BaseProcess]") -> None:
    proc = ref()
    if proc is None:
        return
    try:
        if not proc.is_alive():
            return
    except (AssertionError, ValueError):    # not a child of this process (a forked copy), or closed
        return
    proc.terminate()
    proc.join(_TERMINATE_GRACE_SECONDS)
    if proc.is_alive():
        proc.kill()
        proc.join(_TERMINATE_GRACE_SECONDS)


def ensure_proc_terminate(proc: Any) -> None:
    """Make sure ``proc`` (a ``multiprocessing.Process`` or a list of them) ends when this process
    exits: at exit each one still alive is terminated, and killed if it has not ended a second
    later. Only a weak reference is kept.

    Example::

        p = mp.Process(target=serve)
        ensure_proc_terminate(p)
        p.start()
    """
    for p in _check_processes("ensure_proc_terminate", proc):
        atexit.register(_stop_at_exit, weakref.ref(p))


def start_proc_mask_signal(proc: Any) -> None:
    """Start ``proc`` (a ``multiprocessing.Process`` or a list of them) with SIGINT ignored, so a
    Ctrl-C reaches the parent, which stops them; the parent's handler is restored afterwards.
    The mask applies only when called from the main thread (Python sets handlers there only).

    Example::

        start_proc_mask_signal([mp.Process(target=serve) for _ in range(2)])
    """
    processes = _check_processes("start_proc_mask_signal", proc)
    with mask_sigint():
        for p in processes:
            p.start()


class DIE:
    """The end-of-queue sentinel of tensorpack's process queues: the index ``DIE`` in an
    ``(index, datapoint)`` item says the producer is done (see
    :func:`~inputpipe.dataflow.remote.dump_dataflow_to_process_queue`).

    Example::

        index, dp = queue.get()
        if index is DIE:
            ...
    """
