"""Worker processes with a channel each: what the parallel DataFlows run on.

:class:`WorkerPool` starts supervised processes (:mod:`inputpipe.utils.processes`: start
methods, no orphans, errors that say what died and why) and gives each a
:mod:`~inputpipe.utils.channel` to the parent: commands go to one worker, datapoints come from
any. The pool can grow and shrink while it runs (:meth:`WorkerPool.add_worker`,
:meth:`WorkerPool.retire_worker`), which the ``"auto"`` worker counts use
(:mod:`inputpipe.dataflow.autoscale`).

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
import collections
import errno
import selectors
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Sequence, Set, Tuple

from . import fork_guard
from .errors import WorkerError
from .logger import get_logger
# the supervision of the processes lives in .processes; its names stay importable from here
from .processes import START_METHODS, WorkerProcesses, _check_picklable, _check_start_method, default_start_method

if TYPE_CHECKING:
    from .channel import ParentEnd

__all__ = ["START_METHODS", "default_start_method", "WorkerProcesses", "WorkerPool", "WorkerPoolOwner"]

logger = get_logger(__name__)

_MESSAGE, _ENDED = "message", "ended"        # what a ready file of a WorkerPool's selector means
#: Seconds a worker whose channel broke (a command could not be sent, its messages ended) may take
#: to exit before it is reported without its exit status. Its exit is what reports it: then its
#: status is known and everything it sent before (its own error report first of all) was read.
EXIT_GRACE = 5.0


class WorkerPool:
    """Worker processes, each with a :mod:`~inputpipe.utils.channel` to the parent.

    ``target(rank, worker_end, *args)`` runs in each worker. The parent :meth:`send` s commands
    to a worker and :meth:`receive` s datapoints from any of them; a worker that raised or died
    becomes a :class:`~inputpipe.utils.errors.WorkerError` within one poll interval.

    The pool can change size while it runs: :meth:`add_worker` starts one more worker with a new
    rank (ranks are never reused, so each worker's seed and statistics stay its own) and
    :meth:`retire_worker` stops one after everything it sent has been received.

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
        #: Workers that take commands now (started and not retiring); may be set before start().
        self.num = int(num)
        self._start_method = _check_start_method(component, start_method)
        self._target = target
        self._args = tuple(args)
        self._shm_bytes = channel.DEFAULT_SHM_BYTES if shm_bytes is None else int(shm_bytes)
        self._ends: List[ParentEnd] = []         # by rank, retired ones too (their last statistics)
        self._active: List[int] = []             # ranks that take commands
        self._retiring: Set[int] = set()         # ranks told to stop, whose results may still come
        self._procs: Optional[WorkerProcesses] = None
        self._next_rank = 0
        self._received: Deque[Tuple[int, Any]] = collections.deque()   # the rest of a message of several
        self._selector: Optional[selectors.BaseSelector] = None
        self._notices: set = set()
        self._broken: Dict[int, float] = {}    # rank -> when its channel broke (it is ending)
        #: Counts the workers added and retired while running (a flow that schedules over the pool
        #: compares it to see a change made by someone else).
        self.changes = 0
        self._failure: Optional[WorkerError] = None
        self._finalizer: Optional[weakref.finalize] = None

    @property
    def started(self) -> bool:
        return self._procs is not None

    @property
    def pids(self) -> List[int]:
        """Process ids of the active workers, in rank order."""
        if self._procs is None:
            return []
        pids = self._procs.pids
        return [pids[rank] for rank in self._active]

    @property
    def active_ranks(self) -> List[int]:
        """Ranks of the workers that take commands, in the order they were started."""
        return list(self._active)

    def pid_of(self, rank: int) -> Optional[int]:
        """Process id of worker ``rank`` (also a retired one)."""
        return self._procs.pids[rank] if self._procs is not None else None

    @property
    def pipe_fallbacks(self) -> int:
        """Large datapoints that came through a pipe because a worker's shared memory was full of
        arrays the consumer still held (see :mod:`~inputpipe.utils.channel`)."""
        return sum(end.pipe_fallbacks for end in self._ends)

    def shared_memory_bytes(self) -> int:
        """Bytes of shared memory the active workers' segments hold (as of each one's latest
        large datapoint; see :mod:`~inputpipe.utils.channel`)."""
        return sum(self._ends[rank].shared_bytes for rank in self._active)

    def worker_stats(self) -> List[dict]:
        """``{"rank", "busy_seconds", "send_seconds", "items", "active"}`` of each worker ever started (retired
        ones keep their last values, so sums over the list only grow), as of its latest message
        (cumulative since it started; what counts as busy is up to the worker's loop, see
        :meth:`~inputpipe.utils.channel.WorkerEnd.count_work`). Empty before :meth:`start`."""
        active = set(self._active)
        return [{"rank": rank, "busy_seconds": end.busy_seconds, "send_seconds": end.send_seconds, "items": end.items,
                 "active": rank in active}
                for rank, end in enumerate(self._ends)]

    def start(self) -> None:
        """Check that the target and arguments can be pickled (``spawn``/``forkserver``), then
        make each worker's channel and start it, one worker after the other (so a forked worker
        inherits no other worker's end of a channel).

        If a worker cannot be started (most often: too many open files for a large ``num``),
        everything already made is closed and stopped, and the error names the component, the
        worker and the limit."""
        if self._start_method != "fork":
            _check_picklable(self.component, self._start_method, (self._target,) + self._args)
        procs = WorkerProcesses(self.component, _serve_channel, [], self._start_method)
        self._ends = []
        self._active = []
        selectors_made: List[selectors.BaseSelector] = []
        self._finalizer = weakref.finalize(self, _close_pool, procs, self._ends, selectors_made)
        for rank in range(self.num):
            try:
                self._start_worker(procs, rank)
            except BaseException:
                self._finalizer()
                raise
        logger.debug("%s started %d %s workers: pids %s", self.component, self.num, self._start_method, procs.pids)
        self._procs = procs
        # made after the workers forked, and kept out of later forks: no worker shares it
        self._selector = selectors.DefaultSelector()
        selectors_made.append(self._selector)
        if hasattr(self._selector, "fileno"):
            fork_guard.keep_out_of_forks(self._selector.fileno())
        for rank in range(self.num):
            self._watch(rank)

    def _start_worker(self, procs: "WorkerProcesses", rank: int) -> None:
        """Make worker ``rank``'s channel and start it; on an error nothing of it stays open."""
        from . import channel

        spec = None
        try:
            end, spec = channel.open_channel(self.component, self._shm_bytes, self._notices)
            self._ends.append(end)
            with fork_guard.handing_over(spec.handed_over()):
                procs.add((self._target, spec) + self._args)
        except OSError as err:
            raise self._start_error(rank, err) from err
        finally:
            if spec is not None:
                spec.close_in_parent()
        self._active.append(rank)

    def _watch(self, rank: int) -> None:
        assert self._selector is not None and self._procs is not None
        self._selector.register(self._ends[rank].connection, selectors.EVENT_READ, (_MESSAGE, rank))
        self._selector.register(self._procs.exit_fds[rank], selectors.EVENT_READ, (_ENDED, rank))

    def add_worker(self) -> int:
        """Start one more worker (after :meth:`start`) and return its rank, a new one. An error
        (too many open files) leaves the pool as it was and says what to change."""
        if self._failure is not None:
            raise self._failure
        procs = self._procs
        if procs is None:
            raise RuntimeError("{}: add_worker() before start()".format(self.component))
        rank = len(self._ends)
        try:
            self._start_worker(procs, rank)
        except BaseException:
            if len(self._ends) > rank:        # the channel was made, the process not started
                self._ends.pop().close()
            raise
        self._watch(rank)
        self.num = len(self._active)
        self.changes += 1
        logger.debug("%s added worker %d (pid %d)", self.component, rank, procs.pids[rank])
        return rank

    def retire_worker(self, rank: int) -> None:
        """Stop worker ``rank``: it gets no more commands (its command pipe is closed, which the
        worker's loop sees as the end), and everything it sent before it ends is still returned
        by :meth:`receive`; then it is reaped. A worker that died instead of ending is reported
        like any other (its results sent before are delivered first)."""
        if rank not in self._active:
            raise ValueError("{}: worker {} is not active (active: {})".format(self.component, rank, self._active))
        if len(self._active) == 1:
            raise ValueError("{}: cannot retire the last worker".format(self.component))
        self._active.remove(rank)
        self._retiring.add(rank)
        self.num = len(self._active)
        self.changes += 1
        self._ends[rank].close_commands()
        logger.debug("%s retires worker %d", self.component, rank)

    @property
    def retiring(self) -> int:
        """Workers told to stop that have not ended yet."""
        return len(self._retiring)

    def takes_commands(self, rank: int) -> bool:
        """Whether worker ``rank`` is active (not retiring or retired)."""
        return rank not in self._retiring and rank < len(self._ends) and not self._ends[rank].commands_closed

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
            self.component, rank, max(self.num, rank + 1), what, advice))

    def send(self, rank: int, command: Any) -> None:
        """Send ``command`` (wire format) to worker ``rank``. A worker that no longer reads its
        commands has ended or is ending: the command is dropped and :meth:`receive` reports the
        worker once it has exited (with what it sent before, its own error report included)."""
        if self._failure is not None:
            raise self._failure
        try:
            self._ends[rank].send_command(command)
        except OSError:
            self._broke(rank)

    def receive(self, timeout: float) -> Optional[Tuple[int, Any]]:
        """``(rank, datapoint)`` from the first worker that has one, or None after ``timeout``.

        Raises :class:`WorkerError` if a worker reported an exception or ended; after that the
        pool is broken and raises the same error again on every call."""
        if self._failure is not None:
            raise self._failure
        if self._received:
            return self._received.popleft()
        messages, ended = self._ready(timeout)
        for rank in ended:
            # a worker that ended: deliver what it sent before, then report it (even while others
            # keep sending); a retiring one that ended normally is reaped
            if rank not in messages:
                if rank not in self._retiring or not self._reap(rank):
                    raise self._fail(self._worker_error(rank))
        self._check_broken()
        # fair: start after the rank that was served last
        order = messages if len(messages) < 2 else sorted(messages, key=lambda r: (r < self._next_rank, r))
        for rank in order:
            try:
                kind, value = self._ends[rank].receive()
            except (EOFError, OSError):
                # it closed its end (it is ending): its exit reports it, with its status
                self._unwatch_messages(rank)
                if rank not in self._retiring:
                    self._broke(rank)
                continue
            if kind == "error":
                reason, remote_traceback, original_type, nested = value
                raise self._fail(self._worker_error(rank, remote_traceback, reason, original_type, nested))
            self._next_rank = rank + 1
            if kind == "many":                  # several datapoints in one message: the first now
                self._received.extend((rank, datapoint) for datapoint in value)
                if not self._received:
                    continue
                return self._received.popleft()
            return rank, value
        return None

    def take_received(self) -> Optional[Tuple[int, Any]]:
        """``(rank, datapoint)`` already received (it came with others in one message), without
        waiting; else None."""
        return self._received.popleft() if self._received else None

    def _broke(self, rank: int) -> None:
        """Worker ``rank``'s channel broke: it has ended or is ending, and its exit reports it."""
        self._broken.setdefault(rank, time.monotonic())

    def _check_broken(self) -> None:
        """A worker whose channel broke and that has not exited within :data:`EXIT_GRACE`
        (it closed its pipes itself) is reported without its exit status."""
        for rank, since in self._broken.items():
            waited = time.monotonic() - since
            if waited > EXIT_GRACE:
                raise self._fail(self._worker_error(rank, reason="closed its channel to the parent but has not "
                                                   "exited {:.1f} s later".format(waited)))

    def _unwatch_messages(self, rank: int) -> None:
        assert self._selector is not None
        connection = self._ends[rank].connection
        if not connection.closed:
            try:
                self._selector.unregister(connection)
            except KeyError:
                pass

    def _reap(self, rank: int) -> bool:
        """A retiring worker's process ended: reap it; False if it did not end with exit code 0."""
        assert self._selector is not None and self._procs is not None
        self._unwatch_messages(rank)
        self._selector.unregister(self._procs.exit_fds[rank])
        exitcode = self._procs.release(rank)
        self._retiring.discard(rank)
        self._broken.pop(rank, None)
        self._ends[rank].close()
        return exitcode == 0

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
        if hasattr(selector, "fileno"):
            fork_guard.forget(selector.fileno())
        selector.close()
    for end in ends:
        end.close()
    procs.close()


def _serve_channel(rank: int, target: Callable, spec, *args) -> None:
    """Worker side of :class:`WorkerPool`: open the channel, run ``target``, report its exception
    (an ``EOFError`` or ``BrokenPipeError`` of the user's code too: only the channel's own
    :class:`~inputpipe.utils.channel.ChannelClosed` is the parent's normal stop)."""
    from .channel import ChannelClosed

    end = spec.open()
    try:
        target(rank, end, *args)
    except ChannelClosed:
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
        ``{"rank": int, "busy_seconds": float, "send_seconds": float, "items": int}``. ``busy_seconds``
        is the time spent on the user's work and on sending its results (not waiting for tasks or for
        room to send), of it ``send_seconds`` sending;
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
