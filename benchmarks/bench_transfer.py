"""Transfer of large batches into the graph: 19 MB uint8 batches (128x224x224x3) from an
in-memory DataFlow through QueueInput, against single-thread memcpy bandwidth measured in the
same run and the peer ``tf.data.Dataset.from_generator`` + ``prefetch``. The train step reads
one element of each batch, so the figure is the bandwidth of the input path alone.
Writes benchmarks/results/transfer.json.

    python benchmarks/bench_transfer.py [--batches 60]
"""
import argparse
import json
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tabulate import tabulate  # noqa: E402

from inputpipe.dataflow.base import DataFlow  # noqa: E402
from inputpipe.input_source import QueueInput, StagingInput, hooked_session  # noqa: E402

SHAPE = (128, 224, 224, 3)
SPECS = [tf.TensorSpec(SHAPE, tf.uint8, "images")]
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "transfer.json")


class InMemoryBatches(DataFlow):
    """Cycles endlessly over a few pre-made batches."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        while True:
            for batch in self.batches:
                yield [batch]


def memcpy_seconds(src: np.ndarray, repeats: int) -> float:
    dst = np.empty_like(src)
    np.copyto(dst, src)
    start = time.perf_counter()
    for _ in range(repeats):
        np.copyto(dst, src)
    return (time.perf_counter() - start) / repeats


def time_steps(run, fetch, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        run(fetch)
    start = time.perf_counter()
    for _ in range(steps):
        run(fetch)
    return (time.perf_counter() - start) / steps


def measure_source(make_source, batches, warmup, steps):
    source = make_source(InMemoryBatches(batches))
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        images, = source.get_input_tensors()
        fetch = images[0, 0, 0, 0]
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        return time_steps(run, fetch, warmup, steps)


def measure_tf_data(batches, warmup, steps):
    df = InMemoryBatches(batches)
    graph = tf.Graph()
    with graph.as_default():
        ds = tf.data.Dataset.from_generator(lambda: (tuple(dp) for dp in df),
                                            output_signature=(tf.TensorSpec(SHAPE, tf.uint8),))
        iterator = tf.compat.v1.data.make_initializable_iterator(ds.prefetch(4))
        images, = iterator.get_next()
        fetch = images[0, 0, 0, 0]
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(iterator.initializer)
        return time_steps(sess.run, fetch, warmup, steps)


class SmallQueueInput(QueueInput):
    """QueueInput with an 8-batch queue (150 MB) instead of 50 (950 MB)."""

    default_capacity = 8


def small_queue(df):
    return SmallQueueInput(df)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 256, SHAPE, dtype=np.uint8) for _ in range(4)]
    nbytes = batches[0].nbytes
    memcpy = memcpy_seconds(batches[0], 30)
    rows, records = [], []
    entries = [("memcpy, 1 thread (reference)", memcpy)]
    entries.append(("QueueInput (capacity 8)", measure_source(small_queue, batches, args.warmup, args.batches)))
    entries.append(("StagingInput(QueueInput)", measure_source(
        lambda df: StagingInput(small_queue(df), nr_stage=1, device="/cpu:0"), batches, args.warmup, args.batches)))
    entries.append(("tf.data from_generator+prefetch (peer)", measure_tf_data(batches, args.warmup, args.batches)))
    for name, seconds in entries:
        gbps = nbytes / seconds / 1e9
        ratio = memcpy / seconds
        records.append({"method": name, "ms_per_batch": seconds * 1e3, "GB_per_s": gbps, "ratio_to_memcpy": ratio})
        rows.append([name, "{:.2f}".format(seconds * 1e3), "{:.2f}".format(gbps), "{:.2f}".format(ratio)])
    table = tabulate(rows, headers=["method", "ms / 19 MB batch", "GB/s", "x memcpy"], tablefmt="github")
    print(table)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"benchmark": "transfer", "machine": platform.platform(), "cpus": os.cpu_count(),
                   "tensorflow": tf.__version__, "batch_bytes": nbytes, "args": vars(args), "results": records},
                  f, indent=2)
    print("wrote", RESULTS)


if __name__ == "__main__":
    main()
