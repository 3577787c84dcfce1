"""Stopping while a restored position replays: a source restored far into a slow DataFlow
re-reads its input to reach the position (LocallyShuffleData refills its buffer); leaving the
session, closing the source or Ctrl-C must act within the usual 2 s, and the source must start
again cleanly and continue at the position."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import tensorflow as tf

from inputpipe.dataflow import DataFromList, LocallyShuffleData, MapData
from inputpipe.input_source import QueueInput

from input_source_helpers import feeding_threads

REPO = Path(__file__).resolve().parents[1]
SPEC = [tf.TensorSpec([], tf.int64, "x")]


class Slow:
    """A map function taking ``delay`` seconds per datapoint from ``slow_from`` on (the replay after
    a restore reads those; a worker's first reads from the beginning do not)."""

    def __init__(self, delay=0.0, slow_from=800):
        self.delay = delay
        self.slow_from = slow_from

    def __call__(self, dp):
        if self.delay and dp[0] >= self.slow_from:
            time.sleep(self.delay)
        return dp


def shuffled(slow, n=2000, buffer_size=400):
    return LocallyShuffleData(MapData(DataFromList([[np.int64(i)] for i in range(n)], shuffle=False), slow),
                              buffer_size=buffer_size, shuffle_interval=50)


def state_and_next(consumed, count):
    """The state of the (fast) flow after ``consumed`` datapoints and the ``count`` that follow."""
    df = shuffled(Slow())
    df.reset_state()
    itr = iter(df)
    for _ in range(consumed):
        next(itr)
    state = df.get_state()
    following = [int(next(itr)[0]) for _ in range(count)]
    itr.close()
    return state, following


def _build(source):
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPEC)
        x, = source.get_input_tensors()
    return graph, x


def _wait_no_feeders(seconds=2.0):
    deadline = time.monotonic() + seconds
    while feeding_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return not feeding_threads()


@pytest.mark.timeout(60)
def test_leaving_the_session_during_a_long_replay_is_quick_and_the_source_restarts():
    state, following = state_and_next(1000, 5)
    slow = Slow(0.02)                    # refilling the 400-entry buffer would take 8 s
    source = QueueInput(shuffled(slow))
    graph, x = _build(source)
    try:
        source.set_state(state)
        with tf.compat.v1.Session(graph=graph) as sess:
            with source.session(sess):
                time.sleep(0.2)          # the replay is under way
                started = time.monotonic()
            took = time.monotonic() - started
        assert took < 2, took
        assert _wait_no_feeders(0.5)
        slow.delay = 0.0
        source.set_state(state)          # a new session (the queue of the first one is closed)
        with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
            got = [int(run(x)) for _ in range(5)]
        assert got == following
    finally:
        source.close()
    assert _wait_no_feeders()


@pytest.mark.timeout(60)
def test_close_during_a_long_replay_stops_within_2_s():
    state, _ = state_and_next(1000, 0)
    source = QueueInput(shuffled(Slow(0.02)))
    graph, x = _build(source)
    source.set_state(state)
    sess = tf.compat.v1.Session(graph=graph)
    try:
        for hook in source.get_hooks():
            hook.after_create_session(sess, None)
        time.sleep(0.2)
        started = time.monotonic()
        source.close()
        assert time.monotonic() - started < 2
        assert _wait_no_feeders(0.5)
    finally:
        sess.close()


CTRL_C_SCRIPT = textwrap.dedent('''
    import os, sys, threading, time
    import numpy as np
    import tensorflow as tf
    sys.path.insert(0, {tests!r})
    from test_resume_input_stop import Slow, shuffled, state_and_next
    from inputpipe.input_source import QueueInput, StagingInput

    state, _ = state_and_next(1000, 0)
    inner = QueueInput(shuffled(Slow(0.02)), in_worker={in_worker})
    source = StagingInput(inner, device="/cpu:0") if {staging} else inner
    graph = tf.Graph()
    with graph.as_default():
        source.setup([tf.TensorSpec([], tf.int64, "x")])
        x, = source.get_input_tensors()
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.assign_add(step, 1)
    source.set_state(state)
    try:
        print("READY", flush=True)
        with graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(
                hooks=source.get_hooks(), log_step_count_steps=None, save_summaries_steps=None,
                save_summaries_secs=None) as sess:      # StagingInput prefills here: waits for the replay
            print("STARTED", flush=True)
            sess.run([x, train_op])                     # QueueInput: the first step waits for it
            print("FIRST STEP RAN", flush=True)
    except KeyboardInterrupt:
        left = [t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()
                and not t.name.startswith(("pydevd", "Dummy"))]
        print("INTERRUPTED; threads left:", left, flush=True)
        raise
''')


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["queue", "staging", "worker"])
def test_ctrl_c_while_a_monitored_session_waits_for_a_replay_acts_within_3_s(tmp_path, kind):
    script = tmp_path / "train.py"
    script.write_text(CTRL_C_SCRIPT.format(tests=str(REPO / "tests"), in_worker=kind == "worker",
                                           staging=kind == "staging"))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=str(tmp_path))
    workers = []
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), (line, proc.stderr.read() if proc.poll() is not None else "")
        if kind == "staging":
            time.sleep(1.5)                     # the session is being made: the prefill waits for the replay
        else:
            line = proc.stdout.readline()
            assert line.startswith("STARTED"), (line, proc.stderr.read() if proc.poll() is not None else "")
            time.sleep(0.5)                     # the first step waits for the replay (8 s)
        workers = [child.pid for child in psutil.Process(proc.pid).children(recursive=True)]
        assert len(workers) == (1 if kind == "worker" else 0)
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        # The promise is the reaction: KeyboardInterrupt out of the session, the source stopped and
        # no thread left, within 3 s (the line printed then). The interpreter's exit with
        # TensorFlow loaded comes after and, on a busy host, takes its own time.
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("INTERRUPTED"):
                break
        took = time.monotonic() - started
        rest, err = proc.communicate(timeout=30)
        out = "".join(lines) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert took < 3, (took, out, err[-2000:])
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err, err[-2000:]
    assert "FIRST STEP RAN" not in out
    assert "INTERRUPTED; threads left: []" in out, (out, err[-3000:])
    deadline = time.monotonic() + 2
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in workers) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if psutil.pid_exists(pid)
                and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_a_stop_request_ends_a_replay_in_the_iterating_thread_only():
    """raise_if_stopping() acts in a stopped StoppableThread (an InputSource's feeding thread) and
    nowhere else: the same replay in the main thread runs to the end."""
    from inputpipe.dataflow import DataFlowTerminated, raise_if_stopping
    from inputpipe.utils.concurrency import StoppableThread

    raise_if_stopping(object())              # the main thread: nothing happens
    outcome = []

    def replay():
        try:
            for _ in range(1000):
                raise_if_stopping(df)
                time.sleep(0.01)
            outcome.append("finished")
        except DataFlowTerminated as err:
            outcome.append(str(err))

    df = shuffled(Slow())
    thread = StoppableThread(target=replay, name="test-replay")
    thread.start()
    time.sleep(0.05)
    thread.stop()
    thread.join(1)
    assert not thread.is_alive()
    assert outcome == ["LocallyShuffleData: the thread iterating it was asked to stop"]
    assert threading.current_thread() is threading.main_thread()


class _SourceThatFailsToStop:
    """Starts with a Ctrl-C and fails while it is being stopped."""
    name = "FakeInput"
    _closed = False

    def __init__(self):
        self.closed = 0

    def _start(self, session, coord):
        raise KeyboardInterrupt()

    def close(self):
        self.closed += 1
        raise RuntimeError("the feeding thread is stuck")


def test_a_ctrl_c_while_a_source_starts_reaches_the_loop_even_when_stopping_the_source_fails(caplog):
    from inputpipe.input_source.base import InputSourceHook

    source = _SourceThatFailsToStop()
    with caplog.at_level("WARNING"):
        with pytest.raises(KeyboardInterrupt):
            InputSourceHook(source).after_create_session(None, None)
    assert source.closed == 1
    assert "FakeInput: stopping after KeyboardInterrupt failed too: RuntimeError: the feeding thread is stuck" \
        in caplog.text
