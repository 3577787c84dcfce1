"""A failure at the innermost level of nested parallel flows reaches the consumer every time:
an exception with its type, its reason and its traceback once; a SIGKILLed leaf with its pid and
the signal. Every nesting shape (runner, map, map-and-batch at 2 and 3 levels, threads inside
processes) is run many times.

The race these tests close: a worker writes its error report, then exits; a parent that sends
it a command in between (the next task, an acknowledgement) saw the send fail, or the message
pipe end, and reported "exited unexpectedly with exit code 1" without the report. A consumer
that takes its time (``PAUSE`` after each datapoint) makes the leaf exit before its parent's
next send at every level, which made that race certain instead of rare; every other run the
consumer takes none.
"""
import gc
import os
import signal
import time

import pytest

from inputpipe.dataflow import (DataFlow, DataFromList, MultiProcessMapAndBatchData, MultiProcessMapData,
                                MultiProcessRunnerZMQ, MultiThreadMapData, MultiThreadRunner)
from inputpipe.utils import workers
from inputpipe.utils.errors import WorkerError

pytestmark = pytest.mark.timeout(150)

#: Datapoints of the source, the one at which the leaf fails, the consumer's pause after each.
N, FAIL_AT, PAUSE = 12, 2, 0.02
#: Runs of each shape and failure mode (half of them with the pause that makes the race certain).
RUNS = 8


def fail_here(mode, pid_file):
    """Write this process' pid to ``pid_file``, then raise KeyError (``mode="raise"``) or
    SIGKILL this process (``"kill"``)."""
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(30)                     # not reached: the signal ends the process first
    raise KeyError("the leaf failed at datapoint {}".format(FAIL_AT))


class Leaf:
    """The innermost ``map_func``: ``[i] -> [i]``, failing at datapoint ``FAIL_AT``."""

    def __init__(self, mode, pid_file):
        self.mode, self.pid_file = mode, pid_file

    def __call__(self, dp):
        if dp[0] == FAIL_AT:
            fail_here(self.mode, self.pid_file)
        return [dp[0]]


class LeafFlow(DataFlow):
    """The innermost DataFlow (a runner's copy): ``[0] .. [N-1]``, failing at ``FAIL_AT``."""

    def __init__(self, mode, pid_file):
        self.mode, self.pid_file = mode, pid_file

    def __iter__(self):
        for i in range(N):
            if i == FAIL_AT:
                fail_here(self.mode, self.pid_file)
            yield [i]


class MapFuncRunsAProcessMap:
    """A ``map_func`` that runs a process map of its own (whose ``map_func`` is the leaf) over
    the datapoint's number ``i`` and ``i + N``."""

    def __init__(self, leaf):
        self.leaf = leaf

    def __call__(self, dp):
        inner = MultiProcessMapData(DataFromList([[dp[0]], [dp[0] + N]], shuffle=False), 2, self.leaf,
                                    strict=True)
        inner.reset_state()
        try:
            return [sum(v for v, in inner)]
        finally:
            inner.close()


def identity(dp):
    return dp


def source():
    return DataFromList([[i] for i in range(N)], shuffle=False)


def pmap(ds, func, num=2):
    return MultiProcessMapData(ds, num, func, strict=True, buffer_size=2)


def runner(ds):
    return MultiProcessRunnerZMQ(ds, 1, hwm=1)


def batches(ds, func):
    return MultiProcessMapAndBatchData(ds, 2, func, batch_size=2, buffer_size=4, strict=True)


def copies(flow):
    return MultiThreadRunner(lambda: flow, num_prefetch=2, num_thread=1)


_MAP, _RUNNER, _BATCH = "MultiProcessMapData", "MultiProcessRunnerZMQ", "MultiProcessMapAndBatchData"
_THREADS = "MultiThreadMapData"

#: name -> (build(leaf, leaf_flow), the components the failure comes through, outermost first,
#: and for a leaf in a thread: the components down to the process it runs in)
SHAPES = {
    "map": (lambda leaf, flow: pmap(source(), leaf), [_MAP]),
    "map over map": (lambda leaf, flow: pmap(pmap(source(), leaf), identity), [_MAP]),
    "runner over map": (lambda leaf, flow: runner(pmap(source(), leaf)), [_RUNNER, _MAP]),
    "runner over map over map": (lambda leaf, flow: runner(pmap(pmap(source(), leaf), identity)), [_RUNNER, _MAP]),
    "runner over runner over map": (lambda leaf, flow: runner(runner(pmap(source(), leaf))), [_RUNNER, _RUNNER, _MAP]),
    "runner over runner over copies": (lambda leaf, flow: runner(runner(flow)), [_RUNNER, _RUNNER]),
    "map whose map_func runs a map": (lambda leaf, flow: pmap(source(), MapFuncRunsAProcessMap(leaf), 1),
                                      [_MAP, _MAP]),
    "runner over a map whose map_func runs a map": (
        lambda leaf, flow: runner(pmap(source(), MapFuncRunsAProcessMap(leaf), 1)), [_RUNNER, _MAP, _MAP]),
    "map-and-batch over map": (lambda leaf, flow: batches(pmap(source(), leaf), identity), [_MAP]),
    "runner over map-and-batch": (lambda leaf, flow: runner(batches(source(), leaf)), [_RUNNER, _BATCH]),
    "runner over runner over map-and-batch": (lambda leaf, flow: runner(runner(batches(source(), leaf))),
                                              [_RUNNER, _RUNNER, _BATCH]),
    "threads in a runner": (lambda leaf, flow: runner(MultiThreadMapData(source(), 2, leaf, strict=True,
                                                                         buffer_size=2)), [_RUNNER, _THREADS]),
    "thread copies in a runner": (lambda leaf, flow: runner(copies(flow)), [_RUNNER, "MultiThreadRunner"]),
    "threads over runner over map over map": (
        lambda leaf, flow: MultiThreadMapData(runner(pmap(pmap(source(), leaf), identity)), 2, identity, strict=True,
                                              buffer_size=2), [_RUNNER, _MAP]),
}
#: a thread fails in the process it runs in: the chain of a kill ends before it
_IN_A_THREAD = {"threads in a runner", "thread copies in a runner"}


def run_until_failure(df, pause=PAUSE):
    """Iterate ``df`` like a consumer that takes ``pause`` s for each datapoint; the error it raises."""
    df.reset_state()
    try:
        with pytest.raises(WorkerError) as caught:
            for _ in df:
                time.sleep(pause)
    finally:
        df.close()
    return caught.value


def chain_of(err):
    """The components the failure came through, outermost first."""
    return [err.component] + [where.split(":")[0] for where in err.nested]


def pid_of_the_failing_process(err):
    where = err.nested[-1] if err.nested else err.where
    return int(where.rsplit("(pid ", 1)[1].rstrip(")"))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_exception_at_the_leaf_reaches_the_consumer_with_its_type_and_traceback_every_time(shape, tmp_path):
    build, chain = SHAPES[shape]
    pid_file = str(tmp_path / "leaf")
    for run in range(RUNS):
        err = run_until_failure(build(Leaf("raise", pid_file), LeafFlow("raise", pid_file)), PAUSE * (run % 2))
        where = "{} run {}: {}".format(shape, run, str(err)[:600])
        assert isinstance(err, KeyError) and err.original_type is KeyError, where
        assert err.reason == "raised KeyError: 'the leaf failed at datapoint 2'", where
        assert chain_of(err) == chain, where
        assert err.remote_traceback.count('raise KeyError("the leaf failed at datapoint {}".format(FAIL_AT))') == 1, \
            where
        assert err.remote_traceback.count("received it here:") == len(chain) - 1, where
        assert str(err).count("Traceback in the worker:") == 1, where
        if shape not in _IN_A_THREAD:
            assert pid_of_the_failing_process(err) == int(open(pid_file).read()), where


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_sigkilled_leaf_reaches_the_consumer_with_its_pid_and_signal_every_time(shape, tmp_path):
    build, chain = SHAPES[shape]
    chain = chain[:-1] if shape in _IN_A_THREAD else chain
    pid_file = str(tmp_path / "leaf")
    for run in range(RUNS):
        err = run_until_failure(build(Leaf("kill", pid_file), LeafFlow("kill", pid_file)), PAUSE * (run % 2))
        where = "{} run {}: {}".format(shape, run, str(err)[:600])
        assert err.original_type is None, where
        assert err.reason.startswith("was killed by SIGKILL (signal 9)"), where
        assert chain_of(err) == chain, where
        assert pid_of_the_failing_process(err) == int(open(pid_file).read()), where
        if not err.nested:
            assert (err.exitcode, err.signal_name) == (-signal.SIGKILL, "SIGKILL"), where


def test_an_eof_or_broken_pipe_of_the_users_code_is_its_error_not_a_normal_stop():
    """A worker's loop takes only its own channel's end (``ChannelClosed``) as the parent's stop:
    a ``map_func`` that raises ``EOFError`` (a truncated file) or ``BrokenPipeError`` (a closed
    socket) is reported with its type and traceback, not as an exit with code 0."""
    for error in (EOFError("truncated record 3"), BrokenPipeError(32, "the socket closed")):
        err = run_until_failure(pmap(source(), RaisesAt3(error)))
        assert err.reason == "raised {}: {}".format(type(error).__name__, error)
        assert err.remote_traceback.count("raise self.error") == 1
        assert isinstance(err, EOFError) == isinstance(error, EOFError)   # an OSError's layout stays WorkerError's


class RaisesAt3:
    def __init__(self, error):
        self.error = error

    def __call__(self, dp):
        if dp[0] == 3:
            raise self.error
        return dp


def closes_its_channel_and_lives_on(dp):
    end, = [o for o in gc.get_objects() if type(o).__name__ == "WorkerEnd"]     # this worker's channel
    end._conn.close()
    time.sleep(60)


def test_a_worker_that_closes_its_channel_without_exiting_is_named_after_the_grace(monkeypatch):
    """The report of a worker whose channel broke waits for its exit (which carries the status),
    but not for ever: one that closed its pipe and lives on is named after ``EXIT_GRACE``."""
    monkeypatch.setattr(workers, "EXIT_GRACE", 0.3)
    df = pmap(source(), closes_its_channel_and_lives_on, 1)
    df.reset_state()
    try:
        pid, = df.worker_pids
        with pytest.raises(WorkerError) as caught:
            list(df)
    finally:
        df.close()
    assert caught.value.where == "MultiProcessMapData: worker 0 (pid {})".format(pid)
    assert caught.value.reason.startswith("closed its channel to the parent but has not exited ")
    assert caught.value.exitcode is None
