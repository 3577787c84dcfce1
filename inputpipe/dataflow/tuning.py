"""The static tuner: measure a DataFlow chain and choose a configuration for all of it.

:func:`tune` runs the chain with every map in the consumer's thread (the doctor's timing
probes give each stage's own time; each map function's wall and CPU time are measured per call),
chooses for every map that limits the chain whether to run it in processes or threads and with
how many workers, where to batch in the workers, and whether a part of the chain can be cached
in memory, then runs the chosen configuration once to confirm its rate. The result prints as
code to paste, the throughput to expect, and what limits it then.

Example::

    from inputpipe.dataflow import DataFromList, MapData
    from inputpipe.dataflow.tuning import tune

    def decode(dp):
        return [dp[0] * 2]

    result = tune(MapData(DataFromList([[i] for i in range(1000)], shuffle=False), decode), seconds=1)
    print(result)                # the configuration as code, the rate to expect and its limit
"""
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..utils import resources
from ..utils.arguments import is_dataflow
from ..utils.logger import get_logger
from ._tuning import model
from ._tuning.cache import FROM_CACHE, bytes_text, choose_cache, without_prefix
from ._tuning.chain import BATCH, PROCESSES, SERIAL, THREADS, WORK, Chain, Form, TimedFunc, Unit, build, \
    read_chain
from ._tuning import split
from ._tuning import transport
from ._tuning.code import render
from ._tuning.gil import GilProbe, maps_timed
from ._tuning.split import Split
from .base import DataFlow
from .profiling import ProfileReport, _kind_of, _stage_name, profile

__all__ = ["tune", "TuneResult", "StageChoice", "Split"]

logger = get_logger(__name__)

#: A trial below this share of the model's rate makes the tuner try the other kinds of maps,
#: which replace the first choice when their trial is this much faster (a margin for the load of
#: a shared machine, which slows both).
TRIAL_SHORTFALL = 0.8
TRIAL_MARGIN = 1.2
#: A parallel trial below the serial chain's measured rate is checked in this many pairs of runs
#: (parallel, then serial), and the serial chain kept when it is faster in every pair and this
#: much faster over all of them.
SERIAL_PAIRS = 2
SERIAL_MARGIN = 1.05
#: ... when threads gave less than this many times the serial chain's measured rate; worker
#: processes, when the model rates them below this many times the serial chain.
SERIAL_CHECK_BELOW = 1.5
#: The share of the all-serial run's measuring window after which the GIL probe is at work (the
#: maps' times are taken before).
GIL_PROBE_AFTER = 0.6
#: ... once each map function's time was taken over this many calls (a busy machine makes them
#: slower than the window assumed; while the probe is at work, none is timed), or after this
#: share once each was timed at all (a map behind a filter that lets few datapoints through).
TIMED_CALLS_BEFORE_PROBE = 5
GIL_PROBE_LATEST = 0.85



@dataclass
class StageChoice:
    """What the tuner chose for one stage of the chain (``after``) and why, from how it was
    written (``before``). ``action`` is ``"keep"``, ``"parallel"`` (a serial map made parallel),
    ``"resize"`` (another number of workers), ``"switch"`` (threads <-> processes),
    ``"batch in workers"`` or ``"batch in the consumer"``. For a BatchData after a map in
    processes, ``rates`` are the model's rates with the batching ``"in the workers"`` and ``"in
    the consumer"``. For a map: ``work_ms`` is its
    function's time per call (without waits for a CPU), ``cpu_share`` the share of it spent on a
    CPU and ``gil_share`` the share that held the GIL (None where too few moments fell in its
    calls to tell); ``move_ms`` the consumer's and a worker's CPU to move one datapoint and its
    result through a worker process (measured; None when not); ``rates`` the model's rate of the
    chain with the map serial, in threads and in processes (each sized, the other stages as
    chosen): the kind chosen is the fastest, or within 5% of it with fewer changes, processes or
    workers.

    Example::

        choice = result.stage("MapData(decode)")
        assert choice.after == "MultiProcessMapData" and choice.workers == 2
    """

    stage: str
    before: str
    after: str
    action: str
    workers: Optional[int] = None
    unit: str = ""
    work_ms: Optional[float] = None
    cpu_share: Optional[float] = None
    reason: str = ""
    gil_share: Optional[float] = None
    move_ms: Optional[Tuple[float, float]] = None
    rates: Dict[str, float] = field(default_factory=dict)


@dataclass
class TuneResult:
    """The configuration :func:`tune` chose: ``code`` (Python that rebuilds the chain with it;
    ``exec(result.code, dict(result.names))`` leaves the flow in ``df``), the choice per stage,
    the throughput to expect (``expected_datapoints_per_sec``, output datapoints of the chain per
    second: the trial run's rate) and what limits it then (``limit``: ``"cpus"``, ``"source"`` (the reader: disk,
    network, decoding in the source), ``"stage"`` (a stage in the consumer's thread),
    ``"consumer"`` (the ``consumer_rate`` given) or ``"workers"`` (the most workers a stage may
    have), explained with numbers in ``limit_detail``). ``str(result)`` prints all of it.

    ``fill_in`` lists the names in the code that stand for things tune could not write out (a
    list of datapoints, a lambda) with what they are; ``names`` maps every name the code uses to
    the object it stands for. ``splits`` suggests splitting maps that both wait and compute
    (:class:`~inputpipe.dataflow._tuning.split.Split`: the code of two maps, the wait in threads and
    the computing in processes).

    Example::

        result = tune(df, seconds=10)
        print(result)
        namespace = dict(result.names)
        exec(result.code, namespace)
        tuned = namespace["df"]
    """

    code: str
    stages: List[StageChoice]
    expected_datapoints_per_sec: float
    limit: str
    limit_detail: str
    cpu_budget: int
    memory_budget: Optional[int]
    names: Dict[str, Any] = field(default_factory=dict, repr=False)
    fill_in: Dict[str, str] = field(default_factory=dict)
    model_datapoints_per_sec: float = 0.0
    trial_datapoints_per_sec: Optional[float] = None
    before_datapoints_per_sec: Optional[float] = None
    before_measured: bool = False
    first_epoch_datapoints_per_sec: Optional[float] = None
    cache: Optional[str] = None
    cache_detail: str = ""
    unchanged: bool = False
    stalled: bool = False
    stall_detail: str = ""
    notes: List[str] = field(default_factory=list)
    splits: List[Split] = field(default_factory=list)
    measured: Optional[ProfileReport] = field(default=None, repr=False)
    trial: Optional[ProfileReport] = field(default=None, repr=False)

    def stage(self, name: str) -> StageChoice:
        """The choice for the stage named ``name`` (as the doctor names it, or its class name)."""
        for choice in self.stages:
            if name == choice.stage or choice.stage.startswith(name + "("):
                return choice
        raise KeyError("TuneResult: no stage named {!r}; the stages are {}".format(
            name, [c.stage for c in self.stages]))

    def to_dict(self) -> Dict[str, Any]:
        """The result as plain data (JSON-ready; the reports and ``names`` left out)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("names", "measured", "trial")}
        data["stages"] = [asdict(choice) for choice in self.stages]
        data["fill_in"], data["notes"] = dict(self.fill_in), list(self.notes)
        data["splits"] = [asdict(one) for one in self.splits]
        return data

    def __str__(self) -> str:
        if self.stalled:
            return "Nothing tuned: {}".format(self.stall_detail)
        lines = ["Tuned configuration ({}{}):".format(
            _cpus_text(self.cpu_budget), "" if self.memory_budget is None else ", memory budget {}".format(
                bytes_text(self.memory_budget))), "", self.code.rstrip("\n"), ""]
        if self.unchanged:
            lines.append("The chain is already configured as the tuner would configure it: keep it.")
        width = max([len(c.stage) for c in self.stages] + [5])
        for choice in self.stages:
            after = choice.after + (", {} {}".format(choice.workers, choice.unit) if choice.workers
                                    else ", " + choice.unit if choice.unit else "")
            text = after if choice.action != "keep" else "keep ({})".format(after)
            lines.append("  {:<{}}  {}{}".format(choice.stage, width, text,
                                                 ": " + choice.reason if choice.reason else ""))
        if self.cache:
            lines.append("  cache: {}".format(self.cache_detail))
        elif self.cache_detail:
            lines.append("  no cache: {}".format(self.cache_detail))
        lines.append("")
        lines.append("Expected: {:.1f} datapoints/s out of the chain{}.".format(self.expected_datapoints_per_sec,
                                                                              self._evidence()))
        lines.append("Limit afterwards: {}".format(self.limit_detail))
        lines.extend(self.notes)
        lines.extend("Suggestion: " + one.text() for one in self.splits)
        return "\n".join(lines)

    def _evidence(self) -> str:
        parts = []
        if self.cache and self.first_epoch_datapoints_per_sec is not None:
            parts.append("after the first epoch (estimated; the first epoch, which fills the cache: {:.1f}/s)".format(
                self.first_epoch_datapoints_per_sec))
        elif self.trial_datapoints_per_sec is not None:
            parts.append("(a trial run of this configuration gave {:.1f}/s; the model {:.1f}/s)".format(
                self.trial_datapoints_per_sec, self.model_datapoints_per_sec))
        else:
            parts.append("(measured)" if self.unchanged else "(estimated)")
        if self.before_datapoints_per_sec is not None:
            parts.append("before: {:.1f}/s ({})".format(self.before_datapoints_per_sec,
                                                        "measured" if self.before_measured else "estimated"))
        return " " + "; ".join(parts)


def _cpus_text(cpus: int) -> str:
    return "1 CPU" if cpus == 1 else "{} CPUs".format(cpus)


# ---------------------------------------------------------------------------------------------
# Naming and describing
# ---------------------------------------------------------------------------------------------

def _unit_names(chain: Chain) -> List[str]:
    names: List[str] = []
    for unit in chain.units:
        name = _stage_name(unit.origin, _kind_of(unit.origin, True))
        if unit.kind == BATCH and unit.in_workers:
            name = "{} batching {}".format(name, unit.batch_size)
        base, n = name, 2
        while name in names:
            name, n = "{} #{}".format(base, n), n + 1
        names.append(name)
    return names


def _form_text(unit: Unit, form: Form) -> tuple:
    if form.kind == THREADS:
        return "MultiThreadMapData", "threads"
    if form.kind == PROCESSES:
        return ("MultiProcessMapAndBatchData" if form.merge_batch else "MultiProcessMapData"), "processes"
    return ("MapDataComponent" if unit.index is not None else "MapData"), ""


def _choices(chain: Chain, costs: model.Costs, choice: model.Choice, mine: Sequence[Form]) -> List[StageChoice]:
    forms = choice.forms
    choices = []
    k = 0
    while k < len(chain.units):
        unit, form, was = chain.units[k], forms[k], mine[k]
        name = costs.names[k]
        if unit.kind != WORK:
            merged_now = k > 0 and forms[k - 1].merge_batch
            in_map = "in the workers of the map"
            before = in_map if unit.in_workers else type(unit.origin).__name__
            after = in_map if merged_now else "BatchData" if unit.in_workers else type(unit.origin).__name__
            action, reason = "keep", ""
            if merged_now and not unit.in_workers:
                action = "batch in workers"
                reason = "the stacking ({:.3f} ms per output datapoint) moves to the workers: fewer, larger " \
                         "messages".format(costs.units[k].own * 1e3)
            elif unit.in_workers and not merged_now:
                action = "batch in the consumer"
            rates = choice.batch_rates(k - 1) if k > 0 and forms[k - 1].kind == PROCESSES else {}
            if len(rates) > 1:
                reason += "{}the model: {}".format("; " if reason else "", ", ".join(
                    "{} {:.1f}/s".format(where, rate) for where, rate in sorted(rates.items())))
            choices.append(StageChoice(name, before, after, action, reason=reason, rates=rates))
            k += 1
            continue
        cost = costs.units[k]
        after, what = _form_text(unit, form)
        before, before_what = _form_text(unit, was)
        work_ms = cost.work / cost.calls * 1e3 if cost.calls else None
        cpu_share = cost.cpu / cost.work if cost.work > 0 else None
        if _same_form(unit, form, was):
            action = "keep"
        elif was.kind == SERIAL:
            action = "parallel"
        elif form.kind != was.kind:
            action = "switch"
        elif form.merge_batch != was.merge_batch:
            action = "batch in workers" if form.merge_batch else "resize"
        else:
            action = "resize"
        gil_share = cost.gil / cost.work if cost.gil_measured and cost.work > 0 else None
        move = (cost.move.consumer * 1e3, cost.move.worker * 1e3) if cost.move is not None else None
        rates = choice.kind_rates(k)
        reason = _map_reason(work_ms, cpu_share, gil_share, move, rates, form.kind, cost.no_processes)
        if was.kind != SERIAL:
            before = "{}, {} {}".format(before, "auto" if unit.auto is not None else was.workers, before_what)
        workers = form.workers if form.kind != SERIAL else None
        if unit.auto is not None and form.kind != SERIAL:
            what, workers = "auto " + what, None
            reason += "; auto: the controller sizes it while running (the model's count: {})".format(form.workers)
        choices.append(StageChoice(name, before, after, action, workers, what, work_ms, cpu_share, reason,
                                   gil_share, move, rates))
        k += 1
    return choices


def _map_reason(work_ms: Optional[float], cpu_share: Optional[float], gil_share: Optional[float],
                move: Optional[Tuple[float, float]], rates: Dict[str, float], kind: str,
                no_processes: Optional[str]) -> str:
    """Why a map runs as it does, in words: what was measured and the model's rates."""
    if work_ms is None or cpu_share is None:
        return ""
    parts = ["{:.3f} ms per call, {:.0%} of it on a CPU".format(work_ms, cpu_share)]
    if gil_share is not None:
        parts.append("{:.0%} holding the GIL".format(gil_share))
    if move is not None and kind == PROCESSES:
        parts.append("moving a datapoint through a process {:.3f} ms of the consumer, {:.3f} ms of a worker".format(
            *move))
    text = ", ".join(parts)
    if len(rates) > 1:
        text += "; the model: " + ", ".join("{} {:.1f}/s".format(k, rates[k]) for k in (SERIAL, THREADS, PROCESSES)
                                            if k in rates)
    if no_processes:
        text += "; not processes: " + no_processes
    return text


def _same_form(unit: Unit, form: Form, was: Form) -> bool:
    """Whether the tuner keeps the unit as the user wrote it (an ``"auto"`` count stays auto)."""
    if unit.auto is not None:
        return (form.kind, form.merge_batch) == (was.kind, was.merge_batch)
    return (form.kind, form.workers, form.merge_batch) == (was.kind, was.workers, was.merge_batch)


def _limit_detail(estimate: model.Estimate, costs: model.Costs, cpus: int) -> str:
    rate, parts = estimate.rate, estimate.consumer_parts
    if estimate.limit == model.LIMIT_CPUS:
        return ("the CPUs: the chain takes {:.3f} ms of CPU per datapoint (in the consumer and the workers), so {} "
                "give at most {:.1f}/s. More needs cheaper work or more machines (remote producers)."
                .format(estimate.cpu_per_datapoint * 1e3, _cpus_text(cpus), rate))
    if estimate.limit == model.LIMIT_SOURCE and costs.source_name == FROM_CACHE \
            and max(parts, key=lambda p: parts[p]) == FROM_CACHE:
        return ("the consumer: after the first epoch the datapoints come from memory (CacheData, about {:.0f} us "
                "each, up to {:.0f}/s), so the trainer is the limit.".format(parts[FROM_CACHE] * 1e6, rate))
    if estimate.limit == model.LIMIT_CONSUMER:
        return "the consumer: it takes {:.1f} datapoints/s (consumer_rate); the pipeline could give more.".format(rate)
    if estimate.limit == model.LIMIT_WORKERS:
        stage = estimate.limit_key[len("workers of "):]
        return ("the workers of {}: {:.1f}/s with the most workers the tuner gives a stage ({} threads, {} "
                "processes on {})".format(stage, rate, model.MAX_THREADS, model.most_processes(cpus), _cpus_text(cpus)))
    load = sum(parts.values())
    heaviest = max(parts, key=lambda p: parts[p])
    share = parts[heaviest] / load if load > 0 else 0.0
    if estimate.limit == model.LIMIT_SOURCE:
        cpu = costs.source_cpu / costs.source if costs.source > 0 else 1.0
        nature = ("it waits most of that time (CPU {:.0%}): the disk, the network or a sleep".format(cpu) if cpu < 0.5
                  else "it computes most of that time (CPU {:.0%})".format(cpu))
        return ("the source {}: {:.3f} ms per datapoint in the consumer's thread ({:.0%} of its time), at most "
                "{:.1f}/s; {}. Read sequentially from a dataset file, move decoding into a parallel map, or read "
                "in parallel (MultiProcessRunnerZMQ over copies that read different data).".format(
                    heaviest, parts[heaviest] * 1e3, share, rate, nature))
    return ("{} in the consumer's thread: {:.3f} ms per datapoint ({:.0%} of its time), at most {:.1f}/s.".format(
        heaviest, parts[heaviest] * 1e3, share, rate))


# ---------------------------------------------------------------------------------------------
# The tuner
# ---------------------------------------------------------------------------------------------

def _close(flow: Any) -> None:
    close = getattr(flow, "close", None)
    if callable(close):
        close()


def _stalled_result(report: ProfileReport, chain: Chain, cpus: int, memory: Optional[int]) -> TuneResult:
    if report.stall_detail:
        detail = report.stall_detail
    elif report.stalled:
        detail = "no datapoint came for the stall timeout; {}".format(report.suggestion)
    else:
        detail = "the chain gave no datapoint to measure. {}".format(report.suggestion)
    code = render(chain, model.user_forms(chain))
    return TuneResult(code.text, [], 0.0, "stalled", detail, cpus, memory, code.names, code.fill_in,
                      stalled=True, stall_detail=detail, measured=report)


def tune(df: DataFlow, seconds: float = 10.0, *, warmup: float = 1.0, consumer_rate: Optional[float] = None,
         cpu_budget: Optional[int] = None, memory_budget: Optional[int] = None,
         stall_timeout: float = 30.0) -> TuneResult:
    """Measure the chain ``df`` and choose a configuration for it; returns a :class:`TuneResult`
    (print it: the configuration as code, the rate to expect and what limits it).

    The chain is run in a thread of this process like :func:`~inputpipe.dataflow.profiling.profile`
    runs it, twice: first with every map in the consumer's thread (about half of ``seconds``
    after ``warmup``: each stage's own time, each map function's time and CPU time per call), then,
    when the choice has parallel maps, in the chosen configuration (the rest: its real rate). In
    between, when caching would pay, two short passes check which part of the chain gives the same
    datapoints every epoch. The choice, for each map (MapData, MapDataComponent, the parallel maps):

    - serial, or parallel where that raises the rate (by 5% or more); in threads when the map's
      CPU time is under half its time (it waits: I/O, sleeps, or releases the GIL), else in
      processes; as many workers as reach the rate the rest of the chain, the CPUs and the consumer
      allow (with a 10% margin), processes no more than the CPUs they can keep busy;
    - in the workers of a MultiProcessMapAndBatchData when a BatchData follows and the datapoints
      are large (64 KiB or more) or that is faster;
    - a parallel map already configured is kept when it is as fast (within 5%) and does not use
      many more workers;
    - CacheData on the highest part of the chain whose output is the same in two passes (no random
      draw), has a length and fits in the memory budget, when that raises the rate by 10% or more.

    The user's flow objects are not changed: every chain run is built of new objects (copies of
    the stages the tuner does not rebuild, with the user's functions) on the part of ``df`` it
    cannot rebuild (the source, or the first stage from the top it does not know, with what is
    below it), which it resets and iterates; the new chains are closed before this returns. If
    that part holds workers of its own (a MultiProcessRunnerZMQ), it is closed too: build a new
    flow to train with (the code does). So is the base of a chain that stalled (a thread still
    blocked in it ends when it is closed, if it can be).

    Args:
        df: the DataFlow (the outermost stage of the chain).
        seconds: how long to measure (split between the two runs), after each run's ``warmup``.
        consumer_rate: the datapoints of ``df`` per second the trainer takes (None: as many as come).
        cpu_budget: CPUs the pipeline may use (default: :func:`inputpipe.utils.resources.cpu_budget`,
            the process's affinity and cgroup quota); give less to keep CPUs for the trainer.
        memory_budget: bytes a cache may take (default: :func:`inputpipe.utils.resources.memory_budget`).
        stall_timeout: give up when no datapoint comes for this many seconds (``result.stalled``).

    Example::

        result = tune(df, seconds=5, consumer_rate=200)
        print(result)
    """
    if not is_dataflow(df):
        raise TypeError("tune: expected a DataFlow (an iterable with reset_state()), got a {}".format(type(df).__name__))
    for name, value in (("seconds", seconds), ("stall_timeout", stall_timeout)):
        if not value > 0:
            raise ValueError("tune: {} must be > 0, got {!r}".format(name, value))
    if consumer_rate is not None and not consumer_rate > 0:
        raise ValueError("tune: consumer_rate must be > 0 datapoints/s or None, got {!r}".format(consumer_rate))
    cpus = resources.cpu_budget() if cpu_budget is None else int(cpu_budget)
    if cpus < 1:
        raise ValueError("tune: cpu_budget must be >= 1, got {!r}".format(cpu_budget))
    memory = resources.memory_budget() if memory_budget is None else int(memory_budget)
    chain = read_chain(df)
    result: Optional[TuneResult] = None
    try:
        result = _tune(chain, seconds, max(0.0, float(warmup)), consumer_rate, cpus, memory, stall_timeout)
        return result
    finally:
        stalled = result is not None and (result.stalled or (result.trial is not None and result.trial.stalled))
        if chain.base_has_workers or stalled:       # (a thread stuck in the base ends when it is closed)
            _close(chain.base)


def _measure(chain: Chain, seconds: float, warmup: float, stall_timeout: float) -> tuple:
    """The all-serial run (with the GIL probe) and the echoes through a worker process:
    ``(report, borrowed, timed functions, transports, problems)``."""
    timed = [TimedFunc(u.func) if u.kind == WORK and u.func is not None else None for u in chain.units]
    flow, borrowed = build(chain, [Form() for _ in chain.units], timed)
    try:
        with GilProbe(delay=warmup + GIL_PROBE_AFTER * seconds / 2,
                      ready=maps_timed([t.clock for t in timed if t is not None], TIMED_CALLS_BEFORE_PROBE,
                                         warmup + GIL_PROBE_LATEST * seconds / 2)):
            measured = profile(flow, seconds / 2, warmup=warmup, stall_timeout=stall_timeout)
    finally:
        _close(flow)
    moves, problems = transport.measure([t.sample if t is not None else None for t in timed]) \
        if not measured.stalled else ([], [])
    return measured, borrowed, timed, moves, problems


def _tune(chain: Chain, seconds: float, warmup: float, consumer_rate: Optional[float], cpus: int,
          memory: Optional[int], stall_timeout: float) -> TuneResult:
    names = _unit_names(chain)
    source_name = _stage_name(chain.base, _kind_of(chain.base, False))
    measured, borrowed, timed, moves, problems = _measure(chain, seconds, warmup, stall_timeout)
    if measured.stalled:
        return _stalled_result(measured, chain, cpus, memory)
    costs = model.measure(measured, chain, borrowed, timed, names, source_name, moves, problems)
    if costs is None:
        return _stalled_result(measured, chain, cpus, memory)
    mine = model.user_forms(chain)
    choice = model.choose(chain, costs, cpus, consumer_rate)
    trial, notes = None, []
    if any(f.kind != SERIAL for f in choice.forms):
        trial, choice, notes = _trials(chain, costs, choice, cpus, consumer_rate, seconds / 2, warmup, stall_timeout)
    forms, chosen = choice.forms, choice.estimate
    level, steady, cache_detail = choose_cache(chain, costs, forms, chosen, cpus, consumer_rate, memory,
                                               seconds, stall_timeout)
    code = render(chain, forms, level)
    unchanged = level is None and all(_same_form(u, f, m) for u, f, m in zip(chain.units, forms, mine))
    all_serial = all(f.kind == SERIAL for f in mine)
    result = TuneResult(code.text, _choices(chain, costs, choice, mine), chosen.rate, chosen.limit,
                        _limit_detail(chosen, costs, cpus), cpus, memory, code.names, code.fill_in,
                        model_datapoints_per_sec=chosen.rate, unchanged=unchanged, measured=measured,
                        cache_detail=cache_detail, notes=notes, trial=trial,
                        splits=split.suggest(chain, costs, forms, cpus, consumer_rate))
    if all_serial:
        result.before_datapoints_per_sec, result.before_measured = costs.rate, True
    elif all(f.workers is not None for f in mine):
        result.before_datapoints_per_sec = model.estimate(chain, costs, mine, cpus, consumer_rate).rate
    if trial is not None and not trial.stalled:
        result.trial_datapoints_per_sec = result.expected_datapoints_per_sec = trial.datapoints_per_sec
    elif unchanged and all_serial:
        result.expected_datapoints_per_sec = costs.rate
    if consumer_rate is not None:
        result.expected_datapoints_per_sec = min(result.expected_datapoints_per_sec, consumer_rate)
    if level is not None and steady is not None:
        result.cache = source_name if level < 0 else names[level]
        result.first_epoch_datapoints_per_sec = result.expected_datapoints_per_sec
        result.expected_datapoints_per_sec = result.model_datapoints_per_sec = steady.rate
        result.limit_detail = _limit_detail(steady, without_prefix(costs, level), cpus)
        result.limit = model.LIMIT_CONSUMER if result.limit_detail.startswith("the consumer") else steady.limit
    if not chain.units:
        result.notes.append("The tuner rebuilds MapData, MapDataComponent, FilterData, BatchData, CacheData, the "
                            "parallel maps and single-input stages it can copy; the top of this chain ({}) is none "
                            "of these, so it is kept as it is.".format(source_name))
    return result


def _trials(chain: Chain, costs: model.Costs, choice: model.Choice, cpus: int, consumer_rate: Optional[float],
            seconds: float, warmup: float, stall_timeout: float) -> tuple:
    """Run the chosen configuration once: its rate is what to expect. When that falls short of the
    model (by more than :data:`TRIAL_SHORTFALL`) and the model rates the other kinds of maps
    (threads for processes, or the other way round) above what the trial gave and above the
    serial chain, run those too and keep them when their trial is :data:`TRIAL_MARGIN` faster.
    When the best trial still falls below the measured serial chain, :func:`_against_serial`
    decides between them. Returns ``(the trial's report, the choice kept, notes)``."""
    trial = _trial(chain, choice.forms, seconds, warmup, stall_timeout)
    if trial.stalled:
        return trial, choice, ["The trial run of this configuration stalled: {}".format(trial.suggestion)]
    rate, model_rate = trial.datapoints_per_sec, choice.estimate.rate
    if rate >= TRIAL_SHORTFALL * model_rate:
        return trial, choice, []
    runner = choice.runner_up()
    serial = model.estimate(chain, costs, [Form() for _ in chain.units], cpus, consumer_rate).rate
    if runner is None or runner[0] <= max(rate, serial) * model.GAIN_NEEDED:    # (not worth a trial)
        best = (trial, choice, ["The trial ran well below the model ({:.1f}/s against {:.1f}/s): the machine may be "
                                "busy, or the work costs more in parallel than measured in one thread. Its profile: "
                                "result.trial.".format(rate, model_rate)])
        return _against_serial(chain, costs, cpus, consumer_rate, best, seconds, warmup, stall_timeout)
    other = _trial(chain, runner[1], seconds, warmup, stall_timeout)
    kinds = ", ".join("{} {}".format(costs.names[k], f.kind) for k, f in enumerate(runner[1]) if f.kind != SERIAL)
    if not other.stalled and other.datapoints_per_sec > rate * TRIAL_MARGIN:
        kept = model.Choice(runner[1], model.estimate(chain, costs, runner[1], cpus, consumer_rate), choice.rated)
        best = (other, kept, ["The first choice ran at {:.1f}/s in its trial, below the model's {:.1f}/s; a trial with "
                              "{} gave {:.1f}/s: proposed instead.".format(rate, model_rate, kinds,
                                                                          other.datapoints_per_sec)])
    else:
        best = (trial, choice, ["The trial ran below the model ({:.1f}/s against {:.1f}/s); a trial with {} gave "
                                "{:.1f}/s, no faster.".format(rate, model_rate, kinds, other.datapoints_per_sec)])
    return _against_serial(chain, costs, cpus, consumer_rate, best, seconds, warmup, stall_timeout)


def _against_serial(chain: Chain, costs: model.Costs, cpus: int, consumer_rate: Optional[float], best: tuple,
                    seconds: float, warmup: float, stall_timeout: float) -> tuple:
    """The parallel configuration of ``best`` (its trial, choice and notes) or the serial chain,
    when the parallel trial, short of the model, may be no faster than the serial chain: the work
    costs more in parallel than the model knows (large fresh arrays whose page faults take turns on
    the process's memory map, GIL hand-overs). One trial says little on a shared machine, whose load
    changes from one run to the next, so the two take turns in :data:`SERIAL_PAIRS` pairs (the
    parallel configuration, then the serial chain: runs of ``seconds / 2``; the first pair's
    parallel run is the trial made): the serial chain is kept only when it is faster in every pair
    and :data:`SERIAL_MARGIN` faster over all of them. Threads are checked when their trial gave
    less than :data:`SERIAL_CHECK_BELOW` times the serial chain's measured rate (that rate is
    measured with the tuner's probes at work, a little low; threads start at once, and what the
    model cannot see costs them most); worker processes when their trial fell below that rate and
    the model rates them less than :data:`SERIAL_CHECK_BELOW` times the serial chain: a model
    that expects twice the rate is not that wrong, and short trials under load are (the workers'
    start is not amortized). A stage made "auto" stays so (its controller sizes it at run time)."""
    trial, choice, notes = best
    serial_forms = [Form() for _ in chain.units]
    serial = model.estimate(chain, costs, serial_forms, cpus, consumer_rate)
    if any(f.kind == THREADS for f in choice.forms):
        checked = trial.datapoints_per_sec < SERIAL_CHECK_BELOW * costs.rate
    else:
        checked = trial.datapoints_per_sec < costs.rate and choice.estimate.rate < SERIAL_CHECK_BELOW * serial.rate
    if not checked or any(u.auto is not None and f.kind != SERIAL for u, f in zip(chain.units, choice.forms)):
        return best
    pairs, parallel = [], trial
    for turn in range(SERIAL_PAIRS):
        if turn:
            parallel = _trial(chain, choice.forms, seconds / 2, warmup, stall_timeout)
        alone = _trial(chain, serial_forms, seconds / 2, warmup, stall_timeout)
        if parallel.stalled or alone.stalled:
            return best
        pairs.append((alone.datapoints_per_sec, parallel.datapoints_per_sec))
        last = turn == SERIAL_PAIRS - 1
        if alone.datapoints_per_sec <= parallel.datapoints_per_sec or (last and sum(a for a, _ in pairs) <
                                                                      SERIAL_MARGIN * sum(p for _, p in pairs)):
            return best[0], best[1], notes + ["The trial ran below the serial chain's measured {:.1f}/s; "
                                              "in turns with it: {}. Kept.".format(costs.rate, _pairs_text(pairs))]
    kept = model.Choice(serial_forms, serial, choice.rated)
    return alone, kept, notes + ["The parallel configuration ran below the serial chain's measured {:.1f}/s; in turns "
                                 "with it: {}: every map is kept in the consumer's thread.".format(
                                     costs.rate, _pairs_text(pairs))]


def _pairs_text(pairs: Sequence[tuple]) -> str:
    return ", ".join("serial {:.1f}/s, parallel {:.1f}/s".format(alone, parallel) for alone, parallel in pairs)


def _trial(chain: Chain, forms: Sequence[Form], seconds: float, warmup: float, stall_timeout: float) -> ProfileReport:
    flow, _ = build(chain, forms)
    try:
        return profile(flow, seconds, warmup=warmup, stall_timeout=stall_timeout)
    finally:
        _close(flow)
