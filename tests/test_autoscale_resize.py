"""Workers added and retired at random moments keep every guarantee of the parallel flows: each
datapoint once, the source order of ordered maps, exact strict epochs, continuous mode's streams,
map-and-batch's batches, resumable state, the same output for any sequence of worker counts, and
no process or thread left behind (also when a worker is retired while it holds work).

The resizes are forced: a controller whose policy draws a worker count at every decision
(``Autoscale(interval=0, policy=...)``), or ``set_num_workers`` from another thread."""
import itertools
import json
import random
import threading
import time
from collections import Counter

import numpy as np
import psutil
import pytest

from inputpipe.dataflow import (DataFromList, MultiProcessMapAndBatchData, MultiProcessMapData, MultiProcessRunnerZMQ,
                                MultiThreadMapData, MultiThreadRunner, seeding)
from inputpipe.dataflow.autoscale import Autoscale
from inputpipe.dataflow.parallel_map import _ParallelMapBase
from dataflow_helpers import Indexed
from resume_helpers import OTHER_SEED, SEED, canon, epochs, take

pytestmark = pytest.mark.timeout(60)


class RandomCounts:
    """A scripted policy: at each decision, with probability ``p``, a worker count drawn from
    1..``most`` (a seeded RNG: the same moments on every run of the test)."""

    def __init__(self, seed, most=4, p=0.3, least=1):
        self.rng = random.Random(seed)
        self.most = most
        self.least = least
        self.p = p
        self.decisions = 0
        #: Optionally, ``() -> datapoints the consumer's thread has mapped``: a 0 drawn then lasts
        #: until it maps one (before, the workers it parked may still be answering what they hold).
        self.mapped_inline = None
        self._zero_at = None

    def __call__(self, measurement):
        self.decisions += 1
        if self._zero_at is not None:
            if self.mapped_inline() == self._zero_at:
                return None
            self._zero_at = None
        count = self.rng.randint(self.least, self.most) if self.rng.random() < self.p else None
        if count == 0 and self.mapped_inline is not None:
            self._zero_at = self.mapped_inline()
        return count


def resized(seed, most=4, p=0.3, least=1):
    """Random counts from ``least`` to ``most``; 0 maps in the consumer's thread."""
    return Autoscale(interval=0, settle_intervals=0, policy=RandomCounts(seed, most, p, least), cpu_budget=most,
                     min_workers=least)


def identity(dp):
    return dp


def numbered_array(dp):
    return [dp[0], np.full((3,), dp[0], np.int64)]


def changes(df):
    return len(df.worker_count_history()) - 1


@pytest.fixture(autouse=True)
def no_global_seed():
    yield
    seeding.set_global_seed(None)


# ----------------------------------------------------------------------- the scheduler, simulated

class SimulatedWorkers(_ParallelMapBase):
    """The scheduler of the parallel maps with workers simulated in this thread: each worker
    answers its tasks in order, which one answers next (and whether any answers within a poll)
    is drawn from a seeded RNG, and the worker count is redrawn at random moments. It replays
    interleavings of resizes and answers that real workers produce rarely (a worker retired
    while it holds several tasks, of the current or an abandoned epoch)."""

    def __init__(self, ds, buffer_size, strict, ordered, seed):
        super().__init__(ds, resized(seed, most=5, p=0.4), buffer_size, strict, ordered)
        self.rng = np.random.RandomState(seed)
        self.queues = {}
        self.retired = set()

    def _start(self):
        self.queues = {rank: [] for rank in range(self.num_workers)}

    def _add_worker(self):
        rank = len(self.queues) + len(self.retired)
        self.queues[rank] = []
        return rank

    def _retire_worker(self, rank):
        assert self.queues.pop(rank) == [], "retired while it held work"
        self.retired.add(rank)

    def _submit(self, rank, task):
        assert rank in self._active, "a task for a worker that is not active"
        self.queues[rank].append(task)

    def _receive(self, timeout):
        busy = [rank for rank, tasks in self.queues.items() if tasks]
        if not busy or self.rng.rand() < 0.3:
            return None
        rank = busy[self.rng.randint(len(busy))]
        generation, ticket, dp = self.queues[rank].pop(0)
        return rank, [generation, ticket, identity(dp)]

    def worker_stats(self):
        return [{"rank": rank, "busy_seconds": 0.0, "items": 1, "active": rank in self._active}
                for rank in self.queues]

    def _describe_worker(self, rank):
        return "worker {}".format(rank), None

    def close(self):
        self._end_scaling()


@pytest.mark.parametrize("ordered", [True, False])
def test_simulated_resizes_at_random_moments_keep_strict_epochs_exact(ordered):
    for seed in range(60):
        df = SimulatedWorkers(Indexed(60), 12, True, ordered, seed)
        df.reset_state()
        for epoch in range(3):
            got = [dp[0] for dp in df]
            if ordered:
                assert got == list(range(60)), "seed {} epoch {}".format(seed, epoch)
            else:
                assert sorted(got) == list(range(60)), "seed {} epoch {}".format(seed, epoch)
        # an abandoned epoch: its answers still in flight are dropped, its workers may retire
        itr = iter(df)
        [next(itr) for _ in range(7)]
        itr.close()
        assert sorted(dp[0] for dp in df) == list(range(60)), "seed {}".format(seed)
        assert changes(df) > 10, "seed {}: too few resizes to mean anything".format(seed)
        assert df.retired, "seed {}: no worker was retired".format(seed)
        df.close()


@pytest.mark.parametrize("ordered", [True, False])
def test_simulated_resizes_keep_continuous_streams_whole(ordered):
    for seed in range(60):
        df = SimulatedWorkers(Indexed(50), 15, False, ordered, seed)
        df.reset_state()
        stream = [dp[0] for dp in itertools.islice(df, 200)]      # one iterator: it never ends
        assert len(stream) == 200
        if ordered:
            assert stream == [i % 50 for i in range(200)], "seed {}".format(seed)
        # what was yielded and what is still in flight are the source's datapoints read so far,
        # each exactly once (a datapoint may wait in a slow worker's queue for a while)
        in_flight = [task[2][0] for tasks in df.queues.values() for task in tasks]
        in_flight += [result[0] for _, result in df._ready] + [result[0] for result in df._pending.values()]
        read = 200 + len(in_flight)
        assert read <= 215 and df._next_key == read, "seed {}".format(seed)
        assert Counter(stream + in_flight) == Counter(i % 50 for i in range(read)), "seed {}".format(seed)
        assert len(set(stream[:35])) == 35, "seed {}".format(seed)
        df.close()


# ---------------------------------------------------------------------------- real workers

@pytest.mark.parametrize("least", [1, 0], ids=["workers", "also-inline"])
@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapData])
@pytest.mark.parametrize("ordered", [True, False])
def test_strict_maps_resized_at_random_moments_yield_each_datapoint_once(cls, ordered, least):
    scaling = resized(1, least=least)
    df = cls(Indexed(300), scaling, numbered_array, strict=True, ordered=ordered, buffer_size="auto")
    scaling.policy.mapped_inline = lambda: df._inline.items      # (its 0s last until it maps)
    df.reset_state()
    with df:
        for _ in range(2):
            got = list(df)
            numbers = [dp[0] for dp in got]
            assert numbers == list(range(300)) if ordered else sorted(numbers) == list(range(300))
            assert all(int(array[2]) == i and array.dtype == np.int64 for i, array in got)
        assert changes(df) > 20
        stats = df.worker_stats()
        assert any(not s["active"] for s in stats) and sum(s["active"] for s in stats) == df.num_workers
        assert df.num_workers == df.worker_count_history()[-1].workers
        if least == 0:          # the consumer's thread mapped some, at 0 workers
            assert 0 in [c.workers for c in df.worker_count_history()]
            assert 0 < df._inline.items < 600 and sum(s["items"] for s in stats) + df._inline.items == 600


@pytest.mark.parametrize("least", [1, 0], ids=["workers", "also-inline"])
@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapData])
def test_continuous_maps_resized_at_random_moments_lose_and_repeat_nothing(cls, least):
    df = cls(Indexed(100), resized(2, least=least), identity, buffer_size=30)
    df.reset_state()
    with df:
        stream = [dp[0] for dp in itertools.islice(df, 400)]      # one iterator: it never ends
    counts = np.bincount(stream, minlength=100)
    assert len(stream) == 400 and counts.min() >= 3 and counts.max() <= 5
    assert len(set(stream[:70])) == 70
    assert changes(df) > 20


@pytest.mark.parametrize("least", [1, 0], ids=["workers", "also-inline"])
def test_map_and_batch_resized_at_random_moments_keeps_whole_batches(least):
    df = MultiProcessMapAndBatchData(Indexed(203), resized(3, least=least), numbered_array, batch_size=10,
                                     strict=True, ordered=True)
    df.reset_state()
    with df:
        for _ in range(2):
            batches = list(df)
            assert len(batches) == 20
            labels = [int(v) for labels, _ in batches for v in labels]
            assert labels == list(range(200))
            assert all(arrays.shape == (10, 3) and (arrays[:, 0] == labels).all() for labels, arrays in batches)
    assert changes(df) > 5


def test_set_num_workers_from_another_thread_while_iterating():
    df = MultiProcessMapData(Indexed(400), 2, identity, strict=True, ordered=True, buffer_size=16)
    df.reset_state()
    stop = threading.Event()

    def nudge():
        rng = random.Random(5)
        while not stop.wait(0.005):
            df.set_num_workers(rng.randint(1, 3))

    thread = threading.Thread(target=nudge)
    thread.start()
    try:
        with df:
            # three epochs, and more until the nudging thread got its changes in (it may be scheduled
            # seldom on a busy machine): every epoch whole and in order meanwhile
            epochs = 0
            while epochs < 3 or (changes(df) <= 5 and epochs < 50):
                assert [dp[0] for dp in df] == list(range(400))
                epochs += 1
    finally:
        stop.set()
        thread.join()
    assert changes(df) > 5
    assert {c.reason for c in df.worker_count_history()[1:]} == {"requested"}


def test_set_num_workers_checks_its_argument_and_applies_before_the_start():
    df = MultiThreadMapData(Indexed(10), 2, identity, strict=True, ordered=True)
    with pytest.raises(ValueError, match=r"MultiThreadMapData.set_num_workers: num must be an int >= 0, got -1"):
        df.set_num_workers(-1)
    with pytest.raises(ValueError, match=r"MultiThreadRunner.set_num_workers: num must be an int >= 1, got 0"):
        MultiThreadRunner(lambda: Indexed(3), 2, 4).set_num_workers(0)
    df.set_num_workers(3)
    df.reset_state()
    with df:
        assert [dp[0] for dp in df] == list(range(10))
        assert [c.workers for c in df.worker_count_history()] == [2, 3]
        assert df.num_thread == 3


# ------------------------------------------------------------------------------- the pool itself

def _echo(rank, end, scale):
    """Worker of the pool tests: answers each command ``x`` with ``[rank, x * scale]``."""
    while True:
        command = end.receive_command(0.05)
        if command is not None:
            time.sleep(0.002)
            end.count_work(0.002, 1)
            end.send_datapoint([rank, command * scale])


def test_a_pool_adds_workers_with_new_ranks_and_retires_one_after_all_it_was_sent():
    from inputpipe.utils.workers import WorkerPool

    pool = WorkerPool("EchoPool", _echo, 2, (10,))
    pool.start()
    try:
        first = list(pool.pids)
        assert pool.add_worker() == 2 and pool.active_ranks == [0, 1, 2] and pool.num == 3
        for x in range(30):
            pool.send(x % 3, x)
        pool.retire_worker(1)                    # it still holds 10 commands: all are answered
        assert pool.active_ranks == [0, 2] and pool.num == 2 and not pool.takes_commands(1)
        with pytest.raises(ValueError, match="EchoPool: worker 1 is not active"):
            pool.retire_worker(1)
        got = []
        deadline = time.monotonic() + 10
        while (len(got) < 30 or pool.retiring) and time.monotonic() < deadline:
            answer = pool.receive(0.05)
            if answer is not None:
                got.append(answer[1])
        assert sorted(x for _, x in got) == [10 * x for x in range(30)]
        assert {rank for rank, _ in got} == {0, 1, 2}
        assert pool.retiring == 0                # reaped: not a child any more
        assert first[1] not in {p.pid for p in psutil.Process().children()}
        assert [s["active"] for s in pool.worker_stats()] == [True, False, True]
        assert pool.worker_stats()[1]["items"] == 10
        with pytest.raises(ValueError, match="EchoPool: cannot retire the last worker"):
            pool.retire_worker(0)
            pool.retire_worker(2)
    finally:
        pool.close()


def test_a_map_whose_pool_is_resized_directly_at_random_moments_stays_exact():
    rng = random.Random(3)
    df = MultiProcessMapData(Indexed(300), 2, numbered_array, strict=True, ordered=True, buffer_size=12)
    df.reset_state()
    with df:
        for _ in range(2):
            got = []
            for dp in df:
                got.append(dp[0])
                pool = df._pool
                if rng.random() < 0.1:
                    if rng.random() < 0.5 or pool.num == 1:
                        pool.add_worker()
                    else:
                        pool.retire_worker(rng.choice(pool.active_ranks))
            assert got == list(range(300))
        assert df.num_workers == df._pool.num and len(df.worker_stats()) > 4


# ------------------------------------------------------------------------ runners (copies)

class Numbered(Indexed):
    """``[pid, i]``: each copy numbers its datapoints, so a gap would show a lost one."""

    def __iter__(self):
        import os
        for i in range(self.n):
            yield [os.getpid(), i]


def test_process_runner_resized_at_random_moments_delivers_all_a_retired_copy_made():
    df = MultiProcessRunnerZMQ(Numbered(10 ** 6), resized(4, most=3, p=0.1), hwm=6)
    df.reset_state()
    seen = {}
    try:
        itr = iter(df)
        for _ in range(600):
            pid, i = next(itr)
            assert i == seen.get(pid, -1) + 1, "copy {} skipped from {} to {}".format(pid, seen.get(pid), i)
            seen[pid] = i
        # retired copies: everything each one made (its count, sent with its last datapoint) came
        pool = df._pool
        finished = [rank for rank in range(len(pool.worker_stats())) if not pool.takes_commands(rank)
                    and rank not in pool._retiring]
        assert finished, "no copy was retired"
        for rank in finished:
            made = pool.worker_stats()[rank]["items"]
            assert seen[pool.pid_of(rank)] + 1 == made, "copy {} made {}, delivered {}".format(
                rank, made, seen[pool.pid_of(rank)] + 1)
        itr.close()
    finally:
        df.close()
    assert changes(df) > 5


def test_thread_runner_resized_at_random_moments_delivers_epochs_of_the_right_length():
    df = MultiThreadRunner(lambda: Numbered(50), 8, resized(6, most=3))
    df.reset_state()
    with df:
        for _ in range(6):
            assert len(list(df)) == 50
    assert changes(df) > 5
    assert len(df.worker_stats()) > 3 and df.num_thread == df.worker_count_history()[-1].workers


# -------------------------------------------------------------------- resuming, determinism

N = 23
DROPPED = {3, 10, 17}


def random_map(dp):
    """Drops a few datapoints; draws from the datapoint's RNG and (processes) numpy's global one."""
    if dp[0] in DROPPED:
        return None
    return [dp[0], int(seeding.datapoint_rng().randint(10 ** 6)), int(np.random.randint(10 ** 6))]


def random_map_threads(dp):
    if dp[0] in DROPPED:
        return None
    return [dp[0], int(seeding.datapoint_rng().randint(10 ** 6))]


def make(kind, ordered, workers):
    source = DataFromList([[i] for i in range(N)], shuffle=True)
    if kind == "threads":
        return MultiThreadMapData(source, workers, random_map_threads, strict=True, ordered=ordered, buffer_size=5)
    return MultiProcessMapData(source, workers, random_map, strict=True, ordered=ordered, buffer_size=5)


def run(kind, ordered, workers, count):
    seeding.set_global_seed(SEED)
    df = make(kind, ordered, workers)
    df.reset_state()
    with df:
        got = [canon(dp) for dp in take(epochs(df), count)]
    return got if ordered else sorted(got[:count - count % 20], key=json.dumps)


@pytest.mark.parametrize("kind", ["threads", "processes"])
@pytest.mark.parametrize("ordered", [True, False])
def test_any_sequence_of_worker_counts_gives_the_same_datapoints_under_a_global_seed(kind, ordered):
    pinned = run(kind, ordered, 1, 60)
    assert len({dp[1] for dp in pinned}) > 15                  # the draws differ from datapoint to datapoint
    for seed in (7, 8):
        assert run(kind, ordered, resized(seed), 60) == pinned, "policy seed {}".format(seed)
        # 0 workers at times: the consumer's thread maps those, seeded as a worker would
        assert run(kind, ordered, resized(seed, least=0), 60) == pinned, "policy seed {}, with 0".format(seed)


@pytest.mark.parametrize("kind", ["threads", "processes"])
@pytest.mark.parametrize("ordered", [True, False])
def test_state_taken_while_resizing_resumes_the_same_stream(kind, ordered):
    seeding.set_global_seed(SEED)
    reference = make(kind, ordered, resized(11))
    reference.reset_state()
    with reference:
        full = [canon(dp) for dp in take(epochs(reference), 80)]
    for cut in (1, 13, 20, 27):
        seeding.set_global_seed(SEED)
        first = make(kind, ordered, resized(20 + cut, least=cut % 2))
        first.reset_state()
        with first:
            itr = epochs(first)
            head = [canon(dp) for dp in take(itr, cut)]
            first.set_num_workers(3)                 # a resize pending when the state is taken
            text = json.dumps(first.get_state())
            itr.close()
        seeding.set_global_seed(OTHER_SEED)
        second = make(kind, ordered, resized(40 + cut, least=0))
        second.reset_state()
        second.set_state(json.loads(text))
        with second:
            itr = epochs(second)
            rest = [canon(dp) for dp in take(itr, 80 - cut)]
            itr.close()
        if ordered:
            assert head + rest == full, "cut {}".format(cut)
        else:
            stream = head + rest
            for epoch in range(4):
                got = Counter(json.dumps(dp) for dp in stream[20 * epoch:20 * epoch + 20])
                assert got == Counter(json.dumps(dp) for dp in full[20 * epoch:20 * epoch + 20]), "cut {}".format(cut)


# ------------------------------------------------------------------------------------ orphans

def slow_identity(dp):
    time.sleep(0.05)
    return dp


@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapData])
def test_a_worker_retired_while_it_holds_work_finishes_it_and_close_leaves_nothing(cls):
    df = cls(Indexed(40), 3, slow_identity, strict=True, ordered=True, buffer_size=12)
    df.reset_state()
    pids = list(getattr(df, "worker_pids", []))
    itr = iter(df)
    assert next(itr) == [0]
    df.set_num_workers(1)          # two workers hold tasks: they finish them, then stop
    got = [next(itr) for _ in range(3)]
    assert got == [[1], [2], [3]]
    assert df.num_workers == 1 and len(df._retiring) >= 1       # still finishing their tasks
    started = time.monotonic()
    df.close()
    while pids and any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                       for pid in pids):
        assert time.monotonic() - started < 2.0, "a worker outlived close()"
        time.sleep(0.02)


def test_retired_worker_processes_are_reaped_while_the_map_runs():
    df = MultiProcessMapData(Indexed(10 ** 6), 4, identity, buffer_size=8)
    df.reset_state()
    with df:
        itr = iter(df)
        [next(itr) for _ in range(20)]
        first = set(df.worker_pids)
        df.set_num_workers(1)
        deadline = time.monotonic() + 5
        while (df.num_workers > 1 or df._retiring or df._pool.retiring) and time.monotonic() < deadline:
            next(itr)
        assert df.num_workers == 1 and not df._retiring and df._pool.retiring == 0
        gone = first - set(df.worker_pids)
        assert len(gone) == 3
        children = {p.pid for p in psutil.Process().children()}
        assert not gone & children, "a retired worker was not reaped"
        itr.close()


KILLED_CONSUMER = """
import itertools, sys
from inputpipe.dataflow import DataFlow, MultiProcessMapData
from inputpipe.dataflow.autoscale import Autoscale

class Forever(DataFlow):
    def __iter__(self):
        for i in itertools.count():
            yield [i]

def identity(dp):
    return dp

if __name__ == "__main__":
    counts = itertools.cycle([1, 0, 4])      # workers added, parked (0: the consumer maps) and retired
    df = MultiProcessMapData(Forever(), Autoscale(interval=0, settle_intervals=0, cpu_budget=4, min_workers=0,
                                                  policy=lambda m: next(counts)), identity, buffer_size=8)
    df.reset_state()
    for k, dp in enumerate(df):
        if k == 20:
            print("running", flush=True)
"""


def _marked(marker):
    """Pids of the live processes whose environment carries ``marker``."""
    found = set()
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("INPUTPIPE_TEST_MARK") == marker and proc.status() != psutil.STATUS_ZOMBIE:
                found.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.timeout(90)
def test_killing_the_consumer_while_workers_are_added_leaves_no_process_and_no_shm_file(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import uuid

    script = tmp_path / "consumer.py"
    script.write_text(KILLED_CONSUMER)
    shm_before = set(os.listdir("/dev/shm"))
    for delay in (0.0, 0.07, 0.23):
        marker = uuid.uuid4().hex
        env = dict(os.environ, INPUTPIPE_TEST_MARK=marker, PYTHONPATH=os.pathsep.join(sys.path))
        proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE)
        try:
            assert proc.stdout.readline() == b"running\n"
            time.sleep(delay)
            assert len(_marked(marker)) >= 2            # the consumer and its workers
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            deadline = time.monotonic() + 3.0
            while _marked(marker) and time.monotonic() < deadline:
                time.sleep(0.05)
            left = _marked(marker)
        finally:
            proc.kill()
            proc.wait(10)
            proc.stdout.close()
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert left == set(), "processes left after the consumer was killed {} s in".format(delay)
    assert {name for name in set(os.listdir("/dev/shm")) - shm_before if "inputpipe" in name} == set()
