"""Every guarantee holds at the worker counts "auto" may pick now that a worker is charged its CPU
share: more processes (and threads) than this machine's cores, grown and shrunk while the flow
runs. Exactly once and the source order of strict maps, a state taken at any count resuming the
same stream at another, no process, thread or /dev/shm file left behind, and the memory budget.

The counts are forced (``set_num_workers`` from the consumer's thread and from another one, a
policy drawing counts up to 16) or picked by the controller itself for work that waits."""
import gc
import json
import os
import random
import threading
import time
from collections import Counter

import numpy as np
import psutil
import pytest

from inputpipe.dataflow import DataFromList, MultiProcessMapData, MultiThreadMapData, seeding
from inputpipe.dataflow.autoscale import Autoscale
from inputpipe.utils import resources
from dataflow_helpers import Indexed
from resume_helpers import OTHER_SEED, SEED, canon, epochs, take
from test_autoscale_memory import MB, MemoryWatch

pytestmark = pytest.mark.timeout(120)

#: Counts a stage is forced through: past the 2 cores of the test machine and back.
COUNTS = [9, 3, 16, 2, 12, 1, 6]


@pytest.fixture(autouse=True)
def clean_settings():
    resources.set_budget()
    yield
    resources.set_budget()
    seeding.set_global_seed(None)


def nap(dp):
    time.sleep(0.001)
    return [dp[0], np.full((64 << 10,), dp[0] % 251, np.uint8)]      # 64 KiB: through shared memory


def _shm_files():
    return set(os.listdir("/dev/shm"))


def _our_segments():
    """This process' descriptors of nameless shared-memory files (the pools' segments)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/{}".format(fd))
        except OSError:
            continue
        found += target.startswith(("/dev/shm", "/memfd:")) and target.endswith("(deleted)")
    return found


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.parametrize("cls", [MultiProcessMapData, MultiThreadMapData])
@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_strict_epochs_through_counts_past_the_cores_are_exact(cls, ordered):
    gc.collect()                                     # (flows of earlier tests in this worker)
    shm_before, segments_before = _shm_files(), _our_segments()
    df = cls(Indexed(280), 2, nap, strict=True, ordered=ordered, buffer_size=32)
    df.reset_state()
    pids = set()
    pending = list(COUNTS)
    other = threading.Thread(target=lambda: [time.sleep(0.02), df.set_num_workers(7)], name="resizer")
    try:
        for epoch in range(2):
            seen = []
            for k, dp in enumerate(df):
                seen.append(int(dp[0]))
                assert int(dp[1][0]) == int(dp[0]) % 251 and dp[1].shape == (64 << 10,)
                if k % 40 == 20 and pending:
                    df.set_num_workers(pending.pop(0))
                    pids.update(getattr(df, "worker_pids", []))
                if epoch == 1 and k == 100:
                    other.start()                    # a count asked for from another thread, too
            assert sorted(seen) == list(range(280)), "epoch {}".format(epoch)
            if ordered:
                assert seen == list(range(280)), "epoch {}".format(epoch)
        other.join(5)
        counts = [c.workers for c in df.worker_count_history()]
        assert max(counts) == 16 and counts[-1] == 7 and {9, 12}.issubset(counts)
        assert all(c.reason == "requested" for c in df.worker_count_history()[1:])
    finally:
        df.close()
    del dp                                           # (its array is a view of a worker's shared memory)
    deadline = time.monotonic() + 3.0
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _alive(pids) == [], "workers outlived close()"
    # none of this test's segments is left (one of an earlier test in this worker may have gone meanwhile)
    assert _shm_files() == shm_before and _our_segments() <= segments_before


def slow_nap(dp):
    time.sleep(0.01)
    return dp


@pytest.mark.parametrize("cls", [MultiProcessMapData, MultiThreadMapData])
def test_the_controller_grows_past_the_cores_for_work_that_waits_and_epochs_stay_exact(cls):
    # 10 ms of sleep per datapoint uses almost no CPU: charged an eighth of a CPU each, a budget
    # of one CPU takes up to 8 workers; the epochs are exact while it grows
    df = cls(Indexed(150), Autoscale(interval=0.05, cpu_budget=1), slow_nap, strict=True, ordered=True,
             buffer_size="auto")
    df.reset_state()
    with df:
        deadline = time.monotonic() + 30
        epoch = 0
        while time.monotonic() < deadline and (epoch < 2 or df.num_workers <= 2):
            assert [dp[0] for dp in df] == list(range(150)), "epoch {}".format(epoch)
            epoch += 1
        counts = [c.workers for c in df.worker_count_history()]
    assert 2 < max(counts) <= 8, counts
    assert all(c.reason.startswith("grow") or c.reason.startswith(("undo", "shrink"))
               for c in df.worker_count_history()[1:])


class ManyCounts:
    """A policy drawing a count from 1..16 at random decisions (seeded: the same moments)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def __call__(self, measurement):
        return self.rng.randint(1, 16) if self.rng.random() < 0.3 else None


def resized(seed):
    return Autoscale(interval=0, settle_intervals=0, policy=ManyCounts(seed), cpu_budget=16)


N = 29


def drawing_map(dp):
    """Draws from the datapoint's RNG and (processes) numpy's global one."""
    return [dp[0], int(seeding.datapoint_rng().randint(10 ** 6)), int(np.random.randint(10 ** 6))]


def make(workers, ordered):
    source = DataFromList([[i] for i in range(N)], shuffle=True)
    return MultiProcessMapData(source, workers, drawing_map, strict=True, ordered=ordered, buffer_size=24)


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_state_taken_at_many_workers_resumes_the_same_stream_at_others(ordered):
    seeding.set_global_seed(SEED)
    reference = make(1, ordered)
    reference.reset_state()
    with reference:
        full = [canon(dp) for dp in take(epochs(reference), 3 * N)]
    for cut in (5, 31, 47):
        seeding.set_global_seed(SEED)
        first = make(resized(cut), ordered)
        first.reset_state()
        with first:
            itr = epochs(first)
            head = [canon(dp) for dp in take(itr, cut)]
            first.set_num_workers(14)                # past the cores, pending when the state is taken
            text = json.dumps(first.get_state())
            itr.close()
        seeding.set_global_seed(OTHER_SEED)
        second = make(resized(100 + cut), ordered)
        second.reset_state()
        second.set_state(json.loads(text))
        with second:
            itr = epochs(second)
            rest = [canon(dp) for dp in take(itr, 3 * N - cut)]
            itr.close()
            assert max(c.workers for c in second.worker_count_history()) > 2
        if ordered:
            assert head + rest == full, "cut {}".format(cut)
        else:
            stream = head + rest
            for epoch in range(3):
                got = Counter(json.dumps(dp) for dp in stream[N * epoch:N * epoch + N])
                assert got == Counter(json.dumps(dp) for dp in full[N * epoch:N * epoch + N]), "cut {}".format(cut)


def two_megabytes(dp):
    time.sleep(0.005)                         # waits: the CPU budget alone would take 8 of them
    return [np.full(2 * MB, dp[0] % 251, np.uint8)]


def test_work_that_waits_grows_only_as_far_as_the_memory_budget():
    """A map that waits takes little CPU, so its CPU share would allow many processes on 8 CPUs
    (the more, on a busy machine, where making and copying its arrays takes longer); its
    datapoints (2 MiB, up to 24 in flight per worker) and its workers' own memory fill a 120 MB
    budget first. The memory the stage takes (its workers' own pages, the pages its workers and
    this process copied since they forked, the shared memory of its results) stays within it at
    every sample, and so does its own claim. (Whether it asked for
    more workers than the budget takes depends on the machine's load: not asserted.)"""
    resources.set_budget(cpus=8, memory_bytes=120 * MB)
    with MemoryWatch() as watch:
        df = MultiProcessMapData(Indexed(10 ** 6), "auto", two_megabytes, buffer_size="auto")
        df.reset_state()
        with df:
            df._controller.settings.interval = 0.05
            itr = iter(df)
            while df._controller.decisions < 30 or watch.samples <= 20:
                assert next(itr)[0].nbytes == 2 * MB
            itr.close()
            history = [(c.workers, c.reason) for c in df.worker_count_history()]
            claimed = df._controller.claimed_memory
    assert watch.peak <= 120 * MB, (watch.peak / MB, history)
    # its claim is within the budget too, except at one worker: a worker forked from a large
    # parent (a test process that loaded TensorFlow) accounts for its share of the pages they
    # still share, which can be more than the whole budget (then the stage stays at one, or maps in
    # the consumer's thread, its one worker parked)
    assert max(n for n, _ in history) < 8, history
    assert claimed <= 120 * MB or df.num_workers <= 1, (claimed / MB, history)
