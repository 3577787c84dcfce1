"""The pipelines of bench_autotune.py and the measurement that runs in each subprocess.

The work (``autotune_work.py``) is fixed and calibrated by the driver; the chains
(``build_chain``) in every setting the benchmark compares: pinned worker counts (processes,
threads, or the map in the consumer's thread), "auto", tune()'s code, and the same work in
tf.data (``child_tfdata``). ``run_child`` measures one of them and prints one JSON line.

    python benchmarks/bench_autotune.py --quick        # runs every path of this module
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import autotune_work as work  # noqa: E402
from autotune_work import CALIBRATION, COST_MS, FUNCTIONS, PHASES, Trainer, make_consumer  # noqa: E402

from inputpipe.dataflow import DataFlow, DataFromList, ProxyDataFlow  # noqa: E402

RESULT_PREFIX = "RESULT "
PROCS, THREADS, SERIAL = "processes", "threads", "serial"
NESTED = "nested chain"
CHANGING = "cost changes: cheap, expensive, cheap"


class Indices(DataFlow):
    """Indices 0, 1, 2, ... without end (and without a length)."""

    def __iter__(self):
        i = 0
        while True:
            yield [i]
            i += 1


def make_source(pipeline):
    if pipeline == "small dataset, cache":
        return DataFromList([[i] for i in range(200)], shuffle=False)
    return Indices()


def _wait_compute(cpu, wait, grid):
    return dict(stages=["fetch_and_decode"], consumer="none", costs={"cpu": cpu, "wait": wait}, hand=[(PROCS, 2)],
                grid=[[(PROCS, n)] for n in grid] + [[(THREADS, 4)], [(THREADS, 8)]], tune={})


#: stages: the map functions in the order they apply (the source side first); hand: (kind, count)
#: per stage; grid: the settings searched (the hand setting among them); consumer: what the consumer
#: does per datapoint; costs: ms per call; tune: tune()'s arguments besides the chain; ordered:
#: the maps keep the source order; phases: the run's phases (their names and seconds each).
PIPELINES = {
    "slow map": dict(stages=["slow"], consumer="none", costs={"slow": 2.0}, hand=[(PROCS, 1)],
                     grid=[[(PROCS, n)] for n in (1, 2, 3, 4)], tune={}),
    "cheap map, slow consumer": dict(
        stages=["cheap"], consumer="python", costs={"cheap": 0.1, "consumer": 5.0}, hand=[(PROCS, 8)],
        grid=[[(PROCS, n)] for n in (1, 2, 8)] + [[(THREADS, 1)]], tune={"consumer_rate": 1000 / 5.0}),
    "I/O-like": dict(
        stages=["io_like"], consumer="python", costs={"io_like": 0.05, "consumer": 1.0}, hand=[(THREADS, 2)],
        grid=[[(THREADS, n)] for n in (2, 4, 8, 16)] + [[(PROCS, 8)]], tune={"consumer_rate": 1000 / 1.0}),
    "small dataset, cache": dict(stages=["expensive"], consumer="none", costs={"expensive": 2.0},
                                 hand=[(PROCS, 1)], grid=[[(PROCS, n)] for n in (1, 2, 3)], tune={}),
    "trainer needs the CPU": dict(
        stages=["slow"], consumer="trainer", costs={"slow": 2.0, "consumer": 8.0}, hand=[(PROCS, 4)],
        grid=[[(PROCS, n)] for n in (1, 2, 4)], tune={"consumer_rate": 1000 / 8.0, "cpu_budget": 1}),
    NESTED: dict(stages=["first", "second"], consumer="none", costs={"first": 2.0, "second": 1.0},
                 hand=[(PROCS, 1), (PROCS, 4)], tune={},
                 grid=[[(PROCS, a), (PROCS, b)] for a, b in ((1, 1), (2, 1), (1, 2), (2, 2), (1, 4))]),
    # a map that waits (a read from network storage) and computes (decoding in Python), in one function
    "wait 8 + compute 1 ms": _wait_compute(1.0, 8.0, (2, 4, 8, 12, 16)),
    "wait 6 + compute 3 ms": _wait_compute(3.0, 6.0, (2, 4, 6, 8, 12)),
    "wait 3 + compute 5 ms": _wait_compute(5.0, 3.0, (2, 3, 4, 6)),
    "large outputs (2 MiB)": dict(
        stages=["large_output"], consumer="none", costs={"large": 0.3}, hand=[(SERIAL, 0)], tune={},
        grid=[[(SERIAL, 0)]] + [[(PROCS, n)] for n in (1, 2, 3, 4)] + [[(THREADS, 2)]]),
    "GIL-releasing (OpenCV)": dict(
        stages=["blur"], consumer="none", costs={"blur_repeats": 4}, hand=[(PROCS, 1)], tune={},
        grid=[[(THREADS, n)] for n in (1, 2, 3, 4)] + [[(PROCS, n)] for n in (2, 3)]),
    "heavy-tailed, ordered": dict(
        stages=["heavy_tailed"], consumer="none", costs={"tail_min": 0.3, "tail_max": 30.0}, hand=[(PROCS, 1)],
        tune={}, ordered=True, grid=[[(PROCS, n)] for n in (1, 2, 3, 4)]),
    CHANGING: dict(
        stages=["changing"], consumer="python", hand=[(PROCS, 2)], tune={"consumer_rate": 1000 / 1.0},
        costs={"cheap_cpu": 1.0, "cheap_wait": 8.0, "dear_cpu": 4.0, "consumer": 1.0},
        phases={"names": ["cheap", "expensive", "cheap"], "seconds": 6.0},
        grid=[[(PROCS, n)] for n in (1, 2, 4, 6, 8, 12)]),
}


def label(config):
    kind = config["kind"]
    if kind == "pinned":
        return ", ".join("in the consumer" if k == SERIAL else "{} {}".format(
            n, "proc" + "s" * (n > 1) if k == PROCS else "thread" + "s" * (n > 1)) for k, n in config["stages"])
    return config.get("label", kind)


class Reporter(ProxyDataFlow):
    """Inside the runner of the nested chain: writes the worker-count history and the controller
    cost of the auto stages below it to a file every half second (they live in the runner's
    process, out of the consumer's sight)."""

    def __init__(self, ds, path):
        super().__init__(ds)
        self.path = path

    def __iter__(self):
        written = 0.0
        for dp in self.ds:
            yield dp
            now = time.monotonic()
            if self.path and now - written > 0.5:
                written = now
                _write_json(self.path, stage_reports(self.ds))


def _write_json(path, data):
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def stage_reports(flow):
    from inputpipe.dataflow.autoscale import auto_stages, stage_name

    return [{"stage": stage_name(s), "history": [list(change) for change in s.worker_count_history()],
             "cost": s.autoscale_cost()} for s in auto_stages(flow)]


def build_chain(pipeline, config, report_path=None):
    """The DataFlow of ``pipeline`` with ``config`` ("pinned": a (kind, count) per stage, "auto",
    "tune": tune()'s code), the runner included for the nested chain."""
    from inputpipe.dataflow import MapData, MultiProcessMapData, MultiProcessRunnerZMQ, MultiThreadMapData
    from inputpipe.dataflow.autoscale import Autoscale

    spec = PIPELINES[pipeline]
    if config["kind"] == "tune":
        namespace = {name: (getattr(work, value["attr"]) if "attr" in value else
                            getattr(sys.modules[__name__], value["here"]) if "here" in value else value["value"])
                     for name, value in config["names"].items()}
        exec(config["code"], namespace)
        df = namespace["df"]
    else:
        df = make_source(pipeline)
        settings = spec["hand"] if config["kind"] == "auto" else config["stages"]
        for name, (kind, count) in zip(spec["stages"], settings):
            func = FUNCTIONS[name]
            options = {"ordered": True, "strict": True} if spec.get("ordered") else {}
            if config["kind"] == "auto":
                # "keep_workers": the stages never map in the consumer's thread (0 workers)
                count = Autoscale(min_workers=1) if config.get("keep_workers") else "auto"
                options["buffer_size"] = "auto"
                kind = THREADS if kind == THREADS else PROCS
            if kind == SERIAL:
                df = MapData(df, func)
            elif kind == THREADS:
                df = MultiThreadMapData(df, count, func, **options)
            else:
                df = MultiProcessMapData(df, count, func, **options)
    if pipeline == NESTED:
        df = MultiProcessRunnerZMQ(Reporter(df, report_path), 1)
    return df


# ------------------------------------------------------------------------------ the child side

def tree_cpu(pid):
    """CPU seconds so far of process ``pid`` (all its threads) and of all its descendants, those
    that ended and were reaped included (a worker "auto" retired in the window)."""
    tick = os.sysconf("SC_CLK_TCK")

    def own(p, reaped=False):
        try:
            with open("/proc/{}/stat".format(p)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return sum(int(v) for v in fields[11:15 if reaped else 13]) / tick
        except (OSError, IndexError, ValueError):
            return 0.0

    def children(p):
        found = []
        try:
            for task in os.listdir("/proc/{}/task".format(p)):
                with open("/proc/{}/task/{}/children".format(p, task)) as f:
                    found += [int(c) for c in f.read().split()]
        except OSError:
            pass
        return found

    descendants, todo = own(pid, reaped=True) - own(pid), children(pid)
    while todo:
        child = todo.pop()
        descendants += own(child, reaped=True)
        todo += children(child)
    return own(pid), descendants


def machine_busy():
    """CPU seconds the machine spent busy so far (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def endless(df):
    while True:
        empty = True
        for dp in df:
            empty = False
            yield dp
        if empty:
            raise RuntimeError("the flow gave an empty epoch")


def plan_window(pipeline, spec):
    """The window's length, and for a pipeline whose cost changes, its phases: they begin when
    the window does (``PHASES["start"]``, set before any worker starts, so the workers' maps
    follow the same clock)."""
    phases = PIPELINES[pipeline].get("phases")
    if not phases:
        return spec["seconds"]
    seconds = spec.get("phase_seconds") or phases["seconds"]
    PHASES.update(names=phases["names"], seconds=seconds, start=time.time() + spec["warmup"])
    return seconds * len(phases["names"])


def consume(iterator, consumer, warmup, seconds, stages):
    """Take datapoints for ``warmup`` s, then count them for ``seconds`` s: the measurements
    (with phases: until the first phase begins, and per phase)."""
    begin = time.perf_counter()
    phased = PHASES["start"] > 0
    warm_until = (lambda: time.time() < PHASES["start"]) if phased else (lambda: time.perf_counter() - begin < warmup)
    first_at = None
    taken = 0
    while warm_until():
        consumer(next(iterator))
        taken += 1
        first_at = first_at or time.perf_counter() - begin
    cpu0, busy0 = tree_cpu(os.getpid()), machine_busy()
    window_start = time.time()
    start = time.perf_counter()
    count, busy, dp = 0, 0.0, None
    per_phase = {}
    while True:
        dp = list(next(iterator))
        w0 = time.perf_counter()
        consumer(dp)
        done = time.perf_counter()
        busy += done - w0
        count += 1
        if phased:
            k = int((time.time() - PHASES["start"]) // PHASES["seconds"])
            slot = per_phase.setdefault(min(k, len(PHASES["names"]) - 1), [0, 0.0])
            slot[0], slot[1] = slot[0] + 1, slot[1] + done - w0
        elapsed = done - start
        if elapsed >= seconds:
            break
    cpu1, busy1 = tree_cpu(os.getpid()), machine_busy()
    ours = cpu1[0] - cpu0[0] + cpu1[1] - cpu0[1]
    result = {"datapoints_per_s": count / elapsed, "datapoints": count, "window_s": elapsed,
              "step_ms": 1e3 * elapsed / count, "consumer_work_ms": 1e3 * busy / count,
              "wait_ms": 1e3 * (elapsed - busy) / count, "first_datapoint_s": first_at,
              "from_start_datapoints_per_s": (taken + count) / (time.perf_counter() - begin),
              "cpu_consumer_process": (cpu1[0] - cpu0[0]) / elapsed,
              "cpu_descendants": (cpu1[1] - cpu0[1]) / elapsed, "window_start": window_start,
              "check_error": work.check(stages, dp),
              "others_cpus": max(0.0, (busy1 - busy0 - ours) / elapsed)}
    if phased:
        seconds_each = PHASES["seconds"]
        result["phases"] = [{"phase": PHASES["names"][k], "datapoints_per_s": per_phase.get(k, [0, 0.0])[0] / seconds_each,
                             "step_ms": 1e3 * seconds_each / max(1, per_phase.get(k, [0])[0])}
                            for k in range(len(PHASES["names"]))]
    return result


def count_at(history, moment):
    """The worker count at ``moment`` (seconds from the start) from a stage's history."""
    now = history[0][1]
    for t, n, _ in history:
        if t <= moment:
            now = n
    return now


def summarize_stages(reports, started, window_start, window_end):
    """Per auto stage: its history relative to the start, the count at the window's ends, the
    time-weighted mean count in the window, when it last changed and the controller's cost."""
    out = []
    for report in reports:
        history = [(t - started, int(n), reason) for t, n, reason in report["history"]]
        changes = history[1:]
        w0, w1 = window_start - started, window_end - started
        points = [w0] + [t for t, _, _ in history if w0 < t < w1] + [w1]
        weighted = sum(count_at(history, a) * (b - a) for a, b in zip(points, points[1:])) / max(w1 - w0, 1e-9)
        cost = report["cost"]
        out.append({"stage": report["stage"], "history": history, "start_count": history[0][1],
                    "count_at_window_start": count_at(history, w0), "count_at_window_end": count_at(history, w1),
                    "mean_count_in_window": weighted,
                    "settled_after_s": changes[-1][0] if changes else 0.0,
                    "changes_in_window": sum(1 for t, _, _ in changes if w0 <= t <= w1),
                    "controller_decisions": cost["decisions"], "controller_cpu_s": cost["cpu_seconds"],
                    "controller_resize_cpu_s": cost["resize_seconds"],
                    "controller_cpu_share_of_a_core": cost["cpu_seconds"] / max(w1, 1e-9),
                    "controller_us_per_decision": 1e6 * cost["cpu_seconds"] / max(cost["decisions"], 1)})
    return out


def child_inputpipe(spec):
    pipeline, config = spec["pipeline"], spec["config"]
    seconds = plan_window(pipeline, spec)
    report_path = os.path.join(spec["scratch"], "stages.json") if pipeline == NESTED else None
    df = build_chain(pipeline, config, report_path)
    consumer = make_consumer(PIPELINES[pipeline]["consumer"])
    started = time.time()
    df.reset_state()
    try:
        result = consume(endless(df), consumer, spec["warmup"], seconds, PIPELINES[pipeline]["stages"])
        window_end = time.time()
        if pipeline == NESTED:
            time.sleep(0.6)                     # the reporter writes every half second
            try:
                with open(report_path) as f:
                    reports = json.load(f)
            except (OSError, ValueError):
                reports = []
        else:
            reports = stage_reports(df)
    finally:
        df.close()
        if isinstance(consumer, Trainer):
            consumer.close()
    result["stages"] = summarize_stages(reports, started, result.pop("window_start"), window_end)
    if config["kind"] == "auto" and not result["stages"]:
        result["note"] = "no auto stage reported its history"
    return result


def child_tfdata(spec):
    """The same Python functions in tf.data: ``map(numpy_function, num_parallel_calls=AUTOTUNE)``
    (deterministic where the pipeline keeps the order) and ``prefetch(AUTOTUNE)``."""
    import numpy as np
    import tensorflow as tf

    pipeline = spec["pipeline"]
    seconds = plan_window(pipeline, spec)
    stages = PIPELINES[pipeline]["stages"]
    if pipeline == "small dataset, cache":
        dataset = tf.data.Dataset.range(200).repeat()
    else:
        dataset = tf.data.Dataset.counter()
    dataset = dataset.map(lambda i: (i, i))

    def as_tf(func, takes_value):
        out = [tf.int64, tf.uint8 if func is work.large_output else tf.int64]

        def call(index, value):
            dp = [int(index), int(value)] if takes_value else [int(index)]
            got = func(dp)
            return [np.int64(got[0]), got[1] if isinstance(got[1], np.ndarray) else np.int64(got[1])]
        return lambda i, v: tuple(tf.numpy_function(call, [i, v], out, stateful=False))

    for position, name in enumerate(stages):
        dataset = dataset.map(as_tf(FUNCTIONS[name], position > 0), num_parallel_calls=tf.data.AUTOTUNE,
                              deterministic=bool(PIPELINES[pipeline].get("ordered")))
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    consumer = make_consumer(PIPELINES[pipeline]["consumer"])
    try:
        result = consume(iter(dataset.as_numpy_iterator()), consumer, spec["warmup"], seconds, stages)
    finally:
        if isinstance(consumer, Trainer):
            consumer.close()
    result.pop("window_start")
    result["stages"] = []
    return result


def child_tune(spec):
    from inputpipe.dataflow import tune

    pipeline = spec["pipeline"]
    chain = build_chain(pipeline, {"kind": "pinned", "stages": PIPELINES[pipeline]["hand"]})
    if pipeline == NESTED:
        chain = chain.ds.ds                    # tune() gets the maps inside the runner
    result = tune(chain, seconds=spec["tune_seconds"], **PIPELINES[pipeline]["tune"])
    names = {}
    for name, value in result.names.items():
        qualname = getattr(value, "__qualname__", "") or "-"
        if getattr(work, qualname, None) is value:
            names[name] = {"attr": qualname}
        elif getattr(sys.modules[__name__], qualname, None) is value:
            names[name] = {"here": qualname}
        else:
            json.dumps(value)                  # a value tune() could not write out must be plain data
            names[name] = {"value": value}
    settings = [label({"kind": "pinned", "stages": [(c.unit.replace("auto ", ""), c.workers)]}) if c.workers
                else c.after for c in result.stages]
    text = "tune: " + ", ".join(settings or ["unchanged"]) + (" + CacheData" if result.cache else "")
    return {"code": result.code, "names": names, "label": text, "printed": str(result),
            "result": json.loads(json.dumps(result.to_dict(), default=str))}


def run_child(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    CALIBRATION.update(spec["calibration"])
    COST_MS.update(PIPELINES[spec["pipeline"]]["costs"])
    if "blur" in PIPELINES[spec["pipeline"]]["stages"]:
        import cv2

        cv2.setNumThreads(1)                   # one thread per call, as the other work (OMP_NUM_THREADS=1)
    kind = spec["config"]["kind"]
    if kind == "tune":
        if "code" in spec["config"]:
            result = child_inputpipe(spec)
        else:
            result = child_tune(spec)
    elif kind == "tf.data":
        result = child_tfdata(spec)
    else:
        result = child_inputpipe(spec)
    if result.get("check_error"):
        result["error"] = result["check_error"] + ": the work was not done"
    print(RESULT_PREFIX + json.dumps(result), flush=True)
