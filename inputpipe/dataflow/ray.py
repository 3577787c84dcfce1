"""Data preparation on Ray actors: the parallel maps of :mod:`.parallel_map`, scaled out.

``RayMapData`` and ``RayMapAndBatchData`` keep the contract of ``MultiProcessMapData`` and
``MultiProcessMapAndBatchData`` (exactly-once, ``strict``, ``ordered``, ``buffer_size``,
``map_timeout``, errors with the worker's traceback): the source is read here and each datapoint
(or group of ``batch_size``) is handed, numbered, to one of ``num_actors`` Ray actors; results
come back through Ray's object store (numpy arrays without a copy on the same node, read-only).
``RayShardedData`` is a source whose actors read the data themselves, one shard at a time.

Ray is an optional extra (``pip install "inputpipe[ray]"``), imported when a flow is made. With
``ray_address=None`` a flow joins the Ray instance of this process or starts a local one sized to
this machine (shut down again by ``close()``); ``ray_address="auto"`` or ``"ray://host:10001"``
connects to a cluster (see docs/scaling_out.md).

An actor that dies (killed, out of memory, its node lost) is restarted by Ray and the work it
held is sent again by number, so epochs stay exact. Ray moves functions and datapoints with its
own serialization (cloudpickle): run it only on machines you trust to run your code.

Example::

    df = RayMapData(DataFromList(files), num_actors=4, map_func=decode_jpeg, strict=True)
    df.reset_state()
    with df:
        for image, label in df:
            ...
"""
import collections
import time
import weakref
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

from ..utils.concurrency import POLL_INTERVAL
from ..utils.errors import WorkerError
from ..utils.logger import get_logger
from ._ray import runtime as _ray_runtime
from ._ray.runtime import ActorPool, Lost, start_local_ray
from .base import DataFlow, DataFlowReentrantGuard
from ._parallel.resizable import ResizableStage
from .autoscale import AUTO, WorkerCountChange, worker_count
from .parallel import _check_positive
from ._parallel.map_scheduler import _ParallelMapBase
from ._parallel.map_task import _DEFAULT_BUFFER_SIZE, nbytes
from .parallel_map import MultiProcessMapAndBatchData

__all__ = ["RayMapData", "RayMapAndBatchData", "RayShardedData", "start_local_ray"]

logger = get_logger(__name__)

#: Default bound on the bytes of results held or expected in flight by one flow.
DEFAULT_MAX_BUFFER_BYTES = 1 << 30
#: A datapoint (or shard) whose actor died this many times is an error, not bad luck.
MAX_ATTEMPTS = 3


class _RedoTracker:
    """Counts the actor processes each unit of work was lost with; too many is an error."""

    def __init__(self, owner: str):
        self.owner = owner
        self.lost_with: Dict[Any, set] = {}

    def lost(self, key: Any, what: str, why: Lost) -> None:
        pids = self.lost_with.setdefault(key, set())
        pids.add(why.pid)
        if len(pids) >= MAX_ATTEMPTS:
            raise WorkerError(self.owner, "actors", reason=(
                "were lost {} times while holding {} (pids {}; last: {}): does the function crash its "
                "process (segfault, memory) on it?".format(len(pids), what, sorted(pids, key=str), why)))


class RayMapData(_ParallelMapBase):
    """Apply ``map_func`` to each datapoint of ``ds`` on ``num_actors`` Ray actors.

    The contract of :class:`~inputpipe.dataflow.MultiProcessMapData`: the source is iterated in
    this process; each datapoint is mapped exactly once; with ``strict=True`` every epoch yields
    exactly the datapoints of ``MapData(ds, map_func)`` (``None`` results dropped), in source
    order when ``ordered=True``; with ``strict=False`` one iterator streams the source's passes
    without end (``len()`` is one pass). An exception in ``map_func`` is raised here within a poll
    interval as :class:`~inputpipe.utils.errors.WorkerError` with the actor's traceback (also an
    instance of the original class where that class allows it). An actor that dies is restarted
    by Ray and its datapoints are sent again, each still yielded once.

    Args:
        ds: the source DataFlow.
        num_actors: number of Ray actors (each asks for one CPU unless ``actor_options`` says), or
            ``"auto"``: a controller adds actors while the cluster has CPUs free for them and the
            consumer waits, and retires them when it does not (:mod:`~inputpipe.dataflow.autoscale`).
        map_func: a function of one datapoint; returns the new datapoint or ``None`` to drop it.
        buffer_size: at most this many datapoints in flight (sent and not yet yielded);
            ``"auto"``: per actor, about 50 ms of its measured work (2 to 32 tasks, at
            least 4 when ordered).
        strict, ordered, map_timeout: as for ``MultiProcessMapData``.
        ray_address: None (this process' Ray, or a local instance started for this flow),
            ``"auto"`` or ``"ray://host:port"``.
        actor_options: options for the actors (``num_cpus``, ``memory``, ``resources``,
            ``max_restarts``, ...), e.g. ``{"num_cpus": 2}``.
        max_buffer_bytes: also keep results in flight under about this many bytes (the largest
            result so far times the datapoints in flight).

    Example::

        df = RayMapData(DataFromList([[i] for i in range(100)]), 2, lambda dp: [dp[0] * 2],
                        strict=True, ordered=True)
        df.reset_state()
        with df:
            assert [dp[0] for dp in df] == list(range(0, 200, 2))
    """

    _batch_size: Optional[int] = None
    _worker_kind = "actors"
    _ready_when_added = False

    def __init__(self, ds: DataFlow, num_actors: Any, map_func: Callable[[Any], Any], *,
                 buffer_size: Any = _DEFAULT_BUFFER_SIZE, strict: bool = False, ordered: bool = True,
                 map_timeout: Optional[float] = None, ray_address: Optional[str] = None,
                 actor_options: Optional[Dict[str, Any]] = None,
                 max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES):
        name = type(self).__name__
        if not callable(map_func):
            raise TypeError("{}: map_func must be callable, got {!r}".format(name, map_func))
        super().__init__(ds, num_actors, buffer_size, strict, ordered, map_timeout, "num_actors")
        self.map_func = map_func
        self.max_buffer_bytes = _check_positive(name, "max_buffer_bytes", max_buffer_bytes)
        self.ray_address = ray_address
        self.actor_options = dict(actor_options or {})
        self._largest_result = 0
        self._calls: Dict[Any, Tuple[int, List[Any]]] = {}     # ref -> (rank, [generation, ticket, task])
        self._parked: Dict[int, List[List[Any]]] = collections.defaultdict(list)   # for restarting actors
        self._arrived: Deque[Any] = collections.deque()
        self._redo = _RedoTracker(name)
        self._busy: Dict[int, float] = collections.defaultdict(float)   # rank -> seconds in map calls
        self._items: Dict[int, int] = collections.defaultdict(int)
        self._pool: Optional[ActorPool] = None
        self._finalizer: Optional[weakref.finalize] = None

    # the scheduler's bound on datapoints in flight, lowered when results are large
    @property
    def buffer_size(self) -> int:
        if not self._largest_result:
            return self._max_items
        return max(1, min(self._max_items, self.max_buffer_bytes // self._largest_result))

    @buffer_size.setter
    def buffer_size(self, value: int) -> None:
        self._max_items = value

    @property
    def worker_pids(self) -> List[Optional[int]]:
        """The pids of the actors (current after a restart, once the new one has started)."""
        if self._pool is None:
            return []
        return [self._pool.current_pid(rank, timeout=30.0) for rank in self._active]

    @property
    def num_actors(self) -> int:
        """Actors that take datapoints now."""
        return self.num_workers

    def worker_stats(self) -> List[Dict[str, Any]]:
        """One dict per actor ever started: ``{"rank", "busy_seconds", "items", "active"}``, the
        seconds its ``map`` calls took and the tasks it answered, as received here."""
        if self._pool is None:
            return []
        active = set(self._active)
        return [{"rank": rank, "busy_seconds": self._busy[rank], "items": self._items[rank], "active": rank in active}
                for rank in range(len(self._pool.actors))]

    def _start(self) -> None:
        self._pool = ActorPool(type(self).__name__, self.num_workers, self.map_func, self._batch_size,
                               self.ray_address, self.actor_options)
        self._finalizer = weakref.finalize(self, self._pool.close)

    def _add_worker(self) -> Optional[int]:
        assert self._pool is not None
        return self._pool.add_actor()

    def _retire_worker(self, rank: int) -> None:
        assert self._pool is not None
        self._parked.pop(rank, None)
        self._pool.retire(rank)

    def _worker_capacity(self) -> Optional[int]:
        """The actors there are, plus as many as the cluster's free CPUs can place."""
        assert self._pool is not None
        free = self._pool.free_cpus()
        per_actor = float(self._pool.options.get("num_cpus") or 0)
        if free is None or per_actor <= 0:
            return None
        return self._active_workers() + int(free // per_actor)

    def _submit(self, rank: int, task: List[Any]) -> None:
        assert self._pool is not None
        if self._pool.restarting(rank):
            self._parked[rank].append(task)            # sent when the actor is back
        else:
            self._calls[self._pool.submit(rank, "map", task[2], task[1])] = (rank, task)

    def _describe_worker(self, rank: int) -> Tuple[str, Optional[int]]:
        assert self._pool is not None
        return self._pool.describe(rank)

    def _receive(self, timeout: float):
        assert self._pool is not None
        for rank in self._pool.back():
            if rank in self._starting:                 # added while running: now placed
                self._activate(rank)
            for task in self._parked.pop(rank, []):
                self._submit(rank, task)
        for rank in self._pool.overdue():
            if rank in self._starting:                 # the cluster could not place it: give up on it
                logger.warning("%s: actor %d was not placed within %.0f s (the cluster's free resources); "
                               "staying at %d actors", type(self).__name__, rank, _ray_runtime.ACTOR_START_TIMEOUT,
                               len(self._active))
                self._starting.remove(rank)
                self._retired(rank)
                self._workers_changed()
                self._history.append(WorkerCountChange(time.time(), self._active_workers(),
                                                       "actor {} could not be placed".format(rank)))
        if not self._arrived:
            self._arrived.extend(self._pool.wait(list(self._calls), timeout))
        while self._arrived:
            ref = self._arrived.popleft()
            rank, task = self._calls.pop(ref)
            try:
                result = self._pool.outcome(rank, ref)
            except Lost as why:
                if task[0] == self._generation or not self.strict:
                    self._redo.lost((task[0], task[1][0]), "datapoint #{}".format(task[1][0]), why)
                    self._parked[rank].append(task)    # sent again when Ray has restarted the actor
                else:
                    self._answered(rank)               # work of an abandoned epoch: forget it
                continue
            result, seconds = result
            self._busy[rank] += seconds
            self._items[rank] += 1
            self._largest_result = max(self._largest_result, nbytes(result))
            return rank, [task[0], task[1], result]
        return None

    def close(self) -> None:
        """Kill the actors (and stop the local Ray instance if this flow started it), then close
        the source ``ds``."""
        self._closed = True
        self._calls.clear()
        self._arrived.clear()
        self._parked.clear()
        if self._finalizer is not None:
            self._finalizer()
        super().close()


class RayMapAndBatchData(RayMapData):
    """Map each datapoint with ``map_func`` and stack ``batch_size`` of them, on Ray actors.

    The contract of :class:`~inputpipe.dataflow.MultiProcessMapAndBatchData`: each task is
    ``batch_size`` consecutive source datapoints (an incomplete last group of an epoch is
    dropped); the actor maps them, drops ``None`` results and stacks the rest like ``BatchData``,
    so one call and one object per batch cross Ray (the per-call cost is shared by the batch).

    Args:
        buffer_size: datapoints in flight; default ``3 * batch_size * num_actors`` (``"auto"`` when
            ``num_actors`` is).
        other arguments: as for :class:`RayMapData`.

    Example::

        df = RayMapAndBatchData(DataFromList([[i] for i in range(64)]), 2, lambda dp: dp, 16,
                                strict=True)
        df.reset_state()
        with df:
            assert [batch[0].shape for batch in df] == [(16,)] * 4
    """

    def __init__(self, ds: DataFlow, num_actors: Any, map_func: Callable[[Any], Any], batch_size: int, *,
                 buffer_size: Any = None, **kwargs: Any):
        name = type(self).__name__
        num_actors = worker_count(name, "num_actors", num_actors)
        self._batch_size = self._task_size = _check_positive(name, "batch_size", batch_size)
        self._carried: List[Any] = []        # as MultiProcessMapAndBatchData
        self._datapoints_read = 0
        if buffer_size is None:
            buffer_size = AUTO if not isinstance(num_actors, int) else 3 * batch_size * num_actors
        batches = buffer_size if buffer_size == AUTO else max(1, buffer_size // batch_size)
        super().__init__(ds, num_actors, map_func, buffer_size=batches, **kwargs)

    __len__ = MultiProcessMapAndBatchData.__len__
    _make_task = MultiProcessMapAndBatchData._make_task
    _read_mark = MultiProcessMapAndBatchData._read_mark


class _ShardReader:
    """What the driver knows about one actor of :class:`RayShardedData`: its shard and calls."""

    def __init__(self) -> None:
        self.shard: Optional[int] = None       # index into the shard list
        self.received = 0                      # datapoints of the shard yielded so far
        self.next_start = 0                    # position of the next chunk to ask for
        self.calls: Deque[Tuple[Any, int]] = collections.deque()   # (ref, start), oldest first


class RayShardedData(ResizableStage, DataFlow):
    """A source read by Ray actors: each actor reads whole shards with ``read_shard(shard)``.

    Every ``iter()`` is one epoch: each shard is given to exactly one actor, which streams its
    datapoints back in chunks of ``chunk_size`` (at most two chunks in flight per actor, so memory
    stays bounded); datapoints of one shard come in their order, shards interleave. When an
    actor dies, Ray restarts it and the shard is read again from the first datapoint not yet
    received (so ``read_shard`` must give the same datapoints in the same order for the same
    shard within an epoch); nothing is lost or repeated. An exception in ``read_shard`` is raised
    here as :class:`~inputpipe.utils.errors.WorkerError` with the actor's traceback.

    Args:
        shards: what names each shard (file paths, URLs, index ranges), sent to the actors.
        num_actors: number of Ray actors, or ``"auto"`` (:mod:`~inputpipe.dataflow.autoscale`):
            an actor added while running takes the next shard once Ray has placed it; a retired
            one hands its shard back from the first datapoint not yet received.
        read_shard: a function of one shard returning an iterable of datapoints.
        chunk_size: datapoints per call; larger amortises Ray's per-call cost.
        size: the total number of datapoints, if known (``len()``); otherwise no length.
        ray_address, actor_options: as for :class:`RayMapData`.

    Example::

        def read_range(shard):
            return [[i] for i in range(*shard)]

        df = RayShardedData([(0, 10), (10, 25), (25, 30)], 2, read_range)
        df.reset_state()
        with df:
            assert sorted(dp[0] for dp in df) == list(range(30))
    """

    def __init__(self, shards: Sequence[Any], num_actors: int, read_shard: Callable[[Any], Any], *,
                 chunk_size: int = 64, size: Optional[int] = None, ray_address: Optional[str] = None,
                 actor_options: Optional[Dict[str, Any]] = None):
        name = type(self).__name__
        if not callable(read_shard):
            raise TypeError("{}: read_shard must be callable, got {!r}".format(name, read_shard))
        self.shards = list(shards)
        if not self.shards:
            raise ValueError("{}: shards must not be empty".format(name))
        #: Actors that read shards now (the controller changes it for ``"auto"``).
        self.num_actors = self._init_workers(name, "num_actors", num_actors)
        self.read_shard = read_shard
        self.chunk_size = _check_positive(name, "chunk_size", chunk_size)
        self._size = size
        self.ray_address = ray_address
        self.actor_options = dict(actor_options or {})
        self._guard = DataFlowReentrantGuard(name)
        self._pool: Optional[ActorPool] = None
        self._finalizer: Optional[weakref.finalize] = None
        self._closed = False
        self._active: List[int] = []              # ranks that get shards
        self._starting: List[int] = []            # ranks added, not placed by Ray yet
        self._readers: Dict[int, _ShardReader] = {}     # of the epoch in progress
        self._todo: Deque[Tuple[int, int]] = collections.deque()   # (shard, first datapoint not received)
        self._busy: Dict[int, float] = collections.defaultdict(float)
        self._items: Dict[int, int] = collections.defaultdict(int)

    def __len__(self) -> int:
        if self._size is None:
            raise NotImplementedError("{}: the number of datapoints is not known (pass size=)".format(
                type(self).__name__))
        return self._size

    @property
    def worker_pids(self) -> List[Optional[int]]:
        """The pids of the actors (current after a restart, once the new one has started)."""
        if self._pool is None:
            return []
        return [self._pool.current_pid(rank, timeout=30.0) for rank in self._active]

    def worker_stats(self) -> List[Dict[str, Any]]:
        """One dict per actor ever started: ``{"rank", "busy_seconds", "items", "active"}``, the
        seconds its ``read`` calls took and the datapoints received from it."""
        if self._pool is None:
            return []
        active = set(self._active)
        return [{"rank": rank, "busy_seconds": self._busy[rank], "items": self._items[rank], "active": rank in active}
                for rank in range(len(self._pool.actors))]

    def reset_state(self) -> None:
        """Start the actors (once)."""
        if self._closed:
            raise RuntimeError("{} is closed".format(type(self).__name__))
        if self._pool is None:
            self.num_actors = self._start_workers(self.num_actors)
            self._pool = ActorPool(type(self).__name__, self.num_actors, self.read_shard, None,
                                   self.ray_address, self.actor_options)
            self._finalizer = weakref.finalize(self, self._pool.close)
            self._active = list(range(self.num_actors))
            self._begin_scaling()

    # ------------------------------------------------------------------------------ changing size
    _worker_kind = "actors"

    def _active_workers(self) -> int:
        return len(self._active) + len(self._starting)

    def _grow_one(self) -> bool:
        assert self._pool is not None
        self._starting.append(self._pool.add_actor())
        return True

    def _shrink_one(self) -> bool:
        assert self._pool is not None
        if self._starting:
            rank = self._starting.pop()
        elif len(self._active) > 1:
            rank = self._active.pop()
            reader = self._readers.pop(rank, None)
            if reader is not None and reader.shard is not None:     # read on by another actor
                self._todo.appendleft((reader.shard, reader.received))
        else:
            return False
        self._pool.retire(rank)
        self.num_actors = len(self._active)
        return True

    def _scaling_counters(self) -> Tuple[float, int]:
        return sum(self._busy.values()), sum(self._items.values())

    def _workers_starting(self) -> bool:
        return bool(self._starting)

    _worker_capacity = RayMapData._worker_capacity

    def _placed(self, pool: ActorPool) -> None:
        """Actors added while running that Ray has placed take shards; those it could not place
        in time are given up."""
        for rank in pool.back():
            if rank in self._starting:
                self._starting.remove(rank)
                self._active.append(rank)
                self.num_actors = len(self._active)
        for rank in pool.overdue():
            if rank in self._starting:
                logger.warning("%s: actor %d was not placed within %.0f s; staying at %d actors",
                               type(self).__name__, rank, _ray_runtime.ACTOR_START_TIMEOUT, len(self._active))
                self._starting.remove(rank)
                pool.retire(rank)
                self._history.append(WorkerCountChange(time.time(), self._active_workers(),
                                                       "actor {} could not be placed".format(rank)))

    def __iter__(self) -> Iterator[Any]:
        if self._closed or self._pool is None:
            raise RuntimeError("{}: call reset_state() before iterating{}".format(
                type(self).__name__, " (it is closed)" if self._closed else ""))
        with self._guard:
            yield from self._epoch(self._pool)

    def _epoch(self, pool: ActorPool) -> Iterator[Any]:
        todo = self._todo = collections.deque((i, 0) for i in range(len(self.shards)))
        readers = self._readers = {}
        redo = _RedoTracker(type(self).__name__)
        while True:
            self._placed(pool)
            for rank in list(self._active):
                reader = readers.setdefault(rank, _ShardReader())
                if pool.restarting(rank):
                    continue                           # its shard went back to the others
                if reader.shard is None and todo:
                    reader.shard, reader.received = todo.popleft()
                    reader.next_start = reader.received
                while reader.shard is not None and len(reader.calls) < 2:
                    self._ask(pool, rank, reader)
            heads = {reader.calls[0][0]: rank for rank, reader in readers.items() if reader.calls}
            if not heads and not todo:
                return
            scaling = self._scaling
            if scaling is not None and time.monotonic() >= scaling.due:
                scaling.run()                          # a retired actor's calls are skipped below
            started = time.monotonic()
            arrived = pool.wait(list(heads), POLL_INTERVAL)
            if scaling is not None:
                self._waited += time.monotonic() - started
            for ref in arrived:
                rank = heads[ref]
                if rank not in readers or not readers[rank].calls or readers[rank].calls[0][0] != ref:
                    continue                           # its actor was retired: its shard went back
                reader = readers[rank]
                reader.calls.popleft()
                try:
                    chunk, finished, seconds = pool.outcome(rank, ref)
                except Lost as why:
                    assert reader.shard is not None
                    redo.lost(reader.shard, "shard #{} from datapoint {}".format(reader.shard, reader.received), why)
                    reader.calls.clear()               # later chunks of that actor are lost too
                    todo.appendleft((reader.shard, reader.received))
                    reader.shard = None
                    continue
                reader.received += len(chunk)
                self._busy[rank] += seconds
                self._items[rank] += len(chunk)
                yield from chunk
                if finished:
                    reader.calls.clear()               # an empty answer past the end, if any
                    reader.shard = None

    def _ask(self, pool: ActorPool, rank: int, reader: _ShardReader) -> None:
        index = reader.shard
        assert index is not None
        ref = pool.submit(rank, "read", index, self.shards[index], reader.next_start, self.chunk_size)
        reader.calls.append((ref, reader.next_start))
        reader.next_start += self.chunk_size

    def close(self) -> None:
        """Kill the actors (and stop the local Ray instance if this flow started it)."""
        self._closed = True
        self._end_scaling()
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
