"""Tests of the parallel runners: data, start methods, failures, cleanup, seeding, bounded memory."""
import gc
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest

from inputpipe.dataflow import (
    DataFlow, MultiProcessRunner, MultiProcessRunnerZMQ, MultiThreadRunner, PrefetchDataZMQ, RNGDataFlow, seeding,
)
from inputpipe.utils import _regions as region_allocator, _shm_files as shm_files, channel
from inputpipe.utils.errors import WorkerError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Indexed(DataFlow):
    """``[i, array filled with i]`` for i in range(n); arrays of ``shape`` (small by default)."""

    def __init__(self, n, shape=(2,), dtype=np.float32):
        self.n, self.shape, self.dtype = n, shape, dtype

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield [i, np.full(self.shape, i, self.dtype)]


class Endless(DataFlow):
    def __iter__(self):
        i = 0
        while True:
            yield [i]
            i += 1


class FailsAfter(DataFlow):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield [i]
        raise ValueError("boom after {} datapoints".format(self.n))


class CountsProduced(DataFlow):
    """Endless ``[i, 1 MB array]``; counts produced datapoints in shared memory."""

    def __init__(self, counter, nbytes=1 << 20):
        self.counter, self.nbytes = counter, nbytes

    def __iter__(self):
        while True:
            with self.counter.get_lock():
                self.counter.value += 1
                i = self.counter.value
            yield [i, np.zeros(self.nbytes, np.uint8)]


class RankedRandom(RNGDataFlow):
    def __len__(self):
        return 5

    def __iter__(self):
        for _ in range(5):
            yield [seeding.worker_rank(), int(self.rng.randint(1 << 30))]


@pytest.fixture
def shm_dir(tmp_path, monkeypatch):
    """Shared-memory files of this test go to a fresh directory, to check none is left."""
    monkeypatch.setattr(shm_files, "shm_dir", lambda: str(tmp_path))
    return tmp_path


def _wait_gone(pids, timeout):
    """Seconds until every pid is gone (or a zombie); fails after ``timeout``."""
    start = time.monotonic()
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, "processes {} still alive after {} s".format(alive, timeout)
        time.sleep(0.02)


def test_runner_yields_len_datapoints_from_each_copy_every_epoch(shm_dir):
    df = MultiProcessRunnerZMQ(Indexed(30), num_proc=2, hwm=10)
    assert len(df) == 30
    df.reset_state()
    with df:
        for _ in range(3):
            points = list(df)
            assert len(points) == 30
            for i, arr in points:
                assert arr.dtype == np.float32 and arr.shape == (2,) and (arr == i).all()
                assert 0 <= i < 30
    assert list(shm_dir.iterdir()) == []


def test_large_arrays_arrive_intact_and_writable_even_when_the_consumer_keeps_them(shm_dir):
    shape = (64, 64, 64)      # 1 MiB of float32 per datapoint; 3 MiB of shared memory per worker
    df = MultiProcessRunner(Indexed(40, shape), num_prefetch=8, num_proc=2, shm_bytes=3 << 20)
    df.reset_state()
    with df:
        kept = list(df)       # holding every array forces the pipe path once shared memory is full
        assert len(kept) == 40 and 0 < df.pipe_fallbacks <= 40
        for i, arr in kept:
            assert arr.shape == shape and arr.dtype == np.float32
            assert arr[0, 0, 0] == i and arr[-1, -1, -1] == i
            arr += 1          # writable
        del kept
        gc.collect()
        assert all(arr[0, 0, 0] == i for i, arr in df)
    assert list(shm_dir.iterdir()) == []


def test_shared_memory_regions_are_placed_first_fit_and_reused_as_soon_as_freed():
    unit = region_allocator.SHM_MIN_BYTES
    states = region_allocator.table(bytearray(region_allocator.table_bytes(4 * unit)), 4 * unit)
    assert len(states) == 5                                    # a slot for every region that fits
    regions = region_allocator.Regions(states, 4 * unit)
    a, b, c = (regions.allocate(unit) for _ in range(3))
    assert [a[1], b[1], c[1]] == [0, unit, 2 * unit] and regions.awaiting_receipt()
    assert regions.allocate(2 * unit) is None                 # 1 unit left at the end
    states[[a[0], b[0], c[0]]] = channel._RECEIVED             # the consumer holds all three
    assert not regions.awaiting_receipt()
    states[b[0]] = channel._FREE                               # ... and drops the middle one
    assert regions.allocate(unit)[1] == unit                   # the gap behind a held region
    assert regions.allocate(unit)[1] == 3 * unit
    assert regions.allocate(1) is None


class Patterned(DataFlow):
    """``n`` arrays of ``nbytes`` (not a multiple of the copy's chunk), each a distinct byte pattern."""

    def __init__(self, n, nbytes):
        self.n, self.nbytes = n, nbytes

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield [i, (np.arange(self.nbytes, dtype=np.int64) * 7 + i).astype(np.uint8)]


def test_arrays_large_enough_for_the_two_thread_copy_arrive_byte_for_byte(shm_dir):
    nbytes = (5 << 20) + 12345        # above the 4 MiB at which the worker copies with two threads
    df = MultiProcessRunnerZMQ(Patterned(6, nbytes), num_proc=1, hwm=4)
    df.reset_state()
    with df:
        for i, arr in df:
            assert arr.shape == (nbytes,)
            np.testing.assert_array_equal(arr, (np.arange(nbytes, dtype=np.int64) * 7 + i).astype(np.uint8))
    assert list(shm_dir.iterdir()) == []


def _regions(units: int):
    unit = region_allocator.SHM_MIN_BYTES
    states = region_allocator.table(bytearray(region_allocator.table_bytes(units * unit)), units * unit)
    return states, region_allocator.Regions(states, units * unit), unit


def test_new_regions_go_where_memory_was_released_most_recently():
    states, regions, unit = _regions(8)
    a, b, c, d = (regions.allocate(unit) for _ in range(4))
    assert [r[1] for r in (a, b, c, d)] == [0, unit, 2 * unit, 3 * unit]
    states[[a[0], c[0]]] = channel._FREE          # seen free together: c was allocated later
    assert regions.allocate(unit)[1] == 2 * unit  # c's memory, not the lowest gap (a's)
    assert regions.allocate(unit)[1] == 0         # then a's
    states[d[0]] = channel._FREE
    assert regions.allocate(unit)[1] == 3 * unit  # d's, though the end of the segment is free too
    assert regions.allocate(unit)[1] == 4 * unit  # nothing released is left: the lowest gap


def test_a_region_too_big_for_the_warm_gap_goes_to_the_lowest_gap_that_fits():
    states, regions, unit = _regions(8)
    a, b, c = (regions.allocate(unit) for _ in range(3))
    states[b[0]] = channel._FREE                  # b's gap (1 unit) is the warm one
    assert regions.allocate(2 * unit)[1] == 3 * unit
    assert regions.allocate(unit)[1] == unit      # b's memory is still preferred for what fits


def test_the_worker_waits_for_the_consumer_to_release_the_region_before_the_last(monkeypatch):
    monkeypatch.setattr(region_allocator, "WARM_WAIT_MAX_SECONDS", 10.0)
    monkeypatch.setattr(region_allocator, "WARM_WAIT_PER_BYTE", 1.0)
    states, regions, unit = _regions(8)
    a, _ = regions.allocate(unit), regions.allocate(unit)
    assert regions.held_before_last() is None              # a is sent, not yet received
    states[a[0]] = channel._RECEIVED
    assert regions.held_before_last() == a[0]
    release = threading.Timer(0.05, states.__setitem__, (a[0], channel._FREE))
    release.start()
    start = time.monotonic()
    assert regions.wait_for_warm_region(unit)
    release.join()
    assert 0.03 < time.monotonic() - start < 5
    assert regions.allocate(unit)[1] == 0                  # into a's warm memory


def test_a_consumer_keeping_its_datapoints_makes_the_worker_stop_waiting_for_a_while():
    states, regions, unit = _regions(8)
    a, b = regions.allocate(unit), regions.allocate(unit)
    states[[a[0], b[0]]] = channel._RECEIVED                # e.g. BatchData collecting them
    start = time.monotonic()
    assert not regions.wait_for_warm_region(unit)           # waits at most 1 ms, then gives up
    assert time.monotonic() - start < 0.5
    assert regions.allocate(unit)[1] == 2 * unit
    for _ in range(region_allocator.WARM_WAIT_BACKOFF):             # the next few allocations skip waiting
        assert not regions.wait_for_warm_region(unit)
    assert regions._warm_wait_skips == 0


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_forkserver_and_spawn_workers(method):
    df = MultiProcessRunnerZMQ(Indexed(10, (100, 100)), num_proc=2, start_method=method)
    df.reset_state()
    with df:
        assert sorted({i for i, _ in df}) <= list(range(10))
        values = [(i, float(arr.mean())) for i, arr in df]
    assert len(values) == 10 and all(i == mean for i, mean in values)


def test_spawn_rejects_an_unpicklable_dataflow_with_a_clear_error():
    class Local(Indexed):
        pass

    df = MultiProcessRunnerZMQ(Local(3), num_proc=1, start_method="spawn")
    with pytest.raises(TypeError, match="cannot be pickled.*start_method='fork'"):
        df.reset_state()
    df.close()


def test_unknown_start_method_is_refused():
    with pytest.raises(ValueError, match="start_method must be one of"):
        MultiProcessRunnerZMQ(Indexed(3), start_method="threads")


@pytest.mark.timeout(20, method="signal")
def test_worker_exception_reaches_consumer_with_traceback_within_1s():
    df = MultiProcessRunnerZMQ(FailsAfter(3), num_proc=1)
    df.reset_state()
    with df:
        start = time.monotonic()
        with pytest.raises(WorkerError) as info:
            for _ in df:
                pass
        elapsed = time.monotonic() - start
        with pytest.raises(WorkerError, match="boom after 3 datapoints"):     # broken for good
            next(iter(df))
    assert elapsed < 1.0
    err = info.value
    assert err.pid == df.worker_pids[0]
    assert "MultiProcessRunnerZMQ: worker 0 (pid {}) raised ValueError: boom after 3 datapoints".format(err.pid) in str(err)
    assert "in __iter__" in err.remote_traceback and 'raise ValueError("boom after' in err.remote_traceback


class YieldsAnObject(DataFlow):
    def __iter__(self):
        yield [1, object()]


def test_a_datapoint_the_wire_format_cannot_carry_is_a_clear_worker_error():
    df = MultiProcessRunnerZMQ(YieldsAnObject(), num_proc=1)
    df.reset_state()
    with df, pytest.raises(WorkerError) as info:
        next(iter(df))
    assert "raised TypeError: wire format: cannot serialize an object of type builtins.object" in str(info.value)
    assert "(at obj[1])" in str(info.value)


@pytest.mark.timeout(20, method="signal")      # without a liveness check this would wait forever
def test_killed_worker_is_reported_with_pid_and_signal_within_1s():
    df = MultiProcessRunnerZMQ(Endless(), num_proc=2, hwm=4)
    df.reset_state()
    with df:
        it = iter(df)
        next(it)
        victim = df.worker_pids[1]
        os.kill(victim, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError) as info:
            for _ in it:
                pass
        assert time.monotonic() - start < 1.0
    assert info.value.pid == victim and info.value.signal_name == "SIGKILL"
    assert "(pid {}) was killed by SIGKILL".format(victim) in str(info.value)


def _stop_by_close(df):
    df.close()


def _stop_by_gc(df):
    del df
    gc.collect()


def _segment_fds(directory):
    """Descriptors this process holds on (nameless) files in ``directory``: the segments."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + fd).startswith(str(directory) + "/"):
                found.append(int(fd))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("how", ["close", "gc", "with", "exception", "keyboard_interrupt"])
def test_every_worker_is_gone_within_2s_and_no_file_is_left(how, shm_dir):
    df = MultiProcessRunnerZMQ(Indexed(1000, (300, 300)), num_proc=2, hwm=6, shm_bytes=4 << 20)
    df.reset_state()
    assert list(shm_dir.iterdir()) == [] and len(_segment_fds(shm_dir)) == 2     # named never, held here
    it = iter(df)
    next(it)
    pids = df.worker_pids
    assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
    start = time.monotonic()
    if how == "close":
        df.close()
    elif how == "gc":
        del df, it
        gc.collect()
    else:
        error = {"with": None, "exception": RuntimeError, "keyboard_interrupt": KeyboardInterrupt}[how]
        try:
            with df:
                next(it)
                if error:
                    raise error("consumer failed")
        except (RuntimeError, KeyboardInterrupt):
            pass
    _wait_gone(pids, 2.0 - (time.monotonic() - start))
    assert list(shm_dir.iterdir()) == []
    it = None                  # the suspended iterator holds its last datapoint, whose memory lives
    gc.collect()
    assert _segment_fds(shm_dir) == []     # every segment is released once nothing uses it


def _run_script(code, *args):
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)] + [str(a) for a in args], cwd=REPO,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=REPO))


_PARENT_SCRIPT = """
    import sys, time
    sys.path.insert(0, "tests")
    from test_parallel import Endless, Indexed
    from inputpipe.dataflow import MultiProcessRunnerZMQ
    from inputpipe.utils import _shm_files as shm_files
    shm_files.shm_dir = lambda: sys.argv[1]
    runners = [MultiProcessRunnerZMQ(Endless(), num_proc=2, hwm=4, start_method="fork"),
               MultiProcessRunnerZMQ(Indexed(5), num_proc=1, start_method="forkserver")]
    for r in runners:
        r.reset_state()
        next(iter(r))
    print(" ".join(str(p) for r in runners for p in r.worker_pids), flush=True)
    for dp in runners[0]:
        pass
"""


def test_workers_exit_on_their_own_when_the_parent_is_killed(tmp_path):
    parent = _run_script(_PARENT_SCRIPT, tmp_path)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 3, parent.stderr.read()
        parent.kill()
        parent.wait(timeout=10)
        _wait_gone(pids, 5.0)
        assert list(tmp_path.iterdir()) == []          # no shared-memory file left behind
    finally:
        parent.kill()
        parent.wait(timeout=10)
        parent.stdout.close()
        parent.stderr.close()


def test_ctrl_c_in_the_consumer_stops_every_worker_within_2s(tmp_path):
    parent = _run_script(_PARENT_SCRIPT, tmp_path)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 3, parent.stderr.read()
        start = time.monotonic()
        parent.send_signal(signal.SIGINT)
        parent.wait(timeout=10)
        _wait_gone(pids, 2.0 - (time.monotonic() - start))
        assert "KeyboardInterrupt" in parent.stderr.read()
        assert list(tmp_path.iterdir()) == []
    finally:
        parent.kill()
        parent.wait(timeout=10)
        parent.stdout.close()
        parent.stderr.close()


@pytest.mark.timeout(30, method="signal")
def test_each_worker_gets_its_own_seed_and_a_seeded_pipeline_repeats():
    def run():
        seeding.set_global_seed(1234)
        df = MultiProcessRunnerZMQ(RankedRandom(), num_proc=2, hwm=2)
        df.reset_state()
        per_rank = {0: [], 1: []}
        deadline = time.monotonic() + 10
        with df:
            while min(len(v) for v in per_rank.values()) < 5:
                assert time.monotonic() < deadline, "not every rank answered: {}".format(per_rank)
                for rank, value in df:
                    per_rank.setdefault(rank, []).append(value)
        return {rank: values[:5] for rank, values in per_rank.items()}

    try:
        first, second = run(), run()
    finally:
        seeding.set_global_seed(None)
    assert first[0] != first[1]
    assert first == second


@pytest.mark.parametrize("limit", ["hwm", "bytes"])
def test_a_slow_consumer_makes_the_worker_wait(limit):
    counter = mp.get_context("fork").Value("i", 0)
    if limit == "hwm":
        df = MultiProcessRunnerZMQ(CountsProduced(counter), num_proc=1, hwm=4)
        bound = 4
    else:
        df = MultiProcessRunnerZMQ(CountsProduced(counter), num_proc=1, hwm=1000, max_prefetch_bytes=3 << 20)
        bound = 3
    df.reset_state()
    with df:
        it = iter(df)
        for consumed in range(1, 4):
            next(it)
            time.sleep(0.3)       # time for an unbounded producer to run far ahead
            # consumed + prefetched + the one the worker holds while it waits for room
            assert counter.value <= consumed + bound + 1


def test_multithread_runner_runs_copies_and_reports_failures():
    df = MultiThreadRunner(lambda: Indexed(8), num_prefetch=4, num_thread=3)
    assert len(df) == 8
    df.reset_state()
    with df:
        for _ in range(2):
            points = list(df)
            assert len(points) == 8 and all((arr == i).all() for i, arr in points)
    failing = MultiThreadRunner(lambda: FailsAfter(2), num_prefetch=2, num_thread=2)
    failing.reset_state()
    with failing, pytest.raises(WorkerError, match=r"MultiThreadRunner-thread-\d raised ValueError: boom") as info:
        for _ in range(100):
            list(failing)
    assert isinstance(info.value.__cause__, ValueError)
    assert "in __iter__" in info.value.remote_traceback


def test_tensorpack_aliases_and_argument_checks():
    assert PrefetchDataZMQ is MultiProcessRunnerZMQ
    with pytest.raises(ValueError, match="MultiProcessRunnerZMQ: num_proc must be an int >= 1 or 'auto', got 0"):
        MultiProcessRunnerZMQ(Indexed(3), num_proc=0)
    df = MultiProcessRunnerZMQ(Indexed(3))
    with pytest.raises(RuntimeError, match="call reset_state"):
        next(iter(df))


_FROM_A_THREAD_SCRIPT = """
    import sys, threading, time
    from inputpipe.dataflow import DataFlow, MultiProcessMapData

    class Indexed(DataFlow):
        def __len__(self):
            return 100

        def __iter__(self):
            for i in range(100):
                yield [i]

    def sleep_forever(dp):
        time.sleep(3600)          # busy in map_func: only the parent watchdog can notice the parent die

    df = MultiProcessMapData(Indexed(), 2, sleep_forever, strict=True)

    def consume():
        df.reset_state()          # no parent-death signal: started from a thread that is not the main one
        print(" ".join(str(p) for p in df.worker_pids), flush=True)
        for _ in df:
            pass

    threading.Thread(target=consume, daemon=True).start()
    time.sleep(3600)
"""


def test_workers_started_from_another_thread_exit_within_5s_when_the_parent_is_killed():
    parent = _run_script(_FROM_A_THREAD_SCRIPT)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2, parent.stderr.read()
        time.sleep(0.3)                       # the workers are inside map_func now
        assert all(psutil.pid_exists(p) for p in pids)
        parent.kill()
        parent.wait(timeout=10)
        _wait_gone(pids, 5.0)
    finally:
        parent.kill()
        parent.wait(timeout=10)
        parent.stdout.close()
        parent.stderr.close()


class Closes(DataFlow):
    """Counts close() calls (in this process)."""

    closed = 0

    def __len__(self):
        return 100

    def __iter__(self):
        for i in range(100):
            yield [i]

    def close(self):
        Closes.closed += 1


def _double(dp):
    return [dp[0] * 2]


def test_closing_the_outermost_flow_stops_every_worker_of_the_chain_within_2s():
    from inputpipe.dataflow import BatchData, MapData, MultiProcessMapData, MultiThreadMapData

    Closes.closed = 0
    runner = MultiProcessRunnerZMQ(Indexed(100), num_proc=2, hwm=4)
    processes = MultiProcessMapData(runner, 2, _double, buffer_size=8)
    threads = MultiThreadMapData(processes, 2, _double, buffer_size=8)
    outer = BatchData(MapData(threads, _double), 4)
    source_map = MultiThreadMapData(Closes(), 2, _double, buffer_size=8)
    outer.reset_state()
    source_map.reset_state()
    batch = next(iter(outer))
    assert batch[0].shape == (4,) and all(v % 8 == 0 for v in batch[0])
    assert next(iter(source_map)) in ([0], [2], [4], [6], [8], [10], [12], [14])
    pids = runner.worker_pids + processes.worker_pids
    assert len(pids) == 4 and all(psutil.pid_exists(p) for p in pids)
    start = time.monotonic()
    outer.close()
    source_map.close()
    _wait_gone(pids, 2.0)
    while any(t.name.startswith("MultiThreadMapData-thread-") for t in threading.enumerate()):
        assert time.monotonic() - start < 2.0, "threads still running after 2 s"
        time.sleep(0.02)
    assert Closes.closed == 1                 # forwarded down to the source
    with pytest.raises(RuntimeError, match="is closed"):
        runner.reset_state()
