"""Threads that can always be stopped, and queue operations that never block forever.

Every background thread in inputpipe is a :class:`StoppableThread`: it is a daemon, it checks a
stop event, and its blocking queue operations poll with a timeout so ``stop()`` takes effect
within one poll interval.

tensorpack's ``utils.concurrency`` names are here too: :class:`LoopThread`; the process helpers
:func:`ensure_proc_terminate`, :func:`start_proc_mask_signal`, :func:`mask_sigint`,
:func:`enable_death_signal` and :class:`DIE`; :class:`OrderedContainer` and
:class:`OrderedResultGatherProc`, which put results back in order; :func:`subproc_call`, a
command's output with a timeout; and ``ShareSessionThread``, a TensorFlow thread defined in
:mod:`inputpipe.input_source.input_source` (as tensorpack's input sources imported it) and
looked up here on first use.

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
import bisect
import contextlib
import ctypes
import multiprocessing
import multiprocessing.process
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import weakref
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

from .argtools import log_once  # noqa: F401  (tensorpack's utils.concurrency has it)
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


class OrderedContainer:
    """Items put in any order by rank, taken out in the order of their ranks: ``get()`` gives the
    item of rank ``start``, then ``start + 1``, ... and ``has_next()`` says whether the next one
    is there (tensorpack's, for results of workers that finish out of order). Ranks must be
    distinct; not thread-safe (one owner puts and gets).

    Example::

        box = OrderedContainer(start=0)
        box.put(1, "b"); box.put(0, "a")
        while box.has_next():
            rank, item = box.get()       # (0, "a"), then (1, "b")
    """

    def __init__(self, start: int = 0):
        self.ranks: List[int] = []
        self.data: List[Any] = []
        self.wait_for = int(start)

    def put(self, rank: int, val: Any) -> None:
        """Keep ``val`` as the item of ``rank``."""
        where = bisect.bisect_left(self.ranks, rank)
        if (where < len(self.ranks) and self.ranks[where] == rank) or rank < self.wait_for:
            raise ValueError("OrderedContainer.put: rank {} was already put (ranks must be distinct; the next "
                             "expected is {})".format(rank, self.wait_for))
        self.ranks.insert(where, rank)
        self.data.insert(where, val)

    def has_next(self) -> bool:
        """Whether the item of the next rank (``wait_for``) is there."""
        return bool(self.ranks) and self.ranks[0] == self.wait_for

    def get(self) -> Tuple[int, Any]:
        """``(rank, item)`` of the next rank; ``ValueError`` when it has not been put yet."""
        if not self.has_next():
            raise ValueError("OrderedContainer.get: the item of rank {} is not there yet (held: {})".format(
                self.wait_for, self.ranks[:8]))
        self.wait_for += 1
        return self.ranks.pop(0), self.data.pop(0)


class OrderedResultGatherProc(multiprocessing.Process):
    """A process that puts back in order what several producers compute out of order
    (tensorpack's): it takes ``(rank, item)`` pairs from ``data_queue`` (a ``multiprocessing``
    queue that ``nr_producer`` producer processes fill) and puts them in its ``result_queue`` in
    the order of their ranks from ``start``; a producer ends with ``(DIE, anything)``, which
    passes through as it comes, and the process ends after ``nr_producer`` of them. ``get()``
    takes the next pair; it raises ``RuntimeError`` when the process ended with nothing left,
    and ``queue.Empty`` after ``timeout`` seconds. The process also ends when its parent does.

    Example::

        gather = OrderedResultGatherProc(work_done, nr_producer=2)
        gather.start()
        rank, result = gather.get(timeout=60)
    """

    def __init__(self, data_queue: Any, nr_producer: int, start: int = 0):
        super().__init__(daemon=True)
        if int(nr_producer) < 1:
            raise ValueError("OrderedResultGatherProc: nr_producer must be >= 1, got {!r}".format(nr_producer))
        self.data_queue = data_queue
        self.ordered_container = OrderedContainer(start=start)
        self.result_queue: Any = multiprocessing.get_context().Queue()
        self.nr_producer = int(nr_producer)
        self._parent_pid = os.getpid()
        self._next_rank = int(start)        # (the reader's side: the rank get() gives next)

    def run(self) -> None:
        ended = 0
        while ended < self.nr_producer:
            try:
                rank, item = self.data_queue.get(timeout=POLL_INTERVAL * 10)
            except queue.Empty:
                if os.getppid() != self._parent_pid:      # the parent is gone: nobody will read
                    return
                continue
            if rank is DIE:
                self.result_queue.put((rank, item))
                ended += 1
                continue
            self.ordered_container.put(rank, item)
            while self.ordered_container.has_next():
                self.result_queue.put(self.ordered_container.get())

    def get(self, timeout: Optional[float] = None) -> Tuple[Any, Any]:
        """The next ``(rank, item)`` in rank order (or a producer's ``(DIE, ...)``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = POLL_INTERVAL if deadline is None else max(0.0, min(POLL_INTERVAL, deadline - time.monotonic()))
            try:
                return self._taken(self.result_queue.get(timeout=wait))
            except queue.Empty:
                if not self.is_alive():
                    try:
                        return self._taken(self.result_queue.get(timeout=POLL_INTERVAL))
                    except queue.Empty:
                        raise RuntimeError("OrderedResultGatherProc: expected the next result (rank {} on), but "
                                           "the process ended (exit code {}) with nothing left".format(
                                               self._next_rank, self.exitcode)) from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def _taken(self, pair: Tuple[Any, Any]) -> Tuple[Any, Any]:
        if pair[0] is not DIE:
            self._next_rank = pair[0] + 1
        return pair


def subproc_call(cmd: Union[str, Sequence[str]], timeout: Optional[float] = None) -> Tuple[bytes, int]:
    """Run ``cmd`` (a string through the shell, as tensorpack's; or a list of arguments, without
    one) and return ``(its stdout and stderr as bytes, its return code)``: -1 when it ran over
    ``timeout`` seconds (it is killed; the output so far is returned), -2 when it could not be
    started. Failures are logged as warnings, with the output.

    Example::

        output, code = subproc_call("nvidia-smi -L", timeout=5)
    """
    try:
        output = subprocess.check_output(cmd, stderr=subprocess.STDOUT, shell=isinstance(cmd, str), timeout=timeout)
        return output, 0
    except subprocess.TimeoutExpired as err:
        output = err.output or b""
        logger.warning("subproc_call: %r ran over its timeout of %s s; its output: %s", cmd, timeout,
                       output.decode("utf-8", "replace"))
        return output, -1
    except subprocess.CalledProcessError as err:
        output = err.output or b""
        logger.warning("subproc_call: %r failed with return code %d; its output: %s", cmd, err.returncode,
                       output.decode("utf-8", "replace"))
        return output, err.returncode
    except OSError as err:
        logger.warning("subproc_call: %r could not be started: %s", cmd, err)
        return b"", -2


def __getattr__(name: str) -> Any:
    """``ShareSessionThread``, which tensorpack's ``utils.concurrency`` has: a TensorFlow thread,
    defined with the input sources above this module and looked up on first use."""
    if name == "ShareSessionThread":
        from ..input_source.input_source import ShareSessionThread

        return ShareSessionThread
    raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))
