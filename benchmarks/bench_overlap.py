"""Overlap of data preparation and the train step: step time vs max(D, T) and D + T.

A simulated accelerator step takes T ms during which the CPU is free (a ``numpy_function`` that
sleeps); a DataFlow spends D ms of CPU per batch (hashing in C with the GIL released, like an
image decoder; a pure-Python cost would measure GIL contention instead, which is what
multi-process DataFlows are for). For D/T in {0.5, 1, 2} it measures the mean step time of FeedInput (the D + T
baseline), QueueInput, StagingInput(QueueInput) and the peer ``tf.data.Dataset.from_generator``
+ ``prefetch`` on the same DataFlow, prints a table and writes benchmarks/results/overlap.json.

    python benchmarks/bench_overlap.py [--t-ms 100] [--steps 30]
"""
import argparse
import hashlib
import json
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tabulate import tabulate  # noqa: E402

from inputpipe.dataflow.base import DataFlow  # noqa: E402
from inputpipe.input_source import FeedInput, QueueInput, StagingInput, hooked_session  # noqa: E402

SPECS = [tf.TensorSpec([32, 64], tf.float32, "batch")]
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "overlap.json")


def burn_cpu(seconds: float, scratch: bytes) -> None:
    """Keep one core busy for ``seconds`` in C code that releases the GIL (hashing 64 KiB chunks,
    like an image decoder would), so the cost is CPU time, not GIL contention."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        hashlib.sha256(scratch).digest()


class CostlyBatches(DataFlow):
    """Endless batches, each costing ``cost_ms`` of CPU to make."""

    def __init__(self, cost_ms: float):
        self.cost = cost_ms / 1e3

    def __iter__(self):
        scratch = bytes(1 << 16)
        i = 0
        while True:
            burn_cpu(self.cost, scratch)
            yield [np.full((32, 64), i, np.float32)]
            i += 1


def accelerator_step(batch: tf.Tensor, step_ms: float) -> tf.Tensor:
    def step(x):
        time.sleep(step_ms / 1e3)
        return np.float32(x[0, 0])
    return tf.numpy_function(step, [batch], tf.float32, stateful=True)


def time_steps(run, fetch, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        run(fetch)
    start = time.perf_counter()
    for _ in range(steps):
        run(fetch)
    return (time.perf_counter() - start) / steps


def measure_source(make_source, d_ms, t_ms, warmup, steps):
    source = make_source(CostlyBatches(d_ms))
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        batch, = source.get_input_tensors()
        fetch = accelerator_step(batch, t_ms)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        return time_steps(run, fetch, warmup, steps)


def measure_tf_data(d_ms, t_ms, warmup, steps):
    df = CostlyBatches(d_ms)
    graph = tf.Graph()
    with graph.as_default():
        ds = tf.data.Dataset.from_generator(
            lambda: (tuple(dp) for dp in df), output_signature=(tf.TensorSpec([32, 64], tf.float32),))
        iterator = tf.compat.v1.data.make_initializable_iterator(ds.prefetch(4))
        batch, = iterator.get_next()
        fetch = accelerator_step(batch, t_ms)
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(iterator.initializer)
        return time_steps(sess.run, fetch, warmup, steps)


METHODS = [
    ("FeedInput (D+T baseline)", lambda d, t, w, s: measure_source(FeedInput, d, t, w, s)),
    ("QueueInput", lambda d, t, w, s: measure_source(QueueInput, d, t, w, s)),
    ("StagingInput(QueueInput)", lambda d, t, w, s: measure_source(
        lambda df: StagingInput(QueueInput(df), nr_stage=1, device="/cpu:0"), d, t, w, s)),
    ("tf.data from_generator+prefetch (peer)", measure_tf_data),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--t-ms", type=float, default=100.0, help="simulated accelerator step T (ms)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    rows, records = [], []
    for ratio in (0.5, 1.0, 2.0):
        d_ms, t_ms = ratio * args.t_ms, args.t_ms
        ideal = max(d_ms, t_ms)
        for name, measure in METHODS:
            step_ms = 1e3 * measure(d_ms, t_ms, args.warmup, args.steps)
            records.append({"method": name, "D_ms": d_ms, "T_ms": t_ms, "step_ms": step_ms,
                            "ratio_to_max": step_ms / ideal, "ratio_to_sum": step_ms / (d_ms + t_ms)})
            rows.append([ratio, name, "{:.1f}".format(step_ms), "{:.0f}".format(ideal), "{:.3f}".format(step_ms / ideal),
                         "{:.3f}".format(step_ms / (d_ms + t_ms))])
            print("D/T={} {:40s} {:.1f} ms".format(ratio, name, step_ms), flush=True)
    table = tabulate(rows, headers=["D/T", "method", "step ms", "max(D,T) ms", "step / max(D,T)",
                                    "step / (D+T)"], tablefmt="github")
    print(table)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"benchmark": "overlap", "machine": platform.platform(), "cpus": os.cpu_count(),
                   "tensorflow": tf.__version__, "args": vars(args), "results": records}, f, indent=2)
    print("wrote", RESULTS)


if __name__ == "__main__":
    main()
