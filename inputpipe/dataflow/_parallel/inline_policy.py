"""When an ``"auto"`` process map (or a map given ``Autoscale(min_workers=0)``) maps in the
consumer's thread (0 workers).

Moving a result between processes costs a copy in the worker and a message to the consumer;
for a cheap map of large results (a 2 MiB array made in 0.3 ms) that costs more than the map,
and on few CPUs the workers then deliver less than the consumer's thread would alone. What a
task would cost in the consumer's thread cannot be measured while the workers run (they hold
the CPUs, their caches and the memory bus: one task mapped there then took 3-4 times as long
as alone), so the controller tries 0 workers, when

- the workers spend at least :data:`LEAST_SEND_SHARE` of their time sending results (copying
  them into shared memory, writing their messages): only that is saved at 0 workers, so a map
  whose results are small relative to its work never tries (threads, which send nothing, neither);
- its results have at least :data:`LEAST_RESULT_BYTES` of arrays and byte strings (measured by
  the stage for its memory budget);
- a worker's time per task is at most :data:`MOST_RESULTS_A_TASK` results' time (the stage runs
  about two workers' worth or less: with more, the consumer's thread alone cannot keep up, and
  a trial that fails loses at most part of an interval),
- the consumer's own time per result (between taking one and asking for the next) leaves room
  for :data:`INLINE_GAIN` more results than the workers deliver, and
- a memory budget, where one is set, has room for :data:`INLINE_RESULTS_HELD` results beside
  the memory the parked workers keep (the controller checks it, and a move it refuses is backed
  off like a trial that failed: :meth:`InlinePolicy.refused`);

and measures: a rate below the one before is undone (at once when clearly below, after a second
interval when close: :data:`JUDGED_INTERVALS`, :data:`CLEAR_LOSS`), and 0 stays out of reach for a
while that doubles with each undo (:data:`BACKOFF_INTERVALS`, 20 intervals then 40, ... up to
:data:`BACKOFF_MOST`), so failed trials cost less and less. At 0 workers it tries the workers
again after such a while, or at once when a task's cost in the consumer's thread rose by
:data:`WORK_CHANGED` over its usual cost (a phase of dearer work) in :data:`RISE_INTERVALS`
intervals in a row (one slow interval is the machine's noise; a cost that falls keeps 0: moving
the results would then weigh even more beside the work); they are kept when they deliver
:data:`WORKERS_GAIN` more than the consumer's thread did.

Example::

    policy = InlinePolicy()
    move = policy.decide(measurement, stage, decisions, rate_before, settled=True)   # (count, reason) or None
"""
from typing import Any, List, Optional, Tuple

from .autoscale_settings import WORK_CHANGED, rate_text

__all__ = ["InlinePolicy", "INLINE_GAIN", "INLINE_RESULTS_HELD", "LEAST_RESULT_BYTES", "LEAST_SEND_SHARE", "MOST_RESULTS_A_TASK",
           "BACKOFF_INTERVALS", "BACKOFF_MOST", "RISE_INTERVALS", "JUDGED_INTERVALS", "CLEAR_LOSS"]

#: 0 workers is tried while the workers spend at least this share of their busy time sending ...
LEAST_SEND_SHARE = 0.2
#: ... its results (the arrays and byte strings of one, as last sampled) have at least this many
#: bytes (a small result costs little to move; on a busy machine a worker preempted while it
#: sends one makes its send share look large) ...
LEAST_RESULT_BYTES = 1 << 16
#: ... a worker's time per task is at most this many results' time ...
MOST_RESULTS_A_TASK = 2.5
#: ... and the consumer's own time per result leaves room for this share more results.
INLINE_GAIN = 0.1
#: Results the consumer's thread holds at 0 workers beside the parked workers' memory (the one it
#: maps and the one its consumer still holds), checked against the memory budget before 0 is tried.
INLINE_RESULTS_HELD = 2
#: The workers, tried again, must deliver this share more than the consumer's thread did.
WORKERS_GAIN = 0.02
#: Intervals before 0 workers is tried again, and before the workers are
#: tried again at 0 workers; doubled at each undo, at most :data:`BACKOFF_MOST`.
BACKOFF_INTERVALS = 20
BACKOFF_MOST = 640

#: A trial of 0 workers is judged on up to this many intervals (their mean rate): a first interval
#: that delivers less than the workers did, but at least :data:`CLEAR_LOSS` of it, is a close call
#: (the move's own transient is in it) and one more is looked at ...
JUDGED_INTERVALS = 2
#: ... below this share of the workers' rate the trial is undone at once.
CLEAR_LOSS = 0.8

#: Intervals in a row at 0 workers whose task cost rose by :data:`WORK_CHANGED` before the workers
#: come back for it.
RISE_INTERVALS = 2

#: Reasons of the moves start with this (the controller does not judge them as its own changes).
REASON = "inline"


class InlinePolicy:
    """The decisions about 0 workers of one controller (see the module doc).

    Example::

        policy = InlinePolicy()
        move = policy.decide(m, stage, controller.decisions, rate_before=940.0)
    """

    def __init__(self) -> None:
        self._backoff = BACKOFF_INTERVALS
        self._not_before = 0                          # the decision from which 0 may be considered
        self._workers_not_before = 0                  # ... at 0 workers, from which workers are tried
        self._trial: Optional[Tuple[str, float, int]] = None   # ("in" | "out", rate before it, count before)
        self._task_seconds: Optional[float] = None    # a task's usual cost in the consumer's thread, at 0 workers
        self._rises = 0                               # intervals in a row it rose by WORK_CHANGED
        self._looks: List[float] = []                 # the rates at 0 workers judged so far in a trial

    def decide(self, m: Any, stage: Any, decisions: int, rate_before: Optional[float],
               settled: bool = True) -> Optional[Tuple[int, str]]:
        """A move to or from 0 workers as ``(count, reason)``, ``(0, reason)`` to stay at 0, or
        None to leave the decision to the controller's other rules; ``rate_before``: the rate at
        the current count; ``settled``: the count has held for a few intervals (0 is tried only
        then)."""
        rate = m.delivered_per_s
        if self._trial is not None:
            judged = self._judge(m, decisions)
            if judged is not None:
                return judged
        if m.workers == 0:
            return self._at_zero(m, stage, decisions)
        own = m.consumer_seconds
        if not settled or decisions < self._not_before or own is None or not m.task_seconds or rate <= 0:
            return None
        if m.send_share is None or m.send_share < LEAST_SEND_SHARE or m.task_seconds > MOST_RESULTS_A_TASK / rate \
                or own * (1 + INLINE_GAIN) * rate >= 1.0 \
                or (getattr(stage, "_result_bytes", None) or 0) < LEAST_RESULT_BYTES:
            return None
        self._trial = ("in", rate_before or rate, m.workers)
        return 0, "{}: try the consumer's thread: {} workers deliver {}/s, {:.2f} ms of work a task ({:.0%} " \
                  "sending it); the consumer's own {:.3f} ms a result".format(
                      REASON, m.workers, rate_text(rate), 1e3 * m.task_seconds, m.send_share, 1e3 * own)

    def refused(self, decisions: int) -> None:
        """The controller did not make the move to 0 just proposed (the memory budget had no room
        for it): ask again only after a while, doubled at each refusal like an undone trial (each
        check of the budget reads the workers' memory precisely)."""
        self._trial = None
        self._back_off(decisions)

    def _judge(self, m: Any, decisions: int) -> Optional[Tuple[int, str]]:
        kind, rate_before, count_before = self._trial or ("", 0.0, 0)
        self._trial = None
        looks, self._looks = self._looks, []           # (a trial ended otherwise leaves none behind)
        rate = m.delivered_per_s
        if kind == "in" and m.workers == 0:
            looks = looks + [rate]
            rate = sum(looks) / len(looks)
            if rate >= rate_before:
                self._workers_not_before = decisions + self._backoff
                return 0, "{}: kept: the consumer's thread delivers {}/s, {} workers delivered {}/s".format(
                    REASON, rate_text(rate), count_before, rate_text(rate_before))
            if len(looks) < JUDGED_INTERVALS and rate >= CLEAR_LOSS * rate_before:
                self._looks, self._trial = looks, (kind, rate_before, count_before)    # a close call: look again
                return 0, ""
            self._back_off(decisions)
            return count_before, "{}: undo: the consumer's thread delivered {}/s, {} workers {}/s".format(
                REASON, rate_text(rate), count_before, rate_text(rate_before))
        if kind == "out" and m.workers > 0:
            if rate > (1 + WORKERS_GAIN) * rate_before:
                self._backoff = BACKOFF_INTERVALS        # the workers win again: 0 may be tried soon
                self._not_before = decisions + self._backoff
                return None
            self._back_off(decisions)
            self._workers_not_before = decisions + self._backoff     # (longer than the last while)
            return 0, "{}: undo: {} workers delivered {}/s, the consumer's thread {}/s".format(
                REASON, m.workers, rate_text(rate), rate_text(rate_before))
        return None                                   # the count was changed by other means meanwhile

    def _at_zero(self, m: Any, stage: Any, decisions: int) -> Tuple[int, str]:
        count = max(1, stage._parked_workers())
        cost, usual = m.task_seconds, self._task_seconds
        if cost and usual and cost > WORK_CHANGED * usual:
            self._rises += 1
            if self._rises < RISE_INTERVALS:
                return 0, ""
            self._task_seconds, self._rises = None, 0
            return count, "{}: the work changed: a task takes {:.2f} ms in the consumer's thread, {:.2f} ms " \
                          "before: {} workers again".format(REASON, 1e3 * cost, 1e3 * usual, count)
        self._rises = 0
        if cost:
            self._task_seconds = cost if usual is None else 0.5 * (usual + cost)
        if decisions >= self._workers_not_before:
            self._task_seconds = None
            self._trial = ("out", m.delivered_per_s, 0)
            return count, "{}: try {} workers again (the consumer's thread delivers {}/s)".format(
                REASON, count, rate_text(m.delivered_per_s))
        return 0, ""

    def _back_off(self, decisions: int) -> None:
        self._not_before = decisions + self._backoff
        self._backoff = min(BACKOFF_MOST, 2 * self._backoff)
