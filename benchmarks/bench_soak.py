"""Soak: long runs through worker processes into the graph, watching throughput and memory.

Two pipelines run one after the other, each fed into a TF session by ``QueueInput`` and read by
a train step that touches every batch:

- **small**: ``--datapoints`` (1,000,000) small datapoints (an index and 16 floats) through
  ``MultiProcessMapData`` (2 processes) -> ``BatchData(256)`` -> ``QueueInput``: the per-datapoint
  overhead of the channels and the scheduler, for a long time;
- **large**: ``--batches`` (2,000) batches of 19 MB (128 images of 224x224x3 uint8, made and
  stacked in the workers by ``MultiProcessMapAndBatchData``) -> ``QueueInput``: the shared-memory
  path, region reuse and the realigning enqueue, for a long time.

While each runs, the resident memory (RSS) of the trainer process and of each worker process is
sampled at every 5 % of the run. The figure of merit is the growth from 10 % to 100 % of the run
(the first 10 % are warm-up: queues fill, shared memory is reserved, caches warm): the target is
under 20 MB for the trainer and for each worker. Throughput is datapoints (or batches, and bytes)
per second over the same 10-100 % span. Worker RSS counts the shared memory they touched, so it
is also shown as USS (memory only that process holds).

There is no peer in this benchmark: it checks inputpipe against itself over time.

    python benchmarks/bench_soak.py                # the full run (about 10-20 minutes)
    python benchmarks/bench_soak.py --quick        # a smoke run: 20,000 datapoints, 40 batches

Prints a table and writes ``benchmarks/results/soak.json`` (``soak_quick.json`` with --quick).
"""
import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import tensorflow as tf  # noqa: E402
from tabulate import tabulate  # noqa: E402

from inputpipe.dataflow import BatchData, DataFlow, MultiProcessMapAndBatchData, MultiProcessMapData  # noqa: E402
from inputpipe.input_source import QueueInput, hooked_session  # noqa: E402

SMALL_BATCH = 256
IMAGE = (224, 224, 3)
LARGE_BATCH = 128
SAMPLE_EVERY = 0.05          # of the run
TARGET_GROWTH_MB = 20.0


class Indices(DataFlow):
    """``[i]`` for i in range(n)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield [i]


def small_datapoint(dp):
    """An index and 16 floats."""
    return [dp[0], np.full(16, dp[0] % 1000, np.float32)]


def image_datapoint(dp):
    """One 224x224x3 uint8 image filled with the index's low byte, and its label."""
    return [np.full(IMAGE, dp[0] % 251, np.uint8), dp[0]]


class SmallQueueInput(QueueInput):
    """QueueInput with an 8-batch queue (150 MB of large batches instead of 950 MB)."""

    default_capacity = 8


def _rss_mb(pids):
    """``{pid: (rss MB, uss MB, anonymous MB)}`` of the processes still alive; anonymous memory is
    RSS without file-backed and shared-memory pages (the workers' segments), where a leak would show."""
    out = {}
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out[pid] = (info.rss / 2 ** 20, info.uss / 2 ** 20, (info.rss - info.shared) / 2 ** 20)
    return out


def soak(name, df, signature, steps, per_step, nbytes_per_step, worker_pids):
    """Run ``steps`` train steps on ``df`` through QueueInput; sample memory; returns a record."""
    source = SmallQueueInput(df)
    graph = tf.Graph()
    with graph.as_default():
        source.setup(signature)
        tensors = source.get_input_tensors()
        fetch = tf.add_n([tf.reduce_sum(tf.cast(tf.reshape(t, [-1])[:8], tf.float64)) for t in tensors])
    trainer = os.getpid()
    samples = []                 # (fraction of the run, seconds, {pid: (rss, uss)})
    next_sample = 0.0
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        start = time.perf_counter()
        for step in range(steps + 1):
            fraction = step / steps
            if fraction >= next_sample:
                samples.append((fraction, time.perf_counter() - start, _rss_mb([trainer] + worker_pids())))
                next_sample += SAMPLE_EVERY
            if step < steps:
                run(fetch)
    return _summarise(name, samples, steps, per_step, nbytes_per_step, trainer)


def _at(samples, fraction):
    return min(samples, key=lambda s: abs(s[0] - fraction))


def _summarise(name, samples, steps, per_step, nbytes_per_step, trainer):
    early, last = _at(samples, 0.1), samples[-1]
    seconds = last[1] - early[1]
    done = steps * (last[0] - early[0])
    pids = sorted(set(early[2]) & set(last[2]), key=lambda p: (p != trainer, p))
    processes = []
    for pid in pids:
        role = "trainer" if pid == trainer else "worker {}".format(pids.index(pid))
        series = [s[2][pid][0] for s in samples if pid in s[2]]
        processes.append({
            "process": role, "pid": pid,
            "rss_mb_at_10pct": early[2][pid][0], "rss_mb_at_100pct": last[2][pid][0],
            "rss_growth_mb": last[2][pid][0] - early[2][pid][0],
            "uss_growth_mb": last[2][pid][1] - early[2][pid][1],
            "anonymous_growth_mb": last[2][pid][2] - early[2][pid][2],
            "rss_mb_max": max(series), "rss_mb_series": series,
        })
    return {
        "pipeline": name, "steps": steps, "datapoints": steps * per_step,
        "datapoints_per_s": done * per_step / seconds, "steps_per_s": done / seconds,
        "MB_per_s": done * nbytes_per_step / seconds / 1e6, "seconds_10_to_100pct": seconds,
        "processes": processes,
        "within_target": all(p["rss_growth_mb"] < TARGET_GROWTH_MB for p in processes),
    }


def run_small(datapoints):
    mapped = MultiProcessMapData(Indices(datapoints), 2, small_datapoint, buffer_size=2048)
    df = BatchData(mapped, SMALL_BATCH)
    steps = datapoints // SMALL_BATCH
    signature = [tf.TensorSpec((SMALL_BATCH,), tf.int64, "index"),
                 tf.TensorSpec((SMALL_BATCH, 16), tf.float32, "values")]
    return soak("small: MultiProcessMapData(2) -> BatchData(256) -> QueueInput", df, signature, steps,
                SMALL_BATCH, SMALL_BATCH * (8 + 64), lambda: mapped.worker_pids)


def run_large(batches):
    df = MultiProcessMapAndBatchData(Indices(10 ** 9), 2, image_datapoint, batch_size=LARGE_BATCH)
    signature = [tf.TensorSpec((LARGE_BATCH,) + IMAGE, tf.uint8, "images"),
                 tf.TensorSpec((LARGE_BATCH,), tf.int64, "labels")]
    nbytes = LARGE_BATCH * int(np.prod(IMAGE))
    return soak("large: MultiProcessMapAndBatchData(2, 128 images) 19 MB batches -> QueueInput", df, signature,
                batches, LARGE_BATCH, nbytes, lambda: df.worker_pids)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datapoints", type=int, default=1000000)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20,000 datapoints and 40 batches")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.quick:
        args.datapoints, args.batches = 20000, 40
    out = args.out or os.path.join(HERE, "results", "soak_quick.json" if args.quick else "soak.json")
    records = []
    for run, count in ((run_small, args.datapoints), (run_large, args.batches)):
        record = run(count)
        records.append(record)
        print("{}: {:.0f} datapoints/s, {:.1f} MB/s".format(record["pipeline"], record["datapoints_per_s"],
                                                           record["MB_per_s"]), flush=True)
    rows = []
    for record in records:
        for proc in record["processes"]:
            rows.append([record["pipeline"].split(":")[0], "{:.0f}".format(record["datapoints_per_s"]),
                         "{:.0f}".format(record["MB_per_s"]), proc["process"],
                         "{:.1f}".format(proc["rss_mb_at_10pct"]), "{:.1f}".format(proc["rss_mb_at_100pct"]),
                         "{:+.1f}".format(proc["rss_growth_mb"]), "{:+.1f}".format(proc["uss_growth_mb"]),
                         "{:+.1f}".format(proc["anonymous_growth_mb"]),
                         "yes" if proc["rss_growth_mb"] < TARGET_GROWTH_MB else "NO"])
    print(tabulate(rows, headers=["pipeline", "datapoints/s", "MB/s", "process", "RSS MB at 10%", "at 100%",
                                  "RSS growth MB", "USS growth MB",
                                  "anonymous growth MB", "< 20 MB"], tablefmt="github"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"benchmark": "soak", "machine": platform.platform(), "cpus": os.cpu_count(),
                   "tensorflow": tf.__version__, "numpy": np.__version__, "args": vars(args),
                   "target_growth_mb": TARGET_GROWTH_MB, "results": records}, f, indent=2)
    print("wrote", out)


if __name__ == "__main__":
    main()
