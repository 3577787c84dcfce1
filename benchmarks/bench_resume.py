"""Resumable input: what tracking the consumed input position costs per step, and its size in a
checkpoint.

Each pipeline is trained with ``track_state=True`` (the default: the feeding thread takes the
DataFlow's state after every datapoint and numbers it; the consuming step records the number in
the graph) and ``track_state=False`` (tensorpack's behaviour: nothing is tracked), in its own graph
and session, through its hooks (``hooked_session``). Two train steps:

* ``10 ms``: a step that takes 10 ms without the GIL (a ``numpy_function`` sleeping, like a step
  waiting for an accelerator); the tracking cost appears as extra wall time per step;
* ``empty``: a step that does nothing but take the batch, so the difference is the absolute
  per-step cost of tracking in the training thread (microseconds), measured both as wall time
  and as the training thread's CPU time (``time.thread_time``).

Runs are interleaved in short rounds (rotating order) so load from elsewhere hits all alike; the
overhead is the median over rounds of the paired ratio. Also measured: ``get_state()`` per call
on the pipeline (the feeding thread's extra work per datapoint) and the bytes of the input
position in a checkpoint. Goals: overhead under 2% of a 10 ms step; position under 64 KiB.
tensorpack 0.11 has no resumable input, so ``track_state=False`` is the peer. ``--quick`` is a
smoke run (2 rounds of 3 steps).

    pip install -e ".[tf-cpu,bench]" && python benchmarks/bench_resume.py

Prints a table and writes ``benchmarks/results/resume.json``.
"""
import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO]

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tabulate import tabulate  # noqa: E402

from inputpipe.dataflow import BatchData, DataFromList, MapData, MultiProcessMapData, is_resumable  # noqa: E402
from inputpipe.dataflow.seeding import set_global_seed  # noqa: E402
from inputpipe.input_source import BatchQueueInput, QueueInput, StagingInput, hooked_session  # noqa: E402

v1 = tf.compat.v1
BATCH, SIZE, DATAPOINTS = 32, 32, 1000
STEP_MS = 10.0


def _image(dp):
    i = int(dp[0])
    return [np.full((SIZE, SIZE, 3), i % 251, np.float32), np.int32(i % 10)]


def make_dataflow(pipeline: str):
    """The pipelines measured: batches made by BatchData, single datapoints batched by the queue,
    and batches of a parallel map (2 worker processes)."""
    set_global_seed(0)
    df = DataFromList([[i] for i in range(DATAPOINTS)], shuffle=True)
    if pipeline == "parallel":
        df = MultiProcessMapData(df, num_proc=2, map_func=_image, ordered=True, strict=True)
    else:
        df = MapData(df, _image)
    return df if pipeline == "datapoints" else BatchData(df, BATCH)


PIPELINES = {
    "batches": "DataFromList(shuffle) -> MapData -> BatchData(32) -> StagingInput(QueueInput)",
    "datapoints": "DataFromList(shuffle) -> MapData -> StagingInput(BatchQueueInput(32))",
    "parallel": "DataFromList(shuffle) -> MultiProcessMapData(2) -> BatchData(32) -> StagingInput(QueueInput)",
}


class Trainee:
    """One pipeline, tracked or not, with one step kind, in its own graph and session."""

    def __init__(self, pipeline: str, track: bool, step: str, stack: contextlib.ExitStack):
        self.pipeline, self.track, self.step = pipeline, track, step
        graph = tf.Graph()
        with graph.as_default():
            df = make_dataflow(pipeline)
            if pipeline == "datapoints":
                inner = BatchQueueInput(df, BATCH, track_state=track)
            else:
                inner = QueueInput(df, track_state=track)
            self.source = StagingInput(inner, nr_stage=1, device="/cpu:0")
            self.source.setup([tf.TensorSpec([BATCH, SIZE, SIZE, 3], tf.float32, "images"),
                               tf.TensorSpec([BATCH], tf.int32, "labels")])
            images, labels = self.source.get_input_tensors()
            taken = tf.reduce_sum(labels)
            if step == "10ms":
                wait = tf.numpy_function(lambda: (time.sleep(STEP_MS / 1e3), np.int64(0))[1], [], tf.int64)
                with tf.control_dependencies([wait]):
                    taken = tf.identity(taken)
            self.train_op = taken
            self.saver = v1.train.Saver() if track else None
        self.sess = stack.enter_context(v1.Session(graph=graph))
        self.run = stack.enter_context(hooked_session(self.sess, self.source))
        self.round_ms, self.round_cpu_ms = [], []

    def timed_steps(self, steps: int) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            self.run(self.train_op)
        self.round_cpu_ms.append(1e3 * (time.thread_time() - cpu) / steps)
        self.round_ms.append(1e3 * (time.perf_counter() - wall) / steps)

    def position_bytes(self) -> int:
        """Bytes of the input position in a checkpoint saved now."""
        with tempfile.TemporaryDirectory() as tmp:
            path = self.saver.save(self.sess, os.path.join(tmp, "model"))
            reader = tf.train.load_checkpoint(path)
            keys = [k for k in reader.get_variable_to_shape_map() if k.endswith("input_position")]
            return len(reader.get_tensor(keys[0]))


def get_state_us(pipeline: str, calls: int) -> float:
    """Microseconds per ``get_state()`` call on the pipeline, between datapoints."""
    df = make_dataflow(pipeline)
    df.reset_state()
    try:
        it = iter(df)
        total = 0.0
        for _ in range(calls):
            try:
                next(it)
            except StopIteration:           # a finite pipeline: the next epoch
                it = iter(df)
                next(it)
            t0 = time.perf_counter()
            df.get_state()
            total += time.perf_counter() - t0
    finally:
        df.close()
    return 1e6 * total / calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps-per-round", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=list(PIPELINES))
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 3 steps, 2 warm-up")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps_per_round, args.warmup = 2, 3, 2
    pipelines = []
    for p in args.pipelines:
        df = make_dataflow(p)
        if is_resumable(df):
            pipelines.append(p)
        else:
            print("skipped {}: its DataFlow is not resumable yet".format(p))
        df.close()

    rows, records = [], []
    with contextlib.ExitStack() as stack:
        trainees = [Trainee(p, track, step, stack) for p in pipelines for step in ("10ms", "empty")
                    for track in (True, False)]
        for t in trainees:
            for _ in range(args.warmup):
                t.run(t.train_op)
        for r in range(args.rounds):
            for i in range(len(trainees)):
                trainees[(i + r) % len(trainees)].timed_steps(args.steps_per_round)
        by_key = {(t.pipeline, t.step, t.track): t for t in trainees}
        for p in pipelines:
            on10, off10 = by_key[(p, "10ms", True)], by_key[(p, "10ms", False)]
            on0, off0 = by_key[(p, "empty", True)], by_key[(p, "empty", False)]
            ratio = statistics.median(a / b for a, b in zip(on10.round_ms, off10.round_ms))
            extra_us = 1e3 * statistics.median(a - b for a, b in zip(on0.round_ms, off0.round_ms))
            extra_cpu_us = 1e3 * statistics.median(a - b for a, b in zip(on0.round_cpu_ms, off0.round_cpu_ms))
            state_us = get_state_us(p, 200 if not args.quick else 20)
            size = on10.position_bytes()
            per_step_states = 1            # BatchQueueInput asks for the state of batch ends only
            rows.append([PIPELINES[p], "{:.2f}".format(statistics.median(on10.round_ms)),
                         "{:.2f}".format(statistics.median(off10.round_ms)), "{:+.2f}%".format(100 * (ratio - 1)),
                         "{:+.0f}".format(extra_us), "{:+.0f}".format(extra_cpu_us),
                         "{:.1f} x {}".format(state_us, per_step_states), size])
            records.append({"pipeline": p, "label": PIPELINES[p],
                            "step_10ms_tracked_ms": on10.round_ms, "step_10ms_untracked_ms": off10.round_ms,
                            "median_round_ratio": ratio, "empty_step_extra_us": extra_us,
                            "empty_step_extra_train_thread_cpu_us": extra_cpu_us,
                            "get_state_us": state_us, "get_state_calls_per_step": per_step_states,
                            "position_bytes": size})
    headers = ["pipeline", "ms/step tracked (10 ms step)", "untracked", "overhead (median per round)",
               "empty step: extra us", "extra train-thread CPU us", "get_state us x calls/step",
               "position bytes"]
    print(tabulate(rows, headers=headers, tablefmt="github"))
    for rec in records:
        print("{}: overhead {:+.2f}% of a {:.0f} ms step (goal < 2%): {}; position {} bytes (goal < 65536): {}".format(
            rec["pipeline"], 100 * (rec["median_round_ratio"] - 1), STEP_MS,
            "met" if rec["median_round_ratio"] < 1.02 else "NOT met", rec["position_bytes"],
            "met" if rec["position_bytes"] < 65536 else "NOT met"))
    if args.quick:
        print("(--quick: a smoke run, not a measurement)")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", "resume{}.json".format("_quick" if args.quick else ""))
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"benchmark": "resume", "batch": BATCH, "step_ms": STEP_MS, "rounds": args.rounds,
                   "steps_per_round": args.steps_per_round, "warmup": args.warmup,
                   "cpu_count": os.cpu_count(), "python": platform.python_version(),
                   "tensorflow": tf.__version__, "results": records}, f, indent=1)
    print("wrote", os.path.relpath(out, REPO))


if __name__ == "__main__":
    main()
