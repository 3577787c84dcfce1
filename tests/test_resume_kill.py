"""Kill the training process with SIGKILL at random steps, restart it from its latest checkpoint,
and check that the final model consumed exactly the datapoints of an uninterrupted run.

The trainer is this file run as a script (``python tests/test_resume_kill.py train ...``): an
indexed, shuffled DataFlow (DataFromList -> MapData or MultiProcessMapData -> BatchData) through
StagingInput(QueueInput), trained in a MonitoredTrainingSession that checkpoints every few
steps. The model records what it consumed: step k writes its batch's ids into a fixed-size int64
variable at [k*B, (k+1)*B), saved in the same checkpoints as the input position. So the final
checkpoint says which datapoints the steps it includes consumed; they must equal the seeded
run's sequence: nothing lost, nothing twice, across epoch boundaries.
"""
import json
import os
import random
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

N_DATAPOINTS = 23       # 5 batches of 4 per epoch (3 left over: remainder=False drops them)
BATCH = 4
STEPS = 26              # a bit more than 5 epochs
SAVE_EVERY = 3
SEED = 1234
RUN_TIMEOUT = 90.0      # seconds one trainer process may take (a hang guard: 5-10 s alone)

HERE = os.path.abspath(__file__)
# up to 5 trainer processes a test, each within RUN_TIMEOUT
pytestmark = pytest.mark.timeout(5 * RUN_TIMEOUT + 60)


# -- the trainer (subprocess) ----------------------------------------------------------------------
def _ids(dp):
    return [np.int64(dp[0]), np.float32(dp[0]) * 0.5]


def build_dataflow(procs: int):
    from inputpipe.dataflow import BatchData, DataFromList, MapData, MultiProcessMapData
    from inputpipe.dataflow.seeding import set_global_seed
    set_global_seed(SEED)
    df = DataFromList([[i] for i in range(N_DATAPOINTS)], shuffle=True)
    if procs:
        df = MultiProcessMapData(df, num_proc=procs, map_func=_ids, ordered=True, strict=True)
    else:
        df = MapData(df, _ids)
    return BatchData(df, BATCH, remainder=False)


def expected(procs: int) -> None:
    """Print the ids the uninterrupted run consumes, step after step (no TensorFlow needed)."""
    df = build_dataflow(procs)
    df.reset_state()
    out = []
    try:
        while len(out) < STEPS * BATCH:
            for ids, _ in df:
                out.extend(int(i) for i in ids)
                if len(out) >= STEPS * BATCH:
                    break
    finally:
        df.close()
    print(json.dumps(out[:STEPS * BATCH]), flush=True)


def train(procs: int, logdir: str) -> None:
    df = build_dataflow(procs)
    df.check_resumable()              # raises NotResumableError saying why, before TF is imported
    import tensorflow as tf
    from inputpipe.input_source import QueueInput, StagingInput

    tf.compat.v1.disable_eager_execution()
    source = StagingInput(QueueInput(df), nr_stage=2, device="/cpu:0")
    source.setup([tf.TensorSpec([BATCH], tf.int64, "ids"), tf.TensorSpec([BATCH], tf.float32, "half")])
    ids, half = source.get_input_tensors()
    step = tf.compat.v1.train.get_or_create_global_step()
    consumed = tf.compat.v1.Variable(np.full([STEPS * BATCH], -1, np.int64), name="consumed", trainable=False)
    where = tf.reshape(step.read_value() * BATCH + tf.range(BATCH, dtype=tf.int64), [BATCH, 1])
    check = tf.debugging.assert_equal(tf.cast(ids, tf.float32) * 0.5, half)
    slow = tf.numpy_function(lambda: (time.sleep(0.02), np.int64(0))[1], [], tf.int64)   # a ~20 ms step
    with tf.control_dependencies([check, slow]):
        record = tf.compat.v1.scatter_nd_update(consumed, where, ids)
    with tf.control_dependencies([record]):
        train_op = tf.compat.v1.assign_add(step, 1)
    hooks = source.get_hooks() + [tf.compat.v1.train.StopAtStepHook(last_step=STEPS)]
    with tf.compat.v1.train.MonitoredTrainingSession(
            checkpoint_dir=logdir, save_checkpoint_steps=SAVE_EVERY, save_summaries_steps=None,
            save_summaries_secs=None, log_step_count_steps=None, hooks=hooks) as sess:
        print("start {}".format(sess.run(step)), flush=True)
        while not sess.should_stop():
            print("step {}".format(sess.run(train_op)), flush=True)
    print("done", flush=True)


# -- the driver (pytest) ---------------------------------------------------------------------------
class Trainer:
    """One trainer process: its stdout read line by line with a deadline."""

    def __init__(self, *args: str):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, HERE] + list(args), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True)
        self.deadline = time.monotonic() + RUN_TIMEOUT
        self._buffer = b""
        self.lines = []

    def next_line(self):
        """The next stdout line, or None at its end; fails the test past the deadline."""
        while b"\n" not in self._buffer:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                pytest.fail("trainer timed out after {:.0f} s; output so far: {}".format(RUN_TIMEOUT, self.lines))
            ready, _, _ = select.select([self.proc.stdout], [], [], min(remaining, 1.0))
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    return None
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        self.lines.append(line.decode())
        return self.lines[-1]

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)      # the trainer and its worker processes
        except ProcessLookupError:
            pass

    def finish(self) -> str:
        """Wait for the end (bounded); returns stderr."""
        try:
            _, err = self.proc.communicate(timeout=max(self.deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            self.kill()
            _, err = self.proc.communicate(timeout=10)
        self.kill()          # worker processes left in the group, if any
        return err.decode(errors="replace")


def run_expected(procs: int):
    trainer = Trainer("expected", str(procs))
    line = trainer.next_line()
    err = trainer.finish()
    assert trainer.proc.returncode == 0 and line, err[-3000:]
    return json.loads(line)


def run_until(procs: int, logdir: str, kill_at):
    """Train; SIGKILL the trainer once it reports step ``kill_at`` (None: let it finish).
    Returns (the step it started from, the last step it reported)."""
    trainer = Trainer("train", str(procs), logdir)
    start, last = None, None
    try:
        while True:
            line = trainer.next_line()
            if line is None:
                break
            if line.startswith("start "):
                start = int(line.split()[1])
            elif line.startswith("step "):
                last = int(line.split()[1])
                if kill_at is not None and last >= kill_at:
                    trainer.kill()
                    break
    finally:
        err = trainer.finish()
    if kill_at is not None:
        assert trainer.proc.returncode == -signal.SIGKILL, err[-3000:]
    else:
        assert trainer.proc.returncode == 0 and trainer.lines[-1] == "done", err[-3000:]
    assert start is not None, err[-3000:]
    return start, last


def read_final(logdir: str):
    import tensorflow as tf
    reader = tf.train.load_checkpoint(logdir)
    position = [k for k in reader.get_variable_to_shape_map() if k.endswith("input_position")]
    return (int(reader.get_tensor("global_step")), reader.get_tensor("consumed").tolist(),
            reader.get_tensor(position[0]) if position else None)


def _kill_and_resume(tmp_path, procs: int, kills: int) -> None:
    want = run_expected(procs)
    assert len(want) == STEPS * BATCH
    per_epoch = (N_DATAPOINTS // BATCH) * BATCH
    assert sorted(want[:per_epoch]) != want[:per_epoch] and want[:per_epoch] != want[per_epoch:2 * per_epoch]

    rng = random.Random(SEED + procs)
    logdir = str(tmp_path / "train")
    starts = []
    reached = 0
    for _ in range(kills):
        low, high = reached + SAVE_EVERY, min(reached + 2 * SAVE_EVERY, STEPS - 2)
        if low > high:           # the kills came late (a slow machine): the rest runs to the end
            break
        kill_at = rng.randint(low, high)     # at least one more checkpoint is written before the kill
        start, last = run_until(procs, logdir, kill_at)
        starts.append(start)
        reached = max(start, (last // SAVE_EVERY) * SAVE_EVERY)
    start, last = run_until(procs, logdir, None)
    starts.append(start)

    assert last == STEPS
    assert len(starts) >= 3 and starts[0] == 0, starts
    assert all(a < b for a, b in zip(starts, starts[1:])), starts       # every run resumed further on
    assert any(s % (N_DATAPOINTS // BATCH) for s in starts[1:]), "no restart began mid-epoch: {}".format(starts)
    steps, consumed, position = read_final(logdir)
    assert steps == STEPS
    assert consumed == want                       # nothing lost, nothing twice, in order
    assert position is not None and json.loads(position)["state"]["type"] == "BatchData"


def test_sigkill_and_restart_consumes_exactly_the_uninterrupted_sequence(tmp_path):
    _kill_and_resume(tmp_path, procs=0, kills=3)


def test_sigkill_and_restart_through_multiprocess_map(tmp_path):
    # two workers: the order across workers is what a restart must rebuild (one worker is MapData's order)
    _kill_and_resume(tmp_path, procs=2, kills=2)


if __name__ == "__main__":
    if sys.argv[1] == "expected":
        expected(int(sys.argv[2]))
    else:
        train(int(sys.argv[2]), sys.argv[3])
