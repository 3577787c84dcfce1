"""Tests of the DataFlow sources: DataFromList, DataFromGenerator, DataFromIterable, DataFromQueue,
FakeData."""
import pickle
import queue
import threading
import time

import numpy as np
import pytest

from inputpipe.dataflow import (
    DataFlowLengthUnknown, DataFlowReentrantGuard, DataFlowTerminated, DataFromGenerator, DataFromIterable,
    DataFromList, DataFromQueue, FakeData, RepeatedData, get_length, seeding,
)
from inputpipe.utils.concurrency import POLL_INTERVAL


# --- DataFromList -------------------------------------------------------------------------------

def test_data_from_list_in_order_without_shuffle():
    items = [[i, str(i)] for i in range(5)]
    df = DataFromList(items, shuffle=False)
    df.reset_state()
    assert len(df) == 5
    assert list(df) == items
    assert list(df)[2] is items[2]  # datapoints are not copied
    assert df.size() == 5 and list(df.get_data()) == items  # tensorpack's pre-0.9 names


def test_data_from_list_shuffles_every_epoch_and_keeps_every_item():
    items = [[i] for i in range(50)]
    df = DataFromList(items, shuffle=True)
    df.reset_state()
    first, second = list(df), list(df)
    assert sorted(first) == items and sorted(second) == items
    assert first != items and first != second


def test_data_from_list_shuffle_needs_reset_state():
    df = DataFromList([[1], [2]], shuffle=True)
    with pytest.raises(RuntimeError, match=r"DataFromList has no RNG yet: call reset_state\(\) once before"):
        iter(df)


def test_data_from_list_empty():
    df = DataFromList([], shuffle=True)
    df.reset_state()
    assert len(df) == 0 and list(df) == []


# --- DataFromGenerator / DataFromIterable ------------------------------------------------------

def test_data_from_generator_function_runs_every_epoch():
    def gen():
        for i in range(3):
            yield [i]

    df = DataFromGenerator(gen)
    df.reset_state()
    assert list(df) == [[0], [1], [2]]
    assert list(df) == [[0], [1], [2]]


def test_data_from_generator_has_no_length_but_list_works():
    df = DataFromGenerator(lambda: iter([[1], [2]]))
    with pytest.raises(DataFlowLengthUnknown, match="DataFromGenerator has no length"):
        len(df)
    assert get_length(df) is None
    assert list(df) == [[1], [2]]


def test_data_from_generator_object_is_one_epoch_and_second_epoch_is_an_error():
    df = DataFromGenerator([i] for i in range(2))
    assert list(df) == [[0], [1]]
    with pytest.raises(RuntimeError, match=r"DataFromGenerator was given an iterator \(generator\), which can "
                                           r"only be iterated once and is already used"):
        list(df)


def test_repeating_a_consumed_generator_forever_is_an_error_not_a_hang():
    df = RepeatedData(DataFromGenerator(iter([[1]])), -1)
    itr = iter(df)
    assert next(itr) == [1]
    with pytest.raises(RuntimeError, match="can only be iterated once"):
        next(itr)


def test_data_from_generator_with_reiterable_object():
    df = DataFromGenerator([[1], [2]])
    assert list(df) == list(df) == [[1], [2]]


def test_data_from_iterable_length_and_reiteration():
    df = DataFromIterable([[0], [1], [2]])
    df.reset_state()
    assert len(df) == 3
    assert list(df) == list(df) == [[0], [1], [2]]


def test_data_from_iterable_without_length():
    df = DataFromIterable(iter([[5], [6]]))
    with pytest.raises(DataFlowLengthUnknown, match="DataFromIterable: the iterable has no length"):
        len(df)
    assert list(df) == [[5], [6]]
    with pytest.raises(RuntimeError, match=r"DataFromIterable was given an iterator \(list_iterator\)"):
        list(df)


def test_one_shot_flows_pickle():
    df = pickle.loads(pickle.dumps(DataFromIterable([[1], [2]])))
    assert list(df) == [[1], [2]] and len(df) == 2


# --- DataFromQueue ------------------------------------------------------------------------------

def test_data_from_queue_yields_in_order():
    q = queue.Queue()
    for i in range(3):
        q.put([i])
    df = DataFromQueue(q)
    df.reset_state()
    itr = iter(df)
    assert [next(itr) for _ in range(3)] == [[0], [1], [2]]
    with pytest.raises(DataFlowLengthUnknown):
        len(df)


def test_data_from_queue_does_not_swallow_an_exception_thrown_into_it():
    q = queue.Queue()
    q.put([1])
    df = DataFromQueue(q)
    df.reset_state()
    itr = iter(df)
    assert next(itr) == [1]
    with pytest.raises(queue.Empty, match="from the consumer"):
        itr.throw(queue.Empty("from the consumer"))


def test_data_from_queue_stop_ends_a_waiting_iteration_within_a_poll():
    df = DataFromQueue(queue.Queue())
    df.reset_state()
    caught = []

    def consume():
        try:
            next(iter(df))
        except DataFlowTerminated as err:
            caught.append(str(err))

    consumer = threading.Thread(target=consume, name="test-consumer")
    consumer.start()
    time.sleep(3 * POLL_INTERVAL)  # the consumer is waiting on the empty queue
    stopped_at = time.monotonic()
    df.stop()
    consumer.join(5)
    assert not consumer.is_alive()
    assert time.monotonic() - stopped_at < 1.0
    assert caught == ["DataFromQueue was stopped"]


def test_data_from_queue_stopped_leaves_items_and_reset_state_clears_stop():
    q = queue.Queue()
    q.put([1])
    df = DataFromQueue(q)
    df.stop()
    with pytest.raises(DataFlowTerminated, match="DataFromQueue was stopped"):
        next(iter(df))
    assert q.qsize() == 1  # nothing was taken out and lost
    df.reset_state()
    assert next(iter(df)) == [1]


def test_data_from_queue_works_with_any_get_timeout_object():
    class Source:
        def __init__(self):
            self.calls = 0

        def get(self, timeout):
            assert timeout == POLL_INTERVAL
            self.calls += 1
            if self.calls % 2:
                raise queue.Empty()
            return [self.calls]

    df = DataFromQueue(Source())
    itr = iter(df)
    assert [next(itr), next(itr)] == [[2], [4]]


def test_data_from_queue_pickles_unstopped():
    df = DataFromQueue(None)
    df.stop()
    copy = pickle.loads(pickle.dumps(df))
    assert not copy._stop_event.is_set()


def test_reentrant_guard_pickles_unheld():
    guard = DataFlowReentrantGuard("G")
    with guard:
        copy = pickle.loads(pickle.dumps(guard))
    entered = []
    with copy:  # a held guard pickles as an unheld one: the copy in a worker can be entered
        entered.append(True)
    assert entered == [True]
    with copy:
        with pytest.raises(RuntimeError, match="G is not re-entrant"):
            with copy:
                pass


# --- FakeData ----------------------------------------------------------------------------------

def test_fake_data_shapes_dtypes_domain_and_length():
    df = FakeData([[2, 3], [4], []], size=20, dtype=["float32", "int64", "uint8"],
                  domain=[(-1, 1), (5, 8), (0, 256)])
    df.reset_state()
    points = list(df)
    assert len(df) == 20 and len(points) == 20
    for a, b, c in points:
        assert (a.shape, a.dtype) == ((2, 3), np.float32)
        assert (b.shape, b.dtype) == ((4,), np.int64)
        assert (c.shape, c.dtype) == ((), np.uint8)
    a_all = np.stack([p[0] for p in points])
    b_all = np.stack([p[1] for p in points])
    assert a_all.min() >= -1 and a_all.max() < 1 and a_all.std() > 0.2
    assert set(np.unique(b_all)) == {5, 6, 7}


def test_fake_data_single_dtype_and_domain_apply_to_every_component():
    df = FakeData([[3], [3]], size=2, dtype=np.float64, domain=[10, 11])
    df.reset_state()
    for dp in df:
        assert [x.dtype for x in dp] == [np.float64, np.float64]
        assert all(((x >= 10) & (x < 11)).all() for x in dp)


def test_fake_data_default_int_domain_is_zeros_and_bool_is_coin_flips():
    df = FakeData([[100], [1000]], size=1, dtype=["int32", "bool"])
    df.reset_state()
    ints, bools = next(iter(df))
    assert ints.dtype == np.int32 and not ints.any()
    assert bools.dtype == np.bool_ and 300 < bools.sum() < 700


def test_fake_data_not_random_repeats_one_datapoint_per_epoch():
    df = FakeData([[4]], size=3, random=False)
    df.reset_state()
    points = list(df)
    assert points[0] is not points[1]  # new lists ...
    assert points[0][0] is points[1][0]  # ... sharing the arrays
    again = list(df)
    assert not np.array_equal(points[0][0], again[0][0])


def test_fake_data_random_differs_between_datapoints():
    df = FakeData([[8]], size=2)
    df.reset_state()
    a, b = list(df)
    assert not np.array_equal(a[0], b[0])


def test_fake_data_reproducible_with_global_seed():
    def run():
        seeding.set_global_seed(3)
        df = FakeData([[5]], size=2)
        df.reset_state()
        return np.stack([dp[0] for dp in df])

    try:
        np.testing.assert_array_equal(run(), run())
    finally:
        seeding.set_global_seed(None)


@pytest.mark.parametrize("kwargs, message", [
    (dict(shapes=[[1]], size=-1), "FakeData: size must be >= 0, got -1"),
    (dict(shapes=[[1], [2]], dtype=["float32"]), "FakeData: dtype has 1 entries but there are 2 shapes"),
    (dict(shapes=[[1]], domain=[(0, 1), (0, 2)]), "FakeData: domain has 2 entries but there are 1 shapes"),
    (dict(shapes=[[1]], dtype="complex64"),
     "FakeData: component 0 has dtype complex64; only bool, integer and float dtypes are supported"),
    (dict(shapes=[[1], [1]], domain=[(0, 1), (3, 3)]),
     r"FakeData: component 1 has domain \(3, 3\); low must be < high"),
    (dict(shapes=[[1]], dtype="uint8", domain=(0, 300)),
     r"FakeData: component 0 has domain \(0, 300\), but its dtype uint8 holds only 0..255"),
    (dict(shapes=[[1]], dtype="int8", domain=(-200, 0)),
     r"FakeData: component 0 has domain \(-200, 0\), but its dtype int8 holds only -128..127"),
])
def test_fake_data_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FakeData(**kwargs)


def test_fake_data_needs_reset_state():
    with pytest.raises(RuntimeError, match="FakeData has no RNG yet"):
        next(iter(FakeData([[1]])))
