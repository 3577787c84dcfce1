"""Worker counts chosen while the pipeline runs: ``num_proc="auto"``, ``num_thread="auto"``,
``num_actors="auto"`` and ``buffer_size="auto"``.

A stage given ``"auto"`` (or an :class:`Autoscale` with settings) starts with one worker (the
size of its datapoints is not known yet, so the memory budget holds from the start; it grows
once a result was measured) and a :class:`Controller` that runs in the consumer's thread, on
the iteration path: a time check per datapoint, and a decision once per interval (half a second
by default). Over the last interval
it measures the share of time the consumer waited for a result, the share of time the workers
were busy, and the rate of results. It grows the stage when the consumer waits and the workers
are busy (toward the worker count that would feed the consumer's own rate, at most doubling per
step; processes that wait go there at once, within the queue model's count below), shrinks it by one when the consumer never waits and at least a worker's worth of time is
idle (the trainer needs those CPUs), and undoes a growth that did not make the stage faster.
After a change it lets the workers settle for an interval before it measures again.

It never exceeds the budget of :mod:`inputpipe.utils.resources`, shared by every auto stage of
the process: a worker, process or thread, counts for its measured CPU share (the CPU it uses over
the time it works, without the time it waited for a CPU held by other work: a process that waits
for I/O two thirds of its time costs a third of a CPU), so workers that wait may outnumber the
CPUs until their shares fill the budget. Under the system's own budget (no
:func:`~inputpipe.utils.resources.set_budget` and no ``cpu_budget`` of the stage's), processes
that wait may reach the count that keeps the CPUs busy by a queue model (their waits do not
line up: 10 processes of share 1/3 keep 2 CPUs 98% busy, 6 only 84%), and it grows on
past that count while the CPUs it may use were measured idle (:mod:`inputpipe.utils.cpu_idle`:
workers that wait do not all wait at once, so the count their shares give leaves CPUs unused,
and stages that wait for each other use less than their shares say); an explicit budget is a
promise, held by the shares alone. When the work turns CPU-bound and the workers' shares add
up to well over the budget, the stage shrinks. The workers' own memory (``/proc``) plus the
results in flight stay under the memory budget. An explicit number pins a stage; a pinned or an
auto stage can also be set by hand with ``set_num_workers(n)``. Changing the count keeps every
guarantee of the stage: each datapoint once, the order of ordered maps, resumable state and
the same output for any number of workers. A process map (by default) and any parallel map
given ``Autoscale(min_workers=0)`` may also run with 0 workers, its consumer's thread mapping,
when its results cost more to move than to make and that delivers more
(:mod:`._parallel.inline_policy`, :mod:`._parallel.inline_map`); ``Autoscale(min_workers=1)``
keeps ``map_func`` in the workers.

Example::

    df = MultiProcessMapData(DataFromList(files), "auto", decode, strict=True, buffer_size="auto")
    df.reset_state()
    for dp in df:
        ...
    df.worker_count_history()      # [WorkerCountChange(time, count, reason), ...]
"""
import collections
import math
import threading
import time
import weakref
from time import monotonic as _monotonic
from typing import Any, Deque, Optional, Tuple

from ..utils import resources
from ..utils.cpu_idle import IdleCpus
from ..utils.logger import get_logger
from ._parallel.inline_policy import INLINE_RESULTS_HELD, REASON as INLINE_REASON, InlinePolicy
from ._parallel.autoscale_settings import (AUTO, BUDGET_REFRESH, WORK_CHANGED, START_WORKERS, WORKERS_PER_CPU, Autoscale,
                                           Measurement, WorkerCountChange, auto_stages, buffer_setting, stage_name,
                                           worker_count, rate_text)

__all__ = ["AUTO", "Autoscale", "Controller", "Measurement", "WorkerCountChange", "auto_stages", "stage_name",
           "worker_count", "buffer_setting", "WORKERS_PER_CPU", "START_WORKERS", "BUDGET_REFRESH"]

logger = get_logger(__name__)

#: The consumer waited at least this share of an interval ...
GROW_WAIT = 0.10
#: ... this share, for threads whose CPU share is under CHEAP_THREAD_SHARE (they wait: I/O).
GROW_WAIT_CHEAP = 0.05
CHEAP_THREAD_SHARE = 0.25
#: ... while the workers were busy at least this share: more workers would feed it faster.
GROW_BUSY = 0.85
#: The consumer waited less than this share, and ...
SHRINK_WAIT = 0.02
#: ... at least this many workers' worth of time was idle: one fewer does the same work.
SHRINK_IDLE = 1.2
#: A growth must deliver at least this share of its ideal speed-up, or it is undone.
MIN_GAIN = 0.25
#: ... for worker processes grown past their CPU shares onto idle CPUs, this share.
MIN_GAIN_ON_IDLE = 0.1
#: A growth whose results came faster, but short of that share, is measured over up to this many
#: intervals before it is undone (their results and seconds added up).
JUDGE_LOOKS = 3
#: ... and so is one whose results came slower by at most this share (an interval's noise).
JUDGE_NOISE = 0.1
#: The rate before a change is that of up to this many intervals measured at the count it changes,
#: those whose rates are within this factor of the latest one's.
BEFORE_INTERVALS = 4
BEFORE_RATE_SPREAD = 1.25
#: Intervals a count that was undone stays out of reach (then it is tried again).
BLOCKED_INTERVALS = 20
#: An interval lasts at least this many tasks of a worker (long tasks: longer intervals).
TASKS_PER_INTERVAL = 3
#: Changes kept in a stage's history (the oldest are dropped).
HISTORY_LIMIT = 1000
#: Workers whose CPU shares add up to this much more than the budget shrink (the work turned
#: CPU-bound); below it they only stop growing (a margin for the shares' jitter).
OVER_BUDGET = 1.25
#: A stage grows only while its memory, with the new workers counted, stays within this share of
#: the memory budget: a new worker's memory is read from one already running, whose private pages
#: still grow as it writes to the pages it shares with its parent after fork (a margin, so that
#: the stage does not reach the budget before it knows; over the budget, it shrinks).
GROWTH_HEADROOM = 0.9
#: The workers' CPU share is measured again once each active worker has worked this many seconds
#: (on average) since it was last measured, over one interval or several: the busy time comes
#: with the results, up to ``buffer_size="auto"``'s 50 ms of work per worker after the CPU time
#: the kernel reports, so a shorter span would read the share off by that much.
SHARE_MIN_BUSY_SECONDS = 0.5
#: A measured CPU share this many times above or below the smoothed one replaces it at once (the
#: work changed: a phase of the run), instead of being averaged in.
SHARE_JUMP = 3.0
#: Under the system's budget, a stage grows past the count its workers' CPU shares allow while at
#: least this share of one more worker's CPU share was idle over the interval (a growth that
#: then does not deliver more is undone, as any other).
IDLE_GROWTH = 0.25
#: ... and a stage so grown shrinks for the CPU budget only once its workers' CPU share rose by
#: this factor since it grew (the work turned CPU-bound), not because idle CPUs were used.
IDLE_SHARE_ROSE = 1.5
#: Under the system's budget, worker processes of at most this CPU share may grow to the count
#: that keeps the CPUs busy by the queue model (:func:`~inputpipe.utils.resources.workers_to_fill`:
#: 10 of share 1/3 on 2 CPUs, where their shares add up to 6); a share above it is within the
#: measurement's noise of CPU-bound work, held to the count the shares give.
FILL_SHARE = 0.75
#: ... the count that keeps the CPUs this busy by the model (which takes the waits and the work as
#: random: more workers than it says still gained a few percent where both were fixed, 2 CPUs).
FILL_GOAL = 0.98


#: ``(time, waited, busy seconds, items, CPU seconds, run-queue seconds, the consumer's own
#: seconds, the workers' seconds sending results)``, cumulative.
_Sample = Tuple[float, float, float, int, Optional[float], Optional[float], float, Optional[float]]


# ------------------------------------------------------------------------------------- the stages

class _Registry:
    """The controllers alive in this process: they share the budget. A decision that may grow a
    stage holds the lock from reading the others' claims to starting its workers."""
    lock = threading.RLock()
    controllers: "weakref.WeakSet[Controller]" = weakref.WeakSet()

    @classmethod
    def claimed_cpus(cls) -> float:
        with cls.lock:
            return sum(c.claimed_cpus for c in cls.controllers)

    @classmethod
    def others(cls, me: "Controller") -> Tuple[float, int]:
        """CPUs and memory claimed by the other stages."""
        with cls.lock:
            others = [c for c in cls.controllers if c is not me]
        return sum(c.claimed_cpus for c in others), sum(c.claimed_memory for c in others)


class Controller:
    """Decides the worker count of one ``"auto"`` stage (see the module doc). The stage calls
    :meth:`run` from its consumer's thread when ``time.monotonic() >= controller.due``.

    Example::

        controller = Controller(stage, Autoscale(interval=0.5), "processes")
        ...
        if time.monotonic() >= controller.due:
            controller.run()
    """

    def __init__(self, stage: Any, settings: Autoscale, kind: str):
        self.stage = stage
        self.settings = settings
        self.kind = kind
        self.claimed_cpus = 0.0
        self.claimed_memory = 0
        self.decisions = 0
        self.decision_seconds = 0.0             # CPU time of the consumer's thread: measuring, deciding
        self.resize_seconds = 0.0               # ... and starting or retiring workers
        self._settling = 0
        # (from, to, rate before, the CPU seconds per result before)
        self._last_change: Optional[Tuple[int, int, float, Optional[float]]] = None
        self._looked: Optional[Tuple[float, float, int]] = None   # (results, seconds, intervals) since it, while judged
        self._at_count: Deque[Tuple[float, float]] = collections.deque(maxlen=BEFORE_INTERVALS)  # (results, seconds)
        self._ceiling: Optional[Tuple[int, int]] = None   # (count, until decision) not to reach
        self._floor: Optional[Tuple[int, int]] = None
        self._task_seconds: Optional[float] = None
        self._per_worker_memory = 0
        self._share: Optional[float] = None         # the workers' CPU share, smoothed over intervals
        self._idle = IdleCpus()
        self._idle_grown_share: Optional[float] = None   # the share when it last grew on idle CPUs
        self._growing_on_idle = False            # the change being made grows past the shares
        self._last_change_on_idle = False        # ... and the last change did
        #: The moves to and from 0 workers (a process map, or a map with ``min_workers=0``), else None.
        self._inline = InlinePolicy() if settings.may_map_inline(kind) and getattr(stage, "_maps_inline", False) \
            else None
        self._inline_move = False                # the decision being made is one of ``_inline``'s
        self._base = self._sample()
        self._share_base = self._base             # the sample the CPU share is measured from
        self.due = self._base[0] + settings.interval
        self.claimed_cpus = self._charge(stage._active_workers())
        with _Registry.lock:
            _Registry.controllers.add(self)

    # -- measuring ------------------------------------------------------------------------------
    def _sample(self) -> _Sample:
        """``(time, waited, busy seconds, items, CPU seconds, run-queue seconds, the consumer's
        own seconds, the workers' seconds sending)`` of the stage, cumulative."""
        busy, items = self.stage._scaling_counters()
        cpu, queued = self.stage._scaling_cpu()
        return (_monotonic(), self.stage._waited, busy, items, cpu, queued, getattr(self.stage, "_consumer_seconds", 0.0),
                self.stage._scaling_send())

    def _measure(self, now: _Sample) -> Measurement:
        t0, waited0, busy0, items0, cpu0, queued0, own0, sent0 = self._base
        t1, waited1, busy1, items1, cpu1, queued1, own1, sent1 = now
        seconds = max(t1 - t0, 1e-9)
        workers = self.stage._active_workers()
        slots = max(workers, 1)                  # (0 workers: the consumer's thread maps)
        waited = min(max(waited1 - waited0, 0.0), seconds)
        items = max(items1 - items0, 0)
        busy = max(busy1 - busy0, 0.0)
        working = seconds - waited
        cpu = None if cpu0 is None or cpu1 is None else max(0.0, cpu1 - cpu0)
        queued = None if queued0 is None or queued1 is None else max(0.0, queued1 - queued0)
        memory, self._per_worker_memory = self.stage._scaling_memory()
        return Measurement(
            seconds=seconds, workers=workers, wait_share=waited / seconds,
            busy_share=min(1.0, busy / (seconds * slots)), delivered_per_s=items / seconds,
            demand_per_s=items / working if items and working > 1e-3 else None,
            task_seconds=busy / items if items else None,
            cpus_used=None if cpu is None else cpu / seconds, memory_bytes=memory, cpu_share=self._measure_share(now),
            working_share=None if queued is None else max(0.0, min(1.0, (busy - queued) / (seconds * slots))),
            idle_cpus=self._idle.sample(), consumer_seconds=(own1 - own0) / items if items and own1 > own0 else None,
            send_share=None if sent0 is None or sent1 is None or busy <= 0 else min(1.0, max(0.0, sent1 - sent0) / busy))

    def _measure_share(self, now: _Sample) -> Optional[float]:
        """The workers' CPU share since it was last measured, once they have worked
        :data:`SHARE_MIN_BUSY_SECONDS` each since then (None before)."""
        _, _, busy0, _, cpu0, queued0, _, _ = self._share_base
        _, _, busy1, _, cpu1, queued1, _, _ = now
        workers = self.stage._active_workers()
        if workers == 0:                         # the consumer's thread maps: no worker's share to measure
            self._share_base = now
            return None
        if cpu0 is None or cpu1 is None or busy1 - busy0 < SHARE_MIN_BUSY_SECONDS * workers:
            return None
        queued = max(0.0, queued1 - queued0) if queued0 is not None and queued1 is not None else 0.0
        self._share_base = now
        return resources.cpu_share(max(0.0, cpu1 - cpu0), busy1 - busy0, queued)

    def _charge(self, workers: int) -> float:
        """CPUs ``workers`` of this stage take from the budget: each its measured CPU share (one
        CPU until measured); Ray actors take none here (the cluster places them)."""
        return 0.0 if self.kind == "actors" else resources.cpu_charge(workers, self._share)

    def _rebase(self, sample: _Sample) -> None:
        self._base = sample
        self._idle.sample()                      # the idle CPUs are measured from here too
        interval = self.settings.interval
        if self._task_seconds is not None and interval > 0:
            interval = max(interval, TASKS_PER_INTERVAL * self._task_seconds)
        self.due = sample[0] + interval

    # -- deciding -------------------------------------------------------------------------------
    def run(self) -> None:
        """Measure the interval that ended, decide, resize; in the consumer's thread."""
        started, resizing = time.thread_time(), self.resize_seconds
        try:
            self._run()
        finally:
            self.decisions += 1
            self.decision_seconds += time.thread_time() - started - (self.resize_seconds - resizing)

    def request(self) -> None:
        """A count was asked for with ``set_num_workers``: apply it at the next datapoint."""
        self.due = 0.0

    def _run(self) -> None:
        stage = self.stage
        requested, stage._requested = stage._requested, None
        if requested is not None:
            self._change(requested, "requested", None)
            self._rebase(self._sample())
            return
        sample = self._sample()
        if self._settling > 0 or (self.settings.settle_intervals and stage._workers_starting()):
            self._settling = max(0, self._settling - 1)
            self._rebase(sample)
            return
        m = self._measure(sample)
        if m.task_seconds is not None:
            self._task_seconds = m.task_seconds
        if m.cpu_share is not None:              # smoothed: one odd interval does not swing the count...
            jumped = self._share is not None and not 1 / SHARE_JUMP < m.cpu_share / max(self._share, 1e-9) < SHARE_JUMP
            # ... but a share that moved by a factor of SHARE_JUMP is a new kind of work: taken at once
            self._share = m.cpu_share if self._share is None or jumped else 0.5 * (self._share + m.cpu_share)
        self._publish_claims(m)
        self._at_count.append((m.delivered_per_s * m.seconds, m.seconds))
        target, reason = self._decide(m)
        if target is not None:
            with _Registry.lock:
                target, reason = self._within_budget(m, target, reason)
                if target != m.workers:
                    self._change(target, reason, m)
        self._rebase(self._sample() if target is not None and target != m.workers else sample)

    def _decide(self, m: Measurement) -> Tuple[Optional[int], str]:
        self._inline_move = False
        if self.settings.policy is not None:
            return self.settings.policy(m), "policy"
        n = m.workers
        shares = "the consumer waited {:.0%} of {:.2f} s, {} workers busy {:.0%}, {} results/s".format(
            m.wait_share, m.seconds, n, m.busy_share, rate_text(m.delivered_per_s))
        undone = self._undo_if_unhelpful(m)
        if undone is not None:
            return undone
        if self._inline is not None:
            # (0 workers is tried once the count has held for a few intervals: it is compared with them)
            move = self._inline.decide(m, self.stage, self.decisions, self._rate_at_count(),
                                       settled=len(self._at_count) >= BEFORE_INTERVALS)
            if move is not None:
                self._inline_move = True
                return move
        if m.wait_share >= self._grow_wait() and m.busy_share >= GROW_BUSY:
            step = 1
            if m.demand_per_s and m.delivered_per_s > 0:
                needed = int(math.ceil(n * m.demand_per_s / m.delivered_per_s))
                # processes that wait go to the count needed at once (the budget's queue model
                # bounds it); other workers at most double per step
                step = max(1, needed - n if self._waits_for_the_queue_model() else min(needed - n, n))
            elif m.wait_share >= 0.9:              # the consumer does nothing but wait: double
                step = n
            return n + step, "grow: " + shares
        # a worker that waits for a CPU held by other programs is not working (a busy machine)
        idle = n * (1.0 - (m.busy_share if m.working_share is None else m.working_share))
        if m.wait_share < SHRINK_WAIT and idle >= SHRINK_IDLE and n > 1:
            return n - 1, "shrink: {} ({:.1f} workers idle)".format(shares, idle)
        return n, ""

    def _waits_for_the_queue_model(self) -> bool:
        """Worker processes measured to wait (CPU share at most :data:`FILL_SHARE`) under the
        system's budget: their count is bounded by the queue model of
        :func:`~inputpipe.utils.resources.workers_to_fill`."""
        return self.kind == "processes" and self._share is not None and self._share <= FILL_SHARE and \
            self.settings.cpu_budget is None and resources.overrides().cpus is None

    def _grow_wait(self) -> float:
        """The consumer's wait that makes the stage grow: :data:`GROW_WAIT`, or
        :data:`GROW_WAIT_CHEAP` for threads measured to wait most of their time (one more costs
        a little memory and no CPU)."""
        cheap = self.kind == "threads" and self._share is not None and self._share < CHEAP_THREAD_SHARE
        return GROW_WAIT_CHEAP if cheap else GROW_WAIT

    def _undo_if_unhelpful(self, m: Measurement) -> Optional[Tuple[int, str]]:
        """The measurements after a change: undo a growth that did not deliver faster while the
        consumer still waited, or a shrink after which the consumer waits. A growth that
        delivered more, but less than it should, or at most :data:`JUDGE_NOISE` less, is
        measured over up to :data:`JUDGE_LOOKS` intervals before it is judged (a few percent is
        within one interval's noise), against the rate of up to :data:`BEFORE_INTERVALS`
        intervals before it."""
        change, self._last_change = self._last_change, None
        looked, self._looked = self._looked, None
        if change is None:
            return None
        before, after, rate_before, cpu_before = change
        cpu_now = _cpu_per_result(m)
        if cpu_before and cpu_now and not 1 / WORK_CHANGED < cpu_now / cpu_before < WORK_CHANGED:
            return None                  # the work itself changed: the rates before and after do not compare
        # processes grown onto idle CPUs near saturation gain a little each (their waits line up
        # less and less): a lower bar; threads keep the higher one (the GIL holds them anyway)
        gain = MIN_GAIN_ON_IDLE if self._last_change_on_idle and self.kind == "processes" else MIN_GAIN
        if after > before and m.wait_share >= self._grow_wait():
            items, seconds, looks = looked or (0.0, 0.0, 0)
            items, seconds, looks = items + m.delivered_per_s * m.seconds, seconds + m.seconds, looks + 1
            rate = items / seconds
            if rate >= rate_before * (1 + gain * (after - before) / before):
                return None
            if rate > rate_before * (1 - JUDGE_NOISE) and looks < JUDGE_LOOKS:
                self._last_change, self._looked = change, (items, seconds, looks)
                return m.workers, ""             # within an interval's noise of enough: measure on before judging
            self._ceiling = (after, self.decisions + BLOCKED_INTERVALS)
            return before, "undo: {} workers delivered {}/s{}, {} delivered {}/s".format(
                after, rate_text(rate), "" if looks == 1 else " over {} intervals".format(looks), before,
                rate_text(rate_before))
        if after < before and m.wait_share >= GROW_WAIT:
            self._floor = (before, self.decisions + BLOCKED_INTERVALS)
            return before, "undo: the consumer waited {:.0%} with {} workers".format(m.wait_share, after)
        return None

    def _within_budget(self, m: Measurement, target: int, reason: str) -> Tuple[int, str]:
        """``target`` lowered to the range, the blocked counts and the CPU and memory budgets."""
        n, settings = m.workers, self.settings
        least = 0 if self._inline_move else settings.least()     # (only the moves of ``_inline`` go to 0 by default)
        self._growing_on_idle = False
        if self._ceiling is not None and self.decisions < self._ceiling[1] and target >= self._ceiling[0] > n:
            target = self._ceiling[0] - 1
        if self._floor is not None and self.decisions < self._floor[1] and target < self._floor[0] <= n:
            target = self._floor[0]
        target = max(least, min(target, settings.limit(self.kind)))
        capacity = self.stage._worker_capacity()
        if capacity is not None:
            target = min(target, max(n, capacity))
        other_cpus, other_memory = _Registry.others(self)
        if settings.cpu_budget is not None:          # a budget of its own: the others' do not count
            other_cpus = 0.0
        if settings.memory_budget is not None:
            other_memory = 0
        cpus = settings.cpus()
        room = cpus - other_cpus
        allowed = target if self.kind == "actors" else resources.workers_within(room, self._share)
        system_budget = settings.cpu_budget is None and resources.overrides().cpus is None
        if self._waits_for_the_queue_model():
            # processes that wait: as many as keep the CPUs busy (their waits do not line up)
            allowed = max(allowed, resources.workers_to_fill(room, self._share or 1.0, FILL_GOAL, settings.limit(self.kind)))
        idle_growth = self.kind != "actors" and system_budget and m.idle_cpus is not None
        if idle_growth and n > max(allowed, least) and self._idle_grown_share is not None and \
                (self._share or 1.0) < IDLE_SHARE_ROSE * self._idle_grown_share:
            allowed = n                                # grown on idle CPUs; its work did not change
        if self.kind != "actors" and n > max(allowed, least) and \
                self._charge(n) > OVER_BUDGET * max(room, 0.0):
            # the work turned CPU-bound: its workers' shares add up to well over the budget
            self._idle_grown_share = None
            target = max(allowed, least, n // 2)
            return target, "shrink: CPU budget: {} workers at a CPU share of {:.0%} take {:.1f} of {} CPUs".format(
                n, self._share or 1.0, self._charge(n), _cpus(room))
        if target > max(allowed, least):
            per_worker = self._charge(1)
            if idle_growth and m.idle_cpus is not None and m.idle_cpus >= IDLE_GROWTH * per_worker:
                fits = max(1, int(math.floor(m.idle_cpus / per_worker + 0.5)))
                allowed = max(allowed, min(target, n + fits))
                self._idle_grown_share = self._share or 1.0
                self._growing_on_idle = True
                reason = "{} ({:.1f} CPUs idle)".format(reason, m.idle_cpus)
            if target > max(allowed, least):
                target = max(allowed, least, min(n, target))
                reason = "{} (CPU budget {}{})".format(reason, _cpus(room), "" if self._share is None else
                                                      ", a worker's CPU share {:.0%}".format(self._share))
        budget = settings.memory()
        # the stage's buffer may grow between decisions: within the room the budget leaves it
        self.stage._limit_memory(None if budget is None else int(budget * GROWTH_HEADROOM) - other_memory)
        if budget is not None and target > n and not self.stage._memory_measured():
            # what one more worker takes is not known before a result was measured
            return n, "{} (memory budget {} MB: waiting for a result to measure)".format(reason, budget >> 20)
        if budget is not None and self._inline_move and target == 0 < n:
            # at 0 workers the parked workers keep their memory and the consumer's thread holds
            # results of its own beside it
            inline_bytes = INLINE_RESULTS_HELD * (getattr(self.stage, "_result_bytes", None) or 0)
            mine = m.memory_bytes
            room = int(budget * GROWTH_HEADROOM)
            if mine + other_memory + inline_bytes > room:
                mine = self.claimed_memory = self.stage._scaling_memory(True)[0]
            if mine + other_memory + inline_bytes > room:
                if self._inline is not None:
                    self._inline.refused(self.decisions)
                return n, "{}: not tried: {} MB with the consumer's thread's results would pass {:.0%} of the {} MB " \
                          "memory budget".format(INLINE_REASON, (mine + other_memory + inline_bytes) >> 20,
                                                 GROWTH_HEADROOM, budget >> 20)
        if budget is not None:
            mine, per_worker = m.memory_bytes, self._per_worker_memory
            room_to_grow = int(budget * GROWTH_HEADROOM)
            if mine + other_memory + max(0, target - n) * per_worker > budget:
                # the quick reading counts the pages a forked worker shares with its parent: read
                # the pages only the workers hold before deciding on it
                mine, per_worker = self.stage._scaling_memory(True)
                self.claimed_memory = mine
            total = mine + other_memory
            # (not to 0 workers: the parked workers keep their memory)
            if total > budget and n > max(1, least):
                return n - 1, "shrink: memory {} MB of a {} MB budget".format(total >> 20, budget >> 20)
            if target > n and total + (target - n) * per_worker > room_to_grow:
                fits = (room_to_grow - total) // per_worker if per_worker > 0 else target - n
                target = n + max(0, min(target - n, int(fits)))
                reason = "{} (memory budget {} MB)".format(reason, budget >> 20)
        return target, reason

    def _publish_claims(self, m: Measurement) -> None:
        self.claimed_cpus = self._charge(m.workers)
        self.claimed_memory = m.memory_bytes

    def _change(self, target: int, reason: str, m: Optional[Measurement]) -> None:
        before = self.stage._active_workers()
        started = time.thread_time()
        after = self.stage._resize_to(target, reason)
        self.resize_seconds += time.thread_time() - started
        if after != before:
            self._settling = self.settings.settle_intervals
            self._last_change, self._looked = None, None
            rate_before = self._rate_at_count()
            self._at_count.clear()
            if m is not None and not reason.startswith(("undo", "shrink: memory", "shrink: CPU budget", INLINE_REASON)):
                # (a shrink to the budget is not undone; the moves to and from 0 workers judge themselves)
                self._last_change = (before, after, rate_before or m.delivered_per_s, _cpu_per_result(m))
                self._last_change_on_idle = self._growing_on_idle
            self.claimed_cpus = self._charge(after)

    def _rate_at_count(self) -> Optional[float]:
        """The rate of the last intervals measured at the current count: those within
        :data:`BEFORE_RATE_SPREAD` of the latest one's (an earlier phase of the work is not mixed
        in); None when none was measured."""
        if not self._at_count:
            return None
        results, seconds = self._at_count[-1]
        latest = results / seconds
        kept = [(r, s) for r, s in self._at_count if latest / BEFORE_RATE_SPREAD <= r / s <= latest * BEFORE_RATE_SPREAD]
        return sum(r for r, _ in kept) / sum(s for _, s in kept)

    def close(self) -> None:
        with _Registry.lock:
            _Registry.controllers.discard(self)


def _cpu_per_result(m: Measurement) -> Optional[float]:
    return m.cpus_used / m.delivered_per_s if m.cpus_used and m.delivered_per_s > 0 else None


def _cpus(value: float) -> str:
    return "{:g}".format(round(value, 2))
