"""One source, a parallel map: ``map_func`` runs in worker threads or processes.

The consumer's thread iterates the source DataFlow and hands each datapoint, numbered, to the
least busy worker; at most ``buffer_size`` datapoints are in flight (sent and not yet yielded),
so memory stays bounded and a slow consumer makes the workers wait. Every worker has its own
channel to the parent and every reply carries its number, so nothing is lost or duplicated:

- ``strict=True``: each call of ``iter()`` yields exactly the datapoints that
  ``MapData(ds, map_func)`` would, each once (those mapped to ``None`` are dropped), whatever
  the number of workers; ``ordered=True`` also keeps the source order.
- ``strict=False`` (tensorpack's default): the source is iterated continuously and work in flight
  at the end of an epoch is yielded at the start of the next one; still each datapoint once.

Example::

    df = MultiProcessMapData(DataFromList(files), num_proc=4, map_func=decode_jpeg, strict=True)
    df.reset_state()
    with df:
        for image, label in df:
            ...
"""
import collections
import queue
import time
import weakref
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..utils.compat import no_other_arguments, renamed_argument, warn_deprecated
from ..utils.concurrency import POLL_INTERVAL, StoppableThread
from ..utils.errors import WorkerError, error_from_exception
from ..utils.seeding import datapoint_context, derive_seed, new_rng
from ..utils.workers import WorkerPool, WorkerPoolOwner
from ._map_position import MapPosition, checked_map_state
from ._state import StatePlan, check_input_state
from .base import (DataFlow, DataFlowReentrantGuard, NotResumableError, ProxyDataFlow, empty_passes_mean_stuck,
                   empty_passes_text, get_length, raise_if_stopping)
from .batch import BatchBuilder
from .parallel import _check_positive, _stop_threads
# tensorpack's dataflow.parallel_map also has these (outside __all__): scripts import them from here
from .common import BatchData, RepeatedData  # noqa: F401
from .tensorpack_helpers import enable_death_signal  # noqa: F401

__all__ = [
    "MultiThreadMapData",
    "MultiProcessMapData",
    "MultiProcessMapDataZMQ",
    "MultiProcessMapAndBatchData",
    "MultiProcessMapAndBatchDataZMQ",
    "ThreadedMapData",
]

_DEFAULT_BUFFER_SIZE = 200


def _old_style_arguments(name: str, count_name: str, count: Optional[int], map_func: Optional[Callable],
                         positional: Tuple[Any, ...], buffer_size: int, strict: bool,
                         old_names: Dict[str, Any]) -> Tuple[int, Callable, int, bool]:
    """tensorpack before 0.9: ``nr_proc=``/``nr_thread=``, and ``buffer_size``, ``strict`` passed
    positionally after ``map_func``. Returns ``(count, map_func, buffer_size, strict)``."""
    count = renamed_argument(name, old_names, "nr_" + count_name.split("_")[1], count_name, count, None)
    no_other_arguments(name, old_names)
    if len(positional) > 2:
        raise TypeError("{}() takes at most 5 positional arguments ({} given)".format(name, 3 + len(positional)))
    if positional:
        if buffer_size != _DEFAULT_BUFFER_SIZE or strict is not False:
            raise TypeError("{}: buffer_size/strict passed both by position and by keyword".format(name))
        warn_deprecated("{}: buffer_size and strict passed by position is tensorpack's old style; it still "
                        "works but is deprecated: pass buffer_size= and strict= as keywords".format(name))
        buffer_size = positional[0]
        strict = positional[1] if len(positional) > 1 else strict
    if not callable(map_func):
        raise TypeError("{}: map_func must be callable, got {!r}".format(name, map_func))
    return _check_positive(name, count_name, count), map_func, buffer_size, strict


class _ParallelMapBase(ProxyDataFlow):
    """The scheduler shared by the thread, process and Ray maps.

    Subclasses provide ``_start()``, ``_submit(rank, task)`` with ``task = [generation, ticket,
    payload]``, ``_receive(timeout)`` returning ``(rank, [generation, ticket, result])`` or None,
    ``_describe_worker(rank)`` returning the worker's ``(name, pid or None)`` for error messages,
    and ``close()``. ``ticket = [key, base_seed, epoch, index]``: ``key`` is the task's number in
    its epoch (strict) or overall, the rest seeds the payload's first datapoint (:func:`_apply`).

    Strict maps are resumable (:meth:`get_state`/:meth:`set_state`): see :mod:`._map_position`.
    """

    #: Datapoints in one task (the map-and-batch flows: ``batch_size``).
    _task_size = 1

    def __init__(self, ds: DataFlow, num_workers: int, buffer_size: int, strict: bool, ordered: bool,
                 map_timeout: Optional[float] = None):
        super().__init__(ds)
        name = type(self).__name__
        self.num_workers = num_workers
        self.buffer_size = _check_positive(name, "buffer_size", buffer_size)
        self.strict = bool(strict)
        self.ordered = bool(ordered)
        if map_timeout is not None and not map_timeout > 0:
            raise ValueError("{}: map_timeout must be a positive number of seconds or None, got {!r}".format(
                name, map_timeout))
        self.map_timeout = map_timeout
        self._waiting_since: List[Optional[float]] = [None] * num_workers   # work in flight, no answer since
        self._hung: Optional[WorkerError] = None
        self._guard = DataFlowReentrantGuard(name)
        self._in_flight = [0] * num_workers      # tasks sent to each worker, not yet answered
        self._generation = 0                     # of the current strict iteration; older replies are dropped
        self._generation_in_flight = 0           # tasks of the current generation not yet answered
        self._source: Optional[Iterator[Any]] = None
        self._next_key = 0
        self._passes = 0                         # continuous mode: source passes begun (seeds the tasks)
        self._pass_start = 0                     # continuous mode: key when the source last restarted
        self._empty_passes = 0                   # continuous mode: source passes in a row without a datapoint
        self._next_yield = 0
        self._pending: Dict[int, Any] = {}       # ordered mode: answers waiting for their turn
        self._ready: Deque[Tuple[int, Any]] = collections.deque()   # (key, result) due to be yielded, in order
        #: Seeds every datapoint's randomness with (base_seed, epoch, index); drawn at reset_state().
        self.base_seed: Optional[int] = None
        self._position = MapPosition()
        self._in_epoch = False                   # a strict epoch began and did not end
        self._resume_pending = False             # set_state() was called: the next iter() continues
        self._not_resumable: Optional[List[Optional[NotResumableError]]] = None    # checked once
        self._started = False
        self._closed = False

    def reset_state(self) -> None:
        """Reset the source (in this process), draw the seed of the datapoints' randomness and
        start the workers (once)."""
        if self._closed:
            raise RuntimeError("{} is closed".format(type(self).__name__))
        self.ds.reset_state()
        self.base_seed = int(new_rng(self).randint(0, 2 ** 32, dtype=np.int64))
        self._position = MapPosition()
        self._in_epoch = self._resume_pending = False
        if not self._started:
            self._start()
            self._started = True

    # ------------------------------------------------------------------------------ the workers (subclasses)

    def _start(self) -> None:
        """Start the workers."""
        raise NotImplementedError

    def _submit(self, rank: int, task: List[Any]) -> None:
        """Send ``task = [generation, ticket, payload]`` to worker ``rank``."""
        raise NotImplementedError

    def _receive(self, timeout: float) -> Optional[Tuple[int, List[Any]]]:
        """One answer ``(rank, [generation, ticket, result])``, or None after ``timeout`` seconds."""
        raise NotImplementedError

    def _describe_worker(self, rank: int) -> Tuple[str, Optional[int]]:
        """The worker's ``(name, pid or None)``, for error messages."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------ resuming

    def check_resumable(self) -> None:
        if not self.strict:
            raise NotResumableError(
                "{}(strict=False) is not resumable: it reads its source continuously and yields the work in "
                "flight at the end of an epoch in the next one, so no saved position describes what it "
                "yielded; use strict=True (every epoch exactly the source's datapoints), which is".format(
                    type(self).__name__))
        super().check_resumable()

    def _resumability(self) -> Optional[NotResumableError]:
        if self._not_resumable is None:
            try:
                self.check_resumable()
                self._not_resumable = [None]
            except NotResumableError as err:
                # Kept without its traceback: the traceback's frames (and their callers') would keep
                # the datapoints they held alive, and with them the workers' shared memory.
                self._not_resumable = [err.with_traceback(None)]
        return self._not_resumable[0]

    def get_state(self) -> Dict[str, Any]:
        """The position after the last datapoint yielded: ``seed`` (of the datapoints'
        randomness), ``epoch``, ``index`` (every task before it yielded or dropped), ``done``
        (tasks after it already yielded: unordered maps only) and ``input`` (the source's state
        right after task ``index - 1`` was read). A restore re-reads the source from ``input``,
        maps again the work that was in flight and skips ``done``.

        Only ``strict=True`` maps are resumable (NotResumableError otherwise)."""
        why = self._resumability()
        if why is not None:
            raise NotResumableError(str(why))
        if self.base_seed is None:
            raise RuntimeError("{}: call reset_state() before get_state()".format(type(self).__name__))
        if self._in_epoch:
            fields = self._position.fields()
        else:
            fields = {"epoch": self._position.epoch, "index": 0, "done": [], "input": self.ds.get_state()}
        state = {"type": type(self).__name__, "seed": self.base_seed}
        state.update(fields)
        return state

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        """Continue after the datapoint ``state`` was taken at (from :meth:`get_state` of a map with
        the same arguments; any number of workers). Call ``set_state`` after ``reset_state()``."""
        name = type(self).__name__
        why = self._resumability()
        if why is not None:
            raise NotResumableError(str(why))
        if not self._started or self._closed:
            raise RuntimeError("{}: call reset_state() before set_state(){}".format(
                name, " (it is closed)" if self._closed else ""))
        size = get_length(self.ds)
        state = checked_map_state(self, state, self.ordered, None if size is None else -(-size // self._task_size))
        check_input_state(self, self.ds, state["input"], plan)

        def restore() -> None:
            self.base_seed = state["seed"]
            self._position.start(state["epoch"], state["index"], state["done"], state["input"])
            self._in_epoch = self._resume_pending = True
        plan.then(restore)

    # ---------------------------------------------------------------------------- scheduling

    def _make_task(self, source: Iterator[Any]) -> Any:
        """The next unit of work from ``source`` (raises StopIteration at its end)."""
        return next(source)

    def _fill(self, restart_source: bool) -> None:
        """Send source datapoints to workers while fewer than ``buffer_size`` are in flight."""
        track = self.strict and self._resumability() is None
        position = self._position
        while sum(self._in_flight) + len(self._pending) + len(self._ready) < self.buffer_size:
            if self._source is None:
                return
            try:
                task = self._make_task(self._source)
            except StopIteration:
                self._source = iter(self.ds) if restart_source else None
                self._empty_passes = self._empty_passes + 1 if self._next_key == self._pass_start else 0
                if restart_source and empty_passes_mean_stuck(self.ds, self._empty_passes):
                    raise RuntimeError("{}: the source {} produced no datapoints in {}".format(
                        type(self).__name__, type(self.ds).__name__,
                        empty_passes_text(self._empty_passes, "a whole pass", "passes"))) from None
                self._pass_start = self._next_key
                self._passes += 1
                continue
            key = self._next_key
            self._next_key += 1
            if self.strict:
                if track:
                    position.read(key, self.ds.get_state())
                if position.skip(key):
                    raise_if_stopping(self)
                    continue                       # yielded before the state this epoch was restored from
                ticket = [key, self.base_seed, position.epoch, key * self._task_size]
            else:
                ticket = [key, self.base_seed, self._passes, (key - self._pass_start) * self._task_size]
            rank = min(range(len(self._in_flight)), key=self._in_flight.__getitem__)   # least loaded
            self._submit(rank, [self._generation, ticket, task])
            if not self._in_flight[rank]:
                self._waiting_since[rank] = time.monotonic()
            self._in_flight[rank] += 1
            self._generation_in_flight += 1

    def _collect(self) -> None:
        """Wait up to one poll interval for an answer; move the results now due to ``_ready``."""
        if self._hung is not None:
            raise self._hung
        got = self._receive(POLL_INTERVAL)
        if got is None:
            self._check_hung()
            raise_if_stopping(self)
            return
        rank, (generation, ticket, result) = got
        key = ticket[0]
        self._in_flight[rank] -= 1
        self._waiting_since[rank] = time.monotonic() if self._in_flight[rank] else None
        self._check_hung()                         # also while other workers keep answering
        if generation != self._generation:
            return                                 # left over from an abandoned strict epoch
        self._generation_in_flight -= 1
        if not self.ordered:
            self._ready.append((key, result))
            return
        self._pending[key] = result
        while self._next_yield in self._pending:
            self._ready.append((self._next_yield, self._pending.pop(self._next_yield)))
            self._next_yield += 1

    def _check_hung(self) -> None:
        """Raise a WorkerError for a worker that has had work and no answer for ``map_timeout``."""
        if self.map_timeout is None:
            return
        now = time.monotonic()
        for rank, since in enumerate(self._waiting_since):
            if since is not None and now - since > self.map_timeout:
                worker, pid = self._describe_worker(rank)
                self._hung = WorkerError(type(self).__name__, worker, pid=pid, reason=(
                    "has not answered for {:.1f} s with {} datapoint(s) in flight (map_timeout={} s): is "
                    "map_func stuck?".format(now - since, self._in_flight[rank], self.map_timeout)))
                raise self._hung

    def __iter__(self) -> Iterator[Any]:
        if self._closed or not self._started:
            raise RuntimeError("{}: call reset_state() before iterating{}".format(
                type(self).__name__, " (it is closed)" if self._closed else ""))
        with self._guard:
            yield from (self._iter_strict() if self.strict else self._iter_continuous())

    def _iter_strict(self) -> Iterator[Any]:
        track = self._resumability() is None
        position = self._position
        if self._resume_pending:                   # continue the restored epoch
            self._resume_pending = False
        else:
            if self._in_epoch:                     # the last iteration was abandoned: a new epoch
                position.epoch += 1
            position.start(position.epoch, 0, (), self.ds.get_state() if track else None)
        self._in_epoch = True
        self._generation += 1
        self._generation_in_flight = 0
        self._pending.clear()
        self._ready.clear()
        self._next_key = self._next_yield = position.watermark
        self._source = iter(self.ds)
        while True:
            while self._ready:
                key, result = self._ready.popleft()
                position.passed(key)
                if result is not None:
                    yield result
            self._fill(restart_source=False)
            if self._source is None and self._generation_in_flight == 0 and not self._pending:
                break
            self._collect()
        position.epoch += 1
        self._in_epoch = False

    def _iter_continuous(self) -> Iterator[Any]:
        size = get_length(self)
        if self._source is None:
            self._source = iter(self.ds)
            self._pass_start = self._next_key
        answered = 0
        while size is None or answered < size:
            if self._ready:
                answered += 1
                _, result = self._ready.popleft()
                if result is not None:
                    yield result
                continue
            self._fill(restart_source=True)
            self._collect()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _apply(map_func: Callable, batch_size: Optional[int], task: Any, ticket: List[int],
           reseed_global: bool, allocate: Optional[Callable[..., np.ndarray]] = None) -> Any:
    """Map one task, each datapoint in its own :func:`~inputpipe.utils.seeding.datapoint_context`
    seeded from ``ticket = [key, base_seed, epoch, index of the task's first datapoint]``;
    ``reseed_global`` (process workers) also reseeds numpy's and Python's global RNGs. A batch is
    built as the results come, in arrays from ``allocate`` (a worker's shared memory)."""
    _, base_seed, epoch, index = ticket
    if batch_size is None:
        with datapoint_context(derive_seed(base_seed, epoch, index), reseed_global):
            return map_func(task)
    builder = BatchBuilder(len(task)) if allocate is None else BatchBuilder(len(task), allocate)
    for offset, dp in enumerate(task):
        with datapoint_context(derive_seed(base_seed, epoch, index + offset), reseed_global):
            result = map_func(dp)
        if result is not None:
            builder.add(result)
    return builder.batch()


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

    tensorpack's old style still works, with a ``DeprecationWarning``: ``nr_thread=``, and
    ``buffer_size`` and ``strict`` passed by position after ``map_func``.

    Example::

        df = MultiThreadMapData(DataFromList(paths), num_thread=8, map_func=read_file, strict=True)
        df.reset_state()
        with df:
            contents = [dp for dp in df]
    """

    def __init__(self, ds: DataFlow, num_thread: Optional[int] = None,
                 map_func: Optional[Callable[[Any], Any]] = None, *old_positional: Any,
                 buffer_size: int = _DEFAULT_BUFFER_SIZE, strict: bool = False, ordered: bool = False,
                 map_timeout: Optional[float] = None, **old_names: Any):
        num_thread, map_func, buffer_size, strict = _old_style_arguments(
            type(self).__name__, "num_thread", num_thread, map_func, old_positional, buffer_size, strict, old_names)
        super().__init__(ds, num_thread, buffer_size, strict, ordered, map_timeout)
        self.map_func = map_func
        self._results: "queue.Queue[Any]" = queue.Queue()      # bounded by buffer_size tasks in flight
        self._threads: List[_MapThread] = []
        self._failure: Optional[WorkerError] = None
        self._finalizer: Optional[weakref.finalize] = None

    def _start(self) -> None:
        self._threads = [_MapThread("{}-thread-{}".format(type(self).__name__, i), i, self.map_func,
                                    queue.Queue(), self._results) for i in range(self.num_workers)]
        self._finalizer = weakref.finalize(self, _stop_threads, list(self._threads))
        for thread in self._threads:
            thread.start()

    def _submit(self, rank: int, task: Any) -> None:
        self._threads[rank].tasks.put(task)

    def worker_stats(self) -> List[Dict[str, Any]]:
        """One dict per thread, cumulative since the threads started:
        ``{"rank": int, "busy_seconds": float, "items": int}``, the time inside ``map_func`` and
        the number of datapoints mapped. Empty before ``reset_state()``.

        Example::

            busy_share = [s["busy_seconds"] / elapsed for s in df.worker_stats()]
        """
        return [{"rank": t.rank, "busy_seconds": t.busy_seconds, "items": t.items} for t in self._threads]

    def _describe_worker(self, rank: int) -> Tuple[str, Optional[int]]:
        return self._threads[rank].name, None

    def _receive(self, timeout: float):
        if self._failure is not None:       # the failed thread has ended: raise again, never wait
            raise self._failure
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
        """Stop and join the threads, then close the source ``ds``."""
        self._closed = True
        if self._finalizer is not None:
            self._finalizer()
        super().close()


#: tensorpack's older name.
ThreadedMapData = MultiThreadMapData


# ----------------------------------------------------------------------------------- processes

def _serve_map(rank: int, end, map_func: Callable, batch_size: Optional[int]) -> None:
    """Worker process of :class:`MultiProcessMapData`: answer ``[generation, ticket, task]``
    commands with ``[generation, ticket, result]``."""
    while True:
        command = end.receive_command(POLL_INTERVAL)
        if command is not None:
            started = time.perf_counter()
            generation, ticket, task = command
            result = _apply(map_func, batch_size, task, ticket, reseed_global=True, allocate=end.shared_empty)
            end.count_work(time.perf_counter() - started, 1)
            sending = time.perf_counter()
            end.send_datapoint([generation, ticket, result])
            end.count_work(time.perf_counter() - sending)


class MultiProcessMapData(WorkerPoolOwner, _ParallelMapBase):
    """Apply ``map_func`` to each datapoint of ``ds`` in ``num_proc`` worker processes.

    The source ``ds`` is iterated in the consumer's process (call ``reset_state()`` there); only
    ``map_func`` runs in the workers. Each source datapoint is mapped exactly once; with
    ``strict=True`` every epoch yields exactly the datapoints of ``MapData(ds, map_func)`` (``None``
    results dropped), for any ``num_proc``, in source order when ``ordered=True``.

    Datapoints and results cross the process boundary in :mod:`inputpipe.utils.serialize`'s
    wire format (no pickle): numbers, strings, bytes, numpy arrays, lists, tuples and dicts.
    Large result arrays arrive through shared memory without a copy.

    Args:
        ds: the source DataFlow.
        num_proc: number of worker processes.
        map_func: a function of one datapoint; returns the new datapoint or ``None`` to drop it.
            Module-level (picklable) for ``start_method="spawn"``/``"forkserver"``.
        buffer_size: at most this many datapoints in flight (sent and not yet yielded).
        strict: exactly the datapoints of one source epoch per epoch (see the module doc).
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

    def __init__(self, ds: DataFlow, num_proc: Optional[int] = None, map_func: Optional[Callable[[Any], Any]] = None,
                 *old_positional: Any, buffer_size: int = _DEFAULT_BUFFER_SIZE, strict: bool = False,
                 ordered: bool = False, start_method: Optional[str] = None, shm_bytes: Optional[int] = None,
                 map_timeout: Optional[float] = None, **old_names: Any):
        num_proc, map_func, buffer_size, strict = _old_style_arguments(
            type(self).__name__, "num_proc", num_proc, map_func, old_positional, buffer_size, strict, old_names)
        super().__init__(ds, num_proc, buffer_size, strict, ordered, map_timeout)
        self.map_func = map_func
        self._pool = WorkerPool(type(self).__name__, _serve_map, num_proc, (map_func, self._batch_size),
                                start_method, shm_bytes)

    def _start(self) -> None:
        self._pool.start()

    def _submit(self, rank: int, task: Any) -> None:
        self._pool.send(rank, task)

    def _describe_worker(self, rank: int) -> Tuple[str, Optional[int]]:
        return "worker {}".format(rank), self.worker_pids[rank]

    def _receive(self, timeout: float):
        return self._pool.receive(timeout)

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
        buffer_size: datapoints in flight; default ``3 * batch_size * num_proc``.

    Example::

        df = MultiProcessMapAndBatchData(DataFromList(files), 4, decode_jpeg, batch_size=64)
        df.reset_state()
        for images, labels in df:
            ...
    """

    _batch_size: int        # always set (checked) in __init__

    def __init__(self, ds: DataFlow, num_proc: Optional[int] = None, map_func: Optional[Callable[[Any], Any]] = None,
                 batch_size: Optional[int] = None, buffer_size: Optional[int] = None, **kwargs: Any):
        name = type(self).__name__
        num_proc = renamed_argument(name, kwargs, "nr_proc", "num_proc", num_proc, None)
        num_proc = _check_positive(name, "num_proc", num_proc)
        self._batch_size = self._task_size = _check_positive(name, "batch_size", batch_size)
        if buffer_size is None:
            buffer_size = 3 * self._batch_size * num_proc
        batches_in_flight = max(1, buffer_size // self._batch_size)
        super().__init__(ds, num_proc, map_func, buffer_size=batches_in_flight, **kwargs)

    def __len__(self) -> int:
        return len(self.ds) // self._batch_size

    def _make_task(self, source: Iterator[Any]) -> Any:
        batch = []
        for dp in source:
            batch.append(dp)
            if len(batch) == self._batch_size:
                return batch
        raise StopIteration


#: tensorpack's name: the same class.
MultiProcessMapAndBatchDataZMQ = MultiProcessMapAndBatchData


def __getattr__(name: str) -> Any:
    """tensorpack's ``MultiProcessMapDataComponentSharedArray`` (outside its ``__all__``) is built on
    :class:`MultiProcessMapData` in :mod:`.shared_array_map`, which imports this module; it is
    loaded on first use."""
    if name == "MultiProcessMapDataComponentSharedArray":
        from .shared_array_map import MultiProcessMapDataComponentSharedArray

        return MultiProcessMapDataComponentSharedArray
    raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))
