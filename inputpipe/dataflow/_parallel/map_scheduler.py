"""The scheduler shared by the parallel maps (threads, processes, Ray actors).

The consumer's thread iterates the source DataFlow and hands each datapoint, numbered, to the
least busy active worker; at most ``buffer_size`` datapoints are in flight (sent and not yet
yielded), so memory stays bounded and a slow consumer makes the workers wait. Every reply
carries its number, so nothing is lost or duplicated, whichever worker maps it and however many
workers there are: the set of workers may change at any moment (``"auto"`` worker counts,
``set_num_workers``). A new worker gets a new rank; a retiring one gets no new task and is
stopped once it has answered all it holds. See :mod:`.parallel_map` for the modes.

Example::

    class MyMap(_ParallelMapBase):      # provides _start, _submit, _receive, _add_worker, ...
        ...
"""
import collections
import time
from typing import Any, Deque, Dict, Iterator, List, Optional, Set, Tuple

import numpy as np

from ...utils.concurrency import POLL_INTERVAL
from ...utils.errors import WorkerError
from ...utils.seeding import new_rng
from .._core.helpers import close_iterators
from .inline_map import InlineMapper
from .map_buffer import MapBuffer
from .map_position import MapPosition
from .map_resume import ResumableMap
from .map_task import _DEFAULT_BUFFER_SIZE, _apply, _old_style_arguments, nbytes  # noqa: F401 (imported from here)
from .resizable import ResizableStage
from ..base import (EMPTY_PASSES_ALLOWED, DataFlow, DataFlowReentrantGuard, NotResumableError, ProxyDataFlow,
                   empty_passes_mean_stuck, empty_passes_text, raise_if_stopping)


class _ParallelMapBase(MapBuffer, ResumableMap, ResizableStage, ProxyDataFlow):
    """The scheduler shared by the thread, process and Ray maps.

    Subclasses provide ``_start()`` (starting ``num_workers`` workers, ranks ``0..n-1``),
    ``_submit(rank, task)`` with ``task = [generation, ticket, payload]``, ``_receive(timeout)``
    returning ``(rank, [generation, ticket, result])`` or None, ``_describe_worker(rank)``
    returning the worker's ``(name, pid or None)`` for error messages, and ``close()``. A
    subclass may keep the tasks ``_submit`` gets and send them in ``_send_submitted()`` (each
    fill calls it at its end: a worker's tasks of one fill travel together), and hand out the
    answers that came together in one message from ``_receive_received()``.
    ``ticket = [key, base_seed, epoch, index]``: ``key`` is the task's number in its epoch
    (strict) or overall, the rest seeds the payload's first datapoint (:func:`_apply`). To change
    size they provide ``_add_worker()`` (start one, return its new rank, or None when it cannot)
    and ``_retire_worker(rank)`` (stop one that holds no work), and ``_scaling_counters()``.

    Strict maps are resumable (:meth:`get_state`/:meth:`set_state`): see :mod:`.map_position`.

    A subclass that provides ``_map_inline(payload, ticket)`` (the result a worker would send)
    can run with 0 workers: the consumer's thread maps (:mod:`.inline_map`).
    """

    #: Datapoints in one task (the map-and-batch flows: ``batch_size``).
    _task_size = 1
    #: Whether a worker added while running takes tasks at once (a Ray actor waits to be placed:
    #: the subclass calls :meth:`_activate` when it is).
    _ready_when_added = True

    def __init__(self, ds: DataFlow, num_workers: Any, buffer_size: Any, strict: bool, ordered: bool,
                 map_timeout: Optional[float] = None, count_name: str = "num_workers"):
        super().__init__(ds)
        name = type(self).__name__
        self.strict = bool(strict)
        self.ordered = bool(ordered)
        #: Workers that take tasks now (the controller changes it for ``"auto"``).
        self.num_workers = self._init_workers(name, count_name, num_workers)
        self._init_buffer(name, buffer_size)
        if map_timeout is not None and not map_timeout > 0:
            raise ValueError("{}: map_timeout must be a positive number of seconds or None, got {!r}".format(
                name, map_timeout))
        self.map_timeout = map_timeout
        self._active: List[int] = []             # ranks that get tasks, in the order they started
        self._starting: List[int] = []           # ranks added that do not take tasks yet
        self._retiring: Set[int] = set()         # ranks that get no more tasks and still hold some
        self._waiting_since: Dict[int, Optional[float]] = {}   # rank -> work in flight, no answer since
        self._hung: Optional[WorkerError] = None
        self._guard = DataFlowReentrantGuard(name)
        self._in_flight: Dict[int, int] = {}     # rank -> tasks sent to it, not yet answered
        self._in_flight_total = 0
        self._added_at: Optional[float] = None   # when the latest worker was added (it warms up)
        self._generation = 0                     # of the current strict iteration; older replies are dropped
        self._generation_in_flight = 0           # tasks of the current generation not yet answered
        self._source: Optional[Iterator[Any]] = None
        self._next_key = 0
        self._passes = 0                         # continuous mode: source passes begun (seeds the tasks)
        self._pass_start = 0                     # continuous mode: key when the source last restarted
        self._pass_mark = 0                      # continuous mode: _read_mark() then
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
        #: The consumer's thread as a worker (0 workers), where supported.
        self._inline = InlineMapper(name, self._map_inline) if self._maps_inline else None
        self._mapping_inline = False             # 0 workers: the consumer's thread maps every task
        self._parked_ranks: List[int] = []       # ranks without tasks while it does
        self._consumer_seconds = 0.0             # the consumer's own time between datapoints
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
            self.num_workers = self._start_workers(self.num_workers)
            self._workers_changed()
            self._start()
            self._started = True
            self._active = list(range(self.num_workers))
            for rank in self._active:
                self._in_flight[rank] = 0
                self._waiting_since[rank] = None
            self._begin_scaling()

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

    def _send_submitted(self) -> None:
        """Send the tasks :meth:`_submit` kept (a subclass that sends a worker's tasks together)."""

    def _receive_received(self) -> Optional[Tuple[int, List[Any]]]:
        """An answer already received (with others in one message), without waiting; else None."""
        return None

    def _describe_worker(self, rank: int) -> Tuple[str, Optional[int]]:
        """The worker's ``(name, pid or None)``, for error messages."""
        raise NotImplementedError

    def _add_worker(self) -> Optional[int]:
        """Start one more worker; its new rank, or None when none can be started now."""
        raise NotImplementedError

    def _retire_worker(self, rank: int) -> None:
        """Stop worker ``rank``, which holds no task (every one it got was answered)."""
        raise NotImplementedError

    def _sync_workers(self) -> None:
        """Take in workers added or retired behind the scheduler's back (e.g. on the pool)."""

    def _map_inline(self, payload: Any, ticket: List[int]) -> Any:
        """Map ``payload`` in the consumer's thread, as a worker would (its seeds, its result's
        types); subclasses that can run with 0 workers provide it (``_maps_inline``)."""
        raise NotImplementedError

    def _adopt(self, ranks: List[int]) -> None:
        """The workers that take tasks are now ``ranks``: new ones get tasks from now on, the
        others none (they are retired once they have answered what they hold)."""
        for rank in ranks:
            if rank not in self._in_flight:
                self._in_flight[rank] = 0
                self._waiting_since[rank] = None
                # (at 0 workers the consumer's thread keeps mapping: a new worker waits, parked)
                (self._parked_ranks if self._mapping_inline else self._active).append(rank)
        for rank in [r for r in self._active + self._parked_ranks if r not in ranks]:
            (self._active if rank in self._active else self._parked_ranks).remove(rank)
            if self._in_flight[rank]:
                self._retiring.add(rank)
            else:
                self._retired(rank)
        if not self._active and not self._mapping_inline:
            # the pool kept only workers the scheduler was retiring: they take tasks again
            for rank in [r for r in ranks if r in self._retiring]:
                self._retiring.discard(rank)
                self._active.append(rank)
        self._workers_changed()

    # ------------------------------------------------------------------------------ changing size

    def _workers_changed(self) -> None:
        if self._started:
            self.num_workers = len(self._active)
        if self._auto_buffer:
            self.buffer_size = self._buffer_for(self.num_workers)

    def _active_workers(self) -> int:
        return len(self._active) + len(self._starting)

    def _grow_one(self) -> bool:
        rank = self._add_worker()
        if rank is None:
            return False
        self._in_flight[rank] = 0
        self._waiting_since[rank] = None
        (self._active if self._ready_when_added else self._starting).append(rank)
        self._added_at = time.monotonic()
        self._workers_changed()
        return True

    def _activate(self, rank: int) -> None:
        """Worker ``rank``, added while running, is ready for tasks."""
        self._starting.remove(rank)
        self._active.append(rank)
        self._workers_changed()

    def _shrink_one(self) -> bool:
        if self._starting:                         # not placed yet: holds no work
            self._retired(self._starting.pop())
            return True
        if len(self._active) <= 1:
            return False
        # the least loaded worker (the newest of those): it is done soonest
        rank = min(reversed(self._active), key=self._in_flight.__getitem__)
        self._active.remove(rank)
        self._workers_changed()
        if self._in_flight[rank]:
            self._retiring.add(rank)
        else:
            self._retired(rank)
        return True

    def _enter_inline(self) -> None:
        """0 workers: park the active ones (they answer what they hold, then get no task) and
        map in the consumer's thread from the next task on."""
        for rank in self._starting:                # not placed yet: hold no work
            self._retired(rank)
        self._starting = []
        self._parked_ranks = self._active + self._parked_ranks
        self._active = []
        self._mapping_inline = True
        self._workers_changed()

    def _leave_inline(self, target: int) -> None:
        """Back to workers: up to ``target`` parked ones take tasks again, the other parked ones
        stop (the caller starts more when fewer were parked)."""
        self._mapping_inline = False
        revived, others = self._parked_ranks[:target], self._parked_ranks[target:]
        self._parked_ranks = []
        self._active.extend(revived)
        for rank in others:
            if self._in_flight[rank]:
                self._retiring.add(rank)
            else:
                self._retired(rank)
        self._workers_changed()

    def _parked_workers(self) -> int:
        return len(self._parked_ranks)

    def _retired(self, rank: int) -> None:
        """Worker ``rank`` holds no more work: stop it."""
        self._retiring.discard(rank)
        del self._in_flight[rank]
        del self._waiting_since[rank]
        self._retire_worker(rank)

    def _answered(self, rank: int) -> None:
        """Worker ``rank`` answered a task (or one it held was given up)."""
        self._in_flight[rank] -= 1
        self._in_flight_total -= 1
        if self._in_flight[rank]:
            self._waiting_since[rank] = time.monotonic()
        else:
            self._waiting_since[rank] = None
            if rank in self._retiring:
                self._retired(rank)

    def _workers_starting(self) -> bool:
        """Whether the latest worker added has not answered yet (for at most 5 s)."""
        if self._starting:
            return True
        if self._added_at is None:
            return False
        newest = self._active[-1] if self._active else None
        if time.monotonic() - self._added_at > 5.0 or newest is None or self._worker_items(newest) > 0:
            self._added_at = None
            return False
        return True

    def _worker_items(self, rank: int) -> int:
        """Tasks worker ``rank`` has answered (from its statistics)."""
        for stats in self.worker_stats():
            if stats["rank"] == rank:
                return int(stats["items"])
        return 0

    def worker_stats(self) -> List[Dict[str, Any]]:
        raise NotImplementedError

    def _scaling_counters(self) -> Tuple[float, int]:
        stats = self.worker_stats()
        busy, items = sum(s["busy_seconds"] for s in stats), sum(int(s["items"]) for s in stats)
        if self._inline is not None:               # the consumer's thread's share of the work
            busy, items = busy + self._inline.busy_seconds, items + self._inline.items
        return busy, items

    def _scaling_send(self) -> Optional[float]:
        """The seconds the workers spent sending results so far (None where they do not say)."""
        sent = [s["send_seconds"] for s in self.worker_stats() if "send_seconds" in s]
        return sum(sent) if sent else None

    def _with_inline_cpu(self, clocks: Tuple[Optional[float], Optional[float]]) -> Tuple[Optional[float], Optional[float]]:
        """The workers' ``(CPU seconds, run-queue seconds)`` with the CPU the consumer's thread
        spent mapping."""
        cpu, queued = clocks
        if self._inline is None or not self._inline.items:
            return cpu, queued
        return (cpu or 0.0) + self._inline.cpu_seconds, queued

    # ------------------------------------------------------------------------------ resuming

    def check_resumable(self) -> None:
        if not self.strict:
            raise NotResumableError(
                "{}(strict=False) is not resumable: it reads its source continuously and yields the work in "
                "flight at the end of an epoch in the next one, so no saved position describes what it "
                "yielded; use strict=True (every epoch exactly the source's datapoints), which is".format(
                    type(self).__name__))
        super().check_resumable()

    # ---------------------------------------------------------------------------- scheduling

    def _make_task(self, source: Iterator[Any]) -> Any:
        """The next unit of work from ``source`` (raises StopIteration at its end)."""
        return next(source)

    def _read_mark(self) -> int:
        """A count that grows with every datapoint read from the source (a pass that leaves it
        unchanged read nothing)."""
        return self._next_key

    def _fill(self, restart_source: bool) -> None:
        """Send source datapoints to workers while fewer than ``buffer_size`` are in flight
        (each worker's together, once they are all chosen)."""
        try:
            self._fill_tasks(restart_source)
        finally:
            self._send_submitted()

    def _fill_tasks(self, restart_source: bool) -> None:
        track = self.strict and self._resumability() is None
        position = self._position
        self._sync_workers()
        if self._requested is not None and self._scaling is not None:
            self._scaling.run()          # a count asked for applies before more tasks are sent
        inline = self._inline
        while self._unanswered() + len(self._pending) + len(self._ready) < max(self.buffer_size, 1):
            if self._source is None:
                return
            if self._mapping_inline and self._ready:     # mapping inline: one task at a time, when due
                return
            try:
                task = self._make_task(self._source)
            except StopIteration:
                self._source = iter(self.ds) if restart_source else None
                self._empty_passes = self._empty_passes + 1 if self._read_mark() == self._pass_mark else 0
                if restart_source and empty_passes_mean_stuck(self.ds, self._empty_passes):
                    raise RuntimeError("{}: the source {} produced no datapoints in {}".format(
                        type(self).__name__, type(self.ds).__name__,
                        empty_passes_text(self._empty_passes, "a whole pass", "passes"))) from None
                self._pass_start, self._pass_mark = self._next_key, self._read_mark()
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
            if self._mapping_inline and inline is not None:
                self._tick()                       # (the consumer waits nowhere: the controller acts here)
                self._place(key, inline.map(task, ticket))
                if self._ready:
                    return
                continue
            rank = min(self._active, key=self._in_flight.__getitem__)    # the least loaded
            self._submit(rank, [self._generation, ticket, task])
            if not self._in_flight[rank]:
                self._waiting_since[rank] = time.monotonic()
            self._in_flight[rank] += 1
            self._in_flight_total += 1
            self._generation_in_flight += 1

    def _unanswered(self) -> int:
        """Tasks in flight that count against ``buffer_size``: none at 0 workers (the consumer's
        thread places each result as it maps it; the parked workers' are bounded by what they
        held)."""
        return 0 if self._mapping_inline else self._in_flight_total

    def _tick(self) -> None:
        """Raise a hung worker's error; size an ``"auto"`` buffer and run the controller when due."""
        if self._hung is not None:
            raise self._hung
        now = time.monotonic()
        if self._auto_buffer and now >= self._buffer_refit_at:
            self._fit_auto_buffer(now)
        scaling = self._scaling
        if scaling is not None and now >= scaling.due:
            scaling.run()

    def _collect(self) -> None:
        """Wait up to one poll interval for an answer; move the results now due to ``_ready``.
        The consumer waits here (nothing is ready), so here the controller measures and acts."""
        self._tick()
        scaling = self._scaling
        if scaling is None:
            got = self._receive(POLL_INTERVAL)
        else:
            started = time.monotonic()
            got = self._receive(POLL_INTERVAL)
            self._waited += time.monotonic() - started
        if got is None:
            self._check_hung()
            raise_if_stopping(self)
            return
        changed = False
        while got is not None:                     # (the answers that came in the same message too)
            rank, (generation, ticket, result) = got
            self._answered(rank)
            if generation == self._generation:     # (else left over from an abandoned strict epoch)
                self._generation_in_flight -= 1
                self._place(ticket[0], result)
            if changed:
                break
            got = self._receive_received()
            if got is not None:
                # the controller acts between answers that came together as between messages; after
                # a change of the workers the rest wait for the next call, so that tasks are sent
                # (or mapped in this thread) the new way first
                workers = (self._mapping_inline, len(self._active))
                self._tick()
                changed = (self._mapping_inline, len(self._active)) != workers
        self._check_hung()                         # also while other workers keep answering

    def _place(self, key: int, result: Any) -> None:
        """The result of task ``key`` is in: ready to yield (ordered: once those before it are)."""
        if self._sample_result:
            self._sample_result = False
            self._result_bytes = nbytes(result)
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
        for rank, since in self._waiting_since.items():
            if since is not None and now - since > self.map_timeout:
                worker, pid = self._describe_worker(rank)
                self._hung = WorkerError(type(self).__name__, worker, pid=pid, reason=(
                    "has not answered for {:.1f} s with {} datapoint(s) in flight (map_timeout={} s): is "
                    "map_func stuck?".format(now - since, self._in_flight[rank], self.map_timeout)))
                raise self._hung

    # (defined here too: DataFlow takes a class that defines __iter__ without get_state as not resumable)
    get_state = ResumableMap.get_state

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
                    started = time.perf_counter()
                    yield result
                    self._consumer_seconds += time.perf_counter() - started    # (the consumer's own time)
                    result = None          # not held while the next is made (its memory is reused)
            self._fill(restart_source=False)
            if self._ready:                        # (mapped in the consumer's thread)
                continue
            if self._source is None and self._generation_in_flight == 0 and not self._pending:
                break
            self._collect()
        position.epoch += 1
        self._in_epoch = False

    def _iter_continuous(self) -> Iterator[Any]:
        if self._source is None:
            self._source = iter(self.ds)
            self._pass_start, self._pass_mark = self._next_key, self._read_mark()
        dropped, passes_before = 0, self._passes       # results of None in a row, since which pass
        while True:
            if self._ready:
                _, result = self._ready.popleft()
                if result is not None:
                    dropped, passes_before = 0, self._passes
                    started = time.perf_counter()
                    yield result
                    self._consumer_seconds += time.perf_counter() - started    # (the consumer's own time)
                    result = None          # not held while the next is made (its memory is reused)
                    continue
                dropped += 1
                # an endless stream that can yield nothing must not spin: whole passes of the source
                # and many results in a row, all None (a filter that drops a few never gets here)
                if dropped >= EMPTY_PASSES_ALLOWED and self._passes - passes_before >= 2:
                    raise RuntimeError("{}: map_func returned None for every one of the last {} datapoints ({} "
                                       "passes of the source {}), so this endless stream has nothing to yield".format(
                                           type(self).__name__, dropped, self._passes - passes_before,
                                           type(self.ds).__name__))
                continue
            self._fill(restart_source=True)
            if not self._ready:                    # (else mapped in the consumer's thread)
                self._collect()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._end_scaling()
        # the source's iterator kept across epochs (strict=False) or from an epoch left unfinished:
        # closed now, so that its re-entrancy guards and resources are free once close() returns
        # (not when a garbage collection finds it)
        source, self._source = self._source, None
        if source is not None:
            try:
                close_iterators([source])
            except ValueError:          # running in another thread: it ends with that thread
                pass
        super().close()
