"""The bottleneck doctor's report: the numbers of each stage, the stage that limits throughput,
and what to do about it. :func:`inputpipe.dataflow.profiling.profile` fills it in.

Example::

    report = profile(df, seconds=5)
    print(report)                        # the table, the limiting stage and a suggestion
    slowest = report.limiting.name       # e.g. "MapData(decode)"
    json.dump(report.to_dict(), fh)
"""
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..utils.resources import cpu_budget, cpu_share, workers_within

__all__ = ["StageProfile", "ProfileReport"]

# Stage kinds, from the class a stage is (or derives from); see profiling._kind_of.
SOURCE, REMOTE, MAP, IMAGE, BATCH, SHUFFLE, COMBINE = "source", "remote", "map", "image", "batch", "shuffle", "combine"
PARALLEL_MAP, THREAD_MAP, RUNNER, OTHER = "parallel_map", "thread_map", "runner", "other"
PARALLEL_KINDS = (PARALLEL_MAP, THREAD_MAP, RUNNER)
_MAX_WORKERS_SUGGESTED = 64


@dataclass
class StageProfile:
    """The numbers of one stage of a DataFlow chain over the measured window.

    ``seconds`` is the time the profiling thread spent inside the stage's ``next()``;
    ``own_seconds`` is that minus the time spent inside its inputs' ``next()`` (and minus the
    timing probes' own cost), i.e. the work of this stage alone. For a parallel flow, its own
    time is the time the consumer waited for its workers (plus unpacking their results).

    Example::

        stage = report.stages[0]
        print(stage.name, stage.datapoints_per_sec, stage.own_ms_per_datapoint, stage.share)
    """

    name: str
    kind: str
    type_name: str
    path: str
    depth: int
    datapoints: int = 0
    datapoints_per_sec: float = 0.0
    seconds: float = 0.0
    own_seconds: float = 0.0
    own_ms_per_datapoint: Optional[float] = None
    share: float = 0.0
    inputs: List[int] = field(default_factory=list)
    workers: Optional[int] = None
    worker_unit: str = ""
    busy_share: Optional[float] = None
    worker_cpu_share: Optional[float] = None
    note: str = ""

    def workers_text(self) -> str:
        """The "workers" cell of the table: how many, and how busy they were."""
        if self.workers is None:
            return self.note
        parts = ["{} {}".format(self.workers, self.worker_unit)]
        if self.busy_share is not None:
            parts.append("busy {:.0%}".format(self.busy_share))
        elif self.worker_cpu_share is not None:
            parts.append("CPU {:.0%}".format(self.worker_cpu_share))
        if self.note:
            parts.append(self.note)
        return ", ".join(parts)


@dataclass
class ProfileReport:
    """What :func:`~inputpipe.dataflow.profiling.profile` found: the stages (from the sources to
    the output), the stage that limits throughput and a suggestion. ``str(report)`` is a
    plain-text table; :meth:`to_dict` gives the same as plain data (for JSON).

    Example::

        report = profile(df, seconds=5)
        print(report)
        assert report.limiting.name == "MapData(decode)"
    """

    stages: List[StageProfile]
    seconds: float
    datapoints: int
    consumer_seconds: float
    probe_overhead_us: float
    limiting_index: Optional[int] = None
    suggestion: str = ""
    stalled: bool = False
    ended: bool = False
    cpu_count: int = 1
    #: The call the chain was stuck in when it stalled before iterating, e.g.
    #: ``"Mount.reset_state()"`` (None: not stalled there); ``stall_detail`` says where and for how long.
    stalled_in: Optional[str] = None
    stall_detail: str = ""
    #: The profiling thread was still blocked when ``profile`` returned (Python cannot stop it).
    thread_left_running: bool = False

    @property
    def datapoints_per_sec(self) -> float:
        """Output datapoints per second of the whole chain."""
        return self.datapoints / self.seconds if self.seconds > 0 else 0.0

    @property
    def limiting(self) -> Optional[StageProfile]:
        """The stage that limits throughput (None when nothing was measured)."""
        return None if self.limiting_index is None else self.stages[self.limiting_index]

    def stage(self, name: str) -> StageProfile:
        """The first stage whose name (or class name) is ``name``; KeyError naming the stages if none."""
        for stage in self.stages:
            if name in (stage.name, stage.type_name):
                return stage
        raise KeyError("ProfileReport: no stage named {!r}; the stages are {}".format(
            name, [s.name for s in self.stages]))

    def to_dict(self) -> Dict[str, Any]:
        """The report as plain data: numbers, names and the suggestion (JSON-ready)."""
        limiting = self.limiting
        return {
            "seconds": self.seconds,
            "datapoints": self.datapoints,
            "datapoints_per_sec": self.datapoints_per_sec,
            "consumer_seconds": self.consumer_seconds,
            "probe_overhead_us": self.probe_overhead_us,
            "stalled": self.stalled,
            "ended": self.ended,
            "cpu_count": self.cpu_count,
            "stalled_in": self.stalled_in,
            "stall_detail": self.stall_detail,
            "thread_left_running": self.thread_left_running,
            "limiting": None if limiting is None else limiting.name,
            "limiting_index": self.limiting_index,
            "suggestion": self.suggestion,
            "stages": [asdict(s) for s in self.stages],
        }

    def table(self) -> str:
        """The per-stage table alone."""
        from tabulate import tabulate

        rows = []
        for k, s in enumerate(self.stages):
            mark = "<- limits" if k == self.limiting_index else ""
            own = "" if s.own_ms_per_datapoint is None else "{:.3f}".format(s.own_ms_per_datapoint)
            rows.append(["  " * s.depth + s.name, s.datapoints, "{:.1f}".format(s.datapoints_per_sec), own,
                         "{:.1%}".format(s.share), s.workers_text(), mark])
        headers = ["stage (source first)", "datapoints", "datapoints/s", "own ms/datapoint", "share",
                   "workers", ""]
        return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)

    def __str__(self) -> str:
        if self.stalled_in is not None:           # stuck before iterating: nothing was measured
            lines = [self.stall_detail]
            if self.suggestion:
                lines.append("Suggestion: " + self.suggestion)
            return "\n".join(lines)
        lines = [self.table(), ""]
        lines.append("{} output datapoints in {:.2f} s ({:.1f}/s); the consumer (the profiler's loop) took "
                     "{:.1%} of the time; timing cost about {:.2f} us per stage call, already subtracted."
                     .format(self.datapoints, self.seconds, self.datapoints_per_sec,
                             self.consumer_seconds / self.seconds if self.seconds > 0 else 0.0,
                             self.probe_overhead_us))
        if self.ended:
            lines.append("The flow ended (an epoch produced no datapoints) before the time was up.")
        limiting = self.limiting
        if limiting is not None:
            lines.append("Limiting stage: {} ({:.1%} of the time{}).".format(
                limiting.name, limiting.share, ", stalled" if self.stalled else ""))
        if self.suggestion:
            lines.append("Suggestion: " + self.suggestion)
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Naming the limiting stage and suggesting a fix
# ---------------------------------------------------------------------------------------------

def choose_limiting(stages: List[StageProfile]) -> Optional[int]:
    """The stage with the largest own time: the chain's consumer thread runs the stages one after
    another, so the one it spends most time in bounds the throughput."""
    if not stages:
        return None
    best = max(range(len(stages)), key=lambda k: stages[k].own_seconds)
    return best if stages[best].own_seconds > 0 else None


def _ancestors(stages: List[StageProfile], index: int) -> List[StageProfile]:
    """The stages downstream of ``index`` (those that consume it, directly or not)."""
    parents = {child: k for k, s in enumerate(stages) for child in s.inputs}
    found = []
    while index in parents:
        index = parents[index]
        found.append(stages[index])
    return found


def _descendants(stages: List[StageProfile], index: int) -> List[StageProfile]:
    found, todo = [], list(stages[index].inputs)
    while todo:
        k = todo.pop()
        found.append(stages[k])
        todo.extend(stages[k].inputs)
    return found


def _workers_needed(current: int, own: float, rest: float, cpu_count: int) -> Tuple[str, str]:
    """How many workers a stage that takes ``own`` seconds of a window, in which everything else
    takes ``rest``, needs to stop being the limit (as text); and a remark when that is more than
    the cores. With the rest of the chain nearly free, "many more" is all that can be said."""
    wanted = int(math.ceil(current * (own + rest) / rest)) if rest > 0 else None
    remark = ""
    if wanted is None or wanted > _MAX_WORKERS_SUGGESTED:
        text = "many more than {}".format(current)
        remark = (" The rest of the chain takes only {:.1%} of the time, so it keeps up with a much faster "
                  "stage.".format(rest / (own + rest) if own + rest > 0 else 0.0))
        wanted = _MAX_WORKERS_SUGGESTED
    else:
        text = str(max(wanted, current + 1))
    if wanted > cpu_count:
        remark += (" This machine has {} cores: beyond {} workers only work that waits (I/O, sleep) gets "
                   "faster; CPU-bound work needs a cheaper function or more machines (remote producers)."
                   .format(cpu_count, cpu_count))
    return text, remark


def suggest(report: ProfileReport) -> str:
    """A concrete suggestion for the limiting stage of ``report``, following tensorpack's
    performance-tuning advice (parallelise the slow part, batch in the workers, read sequentially)."""
    index = report.limiting_index
    if report.stalled_in is not None:
        return ("Find what {} waits for (a mount, a lock, a download, a server) and make it available, or give it "
                "a timeout of its own; then run the doctor again.".format(report.stalled_in))
    if index is None:
        if report.ended and report.datapoints == 0:
            return ("Nothing to profile: an epoch of the flow ended without a datapoint. Is its source empty, "
                    "does a filter drop every datapoint, or is it a generator that was used up (DataFromGenerator "
                    "needs a function that makes a new generator, not a generator)?")
        return "Nothing was measured: the flow produced no datapoints in the window."
    stages, stage = report.stages, report.stages[index]
    total = report.seconds
    rest = max(total - stage.own_seconds, 0.0)
    cores = report.cpu_count
    per = "" if stage.own_ms_per_datapoint is None else " ({:.3f} ms per datapoint)".format(stage.own_ms_per_datapoint)
    head = "{} takes {:.0%} of the time{}. ".format(stage.name, stage.share, per)
    parallel = next((s for s in _ancestors(stages, index) + _descendants(stages, index)
                     if s.kind in PARALLEL_KINDS), None)
    if report.stalled:
        return head + ("It produced nothing for the whole stall timeout while it was being waited on: it is "
                       "stuck or waits for data that does not come ({}).".format(
                           "are the producers running and sending to its address?" if stage.kind == REMOTE
                           else "check its inputs, files, locks or network"))
    if stage.kind == REMOTE:
        return head + ("The remote producers do not send fast enough: start more producer processes or hosts "
                       "(each running send_dataflow_zmq), or run `python -m inputpipe.doctor` on the producers' "
                       "DataFlow on their host to find their slow stage.")
    if stage.kind in (PARALLEL_MAP, THREAD_MAP, RUNNER):
        return head + _suggest_parallel(stage, stages, index, rest, cores)
    if parallel is not None and stage.kind in (MAP, IMAGE, BATCH, OTHER):
        return head + ("It runs one datapoint at a time in the consumer's process, next to {} whose workers run "
                       "in parallel: move this work into the workers ({}).".format(
                           parallel.name, "into the flow it copies" if parallel.kind == RUNNER
                           else "into its map_func"))
    k, remark = _workers_needed(1, stage.own_seconds, rest, cores)
    if stage.kind == BATCH:
        return head + ("Stacking the batches is the slow part: batch in the workers with "
                       "MultiProcessMapAndBatchData(ds, num_proc, map_func, batch_size) so only whole batches "
                       "cross to the consumer, or use use_list=True for components that need not be arrays.")
    if stage.kind in (MAP, IMAGE):
        what = "decoding/augmenting" if stage.kind == IMAGE else "this function"
        batched = any(s.kind == BATCH for s in _ancestors(stages, index))
        return head + ("Run {} in parallel: MultiProcessMapData(ds, num_proc={}, map_func=...) in place of this "
                       "stage (MultiThreadMapData if the work releases the GIL: file reads, OpenCV).{}"
                       .format(what, k, " As a BatchData follows, MultiProcessMapAndBatchData(ds, num_proc, "
                               "map_func, batch_size) batches in the workers too." if batched else "") + remark)
    if stage.kind == SOURCE:
        decode = ("It decodes images while reading: read the raw bytes in the source and decode them in a "
                  "parallel map (MultiProcessMapData). " if "ImageFromFile" in stage.type_name else "")
        return head + decode + (
            "Make reading faster: read a dataset file sequentially (LMDB/TFRecord, see dataset_files) and "
            "shuffle with LocallyShuffleData(ds, buffer_size) instead of reading records at random places; "
            "move any decoding out of the source into a parallel map; or read in parallel with "
            "MultiProcessRunnerZMQ(ds, num_proc={}) (each copy must read different data or be shuffled)."
            .format(k) + remark)
    if stage.kind == SHUFFLE:
        return head + ("Shuffling through the buffer is the slow part: a smaller buffer_size or a larger "
                       "shuffle_interval makes it cheaper (less random), or shuffle inside the workers.")
    return head + ("Run this stage in parallel: put the chain up to it in MultiProcessRunnerZMQ(ds, num_proc={}) "
                   "(copies, same distribution) or turn its work into a parallel map."
                   .format(k) + remark)


def _suggest_parallel(stage: StageProfile, stages: List[StageProfile], index: int, rest: float, cores: int) -> str:
    workers = stage.workers or 1
    more, remark = _workers_needed(workers, stage.own_seconds, rest, cores)
    unit = stage.worker_unit or "workers"
    busy, cpu = stage.busy_share, stage.worker_cpu_share
    if busy is not None and busy < 0.5:
        return ("The consumer waits for it while its workers are busy only {:.0%} of the time: the cost is in "
                "moving results to the consumer, not in the work. Batch in the workers "
                "(MultiProcessMapAndBatchData) so fewer, larger messages cross, and send compact arrays "
                "(uint8 images, not float64).".format(busy))
    if cpu is not None and cpu * workers >= 0.8 * cores:
        return ("Its {} {} already use {:.1f} of the {} cores: more of them will not help. Make the work "
                "cheaper (decode smaller images, move work to the graph) or add machines: remote producers "
                "running send_dataflow_zmq, received with RemoteDataZMQ.".format(workers, unit, cpu * workers, cores))
    if stage.kind == THREAD_MAP:
        return ("Its {} cannot keep up. Threads share the GIL: if map_func is Python or numpy code that holds it, "
                "use MultiProcessMapData(num_proc={}); if it waits on I/O or releases the GIL, raise num_thread "
                "to {}.".format(unit, more, more) + remark)
    notes = []
    share = cpu_share(cpu * workers, busy * workers) if cpu is not None and busy else None
    if stage.kind in (PARALLEL_MAP, RUNNER) and share is not None and share < 0.75:
        fits = workers_within(cores, share)
        if fits > workers:
            notes.append(" Its workers spend {:.0%} of their working time on a CPU and wait the rest (I/O): at that "
                         "share the {} cores keep about {} of them busy (num_proc='auto' grows that far).".format(
                             share, cores, fits))
    if cpu is not None and busy is None and cpu < 0.3:
        notes.append(" Its workers use little CPU ({:.0%}): if map_func does not wait on I/O, the time goes to "
                     "moving data, and batching in the workers (MultiProcessMapAndBatchData) helps more than more "
                     "{}.".format(cpu, unit))
    elif stage.kind == PARALLEL_MAP and "AndBatch" not in stage.type_name \
            and any(s.kind == BATCH for s in _ancestors(stages, index)):
        notes.append(" With many small datapoints, batching in the workers (MultiProcessMapAndBatchData) also cuts "
                     "the per-datapoint transfer cost.")
    if stage.kind == RUNNER:
        notes.append(" To see which stage inside the workers is slow, profile the flow it copies on its own: "
                     "profile(df.ds) (the workers' stages are not timed in this run).")
    return "Its {} cannot keep up: use more {} ({} now, {}).{}{}".format(
        unit, unit, workers, more, remark, "".join(notes))


def cpu_count() -> int:
    """Cores this process may use: :func:`inputpipe.utils.resources.cpu_budget` (affinity and
    cgroup quota, or the budget set with ``set_budget``), shared with the controller of
    ``"auto"`` stages."""
    return cpu_budget()
