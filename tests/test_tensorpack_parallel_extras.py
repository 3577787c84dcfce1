"""tensorpack's parallel helpers outside ``__all__`` that work here:
``parallel_map.MultiProcessMapDataComponentSharedArray`` (strict epochs on MultiProcessMapData) and
``remote.dump_dataflow_to_process_queue`` (a supervised producer process, wire format, errors
and a dead producer reach the consumer)."""
import multiprocessing as mp
import os
import queue
import signal
import time

import numpy as np
import pytest

from inputpipe.dataflow import DataFlow, DataFromList, MultiProcessMapData
from inputpipe.dataflow.parallel_map import MultiProcessMapDataComponentSharedArray
from inputpipe.dataflow.remote import DIE, dump_dataflow_to_process_queue
from inputpipe.utils.errors import WorkerError


def square_block(x):
    if x % 4 == 3:
        return None                      # dropped, as in tensorpack
    return np.full((2, 3), x * x, np.int32)


def wrong_shape(x):
    return np.zeros((3, 2), np.int32)


def wrong_type(x):
    return [x]


@pytest.mark.timeout(60)
def test_shared_array_map_epochs_are_strict_and_ordered():
    source = DataFromList([[i, "label-{}".format(i)] for i in range(10)], shuffle=False)
    df = MultiProcessMapDataComponentSharedArray(source, 2, square_block, (2, 3), "int32")
    assert isinstance(df, MultiProcessMapData) and len(df) == 10
    assert (df.nr_proc, df.output_shape, df.output_dtype, df.index) == (2, (2, 3), np.int32, 0)
    df.reset_state()
    try:
        for _ in range(2):                  # tensorpack's never ended its first epoch
            got = list(df)
            assert [dp[1] for dp in got] == ["label-{}".format(i) for i in range(10) if i % 4 != 3]
            assert all(dp[0].shape == (2, 3) and dp[0].dtype == np.int32 for dp in got)
            assert [int(dp[0][1, 2]) for dp in got] == [i * i for i in range(10) if i % 4 != 3]
    finally:
        df.close()


@pytest.mark.timeout(60)
def test_shared_array_map_maps_the_given_index_of_tuples_and_dicts():
    source = DataFromList([("a", 1), ("b", 2)], shuffle=False)
    df = MultiProcessMapDataComponentSharedArray(source, 1, lambda x: np.full((1,), x, np.float64), 1, np.float64,
                                                 index=1)
    df.reset_state()
    try:
        got = list(df)
    finally:
        df.close()
    assert [(type(dp).__name__, dp[0], dp[1].tolist()) for dp in got] == [("tuple", "a", [1.0]), ("tuple", "b", [2.0])]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("func, error, text", [
    (wrong_shape, ValueError, r"map_func returned an array of shape \(3, 2\) and dtype int32 for component 0; "
                              r"expected a numpy array of shape \(2, 3\) and dtype int32"),
    (wrong_type, TypeError, r"map_func returned a list for component 0; expected a numpy array of shape \(2, 3\)"),
])
def test_shared_array_map_refuses_other_shapes_dtypes_and_types(func, error, text):
    df = MultiProcessMapDataComponentSharedArray(DataFromList([[1], [2]], shuffle=False), 2, func, (2, 3), np.int32)
    df.reset_state()
    try:
        with pytest.raises(error, match=text) as info:
            list(df)
        assert isinstance(info.value, WorkerError)
    finally:
        df.close()


def test_shared_array_map_checks_its_arguments():
    source = DataFromList([[1]])
    with pytest.raises(ValueError, match=r"output_shape must be a tuple of non-negative ints, got \(2, -1\)"):
        MultiProcessMapDataComponentSharedArray(source, 1, wrong_shape, (2, -1), np.int32)
    with pytest.raises(TypeError, match=r"output_dtype must be a numpy dtype .*got 'pixels'"):
        MultiProcessMapDataComponentSharedArray(source, 1, wrong_shape, (2,), "pixels")
    with pytest.raises(TypeError, match=r"map_func must be callable, got 3"):
        MultiProcessMapDataComponentSharedArray(source, 1, 3, (2,), np.int32)


def _drain(q, consumers):
    items, ends = [], 0
    while ends < consumers:
        index, dp = q.get(timeout=20)
        if index is DIE:
            ends += 1
        else:
            items.append((index, dp))
    return items


@pytest.mark.timeout(60)
def test_dump_dataflow_to_process_queue_gives_every_datapoint_then_die_per_consumer():
    source = DataFromList([[i, np.arange(3) * i] for i in range(7)], shuffle=False)
    q, proc = dump_dataflow_to_process_queue(source, 2, 3)
    assert isinstance(proc, mp.Process) and proc.daemon
    proc.start()
    try:
        items = _drain(q, 3)
        proc.join(20)
    finally:
        proc.kill()
        proc.join(5)
    assert [(i, dp[0], dp[1].tolist()) for i, dp in items] == [(i, i, [0, i, 2 * i]) for i in range(7)]
    assert proc.exitcode == 0
    with pytest.raises(WorkerError, match=r"dump_dataflow_to_process_queue: producer \(pid \d+\) has ended, and "
                                          r"nothing more is in the queue"):
        q.get(timeout=5)


class FailsAfterTwo(DataFlow):
    def __iter__(self):
        yield [1]
        yield [2]
        raise KeyError("no such record")


@pytest.mark.timeout(60)
def test_dump_dataflow_to_process_queue_error_reaches_every_consumer():
    q, proc = dump_dataflow_to_process_queue(FailsAfterTwo(), 5, 2)
    proc.start()
    try:
        assert [q.get(timeout=20), q.get(timeout=20)] == [(0, [1]), (1, [2])]
        for _ in range(2):
            with pytest.raises(KeyError) as info:
                q.get(timeout=20)
            assert isinstance(info.value, WorkerError)
            assert "producer (pid {}) raised KeyError: 'no such record'".format(proc.pid) in str(info.value)
            assert "FailsAfterTwo" not in str(info.value) or "__iter__" in info.value.remote_traceback
        proc.join(20)
    finally:
        proc.kill()
        proc.join(5)
    assert proc.exitcode == 1


class Silent(DataFlow):
    def __iter__(self):
        while True:
            time.sleep(0.05)
        yield


@pytest.mark.timeout(60)
def test_dump_dataflow_to_process_queue_never_hangs_on_a_dead_or_unstarted_producer():
    q, proc = dump_dataflow_to_process_queue(Silent(), 1, 1)
    with pytest.raises(WorkerError, match=r"producer was not started: call start\(\) on the process"):
        q.get(timeout=1)
    proc.start()
    try:
        with pytest.raises(queue.Empty):
            q.get(timeout=0.2)
        with pytest.raises(queue.Empty):
            q.get_nowait()
        os.kill(proc.pid, signal.SIGKILL)
        with pytest.raises(WorkerError, match=r"producer \(pid \d+\) was killed by SIGKILL"):
            q.get()                          # no timeout: the dead producer ends the wait
    finally:
        proc.kill()
        proc.join(5)


def test_dump_dataflow_to_process_queue_checks_its_arguments():
    with pytest.raises(ValueError, match=r"size must be a positive int, got 0"):
        dump_dataflow_to_process_queue(DataFromList([[1]]), 0, 1)
    with pytest.raises(ValueError, match=r"nr_consumer must be a positive int, got True"):
        dump_dataflow_to_process_queue(DataFromList([[1]]), 1, True)
    with pytest.raises(TypeError, match=r"expected a DataFlow, got \[1\]"):
        dump_dataflow_to_process_queue([1], 1, 1)
