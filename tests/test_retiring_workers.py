"""Workers that retire ("auto" shrinking, ``set_num_workers``): one killed while it retires is
reported with its pid and signal, never dropped silently with the answers it held; a retired
worker leaves no descriptor open in the parent (its pidfd, its pipes)."""
import os
import signal
import time

import psutil
import pytest

from inputpipe.dataflow import DataFlow, MultiProcessRunnerZMQ
from inputpipe.utils.errors import WorkerError
from inputpipe.utils.workers import WorkerPool

pytestmark = pytest.mark.timeout(60)


def gate(gates, pid):
    """While this file exists, the worker ``pid`` holds its work."""
    return os.path.join(gates, str(pid))


def hold_while_gated(gates):
    """In a worker: wait while its gate exists, saying so (``<pid>.held``) as it starts waiting."""
    if os.path.exists(gate(gates, os.getpid())):
        open(gate(gates, os.getpid()) + ".held", "w").close()
        while os.path.exists(gate(gates, os.getpid())):
            time.sleep(0.005)


def answer_when_open(rank, end, gates):
    """A worker of a WorkerPool: answers each command with ``[rank, command]`` once its gate is open."""
    while True:
        command = end.receive_command(0.05)
        if command is not None:
            hold_while_gated(gates)
            end.send_datapoint([rank, command])


class GatedCount(DataFlow):
    """``[pid, i]`` for i = 0, 1, ...; makes the next one only once its process' gate is open."""

    def __init__(self, gates):
        self.gates = gates

    def __iter__(self):
        i = 0
        while True:
            hold_while_gated(self.gates)
            yield [os.getpid(), i]
            i += 1


def wait_for(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.01)


def open_descriptors():
    return sorted(os.listdir("/proc/self/fd"))


def test_a_pool_worker_killed_while_it_retires_holding_an_answer_is_reported(tmp_path):
    gates = str(tmp_path)
    pool = WorkerPool("RetiringPool", answer_when_open, 2, (gates,))
    pool.start()
    try:
        victim = pool.pid_of(1)
        open(gate(gates, victim), "w").close()
        pool.send(1, 7)                               # held: its answer is owed
        wait_for(lambda: os.path.exists(gate(gates, victim) + ".held"), 10, "the worker to hold its answer")
        pool.retire_worker(1)
        assert pool.retiring == 1 and pool.active_ranks == [0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 10
        with pytest.raises(WorkerError) as caught:
            while time.monotonic() < deadline:
                pool.receive(0.05)
        err = caught.value
        assert err.where == "RetiringPool: worker 1 (pid {})".format(victim)
        assert (err.exitcode, err.signal_name) == (-signal.SIGKILL, "SIGKILL")
    finally:
        pool.close()


def test_a_runner_copy_killed_while_it_retires_is_reported_not_dropped(tmp_path):
    """A retired copy delivers every datapoint it made: one killed first (here while it makes its
    next one) makes the iteration fail naming it, instead of going on without its datapoints."""
    gates = str(tmp_path)
    df = MultiProcessRunnerZMQ(GatedCount(gates), 2, hwm=4)
    df.reset_state()
    it = iter(df)
    try:
        survivor, victim = df.worker_pids
        seen = set()
        while seen != {survivor, victim}:
            seen.add(next(it)[0])
        open(gate(gates, victim), "w").close()
        while not os.path.exists(gate(gates, victim) + ".held"):   # the consumer takes what the victim made
            next(it)
        df.set_num_workers(1)
        next(it)                                      # applied at the next datapoint: the newest retires
        assert df.worker_pids == [survivor] and psutil.Process(victim).status() != psutil.STATUS_ZOMBIE
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 10
        with pytest.raises(WorkerError) as caught:
            while time.monotonic() < deadline:
                next(it)
        assert caught.value.pid == victim and caught.value.signal_name == "SIGKILL"
        assert caught.value.reason.startswith("was killed by SIGKILL (signal 9)")
    finally:
        it.close()
        df.close()


def test_a_retired_worker_leaves_no_descriptor_open(tmp_path):
    """Its pidfd (or sentinel) and its pipes are closed when it is reaped, not at close(): a pool
    that grows and shrinks for a long time holds only the descriptors of its workers now."""
    pool = WorkerPool("Resized", answer_when_open, 1, (str(tmp_path),))
    pool.start()
    try:
        before = open_descriptors()
        for n in range(6):
            rank = pool.add_worker()
            pool.send(rank, n)
            answered = None
            while answered is None:
                answered = pool.receive(0.05)
            assert answered == (rank, [rank, n])
            pool.retire_worker(rank)
            wait_for(lambda: pool.receive(0.05) is None and pool.retiring == 0, 10, "the retired worker's end")
        assert open_descriptors() == before
        assert pool.active_ranks == [0] and len(pool.worker_stats()) == 7
    finally:
        pool.close()
