"""The six pipelines of bench_autotune.py and the measurement that runs in each subprocess.

Fixed work (``spin``: pure-Python arithmetic that holds the GIL; ``Trainer``: numpy matmuls that
release it), calibrated by the driver and passed in; the chains (``build_chain``) in every
setting the benchmark compares: pinned worker counts, "auto", tune()'s code, and the same work in
tf.data (``child_tfdata``). ``run_child`` measures one of them and prints one JSON line.

    python benchmarks/bench_autotune.py --quick        # runs every path of this module
"""
import json
import os
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inputpipe.dataflow import DataFlow, DataFromList, ProxyDataFlow  # noqa: E402

RESULT_PREFIX = "RESULT "
PROCS, THREADS = "processes", "threads"
NESTED = "nested chain"

# ------------------------------------------------------------------------------------ the work

#: Iterations of spin() per ms and matmuls per ms on an idle core (calibrated by the driver).
CALIBRATION = {"spin_per_ms": 1.0, "matmul_per_ms": 1.0}
#: ms of work per call of each function (set from the pipeline, in the child, before any fork).
COST_MS = {}
SLEEP_S = 0.005


def spin(iterations, seed):
    """Fixed pure-Python CPU work (holds the GIL); the result depends on ``seed``."""
    total = int(seed)
    for i in range(iterations):
        total = (total * 31 + i) % 1000003
    return total


def _iterations(name):
    return max(1, int(COST_MS[name] * CALIBRATION["spin_per_ms"]))


def slow(dp):
    return [dp[0], spin(_iterations("slow"), dp[0])]


def cheap(dp):
    return [dp[0], spin(_iterations("cheap"), dp[0])]


def io_like(dp):
    time.sleep(SLEEP_S)
    return [dp[0], spin(_iterations("io_like"), dp[0])]


def expensive(dp):
    return [dp[0], spin(_iterations("expensive"), dp[0])]


def first(dp):
    return [dp[0], spin(_iterations("first"), dp[0])]


def second(dp):
    return [dp[0], spin(_iterations("second"), dp[1])]


def expected(pipeline, index):
    """The value a datapoint of ``index`` must carry after the pipeline's stages (the check that
    the work was really done)."""
    value = index
    for name in PIPELINES[pipeline]["stages"]:
        value = spin(_iterations(name), value)
    return value


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


# ---------------------------------------------------------------------------------- consumers

def consume_nothing(dp):
    pass


def consume_python(dp):
    spin(max(1, int(COST_MS["consumer"] * CALIBRATION["spin_per_ms"])), 0)


class Trainer:
    """A train step that keeps ~1.5 cores busy: numpy matmuls (the GIL released) for the step's
    ms in this thread and for half of it in a helper thread."""

    def __init__(self):
        import numpy as np

        self.matrix = np.random.default_rng(0).random((256, 256), dtype=np.float32)
        count = max(1, int(COST_MS["consumer"] * CALIBRATION["matmul_per_ms"]))
        self.main_count, self.helper_count = count, max(1, count // 2)
        self.tasks, self.done = queue.Queue(), queue.Queue()
        threading.Thread(target=self._helper, daemon=True).start()

    def _matmuls(self, count):
        for _ in range(count):
            self.matrix @ self.matrix

    def _helper(self):
        while True:
            count = self.tasks.get()
            if count is None:
                return
            self._matmuls(count)
            self.done.put(None)

    def __call__(self, dp):
        self.tasks.put(self.helper_count)
        self._matmuls(self.main_count)
        self.done.get()

    def close(self):
        self.tasks.put(None)


def make_consumer(kind):
    if kind == "python":
        return consume_python
    if kind == "trainer":
        return Trainer()
    return consume_nothing


# ---------------------------------------------------------------------------------- pipelines

#: stages: the map functions in the order they apply (the source side first); hand: (kind, count)
#: per stage; grid: the settings searched (the hand setting among them); consumer: what the consumer
#: does per datapoint; costs: ms per call; tune: tune()'s arguments besides the chain.
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
}
FUNCTIONS = {"slow": slow, "cheap": cheap, "io_like": io_like, "expensive": expensive, "first": first,
             "second": second}


def label(config):
    kind = config["kind"]
    if kind == "pinned":
        return ", ".join("{} {}".format(n, "proc" + "s" * (n > 1) if k == PROCS else "thread" + "s" * (n > 1))
                         for k, n in config["stages"])
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
    from inputpipe.dataflow import MultiProcessMapData, MultiProcessRunnerZMQ, MultiThreadMapData

    spec = PIPELINES[pipeline]
    if config["kind"] == "tune":
        namespace = {name: (getattr(sys.modules[__name__], value["attr"]) if "attr" in value else value["value"])
                     for name, value in config["names"].items()}
        exec(config["code"], namespace)
        df = namespace["df"]
    else:
        df = make_source(pipeline)
        settings = spec["hand"] if config["kind"] == "auto" else config["stages"]
        for name, (kind, count) in zip(spec["stages"], settings):
            func = FUNCTIONS[name]
            if config["kind"] == "auto":
                count, buffer = "auto", {"buffer_size": "auto"}
            else:
                buffer = {}
            df = MultiThreadMapData(df, count, func, **buffer) if kind == THREADS else \
                MultiProcessMapData(df, count, func, **buffer)
    if pipeline == NESTED:
        df = MultiProcessRunnerZMQ(Reporter(df, report_path), 1)
    return df


# ------------------------------------------------------------------------------ the child side

def tree_cpu(pid):
    """CPU seconds so far of process ``pid`` (all its threads) and of all its descendants."""
    tick = os.sysconf("SC_CLK_TCK")

    def own(p):
        try:
            with open("/proc/{}/stat".format(p)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick
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

    descendants, todo = 0.0, children(pid)
    while todo:
        child = todo.pop()
        descendants += own(child)
        todo += children(child)
    return own(pid), descendants


def endless(df):
    while True:
        empty = True
        for dp in df:
            empty = False
            yield dp
        if empty:
            raise RuntimeError("the flow gave an empty epoch")


def consume(iterator, consumer, warmup, seconds):
    """Take datapoints for ``warmup`` s, then count them for ``seconds`` s: the measurements."""
    begin = time.perf_counter()
    first_at = None
    taken = 0
    while time.perf_counter() - begin < warmup:
        consumer(next(iterator))
        taken += 1
        first_at = first_at or time.perf_counter() - begin
    cpu0 = tree_cpu(os.getpid())
    window_start = time.time()
    start = time.perf_counter()
    count, work, dp = 0, 0.0, None
    while True:
        dp = list(next(iterator))
        w0 = time.perf_counter()
        consumer(dp)
        work += time.perf_counter() - w0
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    cpu1 = tree_cpu(os.getpid())
    return {"datapoints_per_s": count / elapsed, "datapoints": count, "window_s": elapsed,
            "step_ms": 1e3 * elapsed / count, "consumer_work_ms": 1e3 * work / count,
            "wait_ms": 1e3 * (elapsed - work) / count, "first_datapoint_s": first_at,
            "from_start_datapoints_per_s": (taken + count) / (time.perf_counter() - begin),
            "cpu_consumer_process": (cpu1[0] - cpu0[0]) / elapsed, "cpu_descendants": (cpu1[1] - cpu0[1]) / elapsed,
            "window_start": window_start, "last": [int(v) for v in dp[:2]]}


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
    report_path = os.path.join(spec["scratch"], "stages.json") if pipeline == NESTED else None
    df = build_chain(pipeline, config, report_path)
    consumer = make_consumer(PIPELINES[pipeline]["consumer"])
    started = time.time()
    df.reset_state()
    try:
        result = consume(endless(df), consumer, spec["warmup"], spec["seconds"])
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
    import numpy as np
    import tensorflow as tf

    pipeline = spec["pipeline"]
    stages = PIPELINES[pipeline]["stages"]
    if pipeline == "small dataset, cache":
        dataset = tf.data.Dataset.range(200).repeat()
    else:
        dataset = tf.data.Dataset.counter()
    dataset = dataset.map(lambda i: (i, i))

    def as_tf(func, takes_value):
        def call(index, value):
            dp = [int(index), int(value)] if takes_value else [int(index)]
            return [np.int64(v) for v in func(dp)]
        return lambda i, v: tuple(tf.numpy_function(call, [i, v], [tf.int64, tf.int64], stateful=False))

    for position, name in enumerate(stages):
        dataset = dataset.map(as_tf(FUNCTIONS[name], position > 0), num_parallel_calls=tf.data.AUTOTUNE,
                              deterministic=False)
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    consumer = make_consumer(PIPELINES[pipeline]["consumer"])
    try:
        result = consume(iter(dataset.as_numpy_iterator()), consumer, spec["warmup"], spec["seconds"])
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
    module = sys.modules[__name__]
    names = {}
    for name, value in result.names.items():
        if getattr(module, getattr(value, "__qualname__", "") or "-", None) is value:
            names[name] = {"attr": value.__qualname__}
        else:
            json.dumps(value)                  # a value tune() could not write out must be plain data
            names[name] = {"value": value}
    settings = [label({"kind": "pinned", "stages": [(c.unit, c.workers)]}) if c.workers else c.after
                for c in result.stages]
    text = "tune: " + ", ".join(settings or ["unchanged"]) + (" + CacheData" if result.cache else "")
    return {"code": result.code, "names": names, "label": text, "printed": str(result),
            "result": json.loads(json.dumps(result.to_dict(), default=str))}


def run_child(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    CALIBRATION.update(spec["calibration"])
    COST_MS.update(PIPELINES[spec["pipeline"]]["costs"])
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
    if "last" in result and result["last"][1] != expected(spec["pipeline"], result["last"][0]):
        result["error"] = "datapoint {} came as {}, the map gives {}: the work was not done".format(
            result["last"][0], result["last"][1], expected(spec["pipeline"], result["last"][0]))
    print(RESULT_PREFIX + json.dumps(result), flush=True)
