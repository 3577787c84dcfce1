"""Tests of the parallel maps: exactly-once, order, filtering, failures, start methods, batching."""
import gc
import itertools
import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

from inputpipe.dataflow import (
    BatchData, MultiProcessMapAndBatchData, MultiProcessMapData, MultiProcessMapDataZMQ, MultiThreadMapData,
    ThreadedMapData,
)
from inputpipe.dataflow.parallel_map import _ParallelMapBase
from inputpipe.utils.errors import WorkerError
from dataflow_helpers import Indexed


def square_with_array(dp):
    i = dp[0]
    return [i, i * i, np.full((4,), i, np.int64)]


def drop_multiples_of_7(dp):
    return None if dp[0] % 7 == 0 else [dp[0]]


def fail_on_13(dp):
    if dp[0] == 13:
        raise KeyError("no datapoint 13 here")
    return dp


def hang_on_5(dp):
    if dp[0] == 5:
        time.sleep(60)
    return dp


def image_of(dp):
    return [np.full((8, 8, 3), dp[0], np.uint8), dp[0]]


@pytest.mark.parametrize("num_proc", [1, 2, 4])
def test_strict_process_map_yields_each_index_exactly_once_per_epoch(num_proc):
    n = 10000
    df = MultiProcessMapData(Indexed(n), num_proc, square_with_array, strict=True, buffer_size=100)
    df.reset_state()
    with df:
        for _ in range(3):
            points = list(df)
            assert sorted(p[0] for p in points) == list(range(n))
            assert all(sq == i * i and arr.dtype == np.int64 and (arr == i).all() for i, sq, arr in points)


@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapData])
def test_ordered_strict_map_equals_mapdata_and_drops_none(cls):
    df = cls(Indexed(500), 3, drop_multiples_of_7, strict=True, ordered=True, buffer_size=20)
    df.reset_state()
    expected = [[i] for i in range(500) if i % 7]
    with df:
        assert list(df) == expected
        assert list(df) == expected


def test_an_abandoned_strict_epoch_does_not_leak_into_the_next():
    df = MultiProcessMapData(Indexed(300), 2, square_with_array, strict=True, buffer_size=50)
    df.reset_state()
    with df:
        it = iter(df)
        assert len([next(it) for _ in range(10)]) == 10
        it.close()
        assert sorted(p[0] for p in df) == list(range(300))


def identity(dp):
    return dp


@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapData])
def test_non_strict_map_streams_endlessly_from_one_iterator_and_loses_nothing(cls):
    # tensorpack: a reordering of RepeatedData(MapData(ds, f), -1), so one iterator never ends
    # (code feeds it to tf.data.Dataset.from_generator or keeps `it = iter(df)` and calls next)
    ordered = cls(Indexed(100), 2, identity, buffer_size=30, ordered=True)
    unordered = cls(Indexed(100), 2, identity, buffer_size=30)
    for df in (ordered, unordered):
        df.reset_state()
    with ordered, unordered:
        assert len(ordered) == 100
        assert [p[0] for p in itertools.islice(ordered, 400)] == [i % 100 for i in range(400)]
        # an abandoned iterator's work in flight is yielded by the next one
        stream = [p[0] for p in itertools.islice(unordered, 150)] + [p[0] for p in itertools.islice(unordered, 250)]
    # 400 answers out of the first 430 source datapoints (30 may still be in flight), none twice
    counts = np.bincount(stream, minlength=100)
    assert len(stream) == 400 and counts.min() >= 3 and counts.max() <= 5
    assert len(set(stream[:70])) == 70


class ShuffledAnswers(_ParallelMapBase):
    """The scheduler of the parallel maps with workers simulated in this thread: each worker
    answers its tasks in order, but which worker answers next, and whether any answers within a
    poll interval, is drawn from a seeded RNG. It replays orders that threads produce rarely."""

    def __init__(self, ds, num_workers, buffer_size, strict, ordered, seed):
        super().__init__(ds, num_workers, buffer_size, strict, ordered)
        self.rng = np.random.RandomState(seed)
        self.queues = [[] for _ in range(num_workers)]

    def _start(self):
        pass

    def _submit(self, rank, task):
        self.queues[rank].append(task)

    def _receive(self, timeout):
        busy = [rank for rank, tasks in enumerate(self.queues) if tasks]
        if not busy or self.rng.rand() < 0.3:
            return None
        rank = busy[self.rng.randint(len(busy))]
        epoch, seq, dp = self.queues[rank].pop(0)
        return rank, [epoch, seq, identity(dp)]

    def close(self):
        pass


@pytest.mark.parametrize("ordered", [True, False])
def test_the_continuous_stream_loses_and_repeats_nothing_whatever_the_answer_order(ordered):
    # several answers becoming due at once (ordered mode) and answers in any order across the
    # source's passes: the stream is still each source datapoint once per pass
    for seed in range(200):
        df = ShuffledAnswers(Indexed(100), 2, 30, strict=False, ordered=ordered, seed=seed)
        df.reset_state()
        stream = [p[0] for p in itertools.islice(df, 400)]
        if ordered:
            assert stream == [i % 100 for i in range(400)], "seed {}".format(seed)
        counts = np.bincount(stream, minlength=100)
        assert counts.min() >= 3 and counts.max() <= 5 and len(set(stream[:70])) == 70, "seed {}".format(seed)


@pytest.mark.parametrize("cls,worker", [(MultiThreadMapData, "MultiThreadMapData-thread-"),
                                        (MultiProcessMapData, "MultiProcessMapData: worker ")])
@pytest.mark.timeout(20, method="signal")
def test_map_exception_reaches_consumer_with_traceback_within_1s(cls, worker):
    df = cls(Indexed(1000), 2, fail_on_13, strict=True, buffer_size=10)
    df.reset_state()
    with df:
        start = time.monotonic()
        with pytest.raises(WorkerError, match="raised KeyError: 'no datapoint 13 here'") as info:
            list(df)
        assert time.monotonic() - start < 1.0
        with pytest.raises(WorkerError, match="no datapoint 13 here"):     # broken for good, no hang
            list(df)
    assert worker in str(info.value)
    assert "in fail_on_13" in info.value.remote_traceback


@pytest.mark.timeout(20, method="signal")      # without a liveness check this would wait forever
def test_killed_map_worker_is_reported_within_1s():
    df = MultiProcessMapData(Indexed(100), 2, hang_on_5, strict=True, ordered=True, buffer_size=10)
    df.reset_state()
    with df:
        it = iter(df)
        assert [next(it) for _ in range(5)] == [[i] for i in range(5)]
        for pid in df.worker_pids:
            os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError, match=r"\(pid \d+\) was killed by SIGKILL"):
            next(it)
        assert time.monotonic() - start < 1.0


def test_spawn_map_workers():
    df = MultiProcessMapDataZMQ(Indexed(50), 2, square_with_array, strict=True, ordered=True, start_method="spawn")
    df.reset_state()
    with df:
        assert [p[1] for p in df] == [i * i for i in range(50)]


def test_map_and_batch_stacks_whole_batches_in_the_workers():
    df = MultiProcessMapAndBatchData(Indexed(103), 2, image_of, batch_size=10, strict=True)
    assert len(df) == 10
    df.reset_state()
    with df:
        batches = list(df)
    assert len(batches) == 10
    labels = sorted(int(v) for images, labels in batches for v in labels)
    assert len(set(labels)) == 100 and max(labels) < 103
    for images, labels in batches:
        assert images.shape == (10, 8, 8, 3) and images.dtype == np.uint8
        assert labels.shape == (10,) and (images[:, 0, 0, 0] == labels).all()


def image_of_72kb(dp):
    return [np.full((24, 256, 3), dp[0], np.float32), dp[0]]


def test_holding_a_batch_of_datapoints_never_falls_back_to_the_pipe():
    # 64 held datapoints (4.7 MB) plus up to 100 in flight (7.2 MB) do not fit in 8 MiB: the
    # worker must wait for the consumer to take and free datapoints, never use the pipe
    df = MultiProcessMapData(Indexed(640), 1, image_of_72kb, buffer_size=100, strict=True, shm_bytes=8 << 20)
    batches = BatchData(df, 64)
    batches.reset_state()
    with df:
        for _ in range(2):
            labels = []
            for images, batch_labels in batches:
                assert images.shape == (64, 24, 256, 3) and images.dtype == np.float32
                assert (images[:, 0, 0, 0] == batch_labels).all() and (images[:, -1, -1, -1] == batch_labels).all()
                labels.extend(batch_labels.tolist())
            assert sorted(labels) == list(range(640))
        assert df.pipe_fallbacks == 0


def test_holding_whole_batches_from_map_and_batch_never_falls_back_to_the_pipe():
    df = MultiProcessMapAndBatchData(Indexed(640), 2, image_of_72kb, batch_size=16, strict=True, shm_bytes=8 << 20)
    df.reset_state()
    with df:
        held = []                    # the consumer keeps the last 4 batches (4.6 MB per worker at most)
        labels = []
        for images, batch_labels in df:
            assert (images[:, 0, 0, 0] == batch_labels).all()
            labels.extend(batch_labels.tolist())
            held = held[-3:] + [images]
        assert sorted(labels) == list(range(640))
        assert df.pipe_fallbacks == 0


def test_keeping_everything_falls_back_to_the_pipe_and_loses_nothing():
    df = MultiProcessMapData(Indexed(100), 1, image_of_72kb, strict=True, ordered=True, shm_bytes=2 << 20)
    df.reset_state()
    with df:
        kept = list(df)              # 7.2 MB held against 2 MiB of shared memory
        assert [label for _, label in kept] == list(range(100))
        assert all(image[0, 0, 0] == label and image[-1, -1, -1] == label for image, label in kept)
        assert df.pipe_fallbacks == 100 - (2 << 20) // (24 * 256 * 3 * 4)   # all that did not fit


def test_thread_alias_and_argument_checks():
    assert ThreadedMapData is MultiThreadMapData
    with pytest.raises(ValueError, match="MultiProcessMapData: num_proc must be an int >= 1 or 'auto', got 0"):
        MultiProcessMapData(Indexed(3), 0, fail_on_13)
    with pytest.raises(ValueError, match="buffer_size must be an int >= 1 or 'auto', got 0"):
        MultiThreadMapData(Indexed(3), 2, fail_on_13, buffer_size=0)


@pytest.mark.parametrize("how", ["close", "gc", "exception"])
@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapData])
def test_every_worker_of_a_map_is_gone_within_2s(cls, how):
    df = cls(Indexed(1000), 2, image_of, strict=True, buffer_size=20)
    df.reset_state()
    it = iter(df)
    next(it)
    pids = list(getattr(df, "worker_pids", []))
    prefix = type(df).__name__ + "-thread-"
    assert len(pids) == 2 or len([t for t in threading.enumerate() if t.name.startswith(prefix)]) == 2
    start = time.monotonic()
    if how == "close":
        df.close()
    elif how == "gc":
        del df, it
        gc.collect()
    else:
        with pytest.raises(ZeroDivisionError):
            with df:
                next(it)
                raise ZeroDivisionError("an error while iterating")
    while pids and any(_alive(pid) for pid in pids) or any(t.name.startswith(prefix) for t in threading.enumerate()):
        assert time.monotonic() - start < 2.0, "workers still running after 2 s"
        time.sleep(0.02)


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _stuck_at_3(i):
    if i[0] == 3:
        time.sleep(3600)               # a map_func stuck on, say, a hung network file system
    return i


def test_a_stuck_worker_process_is_reported_after_map_timeout_and_close_stops_it():
    df = MultiProcessMapData(Indexed(10), 1, _stuck_at_3, strict=True, ordered=True, buffer_size=2,
                             map_timeout=0.5)
    df.reset_state()
    pid = df.worker_pids[0]
    got = []
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        for dp in df:
            got.append(dp[0])
    assert 0.5 < time.monotonic() - start < 3.0
    assert got == [0, 1, 2]
    assert info.value.pid == pid
    assert "MultiProcessMapData: worker 0 (pid {}) has not answered for".format(pid) in str(info.value)
    assert "(map_timeout=0.5 s): is map_func stuck?" in str(info.value)
    with pytest.raises(WorkerError, match="has not answered"):       # broken for good
        next(iter(df))
    df.close()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_stuck_thread_is_reported_after_map_timeout():
    release = threading.Event()

    def stuck_at_3(i):
        if i[0] == 3:
            release.wait(30)
        return i

    df = MultiThreadMapData(Indexed(10), 2, stuck_at_3, strict=True, ordered=True, map_timeout=0.3)
    df.reset_state()
    got = []
    with pytest.raises(WorkerError, match=r"MultiThreadMapData-thread-\d has not answered for .* "
                                          r"\(map_timeout=0.3 s\): is map_func stuck\?"):
        for dp in df:
            got.append(dp[0])
    assert got == [0, 1, 2]
    release.set()                      # a thread cannot be killed: let its call return
    df.close()


def test_map_timeout_must_be_positive():
    with pytest.raises(ValueError, match="map_timeout must be a positive number of seconds or None, got 0"):
        MultiProcessMapData(Indexed(3), 1, _stuck_at_3, map_timeout=0)


def _ignore_sigterm_and_hang(dp):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(3600)


@pytest.mark.timeout(30, method="signal")
def test_a_worker_that_ignores_sigterm_is_still_gone_within_3s_of_close():
    df = MultiProcessMapData(Indexed(10), 2, _ignore_sigterm_and_hang, strict=True, map_timeout=0.3)
    df.reset_state()
    pids = df.worker_pids
    with pytest.raises(WorkerError, match="has not answered"):
        list(df)                           # both workers are now inside map_func, ignoring SIGTERM
    start = time.monotonic()
    df.close()
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() - start < 3.0, "a worker ignoring SIGTERM outlived close() (no SIGKILL?)"
        time.sleep(0.02)


def _slow_identity(dp):
    time.sleep(0.05)
    return dp


@pytest.mark.timeout(60, method="signal")
@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapData])
def test_map_timeout_counts_from_each_task_not_from_the_first(cls):
    # each worker has 20 tasks of 0.05 s queued (1 s in all) but answers every 0.05 s: not stuck
    df = cls(Indexed(40), 2, _slow_identity, strict=True, ordered=True, map_timeout=0.5)
    df.reset_state()
    with df:
        assert list(df) == [[i] for i in range(40)]


@pytest.mark.timeout(30, method="signal")
def test_a_stuck_worker_is_reported_while_the_others_keep_answering():
    release = threading.Event()

    def stuck_at_3(dp):
        if dp[0] == 3:
            release.wait(30)
        return dp

    df = MultiThreadMapData(Indexed(10 ** 6), 2, stuck_at_3, buffer_size=8, map_timeout=0.3)
    df.reset_state()
    got = 0
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"MultiThreadMapData-thread-\d has not answered for"):
        for _ in df:
            got += 1
    assert time.monotonic() - start < 5.0 and got > 3      # the other thread answered meanwhile
    release.set()
    df.close()


def test_non_strict_map_and_batch_groups_the_stream_across_passes():
    # as tensorpack batches its endless stream: no datapoint is left out at the end of a pass
    df = MultiProcessMapAndBatchData(Indexed(10), 1, identity, 3, ordered=True)
    df.reset_state()
    with df:
        batches = [b[0].tolist() for b in itertools.islice(df, 7)]
    assert len(df) == 3 and batches == [[i % 10 for i in range(k, k + 3)] for k in range(0, 21, 3)]


def drop_all(dp):
    return None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapData])
def test_a_non_strict_map_that_drops_everything_raises_instead_of_spinning(cls):
    df = cls(Indexed(3), 2, drop_all)
    df.reset_state()
    with df, pytest.raises(RuntimeError, match=r"{}: map_func returned None for every one of the last 1000 "
                                               r"datapoints \(\d+ passes of the source Indexed\)".format(cls.__name__)):
        next(iter(df))


def drop_most(dp):
    return dp if dp[0] % 50 == 49 else None


def test_a_non_strict_map_that_drops_most_datapoints_keeps_streaming():
    df = MultiThreadMapData(Indexed(50), 2, drop_most)
    df.reset_state()
    with df:
        assert [dp[0] for dp in itertools.islice(df, 30)] == [49] * 30


def sleep_50ms(dp):
    time.sleep(0.05)
    return dp


@pytest.mark.timeout(30)
@pytest.mark.parametrize("strict", [False, True])
def test_closing_a_thread_map_from_another_thread_ends_a_waiting_consumer(strict):
    # close() is how another thread stops an endless iterator: the consumer must not wait forever
    df = MultiThreadMapData(Indexed(10 ** 6), 2, sleep_50ms, buffer_size=2, strict=strict)
    df.reset_state()
    seen, errors, started = [], [], threading.Event()

    def consume():
        try:
            for dp in df:
                seen.append(dp)
                started.set()
        except RuntimeError as err:
            errors.append(err)

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert started.wait(10)
    df.close()
    consumer.join(5)
    assert not consumer.is_alive()
    assert [str(e) for e in errors] == ["MultiThreadMapData: closed while it was being iterated (close() called "
                                        "from another thread)"]
    assert seen and len({dp[0] for dp in seen}) == len(seen)          # each once, as far as it went
