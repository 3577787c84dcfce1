"""Supervised worker processes: start methods, no orphans, errors that say what died and why.

:class:`WorkerProcesses` starts processes running ``target(rank, *args)`` and owns them:

- **start methods**: ``fork`` (the default on Linux, as in tensorpack), ``forkserver`` or
  ``spawn``; for the last two :class:`~inputpipe.utils.workers.WorkerPool` pickles the target and
  arguments first, and a clear error says what could not be pickled;
- **in the worker**: :func:`inputpipe.utils.seeding.enter_worker` gets the rank and the parent's
  global seed; SIGINT is ignored (the parent handles Ctrl-C and stops its workers); the worker
  dies with its parent through ``prctl(PR_SET_PDEATHSIG)`` (Linux, set through ctypes) plus a
  watchdog thread that notices when the parent process is gone;
- **in the parent**: a worker that ended becomes a :class:`~inputpipe.utils.errors.WorkerError`
  naming its pid and exit code or signal (:meth:`WorkerProcesses.worker_error`); a worker that
  was told to stop and ended is reaped at once (:meth:`WorkerProcesses.release`);
  :meth:`WorkerProcesses.close` (also run on garbage collection and at interpreter exit)
  terminates, then kills, and reaps every worker within about a second.

Example::

    procs = WorkerProcesses("MyRunner", serve, [(conn_a,), (conn_b,)], start_method="fork")
    procs.start()
    procs.add((conn_c,))                  # one more, rank 2
    procs.close()
"""
import ctypes
import gc
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from . import seeding
from .allocator import tune_worker_allocator
from .compat import pidfd_open
from .concurrency import POLL_INTERVAL, StoppableThread, _set_parent_death_signal
from .errors import WorkerError, worker_error_class
from .logger import get_logger

__all__ = ["START_METHODS", "default_start_method", "WorkerProcesses"]

logger = get_logger(__name__)

START_METHODS = ("fork", "forkserver", "spawn")
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
#: Seconds a worker gets to exit after SIGTERM before it is sent SIGKILL.
_TERMINATE_GRACE = 0.5


def default_start_method() -> str:
    """``fork`` where it exists (Linux, like tensorpack), otherwise ``spawn``."""
    return "fork" if "fork" in mp.get_all_start_methods() and sys.platform != "darwin" else "spawn"


def _check_start_method(component: str, start_method: Optional[str]) -> str:
    method = start_method or default_start_method()
    if method not in START_METHODS or method not in mp.get_all_start_methods():
        raise ValueError("{}: start_method must be one of {} (available here: {}), got {!r}".format(
            component, START_METHODS, mp.get_all_start_methods(), start_method))
    return method


def _check_picklable(component: str, method: str, args: Sequence[Any]) -> None:
    """Fail early, in the parent, with a message that says what cannot go to the worker."""
    for arg in args:
        try:
            pickle.dumps(arg)
        except Exception as err:
            raise TypeError(
                "{}: start_method={!r} sends the DataFlow and functions to each worker with pickle, "
                "but {!r} cannot be pickled ({}: {}). Define classes and functions at module level "
                "(no lambdas or local functions), open files and sockets in reset_state(), or use "
                "start_method='fork'.".format(component, method, arg, type(err).__name__, err)
            ) from err


@contextmanager
def adopting_orphans() -> Iterator[None]:
    """While the block runs, a descendant whose parent dies is re-parented to this process
    instead of to init (Linux ``PR_SET_CHILD_SUBREAPER``; elsewhere nothing changes), so that it
    stays among ``psutil.Process().children(recursive=True)`` and can be found and reaped.

    Example::

        with adopting_orphans():
            stop_the_service()                 # kills a daemon whose children would be orphaned
            kill_and_reap(my_descendants())    # they are still found here
    """
    libc: Any = None
    before = ctypes.c_int(0)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0) != 0 or \
                    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                logger.debug("prctl(PR_SET_CHILD_SUBREAPER) failed with errno %d", ctypes.get_errno())
                libc = None
        except (OSError, AttributeError) as err:
            logger.debug("prctl(PR_SET_CHILD_SUBREAPER) is not available: %s", err)
            libc = None
    try:
        yield
    finally:
        if libc is not None and not before.value:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


class _ParentWatchdog(StoppableThread):
    """In a worker: exit the process as soon as its parent process is gone (re-parented)."""

    def __init__(self, parent_pid: int):
        super().__init__(name="inputpipe-parent-watchdog")
        self._parent_pid = parent_pid

    def run(self):
        while not self.wait_stopped(POLL_INTERVAL):
            if os.getppid() != self._parent_pid:
                os._exit(1)


def _allow_children() -> None:
    """Let this worker start workers of its own (a parallel DataFlow inside another one).

    The parent starts its workers as daemons, so that multiprocessing stops them at the parent's
    exit, and Python refuses children to a daemonic process. In the worker the flag has done its
    job; clearing it there lets the worker's own flows start theirs, which are daemons of the
    worker in turn and die with it (death signal, watchdog, and the worker's exit)."""
    mp.current_process().daemon = False


def _worker_main(target: Callable, rank: int, args: Sequence[Any], parent_pid: Optional[int],
                 death_signal: bool, global_seed: Optional[int]) -> None:
    # The objects a forked worker inherits are never traversed by its garbage collector: a
    # collection writes to every object it visits, which would copy the parent's Python heap
    # page by page into the worker (copy-on-write) and hold it there as the worker's own memory.
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if death_signal:
        _set_parent_death_signal()
    if parent_pid is None:          # forkserver: our direct parent is the fork server,
        parent_pid = os.getppid()   # which exits when the process that owns us exits
    if os.getppid() != parent_pid:  # the parent died before we got here
        os._exit(1)
    _ParentWatchdog(parent_pid).start()
    _allow_children()
    seeding.enter_worker(rank, global_seed)
    tune_worker_allocator()
    target(rank, *args)


class WorkerProcesses:
    """Start, watch and stop ``len(args_per_worker)`` processes running ``target(rank, *args)``.

    ``target`` must be a module-level function (it is pickled for ``spawn``/``forkserver``).

    Example::

        procs = WorkerProcesses("MyRunner", serve, [(conn_a,), (conn_b,)], start_method="fork")
        procs.start()
        wait(procs.exit_fds, timeout=0.05)    # readable when a worker ends
        procs.close()
    """

    def __init__(self, component: str, target: Callable, args_per_worker: Sequence[Sequence[Any]],
                 start_method: Optional[str] = None):
        self.component = component
        self.start_method = _check_start_method(component, start_method)
        self._target = target
        self._args = [tuple(a) for a in args_per_worker]
        self.processes: List[mp.Process] = []
        self._pids: List[int] = []          # kept after close(), which releases the process objects
        self._exit_fds: List[int] = []
        self._pidfds: List[int] = []        # the exit descriptors this object opened (and closes)
        self._released: Dict[int, int] = {}     # rank -> exit code of a worker reaped by release()
        self._finalizer = weakref.finalize(self, _stop_processes, self.processes, self._pidfds, os.getpid())

    def start(self) -> None:
        """Start every worker."""
        for args in self._args:
            self.add(args)
        logger.debug("%s started %d %s workers: pids %s", self.component, len(self.processes),
                     self.start_method, self.pids)

    def add(self, args: Sequence[Any]) -> int:
        """Start one more worker running ``target(rank, *args)``; returns its rank."""
        rank = len(self.processes)
        in_main_thread = threading.current_thread() is threading.main_thread()
        # typeshed declares Process on the concrete contexts only; get_context() returns one of them
        proc = mp.get_context(self.start_method).Process(  # type: ignore[attr-defined]
            target=_worker_main,
            args=(self._target, rank, tuple(args), None if self.start_method == "forkserver" else os.getpid(),
                  in_main_thread, seeding.get_global_seed()),
            name="{}-worker-{}".format(self.component, rank),
            daemon=True,
        )
        _start_refused_forks_again(proc, self.component)
        self.processes.append(proc)
        self._pids.append(proc.pid)
        self._exit_fds.append(self._watch_exit(proc))
        return rank

    def _watch_exit(self, proc: mp.process.BaseProcess) -> int:
        """A descriptor that becomes readable when ``proc`` exits: a pidfd, which watches the
        process itself, where Linux has them (5.3+); else multiprocessing's sentinel, a pipe
        that also stays open while a child the worker forked holds its end."""
        assert proc.pid is not None          # started
        try:
            fd = pidfd_open(proc.pid)
        except OSError as err:           # an old kernel (ENOSYS), or a sandbox that forbids it
            logger.debug("%s: pidfd_open(%d) failed (%s); watching the sentinel pipe", self.component,
                         proc.pid, err)
            return proc.sentinel
        self._pidfds.append(fd)
        return fd

    @property
    def pids(self) -> List[int]:
        return list(self._pids)

    @property
    def exit_fds(self) -> List[int]:
        """File descriptors that become readable when the matching worker exits, however many
        processes hold its pipes (see :meth:`_watch_exit`)."""
        return list(self._exit_fds)

    def worker_error(self, rank: int, remote_traceback: Optional[str] = None, reason: Optional[str] = None,
                     original_type: Optional[type] = None, nested: Sequence[str] = ()) -> WorkerError:
        """A :class:`WorkerError` for worker ``rank``, with its exit code if it has ended; also an
        instance of ``original_type`` (the class of the worker's exception) where possible;
        ``nested``: the nested workers the failure came through (see
        :func:`~inputpipe.utils.errors.failure_report`)."""
        proc = self.processes[rank]
        try:
            if reason is None and remote_traceback is None:
                proc.join(timeout=POLL_INTERVAL * 10)   # the exit status of a process we saw end
            exitcode = proc.exitcode
        except ValueError:                              # released by close() or release()
            exitcode = self._released.get(rank)
        return worker_error_class(original_type)(self.component, "worker {}".format(rank), self._pids[rank],
                                                 exitcode, remote_traceback, reason, nested)

    def release(self, rank: int) -> Optional[int]:
        """Reap worker ``rank``, which has exited (its exit descriptor became readable), and free
        what watched it (its exit descriptor: unregister it from selectors first). Returns its
        exit code (None if it had not exited after all: it is then left to :meth:`close`)."""
        proc = self.processes[rank]
        try:
            proc.join(timeout=POLL_INTERVAL)
            exitcode = proc.exitcode
        except ValueError:
            return self._released.get(rank)
        if exitcode is None:
            return None
        self._released[rank] = exitcode
        fd = self._exit_fds[rank]
        if fd in self._pidfds:
            self._pidfds.remove(fd)
            os.close(fd)
        proc.close()                # its sentinel pipe now, not at close()
        return exitcode

    def close(self) -> None:
        """Stop every worker: SIGTERM, then SIGKILL after a short grace period; reap them all."""
        if self._finalizer is not None:
            self._finalizer()


def _stop_processes(processes: List[mp.Process], pidfds: List[int], owner_pid: int) -> None:
    if os.getpid() != owner_pid:
        return          # a forked copy of the owner: the workers are not this process' children
    try:
        _stop_started(processes)
    finally:
        for fd in pidfds:
            os.close(fd)
        pidfds.clear()


def _started(proc: mp.Process) -> bool:
    try:
        return proc.pid is not None
    except ValueError:              # closed: reaped by release()
        return False


def _stop_started(processes: List[mp.Process]) -> None:
    processes = [proc for proc in processes if _started(proc)]
    for proc in processes:
        if proc.exitcode is None:
            try:
                proc.terminate()
            except (OSError, ValueError):
                pass
    deadline = time.monotonic() + _TERMINATE_GRACE
    for proc in processes:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
    for proc in processes:
        if proc.exitcode is None:
            logger.warning("%s did not exit %.1f s after SIGTERM; sending SIGKILL", proc.name, _TERMINATE_GRACE)
            proc.kill()
            proc.join(timeout=1.0)
    for proc in processes:
        if proc.exitcode is not None:
            proc.close()            # its sentinel pipe now, not when the object is collected


#: How long a start retries a fork that an audit hook refused while another thread forked.
FORK_RETRY_SECONDS = 5.0


def _start_refused_forks_again(proc: mp.process.BaseProcess, component: str) -> None:
    """``proc.start()``, again after a moment when a fork audit hook refused the fork because
    another thread was forking at that instant (filelock 4.3+, which Ray imports, refuses
    concurrent forks with "os.fork is unsafe while filelock is changing descriptor ownership").
    The refusal comes before the fork, so no process exists and the start can be repeated."""
    deadline = time.monotonic() + FORK_RETRY_SECONDS
    delay = 0.001
    while True:
        try:
            proc.start()
            return
        except RuntimeError as err:
            if "is unsafe while" not in str(err) or time.monotonic() + delay > deadline:
                raise
            logger.debug("%s: a fork was refused while another thread forked (%s); trying again", component, err)
            time.sleep(delay)
            delay = min(0.05, delay * 2)

