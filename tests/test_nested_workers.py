"""Parallel DataFlows inside the workers of other parallel DataFlows (tensorpack's ImageNet LMDB
recipe runs a process map inside a process runner): exactly once, errors from the innermost
level with their type and traceback, a middle worker's death reported at once, close() within
2 s, and no process or /dev/shm file left by any kill of the trainer, a middle or a leaf worker.

Orphaned grandchildren are re-parented away from the test process, so the conftest's leak check
cannot see them: these tests follow the whole process tree themselves.
"""
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

from inputpipe.dataflow import (BatchData, DataFromList, MultiProcessMapData, MultiProcessRunnerZMQ,
                                MultiThreadMapData, RepeatedData)
from inputpipe.utils.errors import WorkerError
from test_shm_segments import needs_private_shm, run_with_private_shm

#: Seconds the processes of a closed or failed tree get to exit before the test calls them leaked:
#: they exit in 0.12-0.17 s on an idle machine, and took over 2 s beside two other copies of the suite
#: on 2 cores; a leaked process never exits.
EXIT_DEADLINE = 20.0

pytestmark = pytest.mark.timeout(60)


def leaf_double(dp):
    """[2i, pid of the leaf, 64 KiB array filled with i % 251] (the array goes through shared memory)."""
    return [dp[0] * 2, os.getpid(), np.full(1 << 16, dp[0] % 251, np.uint8)]


def middle_plus_one(dp):
    return [dp[0] + 1, dp[1], os.getpid(), dp[2]]


def nested_chain(n, num_proc=2):
    """A runner of a 2-process map of a 2-process map, over ``[i] for i in range(n)``."""
    inner = MultiProcessMapData(DataFromList([[i] for i in range(n)], shuffle=False), num_proc, leaf_double,
                                strict=True)
    return MultiProcessRunnerZMQ(MultiProcessMapData(inner, num_proc, middle_plus_one, strict=True), 1)


def tree_of(pid):
    """Pids of every live (not zombie) descendant of ``pid``."""
    found = set()
    try:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    found.add(child.pid)
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass
    return found


def alive(pids):
    left = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.add(pid)
        except psutil.NoSuchProcess:
            pass
    return left


def wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive(pids)


def kill_all(pids):
    for pid in alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_runner_of_a_map_of_a_map_yields_each_datapoint_once_per_epoch_from_grandchild_processes():
    df = nested_chain(24)
    df.reset_state()
    tree = set()
    try:
        for _ in range(3):
            epoch = list(df)
            assert sorted(dp[0] for dp in epoch) == [2 * i + 1 for i in range(24)]
            for value, _, _, array in epoch:
                assert array.shape == (1 << 16,) and array.dtype == np.uint8
                assert int(array[0]) == (value - 1) // 2 % 251 and int(array[-1]) == int(array[0])
            runner_worker, = df.worker_pids
            leaves = {dp[1] for dp in epoch} | {dp[2] for dp in epoch}
            # the maps' workers are children of the runner's worker, not of this process
            assert len(leaves) == 4 and {psutil.Process(pid).ppid() for pid in leaves} == {runner_worker}
            tree = {runner_worker} | tree_of(runner_worker)
    finally:
        started = time.monotonic()
        df.close()
        closing = time.monotonic() - started
        left = wait_gone(tree, EXIT_DEADLINE)
        kill_all(left)
    assert closing < 10.0 and left == set()          # (close() waits for its workers with timeouts of seconds)


class _Sums:
    """map_func that runs a parallel map of its own over the datapoint's numbers."""

    def __call__(self, dp):
        inner = MultiProcessMapData(DataFromList([[x] for x in dp[0]], shuffle=False), 2, _square, strict=True)
        inner.reset_state()
        try:
            return [sum(v for v, in inner), os.getpid()]
        finally:
            inner.close()


def _square(dp):
    return [dp[0] * dp[0]]


def test_a_map_whose_map_func_runs_a_process_map_inside_a_runner_three_levels_deep():
    rows = [[list(range(i, i + 5))] for i in range(6)]
    df = MultiProcessRunnerZMQ(MultiProcessMapData(DataFromList(rows, shuffle=False), 2, _Sums(), strict=True,
                                                   ordered=True), 1)
    df.reset_state()
    try:
        got = list(df)
    finally:
        df.close()
    assert [s for s, _ in got] == [sum(x * x for x in range(i, i + 5)) for i in range(6)]


def test_a_thread_map_over_a_nested_process_chain_keeps_exactly_once():
    df = BatchData(MultiThreadMapData(nested_chain(16), 2, lambda dp: [dp[0]], strict=True), 4)
    df.reset_state()
    try:
        values = sorted(int(v) for batch in df for v in batch[0])
    finally:
        df.close()
    assert values == [2 * i + 1 for i in range(16)]


def leaf_raising(dp):
    if dp[0] == 7:
        raise KeyError("no label for datapoint 7")
    return [dp[0]]


def test_an_error_three_levels_down_keeps_its_type_and_its_traceback_once():
    inner = MultiProcessMapData(DataFromList([[i] for i in range(20)], shuffle=False), 2, leaf_raising, strict=True)
    df = MultiProcessRunnerZMQ(MultiProcessRunnerZMQ(inner, 1), 1)
    df.reset_state()
    try:
        with pytest.raises(KeyError) as caught:
            list(df)
    finally:
        df.close()
    err = caught.value
    assert isinstance(err, WorkerError) and err.original_type is KeyError
    assert err.reason == "raised KeyError: 'no label for datapoint 7'"
    assert [where.split(" (pid")[0] for where in err.nested] == ["MultiProcessRunnerZMQ: worker 0",
                                                                 "MultiProcessMapData: worker 0"] or \
        [where.split(" (pid")[0] for where in err.nested] == ["MultiProcessRunnerZMQ: worker 0",
                                                              "MultiProcessMapData: worker 1"]
    first_line = str(err).splitlines()[0]
    assert first_line.startswith("MultiProcessRunnerZMQ: worker 0 (pid {}) raised KeyError: 'no label for "
                                 "datapoint 7' in the nested worker MultiProcessRunnerZMQ: worker 0 (pid ".format(
                                     err.pid))
    # the innermost traceback once, then where each level received it
    assert err.remote_traceback.count('in leaf_raising\n    raise KeyError("no label for datapoint 7")') == 1
    assert err.remote_traceback.count("received it here:") == 2
    assert str(err).count("Traceback in the worker:") == 1


def test_a_killed_middle_worker_is_reported_at_once_while_its_children_live_and_they_follow_it():
    df = nested_chain(10 ** 6)
    df.reset_state()
    tree = set()
    try:
        it = iter(df)
        for _ in range(10):
            next(it)
        middle, = df.worker_pids
        leaves = tree_of(middle)
        tree = {middle} | leaves
        assert len(leaves) == 4
        os.kill(middle, signal.SIGKILL)
        killed = time.monotonic()
        with pytest.raises(WorkerError) as caught:
            for _ in it:
                pass
        reported = time.monotonic() - killed
        assert reported < 10.0                          # (the health checks poll every 50 ms: not a timeout away)
        assert str(caught.value).startswith("MultiProcessRunnerZMQ: worker 0 (pid {}) was killed by SIGKILL".format(
            middle))
        assert wait_gone(leaves, EXIT_DEADLINE) == set()        # the leaves die with their parent
    finally:
        df.close()
        kill_all(wait_gone(tree, EXIT_DEADLINE))


def test_a_killed_leaf_is_reported_through_the_middle_with_its_signal():
    df = nested_chain(10 ** 6)
    df.reset_state()
    tree = set()
    try:
        it = iter(df)
        next(it)
        middle, = df.worker_pids
        tree = {middle} | tree_of(middle)
        leaf = sorted(tree_of(middle))[0]
        os.kill(leaf, signal.SIGKILL)
        with pytest.raises(WorkerError) as caught:
            for _ in it:
                pass
        err = caught.value
        assert err.original_type is None and err.reason.startswith("was killed by SIGKILL (signal 9)")
        assert err.nested[0].startswith("MultiProcessRunnerZMQ: worker 0") is False
        assert err.nested[-1].endswith("(pid {})".format(leaf))
        assert wait_gone(tree, EXIT_DEADLINE) == set()
    finally:
        df.close()
        kill_all(wait_gone(tree, EXIT_DEADLINE))


_TREE = """
    import sys
    from test_nested_workers import nested_chain
    df = nested_chain(10 ** 6)
    print("starting", flush=True)
    df.reset_state()
    try:
        for i, dp in enumerate(df):
            if i == 20:
                print("running", flush=True)
    except Exception as err:
        print("error", type(err).__name__, flush=True)
    finally:
        df.close()
"""

_TREE_KILL_SWEEP = """
    import ctypes, json, os, queue, signal, subprocess, sys, threading, time
    import psutil
    TREE = sys.argv[2]
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)      # PR_SET_CHILD_SUBREAPER: orphans come to us
    WAIT = 60.0              # for a step of one case (generous: the machine may be busy)

    def reap_all(deadline):
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                time.sleep(0.01)
        return False

    def level(root, depth):
        # live processes ``depth`` generations below ``root``
        procs = [psutil.Process(root)]
        for _ in range(depth):
            procs = [c for p in procs for c in p.children() if c.status() != psutil.STATUS_ZOMBIE]
        return sorted(p.pid for p in procs)

    def wait_line(trainer, lines, wanted):
        # the next line of the trainer, which must start with ``wanted``; None when it did not come
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.05)
            except queue.Empty:
                if trainer.poll() is not None and lines.empty():
                    return None
                continue
            if line.startswith(wanted):
                return line
        return None

    def run_case(victim, phase, delay):
        trainer = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l.strip()) for l in trainer.stdout], daemon=True).start()
        case = {"case": [victim, phase, delay], "reported": None, "problem": None}
        for wanted in ["starting"] + (["running"] if phase == "running" else []):
            if wait_line(trainer, lines, wanted) is None:
                case["problem"] = "the trainer did not print {!r} within {} s".format(wanted, WAIT)
        if case["problem"] is None:
            time.sleep(delay)
            depth = {"trainer": 0, "middle": 1, "leaf": 2}[victim]
            deadline = time.monotonic() + WAIT
            while not level(trainer.pid, depth) and time.monotonic() < deadline:
                time.sleep(0.001)
            target = level(trainer.pid, depth)[0]
            os.kill(target, signal.SIGKILL)
            killed = time.monotonic()
            if victim != "trainer":
                line = wait_line(trainer, lines, "error")
                case["reported"] = line and [line, round(time.monotonic() - killed, 3)]
        try:
            case["exit"] = trainer.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            case["problem"] = case["problem"] or "the trainer did not exit within {} s".format(WAIT)
            trainer.kill()
            case["exit"] = trainer.wait()
        case["all_gone"] = reap_all(time.monotonic() + WAIT)
        case["files"] = os.listdir("/dev/shm")
        case["stderr"] = trainer.stderr.read()[-2000:]
        return case

    print(json.dumps([run_case(*case) for case in json.loads(sys.argv[1])]))
"""


@needs_private_shm
@pytest.mark.slow
@pytest.mark.timeout(250)
@pytest.mark.parametrize("victim", ["trainer", "middle", "leaf"])
def test_killing_the_trainer_a_middle_or_a_leaf_worker_at_any_time_leaves_no_process_and_no_file(victim):
    """Each kill is followed to its end however busy the machine is (every step may take a minute);
    the report of a killed worker is not timed here (tests of their own time it)."""
    cases = [[victim, phase, delay] for phase, delay in (("starting", 0.0), ("starting", 0.15), ("running", 0.0),
                                                         ("running", 0.1))]
    done = run_with_private_shm(_TREE_KILL_SWEEP, 256, json.dumps(cases), textwrap.dedent(_TREE), timeout=240)
    results = json.loads(done.stdout.splitlines()[-1])
    assert [r["case"] for r in results] == cases
    assert [r for r in results if r["problem"] or r["files"] or not r["all_gone"]] == []
    for r in results:
        if victim == "trainer":
            assert r["exit"] == -signal.SIGKILL
        else:                   # the trainer got a WorkerError, closed and ended normally
            assert r["exit"] == 0, r
            assert r["reported"] is not None and r["reported"][0] == "error WorkerError", r


def forks_a_sleeper_then_dies(dp):
    """A map_func that forks a long-lived child (the child holds whatever the worker had open),
    writes the child's pid to the file named in the datapoint, then kills its own process."""
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    with open(dp[0], "w") as f:
        f.write(str(child))
    os.kill(os.getpid(), signal.SIGKILL)


def forks_in_c_then_dies(dp):
    """The same with libc's fork(), which Python's at-fork hooks do not see."""
    import ctypes
    child = ctypes.CDLL(None).fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    with open(dp[0], "w") as f:
        f.write(str(child))
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("map_func", [forks_a_sleeper_then_dies, forks_in_c_then_dies])
def test_a_worker_that_forks_and_dies_is_reported_at_once_not_when_its_child_exits(map_func, tmp_path):
    pid_file = str(tmp_path / "child")
    df = MultiProcessMapData(DataFromList([[pid_file]], shuffle=False), 1, map_func, strict=True)
    df.reset_state()
    child = None
    try:
        started = time.monotonic()
        with pytest.raises(WorkerError) as caught:
            list(df)
        reported = time.monotonic() - started
        child = int(open(pid_file).read())
        assert alive([child]) == {child}            # still sleeping: it did not hide the death
        assert reported < 10.0                      # (not when the child exits: it sleeps 30 s)
        assert "was killed by SIGKILL" in str(caught.value)
    finally:
        df.close()
        if child is not None:
            kill_all([child])


def test_a_forked_child_of_a_worker_does_not_keep_the_workers_channel_open(tmp_path):
    """A child that a map_func forks gets /dev/null in place of the worker's pipes and shared
    memory (Python's at-fork hook), so it cannot keep them open after the worker."""
    df = MultiProcessMapData(DataFromList([[str(tmp_path / "fds")]], shuffle=False), 1, _child_reports_fds,
                             strict=True)
    df.reset_state()
    try:
        (worker_fds, child_fds, channel_fds), = list(df)
    finally:
        df.close()
    result_pipe, command_pipe, segment = channel_fds
    assert worker_fds[result_pipe].startswith("pipe:") and worker_fds[command_pipe].startswith("pipe:")
    assert "(deleted)" in worker_fds[segment]       # the nameless shared-memory file
    assert [child_fds[fd] for fd in (result_pipe, command_pipe, segment)] == ["/dev/null"] * 3


def _fd_targets():
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            pass
    return found


def _child_reports_fds(dp):
    child = os.fork()
    if child == 0:
        with open(dp[0], "w") as f:
            json.dump(_fd_targets(), f)
        os._exit(0)
    os.waitpid(child, 0)
    end, = [o for o in gc.get_objects() if type(o).__name__ == "WorkerEnd"]     # this worker's channel
    with open(dp[0]) as f:
        return [_fd_targets(), json.load(f), [str(end._conn.fileno()), str(end._commands.fileno()), str(end._segment.fd)]]


def test_another_thread_forking_while_a_pool_starts_does_not_delay_the_report_of_a_dead_worker(tmp_path):
    import threading

    stop = threading.Event()
    sleepers = []

    def fork_sleepers():
        while not stop.is_set() and len(sleepers) < 40:
            try:
                pid = os.fork()
            except RuntimeError as err:     # refused by filelock's audit hook (Ray imports filelock)
                assert "unsafe while" in str(err), err
                time.sleep(0.002)           # while the pool forks: as the pool does, try again
                continue
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            sleepers.append(pid)
            time.sleep(0.002)

    forker = threading.Thread(target=fork_sleepers)
    forker.start()
    df = MultiProcessRunnerZMQ(RepeatedData(DataFromList([[i] for i in range(5)], shuffle=False), -1), 4)
    try:
        df.reset_state()
        it = iter(df)
        next(it)
        stop.set()
        forker.join(5)
        assert sleepers, "the other thread forked nothing while the pool started"
        victim = df.worker_pids[2]
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        with pytest.raises(WorkerError) as caught:
            for _ in it:
                pass
        assert time.monotonic() - killed < 1.0
        assert caught.value.pid == victim
    finally:
        stop.set()
        forker.join(5)
        df.close()
        kill_all(sleepers)
        for pid in sleepers:
            os.waitpid(pid, 0)


@pytest.mark.timeout(180)        # TensorFlow's first import and a session: a minute on a busy machine
def test_a_runner_of_a_process_map_inside_queue_input_in_worker_feeds_every_value():
    import tensorflow as tf
    from inputpipe.input_source import QueueInput

    inner = MultiProcessMapData(DataFromList([[i] for i in range(24)], shuffle=False), 2, _square, strict=True)
    source = QueueInput(BatchData(MultiProcessRunnerZMQ(inner, 1), 4), infinite=False, in_worker=True)
    with tf.Graph().as_default():
        source.setup([tf.TensorSpec([None], tf.int64, "x")])
        x, = source.get_input_tensors()
        values = []
        with tf.compat.v1.Session() as sess, source.session(sess):
            for _ in range(6):
                values += sess.run(x).tolist()
        source.close()
    assert sorted(values) == [i * i for i in range(24)]


_REFUSED_FORKS_SCRIPT = textwrap.dedent("""
    import sys
    from inputpipe.dataflow import DataFromList, MultiProcessMapData
    refusals = [int(sys.argv[1])]
    message = sys.argv[2]

    def audit(event, args):          # as filelock 4.3+ does while another thread forks
        if event == "os.fork" and refusals[0] > 0:
            refusals[0] -= 1
            raise RuntimeError(message)

    if hasattr(sys, "addaudithook"):
        sys.addaudithook(audit)
    else:                            # Python 3.7 has no audit hooks: the same refusal from os.fork itself
        import os
        fork = os.fork

        def refusing_fork():
            audit("os.fork", ())
            return fork()

        os.fork = refusing_fork
    df = MultiProcessMapData(DataFromList([[i] for i in range(6)], shuffle=False), 2, lambda dp: [dp[0] * 10],
                             strict=True)
    try:
        df.reset_state()
        print(sorted(dp[0] for dp in df), refusals[0])
    finally:
        df.close()
""")


@pytest.mark.parametrize("refusals", [1, 3])
def test_a_fork_refused_by_an_audit_hook_while_another_thread_forks_is_tried_again(tmp_path, refusals):
    script = tmp_path / "refused.py"
    script.write_text(_REFUSED_FORKS_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(refusals),
                           "os.fork is unsafe while filelock is changing descriptor ownership"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[0] == "[0, 10, 20, 30, 40, 50] 0"       # every refusal was used


def test_another_runtime_error_of_a_fork_is_raised_at_once(tmp_path):
    script = tmp_path / "refused.py"
    script.write_text(_REFUSED_FORKS_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), "1", "forks are not allowed here"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "RuntimeError: forks are not allowed here" in proc.stderr, proc.stderr[-2000:]
