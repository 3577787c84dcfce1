"""Supervised worker processes: start methods, no orphans, errors that say what died and why.

:class:`WorkerProcesses` starts ``num`` processes running ``target(rank, *args)`` and owns them:

- **start methods**: ``fork`` (the default on Linux, as in tensorpack), ``forkserver`` or
  ``spawn``; for the last two :class:`WorkerPool` pickles the target and arguments first, and a
  clear error says what could not be pickled;
- **in the worker**: :func:`inputpipe.utils.seeding.enter_worker` gets the rank and the parent's
  global seed; SIGINT is ignored (the parent handles Ctrl-C and stops its workers); the worker
  dies with its parent through ``prctl(PR_SET_PDEATHSIG)`` (Linux, set through ctypes) plus a
  watchdog thread that notices when the parent process is gone;
- **in the parent**: a worker that ended becomes a :class:`~inputpipe.utils.errors.WorkerError`
  naming its pid and exit code or signal (:meth:`WorkerProcesses.worker_error`);
  :meth:`WorkerProcesses.close` (also run on garbage collection and at interpreter exit)
  terminates, then kills, and reaps every worker within about a second.

:class:`WorkerPool` adds a :mod:`~inputpipe.utils.channel` to each worker: it is what the
parallel DataFlows use.

Example::

    def serve(rank, end, scale):
        while True:
            command = end.receive_command(timeout=0.05)
            if command is not None:
                end.send_datapoint([command * scale])

    pool = WorkerPool("Demo", serve, num=2, args=(10,), start_method="spawn")
    pool.start()
    pool.send(0, 4)
    ...                               # pool.receive(0.05) -> (0, [40]) once it is there
    pool.close()
"""
import ctypes
import errno
import multiprocessing as mp
import os
import pickle
import selectors
import signal
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Set, Tuple

from . import fork_guard, seeding
from .allocator import tune_worker_allocator
from .concurrency import POLL_INTERVAL, StoppableThread
from .errors import WorkerError, worker_error_class
from .logger import get_logger

if TYPE_CHECKING:
    from .channel import ParentEnd

__all__ = ["START_METHODS", "default_start_method", "WorkerProcesses", "WorkerPool", "WorkerPoolOwner"]

logger = get_logger(__name__)

_MESSAGE, _ENDED = "message", "ended"        # what a ready file of a WorkerPool's selector means

START_METHODS = ("fork", "forkserver", "spawn")
_PR_SET_PDEATHSIG = 1
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
        proc.start()
        self.processes.append(proc)
        self._pids.append(proc.pid)
        self._exit_fds.append(self._watch_exit(proc))
        return rank

    def _watch_exit(self, proc: mp.process.BaseProcess) -> int:
        """A descriptor that becomes readable when ``proc`` exits: a pidfd, which watches the
        process itself, where Linux has them (5.3+); else multiprocessing's sentinel, a pipe
        that also stays open while a child the worker forked holds its end."""
        pid_open = getattr(os, "pidfd_open", None)
        if pid_open is not None:
            try:
                fd = pid_open(proc.pid)
            except OSError as err:       # an old kernel (ENOSYS), or a sandbox that forbids it
                logger.debug("%s: pidfd_open(%d) failed (%s); watching the sentinel pipe", self.component,
                             proc.pid, err)
            else:
                self._pidfds.append(fd)
                return fd
        return proc.sentinel

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
        except ValueError:                              # released by close()
            exitcode = None
        return worker_error_class(original_type)(self.component, "worker {}".format(rank), self._pids[rank],
                                                 exitcode, remote_traceback, reason, nested)

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


def _stop_started(processes: List[mp.Process]) -> None:
    processes = [proc for proc in processes if proc.pid is not None]    # started ones
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


class WorkerPool:
    """Worker processes, each with a :mod:`~inputpipe.utils.channel` to the parent.

    ``target(rank, worker_end, *args)`` runs in each worker. The parent :meth:`send` s commands
    to a worker and :meth:`receive` s datapoints from any of them; a worker that raised or died
    becomes a :class:`~inputpipe.utils.errors.WorkerError` within one poll interval.

    Example::

        pool = WorkerPool("MyMap", serve, num=2, args=(map_func,))
        pool.start()
        pool.send(0, [0, 0, dp])
        rank, result = pool.receive(timeout=0.05) or (None, None)
        pool.close()
    """

    def __init__(self, component: str, target: Callable, num: int, args: Sequence[Any] = (),
                 start_method: Optional[str] = None, shm_bytes: Optional[int] = None):
        from . import channel

        if int(num) < 1:
            raise ValueError("{}: the number of worker processes must be >= 1, got {!r}".format(component, num))
        self.component = component
        self.num = int(num)
        self._start_method = _check_start_method(component, start_method)
        self._target = target
        self._args = tuple(args)
        self._shm_bytes = channel.DEFAULT_SHM_BYTES if shm_bytes is None else int(shm_bytes)
        self._ends: List[ParentEnd] = []
        self._procs: Optional[WorkerProcesses] = None
        self._next_rank = 0
        self._selector: Optional[selectors.BaseSelector] = None
        self._failure: Optional[WorkerError] = None
        self._finalizer: Optional[weakref.finalize] = None

    @property
    def started(self) -> bool:
        return self._procs is not None

    @property
    def pids(self) -> List[int]:
        return self._procs.pids if self._procs else []

    @property
    def pipe_fallbacks(self) -> int:
        """Large datapoints that came through a pipe because a worker's shared memory was full of
        arrays the consumer still held (see :mod:`~inputpipe.utils.channel`)."""
        return sum(end.pipe_fallbacks for end in self._ends)

    def worker_stats(self) -> List[dict]:
        """``{"rank", "busy_seconds", "items"}`` of each worker, as of its latest message
        (cumulative since it started; what counts as busy is up to the worker's loop, see
        :meth:`~inputpipe.utils.channel.WorkerEnd.count_work`). Empty before :meth:`start`."""
        return [{"rank": rank, "busy_seconds": end.busy_seconds, "items": end.items}
                for rank, end in enumerate(self._ends)]

    def start(self) -> None:
        """Check that the target and arguments can be pickled (``spawn``/``forkserver``), then
        make each worker's channel and start it, one worker after the other (so a forked worker
        inherits no other worker's end of a channel).

        If a worker cannot be started (most often: too many open files for a large ``num``),
        everything already made is closed and stopped, and the error names the component, the
        worker and the limit."""
        from . import channel

        if self._start_method != "fork":
            _check_picklable(self.component, self._start_method, (self._target,) + self._args)
        procs = WorkerProcesses(self.component, _serve_channel, [], self._start_method)
        self._ends = []
        selectors_made: List[selectors.BaseSelector] = []
        self._finalizer = weakref.finalize(self, _close_pool, procs, self._ends, selectors_made)
        notices: set = set()
        for rank in range(self.num):
            spec = None
            try:
                end, spec = channel.open_channel(self.component, self._shm_bytes, notices)
                self._ends.append(end)
                with fork_guard.handing_over(spec.handed_over()):
                    procs.add((self._target, spec) + self._args)
            except BaseException as err:
                self._finalizer()
                if isinstance(err, OSError):
                    raise self._start_error(rank, err) from err
                raise
            finally:
                if spec is not None:
                    spec.close_in_parent()
        logger.debug("%s started %d %s workers: pids %s", self.component, self.num, self._start_method, procs.pids)
        self._procs = procs
        # made after the workers forked, so that none of them shares it
        self._selector = selectors.DefaultSelector()
        selectors_made.append(self._selector)
        for rank, (end, exit_fd) in enumerate(zip(self._ends, procs.exit_fds)):
            self._selector.register(end.connection, selectors.EVENT_READ, (_MESSAGE, rank))
            self._selector.register(exit_fd, selectors.EVENT_READ, (_ENDED, rank))

    def _start_error(self, rank: int, err: OSError) -> OSError:
        what = err.strerror or str(err)
        advice = ""
        if err.errno == errno.EMFILE:
            import resource

            what = "too many open files (RLIMIT_NOFILE={})".format(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
            advice = "; lower num_proc or raise the limit (ulimit -n)"
        elif err.errno == errno.ENFILE:
            what = "the system's table of open files is full (ENFILE)"
            advice = "; lower num_proc or raise fs.file-max"
        return type(err)(err.errno, "{}: could not start worker {} of {}: {}{}".format(
            self.component, rank, self.num, what, advice))

    def send(self, rank: int, command: Any) -> None:
        """Send ``command`` (wire format) to worker ``rank``."""
        if self._failure is not None:
            raise self._failure
        try:
            self._ends[rank].send_command(command)
        except OSError:
            raise self._fail(self._worker_error(rank)) from None

    def receive(self, timeout: float) -> Optional[Tuple[int, Any]]:
        """``(rank, datapoint)`` from the first worker that has one, or None after ``timeout``.

        Raises :class:`WorkerError` if a worker reported an exception or ended; after that the
        pool is broken and raises the same error again on every call."""
        if self._failure is not None:
            raise self._failure
        messages, ended = self._ready(timeout)
        for rank in ended:
            # a worker that ended: deliver what it sent before, then report it (even while others
            # keep sending)
            if rank not in messages:
                raise self._fail(self._worker_error(rank))
        for i in range(self.num):
            rank = (self._next_rank + i) % self.num
            if rank not in messages:
                continue
            try:
                kind, value = self._ends[rank].receive()
            except (EOFError, OSError):
                raise self._fail(self._worker_error(rank)) from None
            if kind == "error":
                reason, remote_traceback, original_type, nested = value
                raise self._fail(self._worker_error(rank, remote_traceback, reason, original_type, nested))
            self._next_rank = rank + 1
            return rank, value
        return None

    def _worker_error(self, rank: int, remote_traceback: Optional[str] = None, reason: Optional[str] = None,
                      original_type: Optional[type] = None, nested: Sequence[str] = ()) -> WorkerError:
        """:meth:`WorkerProcesses.worker_error` of the started workers."""
        assert self._procs is not None      # a worker can fail only after start()
        return self._procs.worker_error(rank, remote_traceback, reason, original_type, nested)

    def _ready(self, timeout: float) -> Tuple[Set[int], Set[int]]:
        """``(ranks with a message, ranks whose process ended)``, waiting up to ``timeout`` for
        either; one system call on a selector made once at start."""
        assert self._selector is not None   # made by start(), which every user of the pool calls first
        messages: Set[int] = set()
        ended: Set[int] = set()
        for key, _ in self._selector.select(timeout):
            kind, rank = key.data
            (messages if kind == _MESSAGE else ended).add(rank)
        return messages, ended

    def _fail(self, error: WorkerError) -> WorkerError:
        """Remember the first failure: the pool is broken and raises it again on every use."""
        self._failure = self._failure or error
        return error

    def close(self) -> None:
        """Stop the workers, close the pipes and drop the shared memory (freed once no array uses it)."""
        if self._finalizer is not None:
            self._finalizer()


def _close_pool(procs: WorkerProcesses, ends, selectors_made: List[selectors.BaseSelector]) -> None:
    for selector in selectors_made:
        selector.close()
    for end in ends:
        end.close()
    procs.close()


def _serve_channel(rank: int, target: Callable, spec, *args) -> None:
    """Worker side of :class:`WorkerPool`: open the channel, run ``target``, report its exception."""
    end = spec.open()
    try:
        target(rank, end, *args)
    except (EOFError, BrokenPipeError):
        pass                                    # the parent closed the channel: a normal stop
    except BaseException as err:
        end.send_error(err)
        raise SystemExit(1) from err


class WorkerPoolOwner:
    """Mixin for a DataFlow whose work runs on a :class:`WorkerPool` kept in ``self._pool``:
    exposes the pool's diagnostics.

    Example::

        class MyParallelFlow(WorkerPoolOwner, ProxyDataFlow):
            def __init__(self, ds):
                super().__init__(ds)
                self._pool = WorkerPool("MyParallelFlow", serve, 2, (), None, None)
    """

    _pool: WorkerPool

    @property
    def worker_pids(self) -> List[int]:
        """Process ids of the workers (empty before ``reset_state()``)."""
        return self._pool.pids

    def worker_stats(self) -> List[dict]:
        """One dict per worker process, cumulative since the workers started:
        ``{"rank": int, "busy_seconds": float, "items": int}``. ``busy_seconds`` is the time spent
        on the user's work and on sending its results (not waiting for tasks or for room to send);
        ``items`` counts the results sent. Values are as of each worker's latest result (a task
        old at most). Empty before ``reset_state()``; the last values after ``close()``.

        Example::

            busy_share = [s["busy_seconds"] / elapsed for s in df.worker_stats()]
        """
        return self._pool.worker_stats()

    @property
    def pipe_fallbacks(self) -> int:
        """How many large datapoints came through a pipe instead of shared memory, because the
        consumer still held enough earlier ones to fill it. A diagnostic: 0 unless the consumer
        keeps many datapoints alive (then consider a larger ``shm_bytes``)."""
        return self._pool.pipe_fallbacks
