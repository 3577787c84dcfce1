"""Overlap of data preparation and the train step: step time vs max(D, T) and D + T.

A simulated accelerator step takes T ms during which the CPU is free (a ``numpy_function`` that
sleeps); a DataFlow spends D ms of CPU per batch doing what a real image pipeline does in numpy:
per image a random crop, a flip, a cast to float32, normalisation and clipping, on 32 images of
96x96x3 uint8, then ``np.stack``. That work partly holds the GIL (the Python and numpy call
overhead around each small operation) and partly releases it (numpy's inner loops); the amount
of work per batch is fixed, calibrated once to D ms on an idle thread, so contention for the GIL
or the cores shows up as a longer step instead of being hidden.

Two workloads (``--workload``): ``numpy`` (the above) and ``python``: every batch costs D ms
of pure-Python work (integer arithmetic in a loop) that holds the GIL the whole time, calibrated
the same way. T is also measured as it runs: right before each repeat, the same step on a
constant input with no data work ("T alone"); ratios use max(D alone, T alone).

For D/T in {0.5, 1, 2} it measures the mean step time of FeedInput (the D + T baseline),
QueueInput, StagingInput(QueueInput) and the peers ``tf.data.Dataset.from_generator`` +
``prefetch``, tensorpack 0.11's ``QueueInput`` (where it works; otherwise the reason is
printed and recorded) and the recommended setup, the DataFlow in a worker process
(``QueueInput(df, in_worker=True)``, alone and under StagingInput), ``--repeats`` times each. The machine may be shared, so each repeat
also times the same batch of work alone in the main thread, ``ALONE_SAMPLES`` times right
before and as many right after it, and takes the median ("D alone": the host's speed drifts by
several percent within seconds); the main ratio is step / max(D alone, T). "D made" is the mean time a batch took in
the thread that made it during the run (5-10% longer than D alone on the benchmark machine in
every setup, a worker process and FeedInput's serial loop included; the cause is not known, see
benchmarks/results/HISTORY.md); it is a mean like the step time, so a stall of the host counts in both. step / max(D
made, T) is what the input path adds on top of the data work itself. All ratios are
medians over the repeats (plus the best for the main one, and the worst against D made). The methods
alternate within every repeat, in an order that rotates from repeat to repeat, so a drift of the
host's speed hits them all alike; each in-process inputpipe source is also compared with
tensorpack's matching source repeat by repeat (its step time over theirs: the median and the range).
Prints a table and writes benchmarks/results/overlap.json (overlap_<workload>.json for one workload).

    python benchmarks/bench_overlap.py [--t-ms 100] [--steps 30] [--repeats 3] [--workload python]
    python benchmarks/bench_overlap.py --workload python --ratios 1 --methods QueueInput tensorpack
    python benchmarks/bench_overlap.py --quick      # a smoke run: one ratio, few steps, one repeat
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tabulate import tabulate  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inputpipe.dataflow.base import DataFlow  # noqa: E402
from inputpipe.input_source import FeedInput, QueueInput, StagingInput, hooked_session  # noqa: E402
import tensorpack_peer  # noqa: E402

SPECS = [tf.TensorSpec([32, 64], tf.float32, "batch")]
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "overlap.json")


IMAGES, SIDE, CROP = 32, 96, 80
MEAN, STD = np.float32(120.0), np.float32(60.0)


def augment_batch(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One unit of data work: crop, flip, cast, normalise and clip each image, then stack."""
    out = []
    for image in images:
        y, x = rng.integers(0, SIDE - CROP, size=2)
        crop = image[y:y + CROP, x:x + CROP]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        out.append(np.clip((crop.astype(np.float32) - MEAN) / STD, -3.0, 3.0))
    return np.stack(out)


def python_unit(images: np.ndarray, rng: np.random.Generator) -> int:
    """One unit of pure-Python work: integer arithmetic in a loop, holding the GIL throughout."""
    total = 0
    for i in range(2000):
        total = (total + i * 7) % 1000003
    return total


WORKLOADS = {"numpy": augment_batch, "python": python_unit}
WORK = augment_batch          # the workload being measured (set by main())


def calibrate_units(d_ms: float) -> int:
    """How many calls of the workload take ``d_ms`` on this (idle) thread: the fixed work per batch."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (IMAGES, SIDE, SIDE, 3), dtype=np.uint8)
    WORK(images, rng)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            WORK(images, rng)
        best = min(best, (time.perf_counter() - start) / 10)
    return max(1, round(d_ms / 1e3 / best))


#: How many times the work is timed alone before and after each repeat (D alone is their median).
ALONE_SAMPLES = 3


def data_work(units: int) -> float:
    """Do one batch of data work in the calling thread, alone; returns its seconds (D right now)."""
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (IMAGES, SIDE, SIDE, 3), dtype=np.uint8)
    start = time.perf_counter()
    for _ in range(units):
        WORK(images, rng)
    return time.perf_counter() - start


class CostlyBatches(DataFlow):
    """Endless batches, each made by ``units`` calls of the workload (D ms on an idle core).
    Each batch carries how long it took where it was made (element [0, 1], in seconds), so the
    step can record it even when the batch was made in a worker process."""

    def __init__(self, units: int, work=None):
        self.units = units
        self.work = work or WORK

    def __iter__(self):
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (IMAGES, SIDE, SIDE, 3), dtype=np.uint8)
        i = 0
        while True:
            start = time.perf_counter()
            for _ in range(self.units):
                self.work(images, rng)
            batch = np.full((32, 64), i, np.float32)
            batch[0, 1] = time.perf_counter() - start
            yield [batch]
            i += 1


def accelerator_step(batch: tf.Tensor, step_ms: float, made: list) -> tf.Tensor:
    """The simulated accelerator: sleeps ``step_ms`` (no CPU); notes each batch's making time."""
    def step(x):
        made.append(float(x[0, 1]))
        time.sleep(step_ms / 1e3)
        return np.float32(x[0, 0])
    return tf.numpy_function(step, [batch], tf.float32, stateful=True)


def step_alone(t_ms: float, warmup: int, steps: int) -> float:
    """T as it runs now: mean seconds of the same step on a constant batch, no data work."""
    graph = tf.Graph()
    with graph.as_default():
        fetch = accelerator_step(tf.zeros([32, 64], tf.float32), t_ms, [])
    with tf.compat.v1.Session(graph=graph) as sess:
        return time_steps(sess.run, fetch, warmup, steps, 0.0)


def time_steps(run, fetch, warmup: int, steps: int, settle: float) -> float:
    """Mean seconds per step over ``steps``, after ``warmup`` steps and ``settle`` seconds in
    which the source may fill its buffer (so the steps see the steady state)."""
    for _ in range(warmup):
        run(fetch)
    time.sleep(settle)
    start = time.perf_counter()
    for _ in range(steps):
        run(fetch)
    return (time.perf_counter() - start) / steps


def measure_source(make_source, units, t_ms, warmup, steps, settle):
    made = []
    source = make_source(CostlyBatches(units))
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        batch, = source.get_input_tensors()
        fetch = accelerator_step(batch, t_ms, made)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        return time_steps(run, fetch, warmup, steps, settle), statistics.mean(made[warmup:])


def measure_tf_data(units, t_ms, warmup, steps, settle):
    made, df = [], CostlyBatches(units)
    graph = tf.Graph()
    with graph.as_default():
        ds = tf.data.Dataset.from_generator(
            lambda: (tuple(dp) for dp in df), output_signature=(tf.TensorSpec([32, 64], tf.float32),))
        iterator = tf.compat.v1.data.make_initializable_iterator(ds.prefetch(4))
        batch, = iterator.get_next()
        fetch = accelerator_step(batch, t_ms, made)
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(iterator.initializer)
        return time_steps(sess.run, fetch, warmup, steps, settle), statistics.mean(made[warmup:])


def measure_tensorpack(units, t_ms, warmup, steps, settle):
    made = []
    graph = tf.Graph()
    with graph.as_default():
        source, (batch,) = tensorpack_peer.tensorpack_queue_tensors(CostlyBatches(units), SPECS)
        fetch = accelerator_step(batch, t_ms, made)
    with tf.compat.v1.Session(graph=graph) as sess, tensorpack_peer.run_tensorpack_queue(source, sess):
        return time_steps(sess.run, fetch, warmup, steps, settle), statistics.mean(made[warmup:])


def measure_tensorpack_staging(units, t_ms, warmup, steps, settle):
    made = []
    graph = tf.Graph()
    with graph.as_default():
        source, (batch,), hook = tensorpack_peer.tensorpack_staging_tensors(CostlyBatches(units), SPECS)
        fetch = accelerator_step(batch, t_ms, made)
    with tf.compat.v1.Session(graph=graph) as sess, tensorpack_peer.run_tensorpack_staging(source, sess), \
            hooked_session(sess, hook) as run:
        return time_steps(run, fetch, warmup, steps, settle), statistics.mean(made[warmup:])


TENSORPACK = "tensorpack 0.11 QueueInput (peer)"
TENSORPACK_STAGING = "tensorpack 0.11 StagingInput(QueueInput) (peer)"
METHODS = [
    ("FeedInput (D+T baseline)", lambda *a: measure_source(FeedInput, *a)),
    ("QueueInput", lambda *a: measure_source(QueueInput, *a)),
    ("StagingInput(QueueInput)", lambda *a: measure_source(
        lambda df: StagingInput(QueueInput(df), nr_stage=1, device="/cpu:0"), *a)),
    ("QueueInput(df, in_worker=True) (recommended)", lambda *a: measure_source(
        lambda df: QueueInput(df, in_worker=True), *a)),
    ("StagingInput(QueueInput(df, in_worker=True))", lambda *a: measure_source(
        lambda df: StagingInput(QueueInput(df, in_worker=True), nr_stage=1, device="/cpu:0"), *a)),
    ("tf.data from_generator+prefetch (peer)", measure_tf_data),
    (TENSORPACK, measure_tensorpack),
    (TENSORPACK_STAGING, measure_tensorpack_staging),
]


def measure_once(measure, units, d_ms, t_ms, args, settle):
    """One run of one method with its own yardsticks around it: (step, D alone, D made, T alone) in ms.
    T and D alone are timed right around the run ("alone": the same step on a constant input, the
    same work in the main thread), D made is how long the batches took where they were made."""
    t_now = step_alone(t_ms, args.warmup, args.steps)
    before = [data_work(units) for _ in range(ALONE_SAMPLES)]
    step, made = measure(units, t_ms, args.warmup, args.steps, settle)
    time.sleep(2 * d_ms / 1e3)     # a feeding thread may still finish the batch it was making
    after = [data_work(units) for _ in range(ALONE_SAMPLES)]
    return 1e3 * step, 1e3 * statistics.median(before + after), 1e3 * made, 1e3 * t_now


def summarize(name, runs, d_ms, t_ms, units, workload, peer_steps):
    """Table row and JSON record of one method's runs (one per repeat, taken in alternation with the
    other methods). ``peer_steps``: the same repeats' step times of tensorpack's matching source, if any."""
    step_ms, d_now_ms, d_made_ms, t_now_ms = (list(column) for column in zip(*runs))
    alone = [s_ / max(d_, t_) for s_, d_, t_ in zip(step_ms, d_now_ms, t_now_ms)]
    made = [s_ / max(d_, t_) for s_, d_, t_ in zip(step_ms, d_made_ms, t_now_ms)]
    vs_peer = [s_ / p_ for s_, p_ in zip(step_ms, peer_steps)] if peer_steps else []
    record = {"workload": workload, "method": name, "D_ms": d_ms, "T_ms": t_ms, "work_units_per_batch": units,
              "step_ms": step_ms, "D_alone_ms": d_now_ms, "D_where_made_ms": d_made_ms, "T_alone_ms": t_now_ms,
              "ratio_to_max_D_alone": alone, "ratio_to_max_D_made": made,
              "median_ratio_to_max_D_alone": statistics.median(alone), "best_ratio_to_max_D_alone": min(alone),
              "median_ratio_to_max_D_made": statistics.median(made), "max_ratio_to_max_D_made": max(made),
              "step_vs_tensorpack_same_repeat": vs_peer,
              "median_step_vs_tensorpack": statistics.median(vs_peer) if vs_peer else None,
              "nominal_ratio_to_max": statistics.median(step_ms) / max(d_ms, t_ms)}
    row = [workload, d_ms / t_ms, name, "{:.1f}".format(statistics.median(step_ms)),
           "{:.1f}".format(statistics.median(d_now_ms)), "{:.1f}".format(statistics.median(t_now_ms)),
           "{:.1f}".format(statistics.median(d_made_ms)),
           "{:.3f}".format(statistics.median(alone)), "{:.3f}".format(min(alone)),
           "{:.3f}".format(statistics.median(made)), "{:.3f}".format(max(made)),
           "{:.3f} ({:.3f}-{:.3f})".format(statistics.median(vs_peer), min(vs_peer), max(vs_peer)) if vs_peer else ""]
    return row, record


#: The tensorpack source each in-process inputpipe source is compared with, repeat by repeat.
PEER_OF = {"QueueInput": TENSORPACK, "StagingInput(QueueInput)": TENSORPACK_STAGING,
           "QueueInput(df, in_worker=True) (recommended)": TENSORPACK,
           "StagingInput(QueueInput(df, in_worker=True))": TENSORPACK_STAGING}


def main() -> None:
    global WORK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--t-ms", type=float, default=100.0, help="simulated accelerator step T (ms)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workload", nargs="+", choices=sorted(WORKLOADS), default=["numpy", "python"])
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.5, 1.0, 2.0], help="D/T values")
    parser.add_argument("--methods", nargs="+", default=None,
                        help="measure only the methods whose name contains one of these (case-insensitive)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: D/T = 1 only, 4 steps after 2 warm-up, one repeat, T = 30 ms")
    args = parser.parse_args()
    ratios = tuple(args.ratios)
    if args.quick:
        args.steps, args.warmup, args.repeats, args.t_ms, ratios = 4, 2, 1, 30.0, (1.0,)
    tensorpack_missing = tensorpack_peer.unavailable_reason()
    if tensorpack_missing:
        print("{}: not measured: {}".format(TENSORPACK, tensorpack_missing), flush=True)
    rows, records = [], []
    methods = [(name, measure) for name, measure in METHODS
               if not args.methods or any(part.lower() in name.lower() for part in args.methods)]
    for workload in args.workload:
        WORK = WORKLOADS[workload]
        for ratio in ratios:
            d_ms, t_ms = ratio * args.t_ms, args.t_ms
            units = calibrate_units(d_ms)
            # when data is faster than the step, give every source time to fill its buffer (QueueInput:
            # 50 batches) before timing: while it fills, its thread competes with the step for the GIL
            settle = QueueInput.default_capacity * d_ms / 1e3 if d_ms < t_ms and not args.quick else 0.0
            measured = [(name, measure) for name, measure in methods
                        if not (name in (TENSORPACK, TENSORPACK_STAGING) and tensorpack_missing)]
            runs = {name: [] for name, _ in measured}
            for repeat in range(args.repeats):
                # the methods alternate, in an order that rotates every repeat, so a drift of the
                # host's speed hits all of them alike
                shift = repeat % max(1, len(measured))
                for name, measure in measured[shift:] + measured[:shift]:
                    run = measure_once(measure, units, d_ms, t_ms, args, settle)
                    runs[name].append(run)
                    print("{} D/T={} repeat {}: {:46s} step {:.1f} ms, D alone {:.1f} ms, D made {:.1f} ms, "
                          "T alone {:.1f} ms".format(workload, ratio, repeat + 1, name, run[0], run[1], run[2],
                                                     run[3]), flush=True)
            for name, _ in methods:
                if name not in runs:
                    records.append({"workload": workload, "method": name, "D_ms": d_ms, "T_ms": t_ms,
                                    "step_ms": None, "not_measured": tensorpack_missing})
                    rows.append([workload, ratio, name] + ["n/a"] * 9)
                    continue
                peer_steps = [run[0] for run in runs.get(PEER_OF.get(name, ""), [])]
                row, record = summarize(name, runs[name], d_ms, t_ms, units, workload, peer_steps)
                rows.append(row)
                records.append(record)
    table = tabulate(rows, headers=["workload", "D/T", "method", "step ms", "D alone ms", "T alone ms",
                                    "D made ms", "step / max(D alone,T alone)", "best",
                                    "step / max(D made,T alone)", "worst", "step / tensorpack's (same repeats)"],
                     tablefmt="github")
    print(table)
    if tensorpack_missing:
        print("{}: not measured: {}".format(TENSORPACK, tensorpack_missing))
    # one file per workload run alone (overlap_python.json), both in one: overlap.json; a smoke run keeps the real one
    results = RESULTS.replace(".json", "_" + args.workload[0] + ".json") if len(set(args.workload)) == 1 else RESULTS
    if args.quick:
        results = results.replace(".json", "_quick.json")
    os.makedirs(os.path.dirname(results), exist_ok=True)
    with open(results, "w") as f:
        json.dump({"benchmark": "overlap", "machine": platform.platform(), "cpus": os.cpu_count(),
                   "tensorflow": tf.__version__, "numpy": np.__version__, "args": vars(args),
                   "data_work": {"numpy": "per batch: a fixed number of augment_batch() calls (crop, flip, float32 "
                                          "cast, normalise, clip on 32 images of 96x96x3 uint8, then np.stack), "
                                          "calibrated to D ms on an idle thread; partly holds the GIL",
                                 "python": "per batch: a fixed number of python_unit() calls (integer arithmetic "
                                           "in a loop), calibrated to D ms on an idle thread; holds the GIL"},
                   "tensorpack_not_measured": tensorpack_missing, "results": records}, f, indent=2)
    print("wrote", results)


if __name__ == "__main__":
    main()
