#!/usr/bin/env python
"""Train a tf.estimator model on audio clips read and post-processed in Python, with EstimatorInput.

The scenario of an Estimator user whose ``input_fn`` takes twice the train step to prepare a batch
(Python reading and post-processing of audio files, batches of 128): the data work per batch is
set to ``--data-ratio`` times the step (2 by default) on one core, and the accelerator's step is a
``--step-ms`` wait during which the CPU is free (the machine has no GPU). Two worker processes
prepare the clips, the batches are staged on the model's device, and train()/evaluate() cycles
continue the training stream exactly where the last one stopped while every evaluation reads the
whole evaluation set once.

It prints the model's own step time (a constant input, no data work), then per cycle the time
from each ``input_fn`` call to its first batch, and a summary: examples/s, the step time against
the model's own, the evaluation accuracy.

    python examples/train_estimator.py                    # about a minute on 2 cores
    python examples/train_estimator.py --cycles 5 --steps 40 --step-ms 200 --workers 3

tf.estimator exists up to TensorFlow 2.15 (with tensorflow-estimator) and in 1.15; see the README
for the install line of that stack.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # run from a checkout without installing

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tabulate import tabulate  # noqa: E402

import audio_clips  # noqa: E402
from inputpipe.dataflow import BatchData, DataFromList, MultiProcessMapData  # noqa: E402
from inputpipe.estimator import EstimatorInput  # noqa: E402

STACK_HINT = ("tf.estimator is not part of TensorFlow {}: it exists up to TF 2.15. Install that stack with\n"
              "    pip install 'tensorflow-cpu==2.15.*' 'tensorflow-estimator==2.15.*' 'numpy<2' && pip install -e .")

SPECS = [tf.TensorSpec([None, audio_clips.FRAMES, audio_clips.MEL_BINS], tf.float32, "features"),
         tf.TensorSpec([None], tf.int64, "label")]


class StepTimes(tf.compat.v1.train.SessionRunHook):
    """Wall time of every training step (the run that fetches the train op), per session."""

    def __init__(self) -> None:
        self.sessions: List[List[float]] = []

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.sessions.append([])
        self._start: Optional[float] = None

    def before_run(self, run_context: Any) -> None:
        self._start = time.perf_counter()

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self._start is not None:
            self.sessions[-1].append(time.perf_counter() - self._start)

    def steady(self, skip: int = 2) -> List[float]:
        """Every session's step times without its first ``skip`` steps."""
        return [t for times in self.sessions for t in times[skip:]]


class FirstBatch:
    """The time from each ``input_fn`` call to the moment its first batch reached the model."""

    def __init__(self) -> None:
        self.calls: List[float] = []
        self.arrivals: List[Optional[float]] = []

    def wrap(self, input_fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed_input_fn(mode: Any = None) -> Any:
            self.calls.append(time.perf_counter())
            self.arrivals.append(None)
            return input_fn(mode=mode)
        return timed_input_fn

    def mark(self, tensor: tf.Tensor) -> tf.Tensor:
        """``tensor``, after noting (once per input_fn call) when a step first read it."""
        def note(value: np.ndarray) -> np.ndarray:
            if self.arrivals and self.arrivals[-1] is None:
                self.arrivals[-1] = time.perf_counter()
            return value
        marked = tf.numpy_function(note, [tensor], tensor.dtype, name="first_batch_time")
        marked.set_shape(tensor.shape)
        return marked

    def delays(self) -> List[float]:
        return [a - c for c, a in zip(self.calls, self.arrivals) if a is not None]


def make_model_fn(step_ms: float, first_batch: Optional[FirstBatch] = None) -> Callable[..., Any]:
    """A small classifier over the log-mel features, whose train step also waits ``step_ms`` (the
    accelerator's work; the CPU is free meanwhile)."""
    def model_fn(features: Any, labels: Any, mode: str) -> Any:
        x = features["features"] if isinstance(features, dict) else features
        if first_batch is not None:
            x = first_batch.mark(x)
        pooled = tf.concat([tf.reduce_mean(x, axis=1), tf.math.reduce_std(x, axis=1)], axis=1)
        hidden_w = tf.compat.v1.get_variable("hidden_w", [2 * audio_clips.MEL_BINS, 64])
        out_w = tf.compat.v1.get_variable("out_w", [64, audio_clips.CLASSES])
        logits = tf.matmul(tf.nn.relu(tf.matmul(pooled, hidden_w)), out_w)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"class": tf.argmax(logits, 1)})
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        accelerator = tf.numpy_function(lambda: time.sleep(step_ms / 1e3) or np.float32(0), [], tf.float32,
                                        name="accelerator_step")
        with tf.control_dependencies([accelerator]):
            loss = tf.identity(loss)
        if mode == tf.estimator.ModeKeys.EVAL:
            accuracy = tf.compat.v1.metrics.accuracy(labels, tf.argmax(logits, 1))
            return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={"accuracy": accuracy})
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.train.AdamOptimizer(3e-3).minimize(loss, global_step=step)
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
    return model_fn


def make_estimator(model_dir: str, model_fn: Callable[..., Any]) -> Any:
    config = tf.estimator.RunConfig(model_dir=model_dir, save_checkpoints_steps=10 ** 6,
                                    save_summary_steps=10 ** 6, log_step_count_steps=10 ** 6)
    return tf.estimator.Estimator(model_fn, config=config)


def calibrate_python_ms(paths: List[str], labels: List[int], batch: int, step_ms: float, ratio: float) -> float:
    """The Python work per clip that makes a batch cost ``ratio`` steps of CPU on one core."""
    start = time.thread_time()
    for path, label in zip(paths[:64], labels[:64]):
        audio_clips.load_clip(path, label)
    base_ms = (time.thread_time() - start) / 64 * 1e3
    return max(0.0, ratio * step_ms / batch - base_ms)


def model_step_ms(model_dir: str, step_ms: float, batch: int, steps: int) -> float:
    """The median step of the model on a constant input (no data work at all)."""
    def constant_input_fn() -> Any:
        return ({"features": tf.zeros([batch, audio_clips.FRAMES, audio_clips.MEL_BINS])},
                tf.zeros([batch], tf.int64))
    times = StepTimes()
    make_estimator(model_dir, make_model_fn(step_ms)).train(constant_input_fn, steps=steps, hooks=[times])
    return statistics.median(times.steady()) * 1e3


def audio_flow(paths: List[str], labels: List[int], workers: int, batch: int, python_ms: float,
               training: bool) -> Any:
    """The clips read and post-processed by ``workers`` processes, in batches (training: a new
    order every epoch; evaluation: file order, the last batch smaller)."""
    def load(item: List[Any]) -> List[np.ndarray]:
        return audio_clips.load_clip(item[0], item[1], python_ms)
    files = DataFromList([[path, label] for path, label in zip(paths, labels)], shuffle=training)
    loaded = MultiProcessMapData(files, workers, load, strict=True, ordered=not training)
    return BatchData(loaded, batch, remainder=not training)


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", type=int, default=1024, help="training clips")
    parser.add_argument("--eval-clips", type=int, default=200, help="evaluation clips")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--step-ms", type=float, default=100.0, help="the accelerator's time per step")
    parser.add_argument("--data-ratio", type=float, default=2.0,
                        help="data work per batch on one core, in train steps")
    parser.add_argument("--workers", type=int, default=2, help="processes preparing clips")
    parser.add_argument("--cycles", type=int, default=3, help="train()/evaluate() cycles")
    parser.add_argument("--steps", type=int, default=20, help="train steps per cycle")
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "inputpipe-audio-clips"))
    args = parser.parse_args(argv)
    if not hasattr(tf, "estimator") or not hasattr(tf.estimator, "Estimator"):
        print(STACK_HINT.format(tf.__version__), file=sys.stderr)
        raise SystemExit(2)
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)

    paths, labels = audio_clips.make_clips(os.path.join(args.data_dir, "train"), args.clips, seed=0)
    eval_paths, eval_labels = audio_clips.make_clips(os.path.join(args.data_dir, "eval"), args.eval_clips, seed=1)
    python_ms = calibrate_python_ms(paths, labels, args.batch, args.step_ms, args.data_ratio)
    print("data: {} training / {} evaluation clips, batches of {}; {:.1f} ms of Python work per clip makes a batch "
          "{:.0f} ms on one core ({}x the {:.0f} ms step); {} worker processes".format(
              args.clips, args.eval_clips, args.batch, python_ms, args.data_ratio * args.step_ms, args.data_ratio,
              args.step_ms, args.workers))
    with tempfile.TemporaryDirectory() as scratch:
        own_ms = model_step_ms(os.path.join(scratch, "constant"), args.step_ms, args.batch, args.steps)
        print("the model's own step (constant input): {:.1f} ms".format(own_ms))
        times, first = StepTimes(), FirstBatch()
        estimator = make_estimator(os.path.join(scratch, "model"), make_model_fn(args.step_ms, first))
        train = EstimatorInput(audio_flow(paths, labels, args.workers, args.batch, python_ms, True), SPECS,
                               labels="label")
        evaluation = EstimatorInput(audio_flow(eval_paths, eval_labels, args.workers, args.batch, python_ms, False),
                                    SPECS, labels="label")
        rows, started = [], time.perf_counter()
        with train, evaluation:
            for cycle in range(args.cycles):
                estimator.train(first.wrap(train.input_fn), steps=args.steps, hooks=train.hooks + [times])
                train_delay = first.delays()[-1]
                metrics = estimator.evaluate(first.wrap(evaluation.input_fn), hooks=evaluation.hooks)
                rows.append([cycle + 1, "{:.2f}".format(train_delay), "{:.2f}".format(first.delays()[-1]),
                             "{:.3f}".format(metrics["accuracy"]), int(metrics["global_step"])])
                print("cycle {}/{}: accuracy {:.3f}".format(cycle + 1, args.cycles, metrics["accuracy"]))
        elapsed = time.perf_counter() - started
    print()
    print(tabulate(rows, ["cycle", "train input_fn -> 1st batch s", "eval input_fn -> 1st batch s", "accuracy",
                          "global step"], tablefmt="simple"))
    step_ms = statistics.median(times.steady()) * 1e3
    summary = {"examples_per_s": args.batch * 1e3 / step_ms, "step_ms": step_ms, "model_step_ms": own_ms,
               "step_over_model": step_ms / own_ms, "first_batch_s": first.delays(), "elapsed_s": elapsed}
    print()
    print(tabulate([
        ["examples/s (training)", "{:.0f}".format(summary["examples_per_s"])],
        ["step time (median, training)", "{:.1f} ms".format(step_ms)],
        ["the model's own step", "{:.1f} ms ({:.2f}x)".format(own_ms, summary["step_over_model"])],
        ["data work per batch, one core", "{:.0f} ms".format(args.data_ratio * args.step_ms)],
        ["train/evaluate cycles", "{} in {:.1f} s".format(args.cycles, elapsed)],
    ], tablefmt="simple_grid"))
    return summary


if __name__ == "__main__":
    main()
