"""Transfer of large batches into the graph: 19 MB uint8 batches (128x224x224x3) from an
in-memory DataFlow through QueueInput, against single-thread memcpy bandwidth measured in the
same run and the peers ``tf.data.Dataset.from_generator`` + ``prefetch`` and tensorpack 0.11's
``QueueInput`` (where it works; otherwise the reason is printed and recorded). The train step
reads one element of each batch, so the figure is the bandwidth of the input path alone.

The DataFlow cycles over 4 numpy batches as numpy makes them (16-byte aligned): each is copied
once, and there is no way around that copy (TF shares only 64-byte aligned memory); QueueInput
has TF's concat kernel make it with the intra-op threads, off the GIL
(``inputpipe.input_source.realign``), the peers have TF's feed path make it in the feeding
thread. A second row feeds the same batches from 64-byte aligned memory
(``inputpipe.utils.buffers.aligned_empty``, what ``BatchData``, the wire format's zero-copy
decoding and the shared-memory channel of the parallel runners give), which TF shares without
any copy. The memcpy reference copies one batch into a warm buffer; a second reference copies
the 4 batches in turn, as the pipeline reads them. Every row is measured ``--repeats`` times, interleaved;
the table shows the median and the best. Writes benchmarks/results/transfer.json.

    python benchmarks/bench_transfer.py [--batches 60] [--repeats 5]
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
from inputpipe.input_source import QueueInput, StagingInput, hooked_session  # noqa: E402
from inputpipe.utils.buffers import aligned_empty  # noqa: E402
from memcpy_reference import copy_seconds  # noqa: E402
import tensorpack_peer  # noqa: E402

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


def measure_tensorpack(batches, warmup, steps):
    graph = tf.Graph()
    with graph.as_default():
        source, (images,) = tensorpack_peer.tensorpack_queue_tensors(InMemoryBatches(batches), SPECS)
        fetch = images[0, 0, 0, 0]
    with tf.compat.v1.Session(graph=graph) as sess, tensorpack_peer.run_tensorpack_queue(source, sess):
        return time_steps(sess.run, fetch, warmup, steps)


class SmallQueueInput(QueueInput):
    """QueueInput with an 8-batch queue (150 MB) instead of 50 (950 MB)."""

    default_capacity = 8


def small_queue(df):
    return SmallQueueInput(df)


def aligned_copy(batch: np.ndarray) -> np.ndarray:
    """A copy of ``batch`` in 64-byte aligned memory."""
    out = aligned_empty(batch.shape, batch.dtype)
    out[...] = batch
    return out


MEMCPY = "memcpy, 1 thread (reference)"
TENSORPACK = "tensorpack 0.11 QueueInput (peer)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 256, SHAPE, dtype=np.uint8) for _ in range(4)]
    aligned = [aligned_copy(b) for b in batches]
    nbytes = batches[0].nbytes
    tensorpack_missing = tensorpack_peer.unavailable_reason()
    if tensorpack_missing:
        print("{}: not measured: {}".format(TENSORPACK, tensorpack_missing), flush=True)
    methods = [
        (MEMCPY, lambda: copy_seconds([batches[0]], [np.empty_like(batches[0])], 32)),
        ("memcpy, 1 thread, the 4 batches in turn", lambda: copy_seconds(batches, [np.empty_like(batches[0])], 32)),
        ("QueueInput (capacity 8)", lambda: measure_source(small_queue, batches, args.warmup, args.batches)),
        ("StagingInput(QueueInput)", lambda: measure_source(
            lambda df: StagingInput(small_queue(df), nr_stage=1, device="/cpu:0"), batches, args.warmup,
            args.batches)),
        ("QueueInput, 64-byte aligned batches (zero copy)", lambda: measure_source(
            small_queue, aligned, args.warmup, args.batches)),
        ("tf.data from_generator+prefetch (peer)", lambda: measure_tf_data(batches, args.warmup, args.batches)),
    ]
    if not tensorpack_missing:
        methods.append((TENSORPACK, lambda: measure_tensorpack(batches, args.warmup, args.batches)))
    seconds = {name: [] for name, _ in methods}
    for repeat in range(args.repeats):
        for name, measure in methods:
            seconds[name].append(measure())
        print("repeat {}: {}".format(repeat + 1, ", ".join(
            "{} {:.2f} ms".format(name.split(" (")[0], 1e3 * seconds[name][-1]) for name, _ in methods)), flush=True)
    memcpy_median, memcpy_best = statistics.median(seconds[MEMCPY]), min(seconds[MEMCPY])
    rows, records = [], []
    for name, _ in methods:
        median, best = statistics.median(seconds[name]), min(seconds[name])
        records.append({"method": name, "ms_per_batch": median * 1e3, "best_ms_per_batch": best * 1e3,
                        "ms_repeats": [1e3 * t for t in seconds[name]], "GB_per_s": nbytes / median / 1e9,
                        "ratio_to_memcpy": memcpy_median / median, "best_ratio_to_memcpy": memcpy_best / best})
        rows.append([name, "{:.2f}".format(median * 1e3), "{:.2f}".format(best * 1e3),
                     "{:.2f}".format(nbytes / median / 1e9), "{:.2f}".format(memcpy_median / median),
                     "{:.2f}".format(memcpy_best / best)])
    if tensorpack_missing:
        records.append({"method": TENSORPACK, "not_measured": tensorpack_missing})
        rows.append([TENSORPACK, "n/a", "n/a", "n/a", "n/a", "n/a"])
    table = tabulate(rows, headers=["method", "ms / 19 MB batch (median)", "best", "GB/s (median)",
                                    "x memcpy (medians)", "x memcpy (bests)"], tablefmt="github")
    print(table)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"benchmark": "transfer", "machine": platform.platform(), "cpus": os.cpu_count(),
                   "tensorflow": tf.__version__, "numpy": np.__version__, "batch_bytes": nbytes,
                   "args": vars(args), "tensorpack_not_measured": tensorpack_missing, "results": records},
                  f, indent=2)
    print("wrote", RESULTS)


if __name__ == "__main__":
    main()
