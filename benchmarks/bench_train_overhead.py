"""Training overhead: a real ResNet fed by QueueInput+StagingInput vs DummyConstantInput.

The model is the example's (``examples/resnet_model.py``: CIFAR-style ResNet-14, 32x32x3 images,
batch 64, momentum SGD, batch norm updates), trained in TF1 graph mode on the CPU. Inputs:

* ``DummyConstantInput``: constant tensors, no input cost at all (the upper bound); its tensors
  are zeros, as in tensorpack;
* ``TensorInput`` of one real batch as constants: no input cost either, but real pixel values,
  so it shows what the model's compute on zeros alone is worth (the second reference); two more
  references on request (``--inputs``): ``ones`` (constant ones) and ``zeros_variable`` (zeros
  read from a variable every step, not a constant), which tell zero *values* from constants;
* ``StagingInput(QueueInput(df))``: from an in-memory DataFlow in the training process (its
  batches in 64-byte aligned memory, as ``BatchData`` makes them);
* ``StagingInput(QueueInput(df of zeros))``: the same with the dummy input's values, so the model
  computes exactly what it computes on ``DummyConstantInput`` and only the input's cost differs
  (and tensorpack's StagingInput on the same zeros as its peer);
* ``StagingInput(QueueInput(df, in_worker=True))``: the recommended path, the DataFlow in a
  worker process (only receiving and enqueueing left in the training process);
* ``QueueInput(df)`` alone;
* ``FeedInput(df)``: ``feed_dict`` every step (the slow baseline);
* ``TFDatasetInput`` over ``tf.data.Dataset.from_generator`` on the same DataFlow, prefetching;
* tensorpack 0.11's ``StagingInput(QueueInput(df))`` (the peer; skipped when tensorpack is missing).

Every source has its own graph and session and runs through its hooks (``hooked_session``).
All are built first, then trained in short interleaved rounds (``--steps-per-round`` steps each,
the order rotating every round), so load from elsewhere on the machine hits all of them alike.
Reported: total images/s, its ratio to the dummy input, and the median over rounds of the ratio
to the same round's dummy run and to the same round's constant real batch. Goal:
StagingInput(QueueInput) and its in_worker variant >= 0.99x the dummy throughput (median of the
per-round ratios, quiet host). ``--quick`` is a smoke run (ResNet-8, 2 rounds of 2 steps).

    pip install -e ".[tf-cpu,bench]" && python benchmarks/bench_train_overhead.py

Prints a table and writes ``benchmarks/results/train_overhead.json``.
"""
import argparse
import contextlib
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
from inputpipe.utils.buffers import aligned_empty  # noqa: E402
from inputpipe.input_source import (  # noqa: E402
    DummyConstantInput, FeedInput, QueueInput, StagingInput, TensorInput, TFDatasetInput, hooked_session)
from resnet_model import ModelConfig, build_train_graph  # noqa: E402
import tensorpack_peer  # noqa: E402

v1 = tf.compat.v1
BATCH, SIZE, CLASSES, DISTINCT_BATCHES = 64, 32, 10, 16


def in_memory_batches(zeros: bool = False):
    """The DataFlow's batches, in 64-byte aligned memory as ``BatchData`` makes them (TF then shares
    them instead of copying). ``zeros``: the values of ``DummyConstantInput``, so that the model's
    compute is the same as on the dummy input and only the input's own cost differs."""
    rng = np.random.RandomState(0)
    batches = []
    for _ in range(DISTINCT_BATCHES):
        images = aligned_empty((BATCH, SIZE, SIZE, 3), np.float32)
        images[...] = 0.0 if zeros else rng.standard_normal(images.shape)
        labels = np.zeros(BATCH, np.int32) if zeros else rng.randint(0, CLASSES, size=BATCH).astype(np.int32)
        batches.append([images, labels])
    return batches


ZERO_DATA = ("staging_zeros", "tensorpack_staging_zeros")


def make_source(kind: str, batches):
    df = DataFromList(in_memory_batches(zeros=True) if kind in ZERO_DATA else batches, shuffle=False)
    if kind == "dummy":
        return DummyConstantInput([[BATCH, SIZE, SIZE, 3], [BATCH]])
    if kind == "constant_batch":
        return TensorInput(lambda: [tf.constant(batches[0][0]), tf.constant(batches[0][1])])
    if kind == "ones":
        return TensorInput(lambda: [tf.ones([BATCH, SIZE, SIZE, 3]), tf.ones([BATCH], tf.int32)])
    if kind == "zeros_variable":
        return TensorInput(lambda: [v1.get_variable("zero_images", initializer=tf.zeros([BATCH, SIZE, SIZE, 3]),
                                                    trainable=False).read_value(), tf.zeros([BATCH], tf.int32)])
    if kind in ("staging", "staging_zeros"):
        return StagingInput(QueueInput(df))
    if kind == "staging_worker":
        return StagingInput(QueueInput(df, in_worker=True))
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
    "constant_batch": "TensorInput(a real batch as constants)",
    "ones": "TensorInput(ones as constants)",
    "zeros_variable": "TensorInput(zeros read from a variable)",
    "staging": "StagingInput(QueueInput(df))",
    "staging_zeros": "StagingInput(QueueInput(df of zeros))",
    "staging_worker": "StagingInput(QueueInput(df, in_worker=True))",
    "queue": "QueueInput(df)",
    "feed": "FeedInput(df)",
    "dataset": "TFDatasetInput(from_generator(df).prefetch(4))",
    "tensorpack_staging": "tensorpack 0.11 StagingInput(QueueInput(df)) (peer)",
    "tensorpack_staging_zeros": "tensorpack 0.11 StagingInput(QueueInput(df of zeros)) (peer)",
}
SPECS = [tf.TensorSpec([BATCH, SIZE, SIZE, 3], tf.float32, "images"), tf.TensorSpec([BATCH], tf.int32, "labels")]


class Trainee:
    """One input source with its own graph, session and hooks, ready to run steps."""

    def __init__(self, kind: str, batches, depth: int, stack: contextlib.ExitStack):
        self.kind = kind
        graph = tf.Graph()
        with graph.as_default():
            if kind.startswith("tensorpack_staging"):
                source, (images, labels), hook = tensorpack_peer.tensorpack_staging_tensors(
                    DataFromList(in_memory_batches(zeros=True) if kind in ZERO_DATA else batches, shuffle=False),
                    SPECS)
            else:
                source = make_source(kind, batches)
                source.setup(SPECS)
                images, labels = source.get_input_tensors()
            self.train_op = build_train_graph(images, labels, ModelConfig("cifar", depth=depth,
                                                                          num_classes=CLASSES)).train_op
            init = v1.global_variables_initializer()
        sess = stack.enter_context(v1.Session(graph=graph))
        sess.run(init)
        if kind.startswith("tensorpack_staging"):
            stack.enter_context(tensorpack_peer.run_tensorpack_staging(source, sess))
            self.run = stack.enter_context(hooked_session(sess, hook))
        else:
            self.run = stack.enter_context(hooked_session(sess, source))
        self.seconds, self.steps, self.round_rates = 0.0, 0, []

    def timed_steps(self, steps: int) -> None:
        t0 = time.perf_counter()
        for _ in range(steps):
            self.run(self.train_op)
        elapsed = time.perf_counter() - t0
        self.seconds += elapsed
        self.steps += steps
        self.round_rates.append(steps * BATCH / elapsed)

    @property
    def images_per_second(self) -> float:
        return self.steps * BATCH / self.seconds


def measure(kinds, batches, depth: int, warmup: int, rounds: int, steps_per_round: int):
    """Run every source's steps in short interleaved rounds (rotating the order), so load from
    elsewhere on the machine hits all of them alike."""
    with contextlib.ExitStack() as stack:
        trainees = [Trainee(kind, batches, depth, stack) for kind in kinds]
        for trainee in trainees:
            for _ in range(warmup):
                trainee.run(trainee.train_op)
        for r in range(rounds):
            for i in range(len(trainees)):
                trainees[(i + r) % len(trainees)].timed_steps(steps_per_round)
        return {t.kind: (t.images_per_second, t.round_rates) for t in trainees}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds")
    parser.add_argument("--steps-per-round", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--depth", type=int, default=14, help="depth of the CIFAR-style ResNet")
    parser.add_argument("--inputs", nargs="+", default=[k for k in LABELS if k not in ("ones", "zeros_variable")],
                        choices=list(LABELS))
    parser.add_argument("--quick", action="store_true", help="smoke run: ResNet-8, 2 rounds of 2 steps, 2 warm-up")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps_per_round, args.warmup, args.depth = 2, 2, 2, 8
    kinds = ["dummy", "constant_batch"] + [k for k in args.inputs if k not in ("dummy", "constant_batch")]
    tensorpack_missing = tensorpack_peer.unavailable_reason()
    for peer in ("tensorpack_staging", "tensorpack_staging_zeros"):
        if peer in kinds and tensorpack_missing:
            print("{}: not measured: {}".format(LABELS[peer], tensorpack_missing), flush=True)
            kinds.remove(peer)

    results = measure(kinds, in_memory_batches(), args.depth, args.warmup, args.rounds, args.steps_per_round)
    dummy_rate, dummy_rounds = results["dummy"]
    constant_rounds = results["constant_batch"][1]
    rows, records = [], []
    for kind in kinds:
        rate, rounds = results[kind]
        # the same round's reference run is the fairest reference under changing load
        paired = statistics.median(r / d for r, d in zip(rounds, dummy_rounds))
        paired_constant = statistics.median(r / c for r, c in zip(rounds, constant_rounds))
        rows.append([LABELS[kind], "{:.1f}".format(rate), "{:.1f}".format(1e3 * BATCH / rate),
                     "{:.3f}x".format(rate / dummy_rate), "{:.3f}x".format(paired),
                     "{:.3f}x".format(paired_constant)])
        records.append({"input": kind, "label": LABELS[kind], "images_per_s": rate,
                        "ratio_to_dummy": rate / dummy_rate, "median_round_ratio_to_dummy": paired,
                        "median_round_ratio_to_constant_batch": paired_constant,
                        "images_per_s_per_round": rounds})
    headers = ["input (ResNet-{} CIFAR-style, batch {}, {}x{})".format(args.depth, BATCH, SIZE, SIZE),
               "images/s", "ms/step", "vs DummyConstantInput", "median per-round ratio",
               "median per-round ratio to the real constant batch"]
    print(tabulate(rows, headers=headers, tablefmt="github"))
    for kind, goal in (("staging", 0.99), ("staging_zeros", 0.99), ("staging_worker", 0.99)):
        found = [r for r in records if r["input"] == kind]
        if found:
            ratio = found[0]["median_round_ratio_to_dummy"]
            print("{} reaches {:.3f}x the dummy throughput (median per round; goal >= {}x): {}".format(
                LABELS[kind], ratio, goal, "met" if ratio >= goal else "NOT met"))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", "train_overhead{}.json".format("_quick" if args.quick else ""))
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"benchmark": "train_overhead", "model": "cifar ResNet-{}".format(args.depth), "batch": BATCH,
                   "image_size": SIZE, "rounds": args.rounds, "steps_per_round": args.steps_per_round,
                   "warmup": args.warmup,
                   "cpu_count": os.cpu_count(), "python": platform.python_version(),
                   "tensorflow": tf.__version__, "results": records}, f, indent=1)
    print("wrote", os.path.relpath(out, REPO))


if __name__ == "__main__":
    main()
