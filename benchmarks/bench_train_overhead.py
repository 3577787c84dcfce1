"""Training overhead: a real ResNet fed by QueueInput+StagingInput vs DummyConstantInput.

The model is the example's (``examples/resnet_model.py``: CIFAR-style ResNet-14, 32x32x3 images,
batch 64, momentum SGD, batch norm updates), trained in TF1 graph mode on the CPU. Inputs:

* ``DummyConstantInput``: constant tensors, no input cost at all (the upper bound);
* ``StagingInput(QueueInput(df))``: the recommended path, from an in-memory DataFlow;
* ``QueueInput(df)`` alone;
* ``FeedInput(df)``: ``feed_dict`` every step (the slow baseline);
* ``TFDatasetInput`` over ``tf.data.Dataset.from_generator`` on the same DataFlow, prefetching.

Every source runs through its hooks in a plain session (``hooked_session``). Each is measured
``--repeats`` times, interleaved. Other load on the machine can only slow a run down, so the
best run of each is the headline figure (the median is shown beside it); ratios are to the dummy
input. Goal: StagingInput(QueueInput) >= 0.97x the dummy throughput.

    pip install -e ".[tf-cpu,bench]" && python benchmarks/bench_train_overhead.py

Prints a table and writes ``benchmarks/results/train_overhead.json``.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(REPO, "examples"), REPO]

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tabulate import tabulate  # noqa: E402

from inputpipe.dataflow import DataFromList  # noqa: E402
from inputpipe.input_source import (  # noqa: E402
    DummyConstantInput, FeedInput, QueueInput, StagingInput, TFDatasetInput, hooked_session)
from resnet_model import ModelConfig, build_train_graph  # noqa: E402

v1 = tf.compat.v1
BATCH, SIZE, CLASSES, DISTINCT_BATCHES = 64, 32, 10, 16


def in_memory_batches():
    rng = np.random.RandomState(0)
    return [[rng.standard_normal((BATCH, SIZE, SIZE, 3)).astype(np.float32),
             rng.randint(0, CLASSES, size=BATCH).astype(np.int32)] for _ in range(DISTINCT_BATCHES)]


def make_source(kind: str, batches):
    df = DataFromList(batches, shuffle=False)
    if kind == "dummy":
        return DummyConstantInput([[BATCH, SIZE, SIZE, 3], [BATCH]])
    if kind == "staging":
        return StagingInput(QueueInput(df))
    if kind == "queue":
        return QueueInput(df)
    if kind == "feed":
        return FeedInput(df)
    if kind == "dataset":
        dataset = TFDatasetInput.dataflow_to_dataset(df, [tf.float32, tf.int32]).repeat().prefetch(4)
        return TFDatasetInput(dataset)
    raise ValueError(kind)


LABELS = {
    "dummy": "DummyConstantInput (no input cost)",
    "staging": "StagingInput(QueueInput(df))",
    "queue": "QueueInput(df)",
    "feed": "FeedInput(df)",
    "dataset": "TFDatasetInput(from_generator(df).prefetch(4))",
}


def images_per_second(kind: str, batches, warmup: int, steps: int, depth: int) -> float:
    graph = tf.Graph()
    with graph.as_default():
        source = make_source(kind, batches)
        source.setup([tf.TensorSpec([BATCH, SIZE, SIZE, 3], tf.float32, "images"),
                      tf.TensorSpec([BATCH], tf.int32, "labels")])
        images, labels = source.get_input_tensors()
        model = build_train_graph(images, labels, ModelConfig("cifar", depth=depth, num_classes=CLASSES))
        init = v1.global_variables_initializer()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        with hooked_session(sess, source) as run:
            for _ in range(warmup):
                run(model.train_op)
            t0 = time.perf_counter()
            for _ in range(steps):
                run(model.train_op)
            elapsed = time.perf_counter() - t0
    return steps * BATCH / elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--depth", type=int, default=14, help="depth of the CIFAR-style ResNet")
    parser.add_argument("--inputs", nargs="+", default=list(LABELS), choices=list(LABELS))
    args = parser.parse_args()

    batches = in_memory_batches()
    measured = {kind: [] for kind in args.inputs}
    for repeat in range(args.repeats):
        for kind in args.inputs:
            speed = images_per_second(kind, batches, args.warmup, args.steps, args.depth)
            measured[kind].append(speed)
            print("repeat {}  {:<48} {:8.1f} images/s".format(repeat + 1, LABELS[kind], speed), flush=True)

    best = {kind: max(v) for kind, v in measured.items()}
    median = {kind: statistics.median(v) for kind, v in measured.items()}
    rows, records = [], []
    for kind in args.inputs:
        ratio = best[kind] / best["dummy"] if "dummy" in best else None
        median_ratio = median[kind] / median["dummy"] if "dummy" in median else None
        rows.append([LABELS[kind], "{:.1f}".format(best[kind]), "{:.1f}".format(1e3 * BATCH / best[kind]),
                     "{:.3f}x".format(ratio) if ratio else "-", "{:.1f}".format(median[kind]),
                     "{:.3f}x".format(median_ratio) if median_ratio else "-"])
        records.append({"input": kind, "label": LABELS[kind], "images_per_s_best": best[kind],
                        "images_per_s_median": median[kind], "images_per_s_runs": measured[kind],
                        "ratio_to_dummy_best": ratio, "ratio_to_dummy_median": median_ratio})
    headers = ["input (ResNet-{} CIFAR-style, batch {}, {}x{})".format(args.depth, BATCH, SIZE, SIZE),
               "images/s (best of {})".format(args.repeats), "ms/step", "vs DummyConstantInput",
               "images/s (median)", "vs dummy (median)"]
    print()
    print(tabulate(rows, headers=headers, tablefmt="github"))
    if "dummy" in best and "staging" in best:
        ratio = best["staging"] / best["dummy"]
        print("\nStagingInput(QueueInput) reaches {:.3f}x the dummy throughput (goal >= 0.97x): {}".format(
            ratio, "met" if ratio >= 0.97 else "NOT met"))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", "train_overhead.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"benchmark": "train_overhead", "model": "cifar ResNet-{}".format(args.depth), "batch": BATCH,
                   "image_size": SIZE, "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats,
                   "cpu_count": os.cpu_count(), "python": platform.python_version(),
                   "tensorflow": tf.__version__, "results": records}, f, indent=1)
    print("wrote", os.path.relpath(out, REPO))


if __name__ == "__main__":
    main()
