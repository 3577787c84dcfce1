"""The memory budget of "auto" stages holds from the start: a stage starts with one worker while
the size of its datapoints is unknown, and grows only once it has measured a result.

Memory is measured from outside the controller, honestly: the anonymous memory of this process
and of every process below it (``Pss_Anon``: a page a forked worker still shares with its parent
counts once, split between them), less this process' own before the stage started, plus the
pages of the shared-memory segments the processes hold open (``/dev/shm`` files without a name).
"""
import os
import threading
import time

import numpy as np
import pytest

from inputpipe.dataflow import Autoscale, DataFlow, MultiProcessMapData
from inputpipe.utils import resources

from fresh_python import ZYGOTE_PIDS

pytestmark = pytest.mark.timeout(60)

MB = 1 << 20


class Forever(DataFlow):
    def __iter__(self):
        i = 0
        while True:
            yield [i]
            i += 1


def fifty_megabytes(dp):
    return [np.full(50_000_000, dp[0] % 251, np.uint8)]


def _rollup(pid, field):
    try:
        with open("/proc/{}/smaps_rollup".format(pid)) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:                 # the process ended meanwhile
        pass
    return 0


def _tree(pid):
    """``pid`` and the processes below it, without this worker's test zygotes (tests/fresh_python.py:
    they hold TensorFlow for the scripts of other tests, none of them running now)."""
    found, todo = [pid], [pid]
    while todo:
        parent = todo.pop()
        try:
            with open("/proc/{0}/task/{0}/children".format(parent)) as f:
                children = [int(c) for c in f.read().split() if int(c) not in ZYGOTE_PIDS]
        except OSError:
            children = []
        found += children
        todo += children
    return found


def _segment_bytes(pids):
    """Bytes of memory in the nameless shared-memory files the processes hold, each file once."""
    files = {}
    for pid in pids:
        try:
            fds = os.listdir("/proc/{}/fd".format(pid))
        except OSError:
            continue
        for fd in fds:
            path = "/proc/{}/fd/{}".format(pid, fd)
            try:
                target = os.readlink(path)
                if target.endswith("(deleted)") and target.startswith(("/dev/shm", "/memfd:")):
                    st = os.stat(path)
                    files[(st.st_dev, st.st_ino)] = st.st_blocks * 512
            except OSError:
                continue
    return sum(files.values())


class MemoryWatch:
    """Samples the memory the stage takes (see the module doc) every few milliseconds; ``peak``."""

    def __init__(self):
        self._base = _rollup(os.getpid(), "Pss_Anon")
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch")

    def _run(self):
        while not self._stop.wait(0.005):
            pids = _tree(os.getpid())
            used = sum(_rollup(pid, "Pss_Anon") for pid in pids) - self._base + _segment_bytes(pids)
            self.peak = max(self.peak, used)
            self.samples += 1

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


@pytest.fixture(autouse=True)
def no_budget_override():
    resources.set_budget()
    yield
    resources.set_budget()


def test_fifty_megabyte_datapoints_stay_within_a_300_mb_budget_from_the_start():
    """2 CPUs and a consumer that waits would make the stage grow; the budget, measured from the
    first result on, keeps it at one worker, and the memory is within the budget at every sample."""
    resources.set_budget(cpus=2, memory_bytes=300 * MB)
    with MemoryWatch() as watch:
        df = MultiProcessMapData(Forever(), "auto", fifty_megabytes, buffer_size="auto")
        df.reset_state()
        with df:
            itr = iter(df)
            taken = 0
            # decisions after it measured a result, and enough samples of the memory meanwhile (the
            # watch's thread may be scheduled seldom on a busy machine)
            while taken < 6 or df._controller.decisions < 4 or watch.samples <= 20:
                dp = next(itr)
                assert dp[0].nbytes == 50_000_000
                taken += 1
            itr.close()
            claimed = df._controller.claimed_memory
            history = [(c.workers, c.reason) for c in df.worker_count_history()]
    assert watch.samples > 20
    assert 50 * MB < watch.peak <= 300 * MB, (watch.peak / MB, history)
    # it never grows; the only moves are to the consumer's thread and back (its results cost more
    # to move than to make: 40% of a worker's time goes to sending 50 MB), whose workers stay parked
    assert history[0] == (1, "start (auto)")
    assert all(n <= 1 and reason.startswith("inline: ") for n, reason in history[1:]), history
    # its own accounting counts at least the result in flight; it is an upper bound, and may pass
    # the budget (a result a worker has written and the consumer not yet mapped is in the worker's
    # own pages and in the results in flight), which only keeps the stage from growing
    assert claimed >= 50 * MB


def first_one_slowly(dp):
    if dp[0] == 0:
        time.sleep(0.3)
    return dp


def test_an_auto_stage_grows_only_once_it_has_measured_a_result():
    """A policy asking for two workers at every datapoint gets them only after the first result
    was measured (the growth before that would be blind to the memory it takes): while it waits
    for that result, the controller decides and holds the count, saying why."""
    resources.set_budget(memory_bytes=1 << 30)
    df = MultiProcessMapData(Forever(), Autoscale(interval=0, settle_intervals=0, cpu_budget=2, policy=lambda m: 2),
                             first_one_slowly, strict=False, ordered=True)
    df.reset_state()
    with df:
        itr = iter(df)
        assert next(itr) == [0]
        first_result = time.time()
        assert df.num_workers == 1 and df._controller.decisions >= 1     # it asked while waiting for it
        deadline = time.monotonic() + 20
        while df.num_workers == 1 and time.monotonic() < deadline:
            next(itr)
        itr.close()
        history = df.worker_count_history()
    assert history[0].workers == 1
    # (on a machine at load 20 the second worker came after more than 20 s: not asserted, the
    # promise is that no worker came before the first result)
    assert all(c.time >= first_result and c.reason.startswith("policy") for c in history[1:]), history
    assert [c.workers for c in history][:2] in ([1], [1, 2]), history


def one_megabyte_quickly(dp):
    return [np.full(MB, dp[0] % 251, np.uint8)]


def test_an_auto_buffer_holds_no_more_results_than_the_memory_budget_leaves_room_for():
    """Short tasks make an auto buffer hold 32 results per worker; under a 20 MB budget (18 MB
    of room to grow into, the controller's 90%), the 1 MiB results in flight stay within that
    room as soon as the controller decided once, whatever the measured task time makes the
    buffer want between decisions (it used to grow past the budget after a growth)."""
    from inputpipe.dataflow import MultiThreadMapData
    resources.set_budget(cpus=2, memory_bytes=20 * MB)
    df = MultiThreadMapData(Forever(), Autoscale(interval=0.02, settle_intervals=0, policy=lambda m: 2),
                            one_megabyte_quickly, buffer_size="auto")
    df.reset_state()
    with df:
        itr = iter(df)
        sizes = []
        while df._controller.decisions < 30 or len(sizes) < 200:
            assert next(itr)[0].nbytes == MB
            if df._controller.decisions >= 1:
                sizes.append(df.buffer_size)
        itr.close()
        measured_seconds = df._measured_task_seconds
    assert max(sizes) <= 18 and min(sizes) >= 2, sizes
    # the task time alone asks for more than the room holds: the budget is what holds it
    assert measured_seconds is not None and 2 * min(32, 0.05 / max(measured_seconds, 1e-9)) > 18
    assert df.num_workers == 2          # (the policy's count fits: the budget held the buffer)


def eight_megabytes(dp):
    return [np.full(8 << 20, dp[0] % 251, np.uint8)]


def test_0_workers_is_tried_only_where_the_budget_has_room_for_the_consumers_own_results():
    """At 0 workers the parked workers keep their memory and the consumer's thread holds results
    of its own beside it (the one it maps, the one its consumer holds): the controller lets the
    inline policy try 0 only where the budget has room for both (within its growth headroom)."""
    from inputpipe.dataflow._parallel.autoscale_settings import Measurement
    from inputpipe.dataflow._parallel.inline_policy import BACKOFF_INTERVALS
    from inputpipe.dataflow.autoscale import GROWTH_HEADROOM

    df = MultiProcessMapData(Forever(), "auto", eight_megabytes, buffer_size=2)
    df.reset_state()
    with df:
        itr = iter(df)
        for _ in range(4):
            assert next(itr)[0].nbytes == 8 << 20
        controller = df._controller
        mine, per_worker = df._scaling_memory(True)
        assert df._result_bytes >= 8 << 20 and mine >= 8 << 20
        # (the reading as it was: a worker's memory moves by a result while it maps one)
        df._scaling_memory = lambda precise=False: (mine, per_worker)
        m = Measurement(seconds=0.5, workers=1, wait_share=0.9, busy_share=0.95, delivered_per_s=100.0,
                        demand_per_s=None, task_seconds=0.01, cpus_used=None, memory_bytes=mine,
                        consumer_seconds=0.001, send_share=0.5)
        tight = int((mine + 2 * df._result_bytes) / GROWTH_HEADROOM) - (1 << 20)   # 1 MiB short of the room
        for budget, want in ((tight, 1), (tight + (8 << 20), 0)):
            resources.set_budget(cpus=2, memory_bytes=budget)
            controller._inline_move = True
            target, reason = controller._within_budget(m, 0, "inline: try the consumer's thread")
            assert target == want, (budget, mine, reason)
            if want:
                assert reason.startswith("inline: not tried: ") and reason.endswith(
                    "MB with the consumer's thread's results would pass 90% of the {} MB memory budget".format(
                        budget >> 20))
                # the policy asks again only after a while (each check reads the workers' memory)
                now = controller.decisions
                assert controller._inline.decide(m, df, now + 1, 100.0) is None
                assert controller._inline.decide(m, df, now + BACKOFF_INTERVALS - 1, 100.0) is None
                assert controller._inline.decide(m, df, now + BACKOFF_INTERVALS, 100.0)[0] == 0
            else:
                assert reason == "inline: try the consumer's thread"
        itr.close()
