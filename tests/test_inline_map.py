"""0 workers: a parallel map's consumer thread maps the datapoints itself (``set_num_workers(0)``,
``Autoscale(min_workers=0)``, an ``"auto"`` process map's controller), and the controller's rules
for moving there and back."""
import collections
import ctypes
import os
import random
import re
import time

import numpy as np
import psutil
import pytest

from inputpipe.dataflow import (DataFromList, MultiProcessMapAndBatchData, MultiProcessMapData, MultiProcessRunnerZMQ,
                                MultiThreadMapData, MultiThreadRunner, seeding)
from inputpipe.dataflow._parallel import inline_map
from inputpipe.dataflow._parallel.autoscale_settings import Measurement
from inputpipe.dataflow._parallel.inline_map import INLINE_WORKER, as_sent_by_a_process, global_rngs_kept
from inputpipe.dataflow._parallel.inline_policy import BACKOFF_INTERVALS, InlinePolicy
from inputpipe.dataflow.autoscale import Autoscale
from inputpipe.utils import seeding as utils_seeding, serialize
from inputpipe.utils.errors import WorkerError
from dataflow_helpers import Indexed

pytestmark = pytest.mark.timeout(60)

MAPS = [MultiThreadMapData, MultiProcessMapData]
Pair = collections.namedtuple("Pair", "index value")


def with_array(dp):
    return [dp[0], np.full((4, 3), dp[0], np.int32)]


def drawing(dp):
    """Draws from numpy's and Python's global RNGs (seeded per datapoint in worker processes)."""
    return [dp[0], int(np.random.randint(10 ** 6)), random.random(), float(np.random.randn())]


def as_namedtuple(dp):
    return Pair(dp[0], dp[0] * 2)


class Unsendable:
    pass


def unsendable_at_5(dp):
    return [dp[0], Unsendable()] if dp[0] == 5 else dp


def fails_at_7(dp):
    if dp[0] == 7:
        raise KeyError("no such record: 7")
    return dp


@pytest.mark.parametrize("cls", MAPS)
@pytest.mark.parametrize("ordered", [True, False])
def test_at_0_workers_the_consumer_maps_each_datapoint_once_and_the_parked_workers_come_back(cls, ordered):
    df = cls(Indexed(120), 2, with_array, strict=True, ordered=ordered, buffer_size=6)
    df.reset_state()
    with df:
        pids = set(getattr(df, "worker_pids", []))
        itr = iter(df)
        got = [next(itr) for _ in range(10)]
        df.set_num_workers(0)
        got += [next(itr) for _ in range(50)]
        assert df.num_workers == 0 and df._parked_workers() == 2
        mapped_here = df._inline.items
        df.set_num_workers(3)
        got += list(itr)
        assert df.num_workers == 3 and df._parked_workers() == 0
        assert set(pids) <= set(getattr(df, "worker_pids", []))       # the parked ones came back (no fork)
    numbers = [dp[0] for dp in got]
    assert numbers == list(range(120)) if ordered else sorted(numbers) == list(range(120))
    assert all(array.dtype == np.int32 and array.shape == (4, 3) and (array == i).all() for i, array in got)
    # (the request applies at the next datapoint: one more may have been mapped here before it)
    assert 40 <= mapped_here <= 56 and df._inline.items - mapped_here in (0, 1)
    assert [c.workers for c in df.worker_count_history()] == [2, 0, 3]


@pytest.mark.parametrize("cls", MAPS)
def test_at_0_workers_one_task_is_mapped_at_a_time_just_before_it_is_due(cls):
    calls = []

    def counted(dp):
        calls.append(dp[0])
        return dp

    df = cls(Indexed(10 ** 6), 1, counted, strict=True, ordered=True, buffer_size=50)
    if cls is MultiProcessMapData:
        df.map_func = counted            # (the workers were given it before: they are not used here)
    df.reset_state()
    df.set_num_workers(0)
    with df:
        itr = iter(df)
        for k in range(30):
            next(itr)                    # (the request applies before any task goes to the worker)
            assert (df._inline.items, df._in_flight_total, len(calls)) == (k + 1, 0, k + 1)
        itr.close()


def test_the_consumer_maps_with_each_datapoints_seeds_and_leaves_its_own_global_rngs_as_they_were():
    seeding.set_global_seed(11)
    try:
        reference = MultiProcessMapData(DataFromList([[i] for i in range(40)], shuffle=False), 2, drawing,
                                        strict=True, ordered=True)
        reference.reset_state()
        with reference:
            want = list(reference)
        seeding.set_global_seed(11)
        df = MultiProcessMapData(DataFromList([[i] for i in range(40)], shuffle=False), 2, drawing,
                                 strict=True, ordered=True, buffer_size=2)
        df.reset_state()
        df.set_num_workers(0)
        np.random.seed(3)
        random.seed(3)
        with df:
            got = []
            own = []
            for dp in df:
                got.append(dp)
                own.append((np.random.randint(10 ** 9), random.random()))
        np.random.seed(3)
        random.seed(3)
        assert own == [(np.random.randint(10 ** 9), random.random()) for _ in range(40)]
    finally:
        seeding.set_global_seed(None)
    assert got == want and df._inline.items >= 30
    assert len({dp[1] for dp in got}) > 30                # the draws differ from datapoint to datapoint


CALLS = collections.Counter()


def draws_sometimes(dp):
    """Draws from the global generators for a few datapoints only: numpy's uniform at 17, one
    normal at 23 (which a cached Gaussian would serve without touching numpy's words), Python's
    at 31; counts its calls (at 0 workers they happen in this process)."""
    CALLS[dp[0]] += 1
    if dp[0] == 17:
        return [dp[0], float(np.random.rand())]
    if dp[0] == 23:
        return [dp[0], float(np.random.randn())]
    if dp[0] == 31:
        return [dp[0], random.random()]
    return [dp[0], dp[0] * 2]


def seeded_run(func, count, workers, consumer_draws=None):
    """The datapoints of ``func`` over ``range(count)`` under global seed 11 with ``workers``
    (0: the consumer's thread), and the consumer's own draws made between them."""
    seeding.set_global_seed(11)
    try:
        df = MultiProcessMapData(DataFromList([[i] for i in range(count)], shuffle=False), max(workers, 1), func,
                                 strict=True, ordered=True, buffer_size=2)
        df.reset_state()
        if workers == 0:
            df.set_num_workers(0)
        got, own = [], []
        with df:
            for dp in df:
                got.append(dp)
                if consumer_draws is not None:
                    own.append(consumer_draws(dp))
        return got, own, df
    finally:
        seeding.set_global_seed(None)


def test_a_map_that_draws_now_and_then_is_seeded_from_its_first_draw_on_at_0_workers():
    want, _, _ = seeded_run(draws_sometimes, 40, 2)
    CALLS.clear()
    np.random.seed(3)
    random.seed(3)
    got, own, df = seeded_run(draws_sometimes, 40, 0, lambda dp: (np.random.randint(10 ** 9), random.random()))
    assert got == want
    # the first task that drew was mapped twice (unseeded, then seeded); every other once
    assert CALLS == collections.Counter({i: 2 if i == 17 else 1 for i in range(40)})
    assert df._global_draws.draws
    np.random.seed(3)
    random.seed(3)
    assert own == [(np.random.randint(10 ** 9), random.random()) for _ in range(40)]


@pytest.mark.parametrize("first", [23, 31], ids=["numpy-normal-on-a-cached-gaussian", "python"])
def test_a_first_draw_from_a_cached_gaussian_or_pythons_generator_is_caught(first):
    """From ``first`` on the map draws as draws_sometimes does. At 23 the consumer holds a
    Gaussian numpy cached when that task is mapped (it drew one normal just before): the map's
    one normal draw would take it without changing numpy's words, so that task, and every later
    one while the consumer holds that Gaussian (it is given back after each), is seeded at once
    and mapped once; Python's draw at 31 is seen in its words."""
    def only_from(dp):
        return draws_sometimes(dp) if dp[0] >= first else [dp[0], dp[0] * 2]

    want, _, _ = seeded_run(only_from, 40, 2)
    CALLS.clear()
    np.random.seed(3)
    cached = []

    def cache_a_gaussian_before_the_normal_draw(dp):
        if dp[0] == 22:
            np.random.randn()                  # one of a pair: the other is cached for the consumer
            cached.append(np.random.get_state()[3])

    got, _, df = seeded_run(only_from, 40, 0, cache_a_gaussian_before_the_normal_draw if first == 23 else None)
    assert got == want and cached == ([1] if first == 23 else [])
    if first == 23:
        assert np.random.get_state()[3] == 1           # the consumer's Gaussian, still cached for it
        assert CALLS == collections.Counter(range(23, 40)) and not df._global_draws.draws
    else:
        assert CALLS == collections.Counter({i: 2 if i == 31 else 1 for i in range(31, 40)})
        assert df._global_draws.draws


def draw_then_fail(dp):
    if dp[0] == 6:
        raise ValueError("drew {}".format(np.random.randint(10 ** 9)))
    return dp


def test_a_map_that_draws_then_raises_raises_what_a_seeded_worker_raises():
    messages = []
    for workers in (2, 0):
        with pytest.raises(WorkerError) as caught:
            seeded_run(draw_then_fail, 20, workers)
        assert isinstance(caught.value, ValueError)
        messages.append(re.search(r"drew (\d+)", str(caught.value)).group(1))
    assert messages[0] == messages[1]


def test_a_map_that_never_draws_leaves_the_global_generators_alone_at_0_workers(monkeypatch):
    np.random.seed(3)
    random.seed(3)
    before = (np.random.get_state()[1].copy(), random.getstate())
    reseeded = []
    monkeypatch.setattr(utils_seeding, "_reseed_python_global", lambda seed: reseeded.append(seed))
    got, _, df = seeded_run(with_array, 60, 0)
    assert [int(dp[1][0, 0]) for dp in got] == list(range(60))
    assert not reseeded and not df._global_draws.draws
    assert (np.random.get_state()[1] == before[0]).all() and random.getstate() == before[1]


def _states():
    return np.random.get_state(), random.getstate()


def _same_states(a, b):
    (numpy_a, python_a), (numpy_b, python_b) = a, b
    return all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
               for x, y in zip(numpy_a, numpy_b)) and python_a == python_b


CHANGES = {
    # every draw moves a position; 624 words drawn bring it back with every word made again
    "numpy-624-words": lambda: np.random.bytes(624 * 4),
    "python-624-words": lambda: [random.getrandbits(32) for _ in range(624)],
    "numpy-seeded": lambda: np.random.seed(5),
    "python-seeded": lambda: random.seed(5),
    "numpy-gaussian-cached": lambda: np.random.standard_normal(),
    "python-gaussian-cached": lambda: random.gauss(0, 1),
    "numpy-state-set": lambda: np.random.set_state(np.random.RandomState(8).get_state()),
    "python-state-set": lambda: random.setstate(random.Random(8).getstate()),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_the_watch_sees_every_change_of_a_global_generator_and_puts_the_consumers_states_back(change):
    """Whatever the unseeded call did to either generator, the call is made again seeded and the
    consumer's states are those it had (it drew between the tasks: the copy kept follows it)."""
    watch = inline_map.GlobalDrawsWatch()
    calls = []

    def apply(reseed_global):
        calls.append(reseed_global)
        if not reseed_global and len(calls) == 3:
            CHANGES[change]()
        return len(calls)

    np.random.seed(3)
    random.seed(3)
    assert watch.map(apply) == 1 and not watch.draws
    np.random.randint(10)                       # the consumer's own draws, between tasks
    random.random()
    assert watch.map(apply) == 2 and not watch.draws
    np.random.rand(700)
    random.gauss(0, 1)                         # (Python's cached Gaussian is part of its state)
    consumers = _states()
    assert watch.map(apply) == 4 and watch.draws
    assert calls == [False, False, False, True]
    assert _same_states(_states(), consumers)


def test_without_a_readable_gaussian_flag_every_task_is_seeded(monkeypatch):
    monkeypatch.setattr(inline_map, "_gauss_memory", lambda: None)
    monkeypatch.setattr(inline_map, "_views_made", [(inline_map._NOT_MADE, None)])
    want, _, _ = seeded_run(draws_sometimes, 40, 2)
    CALLS.clear()
    got, _, df = seeded_run(draws_sometimes, 40, 0)
    assert got == want and df._global_draws.draws
    assert set(CALLS.values()) == {1}


def test_the_cached_gaussian_of_numpys_legacy_generator_is_found():
    offset, size = inline_map._gauss_memory()
    assert size in (12, 16)
    rng = np.random.RandomState(4)
    for draws in range(1, 6):
        value = rng.standard_normal()
        state = rng.get_state()
        assert ctypes.c_int.from_address(id(rng) + offset).value == state[3] == draws % 2
        cached = ctypes.c_double.from_address(id(rng) + offset + size - 8).value
        assert cached == state[4] and (not state[3] or cached != value)


@pytest.mark.parametrize("memory", [True, False], ids=["state-memory", "get-state"])
def test_global_rngs_kept_restores_both_generators_exactly(monkeypatch, memory):
    if not memory:
        monkeypatch.setattr(inline_map, "_state_views", lambda: None)
    else:
        assert inline_map._state_views() is not None       # CPython, numpy >= 1.17
    np.random.seed(5)
    random.seed(5)
    np.random.rand(7)
    random.gauss(0, 1)                   # Python caches the second of a pair: kept too
    want_numpy, want_python = np.random.get_state(), random.getstate()
    with global_rngs_kept():
        np.random.seed(99)
        np.random.rand(1000)
        np.random.randn(3)
        random.seed(99)
        random.gauss(0, 1)
    got_numpy = np.random.get_state()
    assert got_numpy[0] == want_numpy[0] and (got_numpy[1] == want_numpy[1]).all() and got_numpy[2] == want_numpy[2]
    assert got_numpy[3] == 0             # a Gaussian cached by the map is not handed to the consumer
    assert random.getstate() == want_python


@pytest.mark.parametrize("memory", [True, False], ids=["state-memory", "get-state"])
def test_global_rngs_kept_gives_the_consumer_its_own_cached_gaussians_back(monkeypatch, memory):
    if not memory:
        monkeypatch.setattr(inline_map, "_state_views", lambda: None)
    np.random.seed(6)
    random.seed(6)
    np.random.standard_normal()          # the second of the pair stays cached in numpy
    random.gauss(0, 1)                   # and in Python
    want_numpy, want_python = np.random.get_state(), random.getstate()
    assert want_numpy[3] == 1 and want_python[2] is not None
    expected = np.random.RandomState()
    expected.set_state(want_numpy)
    for _ in range(2):
        with global_rngs_kept():
            np.random.seed(99)
            np.random.standard_normal()  # the map's own pair, one of it cached
            random.seed(99)
            random.gauss(0, 1)
        got_numpy = np.random.get_state()
        assert got_numpy[3] == 1 and got_numpy[4] == want_numpy[4]
        assert all((a == b).all() if isinstance(a, np.ndarray) else a == b for a, b in zip(got_numpy, want_numpy))
        assert random.getstate() == want_python
    assert np.random.standard_normal(3).tolist() == expected.standard_normal(3).tolist()


def test_global_rngs_kept_nested_and_repeated_restores_each_level():
    np.random.seed(3)
    random.seed(3)
    outer_numpy, outer_python = np.random.get_state()[1].copy(), random.getstate()
    for _ in range(3):                   # the copies' buffers are reused from block to block
        with global_rngs_kept():
            np.random.seed(10)
            random.seed(10)
            inner_numpy, inner_python = np.random.get_state()[1].copy(), random.getstate()
            with global_rngs_kept():
                np.random.seed(20)
                random.seed(20)
                np.random.rand(700)
                random.random()
            assert (np.random.get_state()[1] == inner_numpy).all() and random.getstate() == inner_python
            np.random.rand(5)
        assert (np.random.get_state()[1] == outer_numpy).all() and random.getstate() == outer_python
    assert len(inline_map._spare_copies) >= 2


def test_a_result_reaches_the_consumer_as_a_workers_would_through_the_wire_format():
    values = [
        [1, 2.5, "s", b"b", None, True, (1, (2, [3])), {"k": np.arange(3), 4: np.float32(1.5)}],
        Pair(1, 2), np.arange(10000).reshape(100, 100).T, np.arange(12)[::3], {"a": np.str_("x")},
        [np.int64(2 ** 40), np.bool_(True), np.zeros((2, 2), np.complex64)], 2 ** 63 - 1, -(2 ** 63),
        collections.OrderedDict(a=1), np.array(["ab", "c"]),
    ]
    for value in values:
        got, want = as_sent_by_a_process(value), serialize.loads(serialize.dumps(value))
        assert _shape_of(got) == _shape_of(want), value
    unchanged = values[0]
    assert as_sent_by_a_process(unchanged) is unchanged            # nothing to convert: no copy
    for bad in ([Unsendable()], 2 ** 64, np.array([object()]), {"k": [1, {2: Unsendable()}]}):
        with pytest.raises(TypeError, match="wire format"):
            as_sent_by_a_process(bad)


def _shape_of(value):
    """Types and values, recursively (arrays by dtype, shape and contents)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tolist())
    if isinstance(value, dict):
        return (type(value).__name__, sorted((repr(k), _shape_of(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_shape_of(v) for v in value])
    return (type(value).__name__, value)


@pytest.mark.parametrize("cls", MAPS)
def test_a_map_that_fails_at_0_workers_raises_a_worker_error_naming_the_consumers_thread(cls):
    df = cls(Indexed(20), 2, fails_at_7, strict=True, ordered=True, buffer_size=2)
    df.reset_state()
    df.set_num_workers(0)
    with df:
        with pytest.raises(WorkerError) as caught:
            list(df)
    assert isinstance(caught.value, KeyError) and isinstance(caught.value.__cause__, KeyError)
    assert INLINE_WORKER in str(caught.value) and cls.__name__ in str(caught.value)
    assert "no such record: 7" in str(caught.value)


def test_types_and_refusals_at_0_workers_are_those_of_the_worker_processes():
    for count in (1, 0):
        df = MultiProcessMapData(Indexed(8), 1, as_namedtuple, strict=True, ordered=True, buffer_size=1)
        df.reset_state()
        df.set_num_workers(count)
        with df:
            got = list(df)
        assert got == [(i, 2 * i) for i in range(8)] and all(type(dp) is tuple for dp in got), count
    for count in (1, 0):
        df = MultiProcessMapData(Indexed(8), 1, unsendable_at_5, strict=True, ordered=True, buffer_size=1)
        df.reset_state()
        df.set_num_workers(count)
        with df:
            with pytest.raises(WorkerError, match="Unsendable") as caught:
                list(df)
        assert isinstance(caught.value, TypeError), count


def test_map_and_batch_at_0_workers_builds_the_same_batches():
    results = []
    for count in (2, 0):
        seeding.set_global_seed(4)
        try:
            df = MultiProcessMapAndBatchData(Indexed(50), 2, drawing, batch_size=8, strict=True, ordered=True)
            df.reset_state()
            df.set_num_workers(count)
            with df:
                results.append([[a.tolist() for a in batch] for epoch in range(2) for batch in df])
        finally:
            seeding.set_global_seed(None)
    assert results[0] == results[1] and len(results[0]) == 12


@pytest.mark.parametrize("make", [
    lambda a: MultiProcessRunnerZMQ(Indexed(3), a),
    lambda a: MultiThreadRunner(lambda: Indexed(3), 2, a),
], ids=["process-runner", "thread-runner"])
def test_stages_without_a_map_refuse_min_workers_0(make):
    with pytest.raises(ValueError, match=r"Autoscale\(min_workers=0\) lets a parallel map run with 0 workers.*"
                                         r"min_workers must be >= 1"):
        make(Autoscale(min_workers=0))


def test_autoscale_takes_min_workers_0_and_still_starts_with_a_worker():
    assert Autoscale(min_workers=0).start_count("processes") >= 1
    assert "min_workers=0" in repr(Autoscale(min_workers=0))
    with pytest.raises(ValueError, match=r"Autoscale: min_workers must be an int >= 0 or None, got -1"):
        Autoscale(min_workers=-1)
    with pytest.raises(ValueError, match=r"Autoscale: start must be an int >= 1 or None, got 0"):
        Autoscale(start=0)


def test_closing_at_0_workers_stops_the_parked_workers():
    df = MultiProcessMapData(Indexed(10 ** 6), 3, with_array, buffer_size=6)
    df.reset_state()
    pids = list(df.worker_pids)
    itr = iter(df)
    [next(itr) for _ in range(5)]
    df.set_num_workers(0)
    [next(itr) for _ in range(20)]
    assert df.num_workers == 0 and all(psutil.pid_exists(pid) for pid in pids)
    itr.close()
    df.close()
    deadline = time.monotonic() + 5
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids):
        assert time.monotonic() < deadline, "a parked worker outlived close()"
        time.sleep(0.02)
    assert not [name for name in os.listdir("/dev/shm") if "inputpipe" in name]


# ------------------------------------------------------------------------ the controller's rules

class FakeStage:
    def __init__(self, parked=2, result_bytes=2 << 20):
        self.parked = parked
        self._result_bytes = result_bytes

    def _parked_workers(self):
        return self.parked


def measured(workers, rate, task_ms=1.0, own_ms=0.01, send_share=0.3):
    return Measurement(seconds=0.5, workers=workers, wait_share=0.9, busy_share=0.95, delivered_per_s=rate,
                       demand_per_s=None, task_seconds=task_ms / 1e3, cpus_used=None, memory_bytes=0,
                       consumer_seconds=None if own_ms is None else own_ms / 1e3, send_share=send_share)


def test_0_workers_is_tried_once_the_count_held_and_kept_when_faster():
    policy, stage = InlinePolicy(), FakeStage()
    assert policy.decide(measured(2, 2000), stage, 0, 2000, settled=False) is None
    count, reason = policy.decide(measured(2, 2000), stage, 1, 2000, settled=True)
    assert count == 0 and reason.startswith("inline: try the consumer's thread: 2 workers deliver 2,000/s, 1.00 ms "
                                            "of work a task (30% sending it)")
    count, reason = policy.decide(measured(0, 2600, task_ms=0.35), stage, 2, None)
    assert count == 0 and reason.startswith("inline: kept: the consumer's thread delivers 2,600/s")
    assert policy.decide(measured(0, 2600, task_ms=0.35), stage, 3, None) == (0, "")
    # the workers are tried again after a while; they lose, so 0 comes back and the next try waits longer
    count, reason = policy.decide(measured(0, 2600, task_ms=0.35), stage, 2 + BACKOFF_INTERVALS, None)
    assert count == 2 and reason.startswith("inline: try 2 workers again")
    count, reason = policy.decide(measured(2, 2000), stage, 3 + BACKOFF_INTERVALS, None)
    assert count == 0 and reason.startswith("inline: undo: 2 workers delivered 2,000/s, the consumer's thread 2,600/s")
    assert policy.decide(measured(0, 2600, task_ms=0.35), stage, 4 + 2 * BACKOFF_INTERVALS, None) == (0, "")
    count, _ = policy.decide(measured(0, 2600, task_ms=0.35), stage, 3 + 3 * BACKOFF_INTERVALS, None)
    assert count == 2


def test_0_workers_is_undone_when_slower_and_tried_again_after_a_doubling_while():
    policy, stage = InlinePolicy(), FakeStage()
    decision = 0
    waits = []
    for _ in range(3):
        while policy.decide(measured(2, 2000), stage, decision, 2000) is None:
            decision += 1
        tried_at = decision
        count, reason = policy.decide(measured(0, 1500, task_ms=0.6), stage, decision + 1, None)
        assert count == 2 and reason.startswith("inline: undo: the consumer's thread delivered 1,500/s, 2 workers "
                                                "2,000/s")
        decision += 2
        waits.append(tried_at)
    assert waits[1] - waits[0] >= BACKOFF_INTERVALS and waits[2] - waits[1] >= 2 * BACKOFF_INTERVALS


def test_a_move_to_0_the_controller_refused_is_asked_again_after_a_doubling_while():
    policy, stage = InlinePolicy(), FakeStage()
    asked = []
    for decision in range(8 * BACKOFF_INTERVALS):
        move = policy.decide(measured(2, 2000), stage, decision, 2000)
        if move is not None:
            assert move[0] == 0 and move[1].startswith("inline: try the consumer's thread")
            asked.append(decision)
            policy.refused(decision)       # (the memory budget had no room)
    assert asked == [0, BACKOFF_INTERVALS, 3 * BACKOFF_INTERVALS, 7 * BACKOFF_INTERVALS]


def test_a_close_call_at_0_workers_is_judged_on_two_intervals():
    policy, stage = InlinePolicy(), FakeStage()
    assert policy.decide(measured(2, 2000), stage, 0, 2000)[0] == 0
    assert policy.decide(measured(0, 1900), stage, 1, None) == (0, "")            # close: look again
    count, reason = policy.decide(measured(0, 2300), stage, 2, None)
    assert count == 0 and reason.startswith("inline: kept: the consumer's thread delivers 2,100/s, 2 workers "
                                            "delivered 2,000/s")
    policy = InlinePolicy()
    assert policy.decide(measured(2, 2000), stage, 0, 2000)[0] == 0
    assert policy.decide(measured(0, 1900), stage, 1, None) == (0, "")
    count, reason = policy.decide(measured(0, 1700), stage, 2, None)
    assert count == 2 and reason.startswith("inline: undo: the consumer's thread delivered 1,800/s, 2 workers "
                                            "2,000/s")
    policy = InlinePolicy()
    assert policy.decide(measured(2, 2000), stage, 0, 2000)[0] == 0
    count, reason = policy.decide(measured(0, 1500), stage, 1, None)             # clearly below: at once
    assert count == 2 and reason.startswith("inline: undo")
    # a close call whose second interval finds the count changed by other means leaves no look
    # behind for the next trial
    policy = InlinePolicy()
    assert policy.decide(measured(2, 2000), stage, 0, 2000)[0] == 0
    assert policy.decide(measured(0, 1700), stage, 1, None) == (0, "")
    assert policy.decide(measured(3, 2000), stage, 2, None, settled=False) is None
    assert policy._looks == []


def test_0_workers_is_not_tried_for_long_tasks_small_results_or_a_consumer_that_is_the_bottleneck():
    policy, stage = InlinePolicy(), FakeStage()
    assert policy.decide(measured(2, 2000, send_share=0.05), stage, 5, 2000) is None     # results cheap to move
    assert policy.decide(measured(2, 2000, send_share=None), stage, 5, 2000) is None     # threads: nothing sent
    assert policy.decide(measured(4, 2000, task_ms=2.0), stage, 5, 2000) is None      # 4 results' time a task
    assert policy.decide(measured(2, 200, task_ms=1.0, own_ms=4.8), stage, 5, 200) is None   # the consumer: 208/s at most
    assert policy.decide(measured(2, 2000, own_ms=None), stage, 5, 2000) is None
    for small in (None, 100, (1 << 16) - 1):       # results not measured yet, or small (a busy
        # machine's preemptions can make the send share of small results look large)
        assert policy.decide(measured(2, 2000, send_share=0.6), FakeStage(result_bytes=small), 5, 2000) is None
    assert policy.decide(measured(2, 2000), FakeStage(result_bytes=1 << 16), 5, 2000)[0] == 0


def test_at_0_workers_a_task_whose_cost_changed_brings_the_workers_back():
    policy, stage = InlinePolicy(), FakeStage(parked=3)
    policy.decide(measured(3, 2000), stage, 0, 2000)
    policy.decide(measured(0, 2500, task_ms=0.4), stage, 1, None)
    assert policy.decide(measured(0, 2500, task_ms=0.4), stage, 2, None) == (0, "")
    assert policy.decide(measured(0, 900, task_ms=1.1), stage, 3, None) == (0, "")     # one interval: noise?
    count, reason = policy.decide(measured(0, 900, task_ms=1.1), stage, 4, None)
    assert count == 3 and reason.startswith("inline: the work changed: a task takes 1.10 ms in the consumer's "
                                            "thread, 0.40 ms before: 3 workers again")


def test_at_0_workers_a_cost_that_falls_or_rises_for_one_interval_keeps_0():
    policy, stage = InlinePolicy(), FakeStage(parked=2)
    policy.decide(measured(2, 2000), stage, 0, 2000)
    policy.decide(measured(0, 2200, task_ms=0.46), stage, 1, None)          # kept
    for decision, cost in enumerate([0.46, 0.30, 0.30, 0.29, 0.9, 0.31, 0.9, 0.3], start=2):
        # (the usual cost follows it down; a single slow interval does not bring the workers back)
        assert policy.decide(measured(0, 3000, task_ms=cost), stage, decision, None) == (0, ""), decision


def megabyte(dp):
    return [dp[0], np.full(1 << 20, dp[0] % 251, np.uint8)]


@pytest.mark.parametrize("least", [{"min_workers": 0}, {}], ids=["min_workers=0", "default"])
def test_an_auto_map_keeps_its_guarantees_when_its_controller_tries_0(least):
    # a cheap map of 1 MiB results: the controller's own rules try 0 workers once the count held
    # (a process map's default allows it, as min_workers=0 does)
    df = MultiProcessMapData(Indexed(2000), Autoscale(interval=0.01, settle_intervals=0, cpu_budget=2, **least),
                             megabyte, strict=True, ordered=True, buffer_size="auto")
    df.reset_state()
    with df:
        epochs = 0
        deadline = time.monotonic() + 40
        while not any(c.workers == 0 for c in df.worker_count_history()):
            got = [(dp[0], int(dp[1][-1])) for dp in df]
            assert got == [(i, i % 251) for i in range(2000)], epochs
            epochs += 1
            assert time.monotonic() < deadline, df.worker_count_history()
        for _ in range(2):                         # whichever count it keeps or tries now
            assert [dp[0] for dp in df] == list(range(2000))
    tried = [c for c in df.worker_count_history() if c.workers == 0]
    assert tried[0].reason.startswith("inline: try the consumer's thread:")
    assert df.worker_stats()[0]["send_seconds"] > 0


def test_min_workers_1_keeps_a_process_map_in_its_workers():
    df = MultiProcessMapData(Indexed(1500), Autoscale(interval=0.005, settle_intervals=0, min_workers=1, cpu_budget=2),
                             megabyte, strict=True, ordered=True, buffer_size="auto")
    df.reset_state()
    with df:
        assert df._controller._inline is None
        for _ in range(2):
            assert [dp[0] for dp in df] == list(range(1500))
        assert df._controller.decisions > 20
    assert min(c.workers for c in df.worker_count_history()) >= 1


def test_the_default_least_count_is_1_and_0_only_through_a_process_maps_moves():
    default = Autoscale()
    assert default.min_workers is None and default.least() == 1 and "min_workers=None" in repr(default)
    assert default.may_map_inline("processes") and not default.may_map_inline("threads")
    assert not default.may_map_inline("actors")
    assert not Autoscale(min_workers=1).may_map_inline("processes")
    assert Autoscale(min_workers=0).may_map_inline("threads") and Autoscale(min_workers=0).least() == 0
    assert Autoscale(min_workers=2).least() == 2
    with pytest.raises(ValueError, match=r"Autoscale: max_workers \(1\) is below min_workers \(2\)"):
        Autoscale(min_workers=2, max_workers=1)
    # the runners and Ray stages, which cannot map in their consumer's thread, take the default
    runner = MultiProcessRunnerZMQ(Indexed(10), "auto")
    assert runner.autoscaled


@pytest.mark.parametrize("least", [{"min_workers": 0}, {}], ids=["min_workers=0", "default"])
def test_a_thread_map_never_tries_0_by_itself(least):
    df = MultiThreadMapData(Indexed(1500), Autoscale(interval=0.005, settle_intervals=0, cpu_budget=2, **least),
                            megabyte, strict=True, ordered=True, buffer_size="auto")
    df.reset_state()
    with df:
        for _ in range(2):
            assert [dp[0] for dp in df] == list(range(1500))
        assert df._controller.decisions > 20
    assert 0 not in [c.workers for c in df.worker_count_history()]


def test_a_pool_resized_directly_while_the_consumer_maps_keeps_epochs_exact():
    rng = random.Random(5)
    df = MultiProcessMapData(Indexed(300), 2, with_array, strict=True, ordered=True, buffer_size=12)
    df.reset_state()
    with df:
        for epoch in range(3):
            got = []
            for dp in df:
                got.append(dp[0])
                pool = df._pool
                draw = rng.random()
                if draw < 0.05:
                    df.set_num_workers(rng.choice([0, 0, 1, 3]))
                elif draw < 0.1:
                    pool.add_worker()                     # behind the scheduler's back: parked at 0 workers
                elif draw < 0.15 and pool.num > 1:
                    pool.retire_worker(rng.choice(pool.active_ranks))
            assert got == list(range(300)), epoch
        counts = [c.workers for c in df.worker_count_history()]
        assert 0 in counts and counts[-1] == df.num_workers
        assert df.num_workers + df._parked_workers() == df._pool.num


def test_the_consumers_cpu_clock_is_read_around_one_task_in_eight_and_the_rest_estimated(monkeypatch):
    """The thread's CPU clock is a system call: read for tasks 0, 8, 16..., the CPU of the others
    estimated from those tasks' CPU per busy second."""
    clocks = {"cpu": 0.0, "wall": 0.0, "reads": 0}

    def thread_time():
        clocks["reads"] += 1
        return clocks["cpu"]

    def work(payload, ticket):
        clocks["wall"] += 0.010
        clocks["cpu"] += 0.004           # 40 % of the busy time on the CPU
        return payload

    monkeypatch.setattr(inline_map, "_cpu_clock", thread_time)
    monkeypatch.setattr(inline_map, "_wall_clock", lambda: clocks["wall"])
    mapper = inline_map.InlineMapper("MultiProcessMapData", work)
    assert mapper.cpu_seconds == 0.0
    assert [mapper.map(i, [i, 0, 0, i]) for i in range(20)] == list(range(20))
    assert clocks["reads"] == 2 * 3 == 2 * len(range(0, 20, inline_map.CPU_SAMPLE_EVERY))
    assert mapper.items == 20 and mapper.busy_seconds == pytest.approx(0.2)
    assert mapper.cpu_seconds == pytest.approx(0.08)
