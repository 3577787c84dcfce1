"""Overlap of data preparation and the train step: step time vs max(D, T) and D + T.

A simulated accelerator step takes T ms during which the CPU is free (a ``numpy_function`` that
sleeps); a DataFlow spends D ms of CPU per batch doing what a real image pipeline does in numpy:
per image a random crop, a flip, a cast to float32, normalisation and clipping, on 32 images of
96x96x3 uint8, then ``np.stack``. That work partly holds the GIL (the Python and numpy call
overhead around each small operation) and partly releases it (numpy's inner loops); the amount
of work per batch is fixed, calibrated once to D ms on an idle thread, so contention for the GIL
or the cores shows up as a longer step instead of being hidden.

For D/T in {0.5, 1, 2} it measures the mean step time of FeedInput (the D + T baseline),
QueueInput, StagingInput(QueueInput) and the peers ``tf.data.Dataset.from_generator`` +
``prefetch`` and tensorpack 0.11's ``QueueInput`` (where it works; otherwise the reason is
printed and recorded), ``--repeats`` times each. The machine may be shared, so each repeat
also times the same batch of work alone in the main thread right before and after it ("D
alone"); the main ratio is step / max(D alone, T). "D made" is the mean time a batch took in
the thread that made it during the run (longer than D alone: contention for the GIL or the
cores); it is a mean like the step time, so a stall of the host counts in both. step / max(D
made, T) is what the input path adds on top of the data work itself. All ratios are
medians over the repeats (plus the best for the main one). Prints a table and writes benchmarks/results/overlap.json.

    python benchmarks/bench_overlap.py [--t-ms 100] [--steps 30] [--repeats 3]
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


def calibrate_units(d_ms: float) -> int:
    """How many ``augment_batch`` calls take ``d_ms`` on this (idle) thread: the fixed work per batch."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (IMAGES, SIDE, SIDE, 3), dtype=np.uint8)
    augment_batch(images, rng)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            augment_batch(images, rng)
        best = min(best, (time.perf_counter() - start) / 10)
    return max(1, round(d_ms / 1e3 / best))


def data_work(units: int) -> float:
    """Do one batch of data work in the calling thread, alone; returns its seconds (D right now)."""
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (IMAGES, SIDE, SIDE, 3), dtype=np.uint8)
    start = time.perf_counter()
    for _ in range(units):
        augment_batch(images, rng)
    return time.perf_counter() - start


class CostlyBatches(DataFlow):
    """Endless batches, each made by ``units`` calls of :func:`augment_batch` (D ms on an idle
    core); ``durations`` records how long each batch took where it was made."""

    def __init__(self, units: int):
        self.units = units
        self.durations = []

    def __iter__(self):
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (IMAGES, SIDE, SIDE, 3), dtype=np.uint8)
        i = 0
        while True:
            start = time.perf_counter()
            for _ in range(self.units):
                augment_batch(images, rng)
            self.durations.append(time.perf_counter() - start)
            yield [np.full((32, 64), i, np.float32)]
            i += 1


def accelerator_step(batch: tf.Tensor, step_ms: float) -> tf.Tensor:
    def step(x):
        time.sleep(step_ms / 1e3)
        return np.float32(x[0, 0])
    return tf.numpy_function(step, [batch], tf.float32, stateful=True)


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
    df = CostlyBatches(units)
    source = make_source(df)
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        batch, = source.get_input_tensors()
        fetch = accelerator_step(batch, t_ms)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        return time_steps(run, fetch, warmup, steps, settle), statistics.mean(df.durations[warmup:])


def measure_tf_data(units, t_ms, warmup, steps, settle):
    df = CostlyBatches(units)
    graph = tf.Graph()
    with graph.as_default():
        ds = tf.data.Dataset.from_generator(
            lambda: (tuple(dp) for dp in df), output_signature=(tf.TensorSpec([32, 64], tf.float32),))
        iterator = tf.compat.v1.data.make_initializable_iterator(ds.prefetch(4))
        batch, = iterator.get_next()
        fetch = accelerator_step(batch, t_ms)
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(iterator.initializer)
        return time_steps(sess.run, fetch, warmup, steps, settle), statistics.mean(df.durations[warmup:])


def measure_tensorpack(units, t_ms, warmup, steps, settle):
    df = CostlyBatches(units)
    graph = tf.Graph()
    with graph.as_default():
        source, (batch,) = tensorpack_peer.tensorpack_queue_tensors(df, SPECS)
        fetch = accelerator_step(batch, t_ms)
    with tf.compat.v1.Session(graph=graph) as sess, tensorpack_peer.run_tensorpack_queue(source, sess):
        return time_steps(sess.run, fetch, warmup, steps, settle), statistics.mean(df.durations[warmup:])


TENSORPACK = "tensorpack 0.11 QueueInput (peer)"
METHODS = [
    ("FeedInput (D+T baseline)", lambda *a: measure_source(FeedInput, *a)),
    ("QueueInput", lambda *a: measure_source(QueueInput, *a)),
    ("StagingInput(QueueInput)", lambda *a: measure_source(
        lambda df: StagingInput(QueueInput(df), nr_stage=1, device="/cpu:0"), *a)),
    ("tf.data from_generator+prefetch (peer)", measure_tf_data),
    (TENSORPACK, measure_tensorpack),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--t-ms", type=float, default=100.0, help="simulated accelerator step T (ms)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tensorpack_missing = tensorpack_peer.unavailable_reason()
    if tensorpack_missing:
        print("{}: not measured: {}".format(TENSORPACK, tensorpack_missing), flush=True)
    rows, records = [], []
    for ratio in (0.5, 1.0, 2.0):
        d_ms, t_ms = ratio * args.t_ms, args.t_ms
        units = calibrate_units(d_ms)
        ideal = max(d_ms, t_ms)
        # when data is faster than the step, give every source time to fill its buffer (QueueInput:
        # 50 batches) before timing: while it fills, its thread competes with the step for the GIL
        settle = QueueInput.default_capacity * d_ms / 1e3 if d_ms < t_ms else 0.0
        for name, measure in METHODS:
            if name == TENSORPACK and tensorpack_missing:
                records.append({"method": name, "D_ms": d_ms, "T_ms": t_ms, "step_ms": None,
                                "not_measured": tensorpack_missing})
                rows.append([ratio, name] + ["n/a"] * 7)
                continue
            step_ms, d_now_ms, d_made_ms = [], [], []
            for _ in range(args.repeats):
                before = data_work(units)
                step, made = measure(units, t_ms, args.warmup, args.steps, settle)
                d_now_ms.append(1e3 * (before + data_work(units)) / 2)
                step_ms.append(1e3 * step)
                d_made_ms.append(1e3 * made)
            # this repeat's own D: the same work timed alone right before and after it ("alone"), and
            # as long as it took in the thread that made the batches during the run ("made")
            alone = [s_ / max(d_, t_ms) for s_, d_ in zip(step_ms, d_now_ms)]
            made = [s_ / max(d_, t_ms) for s_, d_ in zip(step_ms, d_made_ms)]
            records.append({"method": name, "D_ms": d_ms, "T_ms": t_ms, "work_units_per_batch": units,
                            "step_ms": step_ms, "D_alone_ms": d_now_ms, "D_where_made_ms": d_made_ms,
                            "ratio_to_max_D_alone": alone, "ratio_to_max_D_made": made,
                            "median_ratio_to_max_D_alone": statistics.median(alone),
                            "best_ratio_to_max_D_alone": min(alone),
                            "median_ratio_to_max_D_made": statistics.median(made),
                            "nominal_ratio_to_max": statistics.median(step_ms) / ideal})
            rows.append([ratio, name, "{:.1f}".format(statistics.median(step_ms)),
                         "{:.1f}".format(statistics.median(d_now_ms)), "{:.1f}".format(statistics.median(d_made_ms)),
                         "{:.3f}".format(statistics.median(alone)), "{:.3f}".format(min(alone)),
                         "{:.3f}".format(statistics.median(made)),
                         "{:.3f}".format(statistics.median(step_ms) / ideal)])
            print("D/T={} {:40s} step {} ms, D alone {} ms, D where made {} ms".format(
                ratio, name, *[" ".join("{:.0f}".format(v) for v in vs) for vs in (step_ms, d_now_ms, d_made_ms)]),
                flush=True)
    table = tabulate(rows, headers=["D/T", "method", "step ms", "D alone ms", "D made ms",
                                    "step / max(D alone,T)", "best", "step / max(D made,T)",
                                    "step / nominal max(D,T)"],
                     tablefmt="github")
    print(table)
    if tensorpack_missing:
        print("{}: not measured: {}".format(TENSORPACK, tensorpack_missing))
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"benchmark": "overlap", "machine": platform.platform(), "cpus": os.cpu_count(),
                   "tensorflow": tf.__version__, "numpy": np.__version__, "args": vars(args),
                   "data_work": "per batch: a fixed number of augment_batch() calls (crop, flip, float32 cast, "
                                "normalise, clip on 32 images of 96x96x3 uint8, then np.stack), calibrated "
                                "to D ms on an idle thread; partly holds the GIL",
                   "tensorpack_not_measured": tensorpack_missing, "results": records}, f, indent=2)
    print("wrote", RESULTS)


if __name__ == "__main__":
    main()
