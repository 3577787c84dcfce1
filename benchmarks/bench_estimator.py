"""tf.estimator input: the tf.data ``py_function`` input_fn an Estimator user writes, against
EstimatorInput, on the same Python work and cores.

The work is the scenario of examples/train_estimator.py: audio clips read and post-processed in
Python (log-mel features plus calibrated Python clean-up), batches of 128, the data work per batch
``--data-ratio`` times the step on one core; the step is the model plus a ``--step-ms`` wait during
which the CPU is free (the accelerator). Each method runs ``--cycles`` train(steps)/evaluate()
cycles in a fresh Estimator:

- ``constant``: a constant input (the model's own step time, no data work at all);
- ``tf.data``: ``from_tensor_slices(files)`` -> ``map(tf.py_function(load), num_parallel_calls=AUTOTUNE)``
  -> ``batch`` -> ``prefetch(AUTOTUNE)``, a new pipeline per input_fn call (as Estimator makes it);
- ``inputpipe``: ``EstimatorInput(BatchData(MultiProcessMapData(files, --workers, load), 128))``
  with staging, one pipeline for every call.

Reported per method (median over ``--rounds`` alternating rounds, and the spread): examples/s and
the step time of the training steps (the first two of each train() call left out), the step over
the model's own step, and the time from each input_fn call to its first batch reaching the model
(train calls after the first, and evaluation calls after the first), with the part of it that the
input_fn and its hooks took (the rest is Estimator's own: the graph, the session, the checkpoint,
slower where the data's workers share the cores). Every method evaluates between train calls. Prints a table and writes
benchmarks/results/estimator.json. Needs tf.estimator (TensorFlow <= 2.15 with tensorflow-estimator).

    python benchmarks/bench_estimator.py [--rounds 3] [--cycles 3] [--steps 20] [--workers 2]
    python benchmarks/bench_estimator.py --quick
"""
import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import tensorflow as tf  # noqa: E402
from tabulate import tabulate  # noqa: E402

import audio_clips  # noqa: E402
from inputpipe.estimator import EstimatorInput  # noqa: E402
from train_estimator import (  # noqa: E402
    SPECS, STACK_HINT, FirstBatch, StepTimes, audio_flow, calibrate_python_ms, make_estimator, make_model_fn)

RESULTS = os.path.join(HERE, "results", "estimator.json")
METHODS = ("constant", "tf.data", "inputpipe")


def tf_data_input_fn(paths, labels, python_ms, batch, training):
    """The input_fn an Estimator user writes around Python loading code."""
    def input_fn(mode=None):
        dataset = tf.data.Dataset.from_tensor_slices((paths, labels))
        if training:
            dataset = dataset.shuffle(len(paths)).repeat()

        def load(path, label):
            features, label = tf.py_function(
                lambda p, y: audio_clips.load_clip(p.numpy().decode(), int(y), python_ms), [path, label],
                [tf.float32, tf.int64])
            features.set_shape([audio_clips.FRAMES, audio_clips.MEL_BINS])
            label.set_shape([])
            return {"features": features}, label

        return dataset.map(load, num_parallel_calls=tf.data.experimental.AUTOTUNE).batch(batch).prefetch(
            tf.data.experimental.AUTOTUNE)
    return input_fn


def constant_input_fn(batch):
    def input_fn(mode=None):
        return ({"features": tf.zeros([batch, audio_clips.FRAMES, audio_clips.MEL_BINS])},
                tf.zeros([batch], tf.int64))
    return input_fn


class OwnTime:
    """The time an input_fn and its hooks' begin / after_create_session take at each call: the
    part of the wait for the first batch that the input pipeline itself spends (the rest is
    Estimator's: building the graph, the session, the checkpoint)."""

    def __init__(self):
        self.per_call = []

    def wrap_fn(self, input_fn):
        def timed(mode=None):
            self.per_call.append(0.0)
            return self._timed(input_fn, mode=mode)
        return timed

    def _timed(self, function, *args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            self.per_call[-1] += time.perf_counter() - started

    def wrap_hooks(self, hooks):
        own = self

        class Timed(tf.compat.v1.train.SessionRunHook):
            def __init__(self, hook):
                self.hook = hook

            def begin(self):
                own._timed(self.hook.begin)

            def after_create_session(self, session, coord):
                own._timed(self.hook.after_create_session, session, coord)

            def before_run(self, run_context):
                return self.hook.before_run(run_context)

            def after_run(self, run_context, run_values):
                self.hook.after_run(run_context, run_values)

            def end(self, session):
                self.hook.end(session)
        return [Timed(hook) for hook in hooks]


def run(method, args, data, python_ms, scratch):
    """One method's cycles; returns its measurements."""
    paths, labels, eval_paths, eval_labels = data
    times, first = StepTimes(), FirstBatch()
    estimator = make_estimator(os.path.join(scratch, method), make_model_fn(args.step_ms, first))
    hooks_train, hooks_eval, closers = [], [], []
    if method == "inputpipe":
        train = EstimatorInput(audio_flow(paths, labels, args.workers, args.batch, python_ms, True), SPECS,
                               labels="label")
        evaluation = EstimatorInput(audio_flow(eval_paths, eval_labels, args.workers, args.batch, python_ms, False),
                                    SPECS, labels="label")
        train_fn, eval_fn = train.input_fn, evaluation.input_fn
        hooks_train, hooks_eval, closers = train.hooks, evaluation.hooks, [train, evaluation]
    elif method == "tf.data":
        train_fn = tf_data_input_fn(paths, labels, python_ms, args.batch, True)
        eval_fn = tf_data_input_fn(eval_paths, eval_labels, python_ms, args.batch, False)
    else:
        train_fn = eval_fn = constant_input_fn(args.batch)
    train_delays, eval_delays, train_own, eval_own = [], [], OwnTime(), OwnTime()
    eval_steps = None if method != "constant" else -(-len(data[2]) // args.batch)
    started = time.perf_counter()
    try:
        for _ in range(args.cycles):
            estimator.train(first.wrap(train_own.wrap_fn(train_fn)), steps=args.steps,
                            hooks=train_own.wrap_hooks(hooks_train) + [times])
            train_delays.append(first.delays()[-1])
            estimator.evaluate(first.wrap(eval_own.wrap_fn(eval_fn)), steps=eval_steps,
                               hooks=eval_own.wrap_hooks(hooks_eval))
            eval_delays.append(first.delays()[-1])
    finally:
        for closer in closers:
            closer.close()
    steps = times.steady()
    step_ms = statistics.median(steps) * 1e3
    return {"step_ms": step_ms, "mean_step_ms": statistics.mean(steps) * 1e3, "examples_per_s": args.batch * 1e3 / step_ms,
            "train_first_batch_s": train_delays, "eval_first_batch_s": eval_delays,
            "train_own_s": train_own.per_call, "eval_own_s": eval_own.per_call,
            "elapsed_s": time.perf_counter() - started}


def _delay(delays, own):
    """The median wait for the first batch and, in brackets, the median time the input_fn and its
    hooks took of it."""
    if not delays:
        return ""
    return "{:.2f} ({:.3f})".format(statistics.median(delays), statistics.median(own)) if own else \
        "{:.2f}".format(statistics.median(delays))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--step-ms", type=float, default=100.0)
    parser.add_argument("--data-ratio", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clips", type=int, default=1024)
    parser.add_argument("--eval-clips", type=int, default=256)
    parser.add_argument("--quick", action="store_true", help="one round of one short cycle")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.cycles, args.steps, args.clips, args.eval_clips = 1, 2, 6, 256, 128
    if not hasattr(tf, "estimator") or not hasattr(tf.estimator, "Estimator"):
        raise SystemExit(STACK_HINT.format(tf.__version__))
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    root = os.path.join(tempfile.gettempdir(), "inputpipe-audio-clips")
    paths, labels = audio_clips.make_clips(os.path.join(root, "train"), args.clips, seed=0)
    eval_paths, eval_labels = audio_clips.make_clips(os.path.join(root, "eval"), args.eval_clips, seed=1)
    python_ms = calibrate_python_ms(paths, labels, args.batch, args.step_ms, args.data_ratio)
    results = {m: [] for m in METHODS}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            order = METHODS[round_index % len(METHODS):] + METHODS[:round_index % len(METHODS)]
            for method in order:
                result = run(method, args, (paths, labels, eval_paths, eval_labels), python_ms,
                             os.path.join(scratch, str(round_index)))
                results[method].append(result)
                print("round {} {:10s} step {:6.1f} ms  first batch: train {}  eval {}".format(
                    round_index + 1, method, result["step_ms"],
                    " ".join("{:.2f}".format(d) for d in result["train_first_batch_s"]),
                    " ".join("{:.2f}".format(d) for d in result["eval_first_batch_s"])), flush=True)
    own = statistics.median(r["step_ms"] for r in results["constant"])
    rows = []
    for method in METHODS:
        runs = results[method]
        steps = [r["step_ms"] for r in runs]
        step = statistics.median(steps)
        later_train = [d for r in runs for d in r["train_first_batch_s"][1:]]
        evals = [d for r in runs for d in r["eval_first_batch_s"][1:]]
        own_train = [d for r in runs for d in r["train_own_s"][1:]]
        own_eval = [d for r in runs for d in r["eval_own_s"][1:]]
        rows.append([method, "{:.0f}".format(args.batch * 1e3 / step), "{:.1f}".format(step),
                     "{:.1f}-{:.1f}".format(min(steps), max(steps)), "{:.2f}x".format(step / own),
                     "{:.2f}x".format(statistics.median(results["tf.data"][i]["step_ms"] for i in range(len(runs)))
                                      / step) if method != "constant" else "",
                     _delay(later_train, own_train), _delay(evals, own_eval)])
    print()
    print("{} cores; batches of {}; data work per batch {:.0f} ms on one core ({}x the {:.0f} ms step); "
          "{} cycles of {} steps; {} rounds".format(os.cpu_count(), args.batch, args.data_ratio * args.step_ms,
                                                    args.data_ratio, args.step_ms, args.cycles, args.steps,
                                                    args.rounds))
    print(tabulate(rows, ["input_fn", "examples/s", "step ms", "spread", "step / model's", "speed-up over tf.data",
                          "train input_fn -> 1st batch s (later calls; the input's own part)",
                          "eval input_fn -> 1st batch s (idem)"]))
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as out:
        json.dump({"args": vars(args), "python_ms_per_clip": python_ms, "results": results,
                   "tensorflow": tf.__version__, "python": platform.python_version(),
                   "time": time.strftime("%Y-%m-%d %H:%M")}, out, indent=1)
    print("wrote", RESULTS)


if __name__ == "__main__":
    main()
