"""Run COPIES of a DataFlow in parallel: in worker processes or in threads.

Each worker iterates its own copy of the DataFlow, over and over, and the runner yields whatever
datapoints arrive first. With ``num_proc`` (or ``num_thread``) copies, an "epoch" of the runner
is ``len(ds)`` datapoints drawn from ``num_proc`` independent copies: **the same distribution,
not the same set** -- a datapoint may come twice and another not at all. For each source
datapoint exactly once, use :mod:`inputpipe.dataflow.parallel_map` with ``strict=True``.

Worker processes are supervised (:mod:`inputpipe.utils.workers`): an exception in a worker
reaches the consumer with the worker's traceback, a killed worker is reported with its pid and
signal, and no worker outlives its runner or the parent process. Large arrays reach the consumer
through shared memory without a copy (:mod:`inputpipe.utils.channel`).

Example::

    df = MultiProcessRunnerZMQ(MyJpegFlow(), num_proc=4)
    df.reset_state()
    with df:
        for image, label in df:
            ...
"""
import collections
import time
from typing import Any, Deque, Dict, Iterator, List, Optional, Tuple

from ..utils.arguments import no_other_arguments, renamed_argument
from ..utils.concurrency import POLL_INTERVAL, StoppableThread  # noqa: F401 - tensorpack has it here
from ..utils.logger import get_logger
from ..utils.resources import process_anon_share, process_memory, process_schedstat
from ..utils.workers import WorkerPool, WorkerPoolOwner
from ._core.helpers import empty_epoch_error as _empty_epoch_error, int_at_least_one as _check_positive
from ._core.state import IntRange, StatePlan, check_plain_state, two_phase
from ._parallel.resizable import ResizableStage, WorkerClocks
from .autoscale import worker_count
from .base import (DataFlow, DataFlowReentrantGuard, NotResumableError, ProxyDataFlow, StateMismatchError,
                   check_state, empty_passes_mean_stuck, get_length, is_resumable, raise_if_stopping)
# tensorpack's dataflow.parallel also has these (outside __all__): scripts import them from here
from .base import DataFlowTerminated  # noqa: F401
from .plasma import PlasmaGetData, PlasmaPutData  # noqa: F401
from .tensorpack_helpers import del_weakref, enable_death_signal, ensure_proc_terminate, start_proc_mask_signal  # noqa: F401
# the thread runner lives in ._parallel.thread_runner; tensorpack's module path is this one
from ._parallel.thread_runner import MultiThreadRunner, _stop_threads  # noqa: F401

__all__ = [
    "MultiProcessRunnerZMQ",
    "MultiProcessRunner",
    "MultiThreadRunner",
    "PrefetchDataZMQ",
    "PrefetchData",
    "MultiProcessPrefetchData",
    "MultiThreadPrefetchData",
]


logger = get_logger(__name__)

#: Seconds get_state() waits for a new worker's first message.
_STATE_TIMEOUT = 60.0


def _run_copy(rank: int, end, ds: DataFlow, prefetch: int, max_bytes: Optional[int], track: bool) -> None:
    """Worker process of :class:`MultiProcessRunnerZMQ`: send ``ds`` forever, ``prefetch`` ahead.

    Commands from the parent: an int (how many datapoints it has taken: room to send more),
    ``["check", token, state]`` (answer ``["checked", token, accepted, why]`` and go on as before), or
    ``["restore", generation, state]`` (drop the current pass, ``ds.set_state(state)``, go on).
    With ``track`` each message is ``[generation, datapoint, ds.get_state()]``, the state taken
    right after ``ds`` yielded that datapoint."""
    from ..utils.channel import HOLD_SECONDS

    ds.reset_state()
    unacknowledged: Deque[int] = collections.deque()     # array bytes of each datapoint the parent has not taken
    state: Dict[str, Any] = {"acked": 0, "bytes": 0, "restore": None}

    def apply(command) -> bool:
        """Handle one command; True when it asks for a restore."""
        if isinstance(command, list):
            if command[0] == "check":
                end.send_datapoint(["checked", command[1]] + _verdict(ds, command[2]))
                return False
            state["restore"] = command
            return True
        while state["acked"] < command:
            state["bytes"] -= unacknowledged.popleft()
            state["acked"] += 1
        return False

    generation = 0
    may_be_empty = False                     # the first pass after a restore may have nothing left
    empty = 0                                # passes in a row without a datapoint
    if track:
        end.send_datapoint([generation, ds.get_state()])     # the position before any datapoint
    while True:
        if state["restore"] is not None:
            _, generation, saved = state["restore"]
            state["restore"] = None
            ds.set_state(saved)
            may_be_empty = True
        produced = 0
        started = time.perf_counter()
        for dp in ds:
            made_in = time.perf_counter() - started
            end.count_work(made_in, 1)                           # making the datapoint is work
            produced += 1
            message = [generation, dp, ds.get_state()] if track else dp
            restore = False
            try:
                command = end.receive_command(0)
                while command is not None and not restore:
                    restore = apply(command)
                    command = end.receive_command(0) if not restore else None
                while not restore and (len(unacknowledged) >= prefetch
                                       or (max_bytes is not None and state["bytes"] >= max_bytes)):
                    command = end.receive_command(POLL_INTERVAL)
                    if command is not None:
                        restore = apply(command)
            except EOFError:               # retired (or closed): what it made is not lost
                end.send_datapoint(message)
                raise
            if restore:
                break                                            # the parent drops this pass' rest
            sending = time.perf_counter()                        # waiting for room was not
            # small ones travel several to a message, as long as the oldest would not wait longer than
            # HOLD_SECONDS for the next (made in about the time this one took)
            nbytes = end.hold_datapoint(message)
            if end.held_seconds() + made_in > HOLD_SECONDS:
                end.send_held()
            started = time.perf_counter()
            end.count_work(started - sending, sending=True)
            unacknowledged.append(nbytes)
            state["bytes"] += nbytes
        if state["restore"] is not None:
            continue
        empty = 0 if produced or may_be_empty else empty + 1
        if empty_passes_mean_stuck(ds, empty):
            raise _empty_epoch_error(ds)
        may_be_empty = False


def _verdict(ds: DataFlow, state: Any) -> List[Any]:
    """``[accepted, why]``: whether ``ds.set_state(state)`` would accept ``state`` (checked without
    changing anything; a flow that checks its own states in ``set_state`` is only checked to hold
    plain data)."""
    try:
        check = two_phase(ds)
        if check is not None:
            check(state, StatePlan())
        else:
            check_plain_state(ds, state)
    except StateMismatchError as err:
        return [False, str(err)]
    return [True, ""]


class MultiProcessRunnerZMQ(WorkerPoolOwner, ResizableStage, ProxyDataFlow):
    """Run ``num_proc`` COPIES of ``ds`` in worker processes and yield their datapoints.

    .. warning::
       Every worker iterates its **own copy** of ``ds``. An epoch of this runner is ``len(ds)``
       datapoints from ``num_proc`` independent copies: the same distribution, **not the same
       set** (duplicates and omissions are expected unless each copy is randomised). For each
       datapoint exactly once, use :class:`~inputpipe.dataflow.parallel_map.MultiProcessMapData`
       with ``strict=True``.

    Args:
        ds: the DataFlow to copy. ``ds.reset_state()`` runs in each worker.
        num_proc: number of worker processes, or ``"auto"`` (or an
            :class:`~inputpipe.dataflow.autoscale.Autoscale`): a controller chooses it while the
            runner runs, within the CPU and memory budget (:mod:`~inputpipe.dataflow.autoscale`);
            a retired copy's datapoints already made are all yielded.
        hwm: at most this many datapoints are prefetched (split among the workers at start, at
            least one each; a worker added later prefetches as many as one at start): a slow
            consumer makes the workers wait.
        start_method: ``"fork"`` (default on Linux), ``"forkserver"`` or ``"spawn"``. The last two
            pickle ``ds``; an unpicklable one raises a ``TypeError`` that says what to change.
            Create the runner (call ``reset_state()``) before building a TF session when forking.
        shm_bytes: shared memory per worker for zero-copy transfer of large arrays
            (at most 96 MiB by default, taken as used; 0 sends everything through a pipe). When
            ``/dev/shm`` is full, datapoints come through the pipe with one warning.
        max_prefetch_bytes: optionally, also bound the prefetched array bytes (split among the
            workers; a worker may exceed its share by one datapoint).

    tensorpack's old keyword ``nr_proc=`` still works, with a ``DeprecationWarning``.

    Datapoints go through :mod:`inputpipe.utils.serialize` (no pickle), so their components
    must be numbers, strings, bytes, numpy arrays, lists, tuples or dicts. Arrays of a large
    datapoint are views of shared memory that is recycled once they are garbage-collected.
    The ``ZMQ`` in the name is kept from tensorpack; the transport is pipes plus shared memory.

    A worker that raises or dies makes iteration raise
    :class:`~inputpipe.utils.errors.WorkerError` (with the worker's traceback, or its pid and
    signal). ``close()``, a ``with`` block, garbage collection or interpreter exit stop all workers.

    Example::

        df = MultiProcessRunnerZMQ(AugmentedImages(), num_proc=4, hwm=20)
        df.reset_state()
        with df:
            for epoch in range(10):
                for image, label in df:
                    ...
    """

    def __init__(self, ds: DataFlow, num_proc: Any = 1, hwm: int = 50, *, start_method: Optional[str] = None,
                 shm_bytes: Optional[int] = None, max_prefetch_bytes: Optional[int] = None, **old_names: Any):
        super().__init__(ds)
        name = type(self).__name__
        num_proc = renamed_argument(name, old_names, "nr_proc", "num_proc", num_proc, 1)
        no_other_arguments(name, old_names)
        #: Worker processes that run copies now (the controller changes it for ``"auto"``).
        self.num_proc = num_proc = self._init_workers(name, "num_proc", num_proc)
        self.hwm = _check_positive(name, "hwm", hwm)
        per_worker = max(1, hwm // num_proc)
        max_bytes = None
        if max_prefetch_bytes is not None:
            max_bytes = max(1, _check_positive(name, "max_prefetch_bytes", max_prefetch_bytes) // num_proc)
        self._track = self.num_proc == 1 and not self.autoscaled and is_resumable(ds)
        self._pool = WorkerPool(name, _run_copy, num_proc, (ds, per_worker, max_bytes, self._track), start_method,
                                shm_bytes)
        self._clocks = WorkerClocks(process_schedstat)
        self._received: Dict[int, int] = collections.defaultdict(int)
        self._generation = 0                 # of the worker's current pass; bumped by set_state()
        self._last_state: Optional[Dict[str, Any]] = None    # worker copy's state after the last datapoint
        self._count = 0                      # datapoints yielded in the current epoch of this runner
        self._resume_pending = False
        self._checks = 0                     # states sent to the worker to check
        self._early: Deque[Tuple[int, Any]] = collections.deque()    # received while waiting for a check
        self._ack_every = 1 if max_bytes is not None else max(1, per_worker // 4)
        self._guard = DataFlowReentrantGuard(name)
        self._closed = False

    def reset_state(self) -> None:
        """Start the worker processes (once; later calls do nothing)."""
        if self._closed:
            raise RuntimeError("{} is closed".format(type(self).__name__))
        if not self._pool.started:
            self._pool.num = self.num_proc = self._start_workers(self.num_proc)
            self._pool.start()
            self._begin_scaling()

    # ------------------------------------------------------------------------------ changing size

    def _active_workers(self) -> int:
        return self._pool.num

    def _grow_one(self) -> bool:
        try:
            self._pool.add_worker()
        except OSError as err:                 # e.g. out of file descriptors: keep the workers there are
            logger.warning("%s: cannot add a worker (%s); staying at %d", type(self).__name__, err, self._pool.num)
            return False
        self.num_proc = self._pool.num
        return True

    def _shrink_one(self) -> bool:
        ranks = self._pool.active_ranks
        if len(ranks) <= 1:
            return False
        self._pool.retire_worker(ranks[-1])    # the newest; what it sent is still yielded
        self.num_proc = self._pool.num
        return True

    def _scaling_counters(self) -> Tuple[float, int]:
        stats = self._pool.worker_stats()
        return sum(s["busy_seconds"] for s in stats), sum(s["items"] for s in stats)

    def _scaling_cpu(self) -> Tuple[Optional[float], Optional[float]]:
        return self._clocks.total(self._pool.pids)

    def _memory_measured(self) -> bool:
        return bool(self._received)            # the workers' memory holds a datapoint made

    def _scaling_memory(self, precise: bool = False) -> Tuple[int, int]:
        read = process_anon_share if precise else process_memory
        sizes = [read(pid) or 0 for pid in self._pool.pids]
        # (and their shared-memory segments, where the datapoints in flight live)
        return sum(sizes) + self._pool.shared_memory_bytes(), (max(sizes) if sizes else 0)

    def _receive_measured(self) -> Optional[Tuple[int, Any]]:
        """The next message; for ``"auto"``, the time waited is measured and the controller runs."""
        scaling = self._scaling
        if scaling is None:
            return self._next_message()
        if time.monotonic() >= scaling.due:
            scaling.run()
        started = time.monotonic()
        got = self._next_message()
        self._waited += time.monotonic() - started
        return got

    def __iter__(self) -> Iterator[Any]:
        if self._closed or not self._pool.started:
            raise RuntimeError("{}: call reset_state() before iterating{}".format(
                type(self).__name__, " (it is closed)" if self._closed else ""))
        with self._guard:
            size = get_length(self.ds)
            count = self._count if self._resume_pending else 0
            self._resume_pending = False
            self._count = count
            while size is None or count < size:
                got = self._receive_measured()
                if got is None:
                    raise_if_stopping(self)        # e.g. while the worker re-reads to restore a position
                    continue
                rank, dp = got
                if self._track:
                    if len(dp) == 2:                       # the worker's state before its first datapoint
                        self._initial_state(dp)
                        continue
                    if len(dp) == 4:                       # the answer to a check that gave up waiting
                        continue
                    generation, dp, state = dp
                self._received[rank] += 1
                if self._received[rank] % self._ack_every == 0 and self._pool.takes_commands(rank):
                    self._pool.send(rank, self._received[rank])
                if self._track:
                    if generation != self._generation:
                        continue                           # prefetched before a set_state()
                    self._last_state = state
                count += 1
                self._count = count
                yield dp
            self._count = 0

    # ------------------------------------------------------------------------------ resuming

    def check_resumable(self) -> None:
        if self.autoscaled:
            raise NotResumableError(
                "{}(num_proc='auto') is not resumable: its number of workers changes, and the datapoints of "
                "independent copies interleave, so no position describes what it yielded. Use num_proc=1, or "
                "MultiProcessMapData(ds, 'auto', map_func, strict=True), which is".format(type(self).__name__))
        if self.num_proc > 1:
            raise NotResumableError(
                "{}(num_proc={}) is not resumable: its {} workers iterate independent copies of {} and their "
                "datapoints interleave, so no position describes what it yielded. Use num_proc=1, or "
                "MultiProcessMapData(ds, num_proc, map_func, strict=True) to parallelise the work on one "
                "resumable source".format(type(self).__name__, self.num_proc, self.num_proc, type(self.ds).__name__))
        super().check_resumable()

    def _raise_not_resumable(self) -> None:
        self.check_resumable()
        raise NotResumableError("{} is not resumable: its input {} was not resumable when the runner was made".format(
            type(self).__name__, type(self.ds).__name__))

    def _next_message(self) -> Optional[Tuple[int, Any]]:
        """The next message from the workers (those that came while a check waited first), or None
        after a poll interval."""
        if self._early:
            return self._early.popleft()
        return self._pool.receive(POLL_INTERVAL)

    def _worker_check(self, state: Dict[str, Any]) -> None:
        """Have the worker check ``state`` for its copy of ``ds`` (which only it has reset), without
        changing anything there; raise StateMismatchError with its reason when it refuses. What
        arrives meanwhile is kept for the iteration."""
        name = type(self).__name__
        self._checks += 1
        token = self._checks
        self._pool.send(0, ["check", token, state])
        deadline = time.monotonic() + _STATE_TIMEOUT
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError("{}: the worker did not check the state within {:.0f} s (it answers between "
                                   "datapoints)".format(name, _STATE_TIMEOUT))
            got = self._pool.receive(POLL_INTERVAL)          # raises WorkerError if the worker died
            if got is None:
                continue
            message = got[1]
            if len(message) != 4:
                self._early.append(got)
            elif message[1] == token:
                if not message[2]:
                    raise StateMismatchError("{} > {}".format(name, message[3]))
                return

    def _initial_state(self, message: List[Any]) -> None:
        generation, state = message
        if generation == self._generation and self._last_state is None:
            self._last_state = state

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "input": S, "count": c}``: ``S`` is the worker copy's state taken in the worker
        right after it yielded the last datapoint this runner yielded (each datapoint carries it),
        ``c`` how many datapoints this runner's current epoch has yielded. Only with ``num_proc=1``
        and a resumable ``ds``. Before the first datapoint it waits (up to 60 s) for the worker's
        initial state."""
        if not self._track:
            self._raise_not_resumable()
        if not self._pool.started or self._closed:
            raise RuntimeError("{}: call reset_state() before get_state()".format(type(self).__name__))
        deadline = time.monotonic() + _STATE_TIMEOUT
        while self._last_state is None:
            if time.monotonic() > deadline:
                raise TimeoutError("{}: the worker sent no state within {:.0f} s of starting".format(
                    type(self).__name__, _STATE_TIMEOUT))
            got = self._next_message()                       # raises WorkerError if the worker died
            if got is not None and len(got[1]) != 4:
                if len(got[1]) != 2:
                    raise RuntimeError("{}: expected the worker's initial state first, got a datapoint".format(
                        type(self).__name__))
                self._initial_state(got[1])
        return {"type": type(self).__name__, "input": self._last_state, "count": self._count}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        """Continue after the datapoint ``state`` was taken at: the worker checks ``state["input"]``
        for its copy first (a refusal changes nothing, there or here), then, when the state is
        applied, drops what it prefetched and calls ``set_state(state["input"])`` on its copy
        (``"count"`` is optional, default 0). Call ``set_state`` after ``reset_state()``."""
        if not self._track:
            self._raise_not_resumable()
        name = type(self).__name__
        if not self._pool.started or self._closed:
            raise RuntimeError("{}: call reset_state() before set_state()".format(name))
        state = check_state(self, state, {"input": dict, "count": IntRange(0, get_length(self.ds))},
                            optional=("count",))
        try:
            check_plain_state(self.ds, state["input"])      # what the pipe carries; the worker checks the rest
        except StateMismatchError as err:
            raise StateMismatchError("{} > {}".format(name, err)) from None
        self._worker_check(state["input"])

        def restore() -> None:
            self._generation += 1
            self._pool.send(0, ["restore", self._generation, state["input"]])
            self._last_state = state["input"]
            self._count = state.get("count", 0)
            self._resume_pending = True
        plan.then(restore)

    def close(self) -> None:
        """Stop the workers (within about a second), free their pipes and shared memory, and
        close ``ds`` here too (in case it started anything in this process)."""
        self._closed = True
        self._end_scaling()
        self._pool.close()
        super().close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MultiProcessRunner(MultiProcessRunnerZMQ):
    """tensorpack's ``MultiProcessRunner(ds, num_prefetch, num_proc)``: the same runner as
    :class:`MultiProcessRunnerZMQ` with ``hwm=num_prefetch``.

    .. warning::
       It runs ``num_proc`` COPIES of ``ds``: the same distribution, not the same set.

    tensorpack's old keywords ``nr_prefetch=`` and ``nr_proc=`` still work, with a
    ``DeprecationWarning``.

    Example::

        df = MultiProcessRunner(AugmentedImages(), num_prefetch=20, num_proc=4)
    """

    def __init__(self, ds: DataFlow, num_prefetch: Optional[int] = None, num_proc: Any = None,
                 **kwargs: Any):
        name = type(self).__name__
        num_prefetch = renamed_argument(name, kwargs, "nr_prefetch", "num_prefetch", num_prefetch, None)
        num_proc = renamed_argument(name, kwargs, "nr_proc", "num_proc", num_proc, None)
        super().__init__(ds, num_proc=worker_count(name, "num_proc", num_proc),
                         hwm=_check_positive(name, "num_prefetch", num_prefetch), **kwargs)


#: tensorpack's older names.
PrefetchDataZMQ = MultiProcessRunnerZMQ
PrefetchData = MultiProcessRunner
MultiProcessPrefetchData = MultiProcessRunner
MultiThreadPrefetchData = MultiThreadRunner
