"""One source, a parallel map: ``map_func`` runs in worker threads or processes.

The consumer's thread iterates the source DataFlow and hands each datapoint, numbered, to the
least busy worker; at most ``buffer_size`` datapoints are in flight (sent and not yet yielded),
so memory stays bounded and a slow consumer makes the workers wait. Every worker has its own
channel to the parent and every reply carries its number, so nothing is lost or duplicated:

- ``strict=True``: each call of ``iter()`` yields exactly the datapoints that
  ``MapData(ds, map_func)`` would, each once (those mapped to ``None`` are dropped), whatever
  the number of workers; ``ordered=True`` also keeps the source order.
- ``strict=False`` (tensorpack's default): as in tensorpack, a reordering of
  ``RepeatedData(MapData(ds, map_func), -1)``: the source is iterated continuously and one
  iterator never ends (``len()`` is still the source's); each datapoint once per source pass, and
  an iterator abandoned half way leaves its work in flight to the next one.

Example::

    df = MultiProcessMapData(DataFromList(files), num_proc=4, map_func=decode_jpeg, strict=True)
    df.reset_state()
    with df:
        for image, label in df:
            ...
"""
import copy
import queue
import time
import weakref
from typing import Any, Callable, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..utils.arguments import renamed_argument
from ..utils.concurrency import POLL_INTERVAL, StoppableThread
from ..utils.errors import WorkerError, error_from_exception
from ..utils.logger import get_logger
from ..utils.resources import process_anon_share, process_memory, process_schedstat, thread_schedstat
from ..utils.workers import WorkerPool, WorkerPoolOwner
# the scheduler lives in ._parallel.map_scheduler; tensorpack-era code imports these from here
from ._parallel.inline_map import GlobalDrawsWatch, as_sent_by_a_process
from ._parallel.map_scheduler import _ParallelMapBase
from ._parallel.map_task import _DEFAULT_BUFFER_SIZE, _apply, _old_style_arguments  # noqa: F401
from ._parallel.resizable import WorkerClocks
from .autoscale import AUTO, worker_count
from .base import DataFlow, call_len
from ._core.helpers import int_at_least_one as _check_positive
from ._parallel.thread_runner import _stop_threads
# tensorpack's dataflow.parallel_map also has these (outside __all__): scripts import them from here
from .base import DataFlowReentrantGuard, ProxyDataFlow  # noqa: F401
from .common import BatchData, RepeatedData  # noqa: F401
from .tensorpack_helpers import enable_death_signal  # noqa: F401

logger = get_logger(__name__)

__all__ = [
    "MultiThreadMapData",
    "MultiProcessMapData",
    "MultiProcessMapDataZMQ",
    "MultiProcessMapAndBatchData",
    "MultiProcessMapAndBatchDataZMQ",
    "ThreadedMapData",
]

# ------------------------------------------------------------------------------------- threads

class _MapThread(StoppableThread):
    def __init__(self, name: str, rank: int, map_func: Callable, tasks: "queue.Queue", out: "queue.Queue"):
        super().__init__(name=name)
        self.rank = rank
        self.map_func = map_func
        self.tasks = tasks
        self._out = out
        self.busy_seconds = 0.0          # time inside map_func
        self.items = 0

    def run(self):
        while not self.stopped():
            try:
                generation, ticket, dp = self.tasks.get(timeout=POLL_INTERVAL)
            except queue.Empty:
                continue
            try:
                started = time.perf_counter()
                result = _apply(self.map_func, None, dp, ticket, reseed_global=False)   # threads share the globals
                self.busy_seconds += time.perf_counter() - started
                self.items += 1
                self._out.put((self.rank, [generation, ticket, result]))
            except BaseException as err:  # reported to the consumer, which raises it
                self._out.put((self.rank, (err,)))
                return


class MultiThreadMapData(_ParallelMapBase):
    """Apply ``map_func`` to each datapoint of ``ds`` in ``num_thread`` threads.

    Each source datapoint is mapped exactly once; with ``strict=True`` every epoch yields exactly
    the datapoints of ``MapData(ds, map_func)`` (``None`` results dropped), in source order when
    ``ordered=True``. Best for work that releases the GIL (I/O, decoding in C). An exception in
    ``map_func`` is raised in the consumer as :class:`~inputpipe.utils.errors.WorkerError`
    chained to the original; with ``map_timeout``, so is a thread that holds work without
    answering for that many seconds (a thread cannot be killed: it ends when its call returns).
    It is also an instance of the original exception's class where that class allows it (see
    :func:`~inputpipe.utils.errors.worker_error_class`), so ``except ValueError`` still works.

    ``num_thread="auto"`` (or an :class:`~inputpipe.dataflow.autoscale.Autoscale`) lets a
    controller choose the number of threads while it runs, within the CPU budget (threads that
    wait for I/O count for the CPU they use); ``buffer_size="auto"`` keeps about 50 ms of each
    thread's measured work in flight for it (2 to 32 tasks; at least 4 when ordered). See :mod:`~inputpipe.dataflow.autoscale`.

    tensorpack's old style still works, with a ``DeprecationWarning``: ``nr_thread=``, and
    ``buffer_size`` and ``strict`` passed by position after ``map_func``.

    Example::

        df = MultiThreadMapData(DataFromList(paths), num_thread=8, map_func=read_file, strict=True)
        df.reset_state()
        with df:
            contents = [dp for dp in df]
    """

    _worker_kind = "threads"
    _maps_inline = True

    def __init__(self, ds: DataFlow, num_thread: Any = None,
                 map_func: Optional[Callable[[Any], Any]] = None, *old_positional: Any,
                 buffer_size: Any = _DEFAULT_BUFFER_SIZE, strict: bool = False, ordered: bool = False,
                 map_timeout: Optional[float] = None, **old_names: Any):
        num_thread, map_func, buffer_size, strict = _old_style_arguments(
            type(self).__name__, "num_thread", num_thread, map_func, old_positional, buffer_size, strict, old_names)
        super().__init__(ds, num_thread, buffer_size, strict, ordered, map_timeout, "num_thread")
        self.map_func = map_func
        self._results: "queue.Queue[Any]" = queue.Queue()      # bounded by buffer_size tasks in flight
        self._threads: List[_MapThread] = []     # by rank, retired ones too (their statistics)
        self._clocks = WorkerClocks(thread_schedstat)
        self._failure: Optional[WorkerError] = None
        self._finalizer: Optional[weakref.finalize] = None

    def _new_thread(self, rank: int) -> _MapThread:
        thread = _MapThread("{}-thread-{}".format(type(self).__name__, rank), rank, self.map_func, queue.Queue(),
                            self._results)
        self._threads.append(thread)
        thread.start()
        return thread

    def _start(self) -> None:
        self._threads = []
        # the finalizer holds the list itself: threads added later are stopped too
        self._finalizer = weakref.finalize(self, _stop_threads, self._threads)
        for rank in range(self.num_workers):
            self._new_thread(rank)

    def _add_worker(self) -> Optional[int]:
        return self._new_thread(len(self._threads)).rank

    def _retire_worker(self, rank: int) -> None:
        self._threads[rank].stop()       # it holds no task: it ends within a poll interval

    def _submit(self, rank: int, task: Any) -> None:
        self._threads[rank].tasks.put(task)

    def worker_stats(self) -> List[Dict[str, Any]]:
        """One dict per thread ever started, cumulative since it started:
        ``{"rank": int, "busy_seconds": float, "items": int, "active": bool}``, the time inside
        ``map_func`` and the number of datapoints mapped; a thread retired by ``"auto"`` or
        ``set_num_workers`` keeps its last values (``"active": False``). Empty before
        ``reset_state()``.

        Example::

            busy_share = [s["busy_seconds"] / elapsed for s in df.worker_stats()]
        """
        active = set(self._active)
        return [{"rank": t.rank, "busy_seconds": t.busy_seconds, "items": t.items, "active": t.rank in active}
                for t in self._threads]

    def _scaling_cpu(self) -> Tuple[Optional[float], Optional[float]]:
        return self._with_inline_cpu(self._clocks.total(
            [t.native_id for t in self._threads if t.native_id is not None and t.is_alive()]))

    def _map_inline(self, payload: Any, ticket: List[int]) -> Any:
        return _apply(self.map_func, None, payload, ticket, reseed_global=False)   # as in a thread

    def _describe_worker(self, rank: int) -> Tuple[str, Optional[int]]:
        return self._threads[rank].name, None

    @property
    def num_thread(self) -> int:
        """Threads that take datapoints now."""
        return self.num_workers

    def _receive(self, timeout: float):
        if self._failure is not None:       # the failed thread has ended: raise again, never wait
            raise self._failure
        if self._closed:                     # closed by another thread: its threads answer no more
            raise RuntimeError("{}: closed while it was being iterated (close() called from another "
                               "thread)".format(type(self).__name__))
        try:
            rank, answer = self._results.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(answer, tuple):
            err, = answer
            self._failure = error_from_exception(type(self).__name__, self._threads[rank].name, err)
            self._failure.__cause__ = err
            raise self._failure
        return rank, answer

    def close(self) -> None:
        """Stop and join the threads (added ones too), then close the source ``ds``."""
        self._closed = True
        if self._finalizer is not None:
            self._finalizer()
        super().close()


#: tensorpack's older name.
ThreadedMapData = MultiThreadMapData


# ----------------------------------------------------------------------------------- processes

def _serve_map(rank: int, end, map_func: Callable, batch_size: Optional[int]) -> None:
    """Worker process of :class:`MultiProcessMapData`: answer each task ``[generation, ticket,
    payload]`` of a command (a list of tasks) with ``[generation, ticket, result]``."""
    from ..utils.channel import HOLD_SECONDS

    # small results travel several to a message (WorkerEnd.hold_datapoint), as long as the oldest
    # would not wait longer than HOLD_SECONDS for the next task's (whose time is taken to be the last's)
    task_seconds = 0.0
    while True:
        command = end.receive_command(POLL_INTERVAL)   # (sends the results held before it waits)
        for generation, ticket, task in command or ():
            started = time.perf_counter()
            result = _apply(map_func, batch_size, task, ticket, reseed_global=True, allocate=end.shared_empty)
            sending = time.perf_counter()
            task_seconds = sending - started
            end.count_work(task_seconds, 1)
            end.hold_datapoint([generation, ticket, result])
            if end.held_seconds() + task_seconds > HOLD_SECONDS:
                end.send_held()
            end.count_work(time.perf_counter() - sending, sending=True)


class MultiProcessMapData(WorkerPoolOwner, _ParallelMapBase):
    """Apply ``map_func`` to each datapoint of ``ds`` in ``num_proc`` worker processes.

    The source ``ds`` is iterated in the consumer's process (call ``reset_state()`` there); only
    ``map_func`` runs in the workers. Each source datapoint is mapped exactly once; with
    ``strict=True`` every epoch yields exactly the datapoints of ``MapData(ds, map_func)`` (``None``
    results dropped), for any ``num_proc``, in source order when ``ordered=True``.

    Datapoints and results cross the process boundary in :mod:`inputpipe.utils.serialize`'s
    wire format (no pickle): numbers, strings, bytes, numpy arrays, lists, tuples and dicts.
    Large result arrays arrive through shared memory without a copy. A worker's tasks go to it
    several to a message, and its small results come back several to a message, each held at
    most a few milliseconds (``HOLD_SECONDS`` of :mod:`inputpipe.utils.channel`, 4 ms), never
    while the worker waits for work.

    Args:
        ds: the source DataFlow.
        num_proc: number of worker processes, or ``"auto"`` (or an
            :class:`~inputpipe.dataflow.autoscale.Autoscale`): a controller chooses it while the
            map runs, within the CPU and memory budget (:mod:`~inputpipe.dataflow.autoscale`).
        map_func: a function of one datapoint; returns the new datapoint or ``None`` to drop it.
            Module-level (picklable) for ``start_method="spawn"``/``"forkserver"``.
        buffer_size: at most this many datapoints in flight (sent and not yet yielded);
            ``"auto"``: per worker, about 50 ms of its measured work (2 to 32
            tasks, at least 4 when ``ordered``), following the worker count.
        strict: exactly the datapoints of one source epoch per epoch; ``False`` (the default, as
            in tensorpack) streams endlessly from one iterator (see the module doc).
        ordered: yield in source order (a slow datapoint holds back the ones after it).
        start_method: ``"fork"`` (default on Linux), ``"forkserver"`` or ``"spawn"``.
        shm_bytes: shared memory per worker for zero-copy results (at most 96 MiB by default,
            taken as used; when ``/dev/shm`` is full, results come through a pipe, one warning).
        map_timeout: optionally, seconds a worker may hold work without answering; past that,
            iteration raises a :class:`~inputpipe.utils.errors.WorkerError` naming the worker
            (a ``map_func`` stuck on a hung file system or lock). ``close()`` then stops it.

    A ``map_func`` that raises, or a worker that dies, makes iteration raise
    :class:`~inputpipe.utils.errors.WorkerError` with the worker's traceback, or its pid and signal.
    For an exception, the error is also an instance of the exception's class where that class
    allows it and is importable in this process, so ``except KeyError`` still works.

    tensorpack's old style still works, with a ``DeprecationWarning``: ``nr_proc=``, and
    ``buffer_size`` and ``strict`` passed by position after ``map_func``.

    Example::

        df = MultiProcessMapData(DataFromList(files), 4, decode_jpeg, strict=True, ordered=True)
        df.reset_state()
        with df:
            for image, label in df:
                ...
    """

    _batch_size: Optional[int] = None
    _maps_inline = True

    def __init__(self, ds: DataFlow, num_proc: Any = None, map_func: Optional[Callable[[Any], Any]] = None,
                 *old_positional: Any, buffer_size: Any = _DEFAULT_BUFFER_SIZE, strict: bool = False,
                 ordered: bool = False, start_method: Optional[str] = None, shm_bytes: Optional[int] = None,
                 map_timeout: Optional[float] = None, **old_names: Any):
        num_proc, map_func, buffer_size, strict = _old_style_arguments(
            type(self).__name__, "num_proc", num_proc, map_func, old_positional, buffer_size, strict, old_names)
        super().__init__(ds, num_proc, buffer_size, strict, ordered, map_timeout, "num_proc")
        self.map_func = map_func
        self._pool = WorkerPool(type(self).__name__, _serve_map, self.num_workers, (map_func, self._batch_size),
                                start_method, shm_bytes)
        self._pool_changes = 0
        self._clocks = WorkerClocks(process_schedstat)
        self._outbox: Dict[int, List[Any]] = {}     # rank -> tasks submitted, sent together by _fill

    @property
    def num_proc(self) -> int:
        """Worker processes that take datapoints now."""
        return self.num_workers

    def _start(self) -> None:
        self._pool.num = self.num_workers
        self._pool.start()

    def _submit(self, rank: int, task: Any) -> None:
        self._outbox.setdefault(rank, []).append(task)

    def _send_submitted(self) -> None:
        outbox, self._outbox = self._outbox, {}
        for rank, tasks in outbox.items():
            self._pool.send(rank, tasks)

    def _describe_worker(self, rank: int) -> Tuple[str, Optional[int]]:
        return "worker {}".format(rank), self._pool.pid_of(rank)

    def _add_worker(self) -> Optional[int]:
        try:
            return self._pool.add_worker()
        except OSError as err:                 # e.g. out of file descriptors: keep the workers there are
            logger.warning("%s: cannot add a worker (%s); staying at %d", type(self).__name__, err,
                           self.num_workers)
            return None

    def _retire_worker(self, rank: int) -> None:
        if self._pool.takes_commands(rank):    # (not retired on the pool directly)
            self._pool.retire_worker(rank)

    def _sync_workers(self) -> None:
        if self._pool.changes != self._pool_changes:
            self._pool_changes = self._pool.changes
            self._adopt(self._pool.active_ranks)

    def worker_stats(self) -> List[Dict[str, Any]]:
        """One dict per worker process ever started, cumulative since it started:
        ``{"rank": int, "busy_seconds": float, "send_seconds": float, "items": int, "active": bool}``.
        ``busy_seconds`` is the time spent mapping and sending results (not waiting for tasks or for
        room to send), of it ``send_seconds`` sending (copying a result into shared memory, writing
        its message); ``items`` counts the results sent; ``active``: it gets tasks (a worker retired by
        ``"auto"`` or ``set_num_workers`` keeps its last values). Values are as of each worker's
        latest result. Empty before ``reset_state()``; the last values after ``close()``.

        Example::

            busy_share = [s["busy_seconds"] / elapsed for s in df.worker_stats()]
        """
        active = set(self._active)
        return [dict(stats, active=stats["rank"] in active) for stats in self._pool.worker_stats()]

    def _scaling_cpu(self) -> Tuple[Optional[float], Optional[float]]:
        return self._with_inline_cpu(self._clocks.total(self._pool.pids))

    def _map_inline(self, payload: Any, ticket: List[int]) -> Any:
        # as in a worker process: the global RNGs seeded for each datapoint (the consumer's own
        # states kept) once map_func is seen drawing from them, the result through the wire format
        watch = self.__dict__.get("_global_draws")
        if watch is None:
            watch = self._global_draws = GlobalDrawsWatch()
        return as_sent_by_a_process(watch.map(_apply, self.map_func, self._batch_size, payload, ticket))

    def _workers_memory(self, precise: bool) -> Tuple[int, int]:
        read = process_anon_share if precise else process_memory
        sizes = [read(pid) or 0 for pid in self._pool.pids]
        return sum(sizes), (max(sizes) if sizes else 0)

    def _shared_memory(self) -> int:
        return self._pool.shared_memory_bytes()

    def _receive(self, timeout: float):
        return self._pool.receive(timeout)

    def _receive_received(self):
        return self._pool.take_received()

    def close(self) -> None:
        """Stop the workers (within about a second), free their pipes and shared memory, and
        close the source ``ds``."""
        self._closed = True
        self._pool.close()
        super().close()


#: tensorpack's name: the same class.
MultiProcessMapDataZMQ = MultiProcessMapData


class MultiProcessMapAndBatchData(MultiProcessMapData):
    """Map each datapoint with ``map_func`` and stack ``batch_size`` of them, in worker processes.

    Each task is ``batch_size`` consecutive source datapoints (an incomplete last group of an
    epoch is dropped, like ``BatchData(..., remainder=False)``); the worker maps them, drops
    ``None`` results and stacks the rest as ``BatchData`` does, so only whole batches cross the
    process boundary.

    Args:
        num_proc: worker processes, or ``"auto"`` (see :class:`MultiProcessMapData`).
        buffer_size: datapoints in flight; default ``3 * batch_size * num_proc`` (``"auto"`` when
            ``num_proc`` is: 2 batches per worker, 4 when ordered).

    Example::

        df = MultiProcessMapAndBatchData(DataFromList(files), 4, decode_jpeg, batch_size=64)
        df.reset_state()
        for images, labels in df:
            ...
    """

    _batch_size: int        # always set (checked) in __init__

    def __init__(self, ds: DataFlow, num_proc: Any = None, map_func: Optional[Callable[[Any], Any]] = None,
                 batch_size: Optional[int] = None, buffer_size: Any = None, **kwargs: Any):
        name = type(self).__name__
        num_proc = renamed_argument(name, kwargs, "nr_proc", "num_proc", num_proc, None)
        num_proc = worker_count(name, "num_proc", num_proc)
        self._batch_size = self._task_size = _check_positive(name, "batch_size", batch_size)
        if buffer_size is None:
            buffer_size = AUTO if not isinstance(num_proc, int) else 3 * self._batch_size * num_proc
        batches_in_flight = buffer_size if buffer_size == AUTO else max(1, buffer_size // self._batch_size)
        self._carried: List[Any] = []        # non-strict: the start of a group, from the last pass
        self._datapoints_read = 0
        super().__init__(ds, num_proc, map_func, buffer_size=batches_in_flight, **kwargs)

    def __len__(self) -> int:
        return call_len(self.ds) // self._batch_size

    def _make_task(self, source: Iterator[Any]) -> Any:
        batch, self._carried = self._carried, []
        for dp in source:
            self._datapoints_read += 1
            batch.append(dp)
            if len(batch) == self._batch_size:
                return batch
        if not self.strict:
            self._carried = batch        # a stream: the group continues in the next pass, as in tensorpack
        raise StopIteration

    def _read_mark(self) -> int:
        return self._datapoints_read


#: tensorpack's name: the same class.
MultiProcessMapAndBatchDataZMQ = MultiProcessMapAndBatchData


# tensorpack's MultiProcessMapDataComponentSharedArray (outside its __all__; also in .shared_array_map)

_OWNER = "MultiProcessMapDataComponentSharedArray"


def _checked_shape(output_shape: Any) -> Tuple[int, ...]:
    dims = (output_shape,) if isinstance(output_shape, (int, np.integer)) else output_shape
    try:
        dims = tuple(dims)
    except TypeError:
        dims = None
    if dims is None or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0
                               for n in dims):
        raise ValueError("{}: output_shape must be a tuple of non-negative ints, got {!r}".format(_OWNER, output_shape))
    return tuple(int(n) for n in dims)


def _checked_dtype(output_dtype: Any) -> np.dtype:
    try:
        return np.dtype(output_dtype)
    except TypeError as err:
        raise TypeError("{}: output_dtype must be a numpy dtype (e.g. 'uint8', np.float32), got {!r}: {}".format(
            _OWNER, output_dtype, err)) from None


class _MapComponent:
    """The function the workers run: ``dp`` with component ``index`` replaced by
    ``map_func(dp[index])``, checked to be an array of ``shape`` and ``dtype``; None when
    ``map_func`` returns None. Module-level, so it pickles for ``spawn``."""

    def __init__(self, map_func: Callable[[Any], Any], index: Hashable, shape: Tuple[int, ...], dtype: np.dtype):
        self.map_func = map_func
        self.index = index
        self.shape = shape
        self.dtype = dtype

    def _expected(self) -> str:
        return "a numpy array of shape {} and dtype {} (or None to drop the datapoint)".format(self.shape, self.dtype)

    def __call__(self, dp: Any) -> Any:
        result = self.map_func(dp[self.index])
        if result is None:
            return None
        if not isinstance(result, np.ndarray):
            raise TypeError("{}: map_func returned a {} for component {!r}; expected {}".format(
                _OWNER, type(result).__name__, self.index, self._expected()))
        if result.shape != self.shape or result.dtype != self.dtype:
            raise ValueError("{}: map_func returned an array of shape {} and dtype {} for component {!r}; expected "
                             "{}".format(_OWNER, result.shape, result.dtype, self.index, self._expected()))
        mapped: Any
        if isinstance(dp, tuple):
            mapped = list(dp)
            mapped[self.index] = result
            return tuple(mapped)
        mapped = copy.copy(dp)
        mapped[self.index] = result
        return mapped


class MultiProcessMapDataComponentSharedArray(MultiProcessMapData):
    """Replace component ``index`` of each datapoint of ``ds`` by ``map_func(component)``, an array
    of shape ``output_shape`` and dtype ``output_dtype``, in ``nr_proc`` worker processes.

    Every epoch yields each datapoint of one epoch of ``ds`` once, in source order, except those
    for which ``map_func`` returns None (dropped, as in tensorpack). A result that is not an array
    of ``output_shape`` and ``output_dtype`` raises a
    :class:`~inputpipe.utils.errors.WorkerError` that is also a ``TypeError``/``ValueError``,
    naming the expected and the returned shape and dtype. tensorpack's version never ended an
    epoch (see docs/migrating.md); any numeric dtype works here, not only tensorpack's five.

    The keyword arguments are :class:`~inputpipe.dataflow.MultiProcessMapData`'s.

    Example::

        df = MultiProcessMapDataComponentSharedArray(DataFromList(paths), 4, load_mask, (64, 64), np.float32)
        df.reset_state()
        with df:
            masks = [dp[0] for dp in df]
    """

    def __init__(self, ds: DataFlow, nr_proc: int, map_func: Callable[[Any], Optional[np.ndarray]],
                 output_shape: Sequence[int], output_dtype: Any, index: Hashable = 0, *,
                 buffer_size: int = 200, start_method: Optional[str] = None, shm_bytes: Optional[int] = None,
                 map_timeout: Optional[float] = None):
        if not callable(map_func):
            raise TypeError("{}: map_func must be callable, got {!r}".format(_OWNER, map_func))
        shape, dtype = _checked_shape(output_shape), _checked_dtype(output_dtype)
        super().__init__(ds, nr_proc, _MapComponent(map_func, index, shape, dtype), buffer_size=buffer_size,
                         strict=True, ordered=True, start_method=start_method, shm_bytes=shm_bytes,
                         map_timeout=map_timeout)
        self.nr_proc = nr_proc
        self.component_map_func = map_func
        self.output_shape = shape
        self.output_dtype = dtype.type
        self.index = index
