"""Resumable parallel flows: strict thread/process maps (ordered and unordered), map-and-batch,
and the one-worker process runner. A run is cut after k datapoints, its state goes through JSON
into a fresh flow with ANOTHER number of workers (under another global seed: every random choice
must come from the state), and the continuation must equal the uninterrupted run's."""
import json
from collections import Counter

import numpy as np
import pytest

from inputpipe.dataflow import (BatchData, DataFromList, MultiProcessMapAndBatchData, MultiProcessMapData,
                                MultiProcessRunnerZMQ, MultiThreadMapData, NotResumableError, StateMismatchError,
                                is_resumable, seeding)
from inputpipe.dataflow.base import DataFlow

from resume_helpers import OTHER_SEED, SEED, canon, epochs, take

N = 23                    # source datapoints per epoch
DROPPED = {3, 10, 17}     # mapped to None: an epoch yields 20


def random_map(dp):
    """Drops a few datapoints; draws from the datapoint's RNG and from numpy's global RNG."""
    i = dp[0]
    if i in DROPPED:
        return None
    return [i, int(seeding.datapoint_rng().randint(10 ** 6)), int(np.random.randint(10 ** 6))]


def random_map_threads(dp):
    """As random_map without numpy's global RNG (threads share it: it is not reseeded there)."""
    i = dp[0]
    if i in DROPPED:
        return None
    return [i, int(seeding.datapoint_rng().randint(10 ** 6))]


def draw(dp):
    return [dp[0], int(seeding.datapoint_rng().randint(10 ** 6))]


def source():
    return DataFromList([[i] for i in range(N)], shuffle=True)


def make_map(kind, ordered, batch=None):
    def make(workers):
        if kind == "threads":
            return MultiThreadMapData(source(), workers, random_map_threads, strict=True, ordered=ordered,
                                      buffer_size=5)
        if batch:
            return MultiProcessMapAndBatchData(source(), workers, random_map, batch_size=batch, buffer_size=2 * batch,
                                               strict=True, ordered=ordered)
        return MultiProcessMapData(source(), workers, random_map, strict=True, ordered=ordered, buffer_size=5)
    return make


def reference_epochs(make, workers, count):
    """The uninterrupted run: its first ``count`` epochs, each a list of canonical datapoints."""
    seeding.set_global_seed(SEED)
    df = make(workers)
    df.reset_state()
    with df:
        return [[canon(dp) for dp in df] for _ in range(count)]


def cut_and_resume(make, save_workers, restore_workers, cut, after):
    """``(head, state text, rest)``: ``cut`` datapoints of one run, its state, then ``after``
    datapoints of a fresh flow restored from it."""
    seeding.set_global_seed(SEED)
    first = make(save_workers)
    first.reset_state()
    with first:
        itr = epochs(first)
        head = [canon(dp) for dp in take(itr, cut)]
        text = json.dumps(first.get_state())
        itr.close()
    seeding.set_global_seed(OTHER_SEED)
    second = make(restore_workers)
    second.reset_state()
    second.set_state(json.loads(text))
    with second:
        itr = epochs(second)
        rest = [canon(dp) for dp in take(itr, after)]
        itr.close()
    return head, text, rest


@pytest.fixture(autouse=True)
def no_global_seed():
    yield
    seeding.set_global_seed(None)


def _split(stream, lengths):
    out, start = [], 0
    for length in lengths:
        out.append(stream[start:start + length])
        start += length
    return out


def _key(dp):
    return json.dumps(dp, sort_keys=True)


@pytest.mark.timeout(100)
@pytest.mark.parametrize("kind", ["threads", "processes"])
@pytest.mark.parametrize("save_workers,restore_workers", [(1, 2), (2, 1), (2, 3)])
def test_ordered_map_resumes_exactly_with_any_number_of_workers(kind, save_workers, restore_workers):
    make = make_map(kind, ordered=True)
    full = [dp for epoch in reference_epochs(make, 1, 4) for dp in epoch]
    assert len(full) == 80
    # mid-epoch, the first and last datapoint of an epoch, just after it, two epochs on
    for cut in (0, 1, 6, 19, 20, 21, 37):
        head, text, rest = cut_and_resume(make, save_workers, restore_workers, cut, 80 - cut)
        assert head == full[:cut]
        assert len(text) < 4096
        assert rest == full[cut:], "continuation differs after cut {}".format(cut)


@pytest.mark.timeout(100)
@pytest.mark.parametrize("kind", ["threads", "processes"])
@pytest.mark.parametrize("save_workers,restore_workers", [(1, 2), (2, 1), (2, 2)])
def test_unordered_map_resumes_each_datapoint_once(kind, save_workers, restore_workers):
    make = make_map(kind, ordered=False)
    reference = reference_epochs(make, 2, 3)
    assert [len(epoch) for epoch in reference] == [20, 20, 20]
    for cut in (0, 1, 7, 20, 26):
        head, text, rest = cut_and_resume(make, save_workers, restore_workers, cut, 60 - cut)
        assert len(text) < 4096
        got = _split(head + rest, [20, 20, 20])
        for number, (epoch, expected) in enumerate(zip(got, reference)):
            counts = Counter(_key(dp) for dp in epoch)
            assert max(counts.values()) == 1, "a datapoint twice in epoch {} after cut {}".format(number, cut)
            assert counts == Counter(_key(dp) for dp in expected), "epoch {} after cut {}".format(number, cut)


def test_unordered_state_names_the_datapoints_yielded_beyond_the_watermark():
    # a slow first datapoint: the others overtake it, so they are "done" beyond index 0
    seeding.set_global_seed(SEED)
    df = MultiThreadMapData(DataFromList([[i] for i in range(10)], shuffle=False), 2, slow_first, strict=True,
                            ordered=False, buffer_size=4)
    df.reset_state()
    with df:
        itr = iter(df)
        got = [next(itr)[0] for _ in range(2)]
        state = df.get_state()
        itr.close()
    assert 0 not in got
    assert state["index"] == 0 and sorted(state["done"]) == sorted(got)
    assert state["input"]["position"] == 0      # the source's state before datapoint 0
    restored = MultiThreadMapData(DataFromList([[i] for i in range(10)], shuffle=False), 1, slow_first, strict=True,
                                  ordered=False, buffer_size=4)
    restored.reset_state()
    restored.set_state(json.loads(json.dumps(state)))
    with restored:
        rest = [dp[0] for dp in restored]
    assert sorted(rest + got) == list(range(10))


def slow_first(dp):
    if dp[0] == 0:
        import time
        time.sleep(0.3)
    return dp


@pytest.mark.timeout(100)
@pytest.mark.parametrize("save_workers,restore_workers", [(1, 2), (2, 1)])
def test_map_and_batch_resumes_with_in_flight_batches_and_the_dropped_remainder(save_workers, restore_workers):
    make = make_map("processes", ordered=True, batch=4)
    reference = reference_epochs(make, 1, 3)
    assert [len(epoch) for epoch in reference] == [5, 5, 5]      # 23 // 4 batches, 3 datapoints left out
    full = [dp for epoch in reference for dp in epoch]
    for cut in (0, 2, 5, 6, 9):
        head, text, rest = cut_and_resume(make, save_workers, restore_workers, cut, 15 - cut)
        assert head == full[:cut] and len(text) < 4096
        assert rest == full[cut:], "continuation differs after cut {}".format(cut)


@pytest.mark.timeout(60)
def test_map_and_batch_seeds_each_datapoint_as_the_map_does():
    # the same datapoint gets the same seed whether it is mapped alone or in a batch
    seeding.set_global_seed(SEED)
    batched = MultiProcessMapAndBatchData(DataFromList([[i] for i in range(12)], shuffle=False), 2, draw,
                                          batch_size=4, strict=True, ordered=True)
    batched.reset_state()
    with batched:
        got = [canon(dp) for dp in batched]
    seeding.set_global_seed(SEED)
    mapped = MultiProcessMapData(DataFromList([[i] for i in range(12)], shuffle=False), 2, draw,
                                 strict=True, ordered=True)
    df = BatchData(mapped, 4)
    df.reset_state()
    with mapped:
        expected = [canon(dp) for dp in df]
    assert got == expected
    # two datapoints of one batch drew different numbers
    assert got[0][1][3][0] != got[0][1][3][1]


@pytest.mark.timeout(60)
def test_state_at_the_end_of_an_epoch_and_after_it():
    seeding.set_global_seed(SEED)
    df = MultiProcessMapData(DataFromList([[i] for i in range(5)], shuffle=False), 2, draw,
                             strict=True, ordered=True, buffer_size=3)
    df.reset_state()
    with df:
        assert df.get_state()["epoch"] == 0 and df.get_state()["index"] == 0
        itr = iter(df)
        first = [next(itr) for _ in range(5)]
        at_last = df.get_state()
        assert (at_last["epoch"], at_last["index"], at_last["done"]) == (0, 5, [])
        assert list(itr) == []
        after = df.get_state()
        assert (after["epoch"], after["index"]) == (1, 0)
        assert after["input"]["epoch"] == 1 and after["input"]["position"] == 0
        second = list(df)
    assert [dp[0] for dp in first] == [dp[0] for dp in second] == list(range(5))
    assert [dp[1] for dp in first] != [dp[1] for dp in second]       # epoch 1 has its own seeds
    assert len(json.dumps(at_last)) < 4096


@pytest.mark.timeout(60)
def test_abandoned_epoch_starts_the_next_and_state_follows():
    seeding.set_global_seed(SEED)
    df = MultiThreadMapData(DataFromList([[i] for i in range(8)], shuffle=False), 2, draw, strict=True,
                            ordered=True, buffer_size=4)
    df.reset_state()
    with df:
        itr = iter(df)
        next(itr)
        itr.close()
        assert [dp[0] for dp in df] == list(range(8))
        assert df.get_state()["epoch"] == 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapData])
def test_non_strict_maps_are_not_resumable_and_say_what_to_use(cls):
    df = cls(source(), 2, random_map_threads, strict=False)
    assert not is_resumable(df)
    with pytest.raises(NotResumableError, match=r"{}\(strict=False\) is not resumable.*use strict=True".format(
            cls.__name__)):
        df.check_resumable()
    df.reset_state()
    with df:
        with pytest.raises(NotResumableError, match="strict=True"):
            df.get_state()
        with pytest.raises(NotResumableError, match="strict=True"):
            df.set_state({"type": cls.__name__})
    assert is_resumable(cls(source(), 2, random_map_threads, strict=True))


class Unresumable(DataFlow):
    def __len__(self):
        return 3

    def __iter__(self):
        yield from ([i] for i in range(3))


@pytest.mark.timeout(60)
def test_a_strict_map_of_an_unresumable_source_names_the_source_and_still_iterates():
    df = MultiThreadMapData(Unresumable(), 2, random_map_threads, strict=True, ordered=True)
    assert not is_resumable(df)
    df.reset_state()
    with df:
        assert [dp[0] for dp in df] == [0, 1, 2]
        with pytest.raises(NotResumableError, match="Unresumable is not resumable"):
            df.get_state()


@pytest.mark.timeout(60)
def test_set_state_refuses_other_states_with_a_clear_error():
    seeding.set_global_seed(SEED)
    df = MultiThreadMapData(source(), 1, random_map_threads, strict=True, ordered=True)
    other = MultiThreadMapData(source(), 1, random_map_threads, strict=True, ordered=False)
    df.reset_state()
    other.reset_state()
    with df, other:
        with pytest.raises(StateMismatchError, match="expected a state of MultiThreadMapData.*got a state of "
                                                     "DataFromList"):
            df.set_state(source().get_state() if False else {"type": "DataFromList", "epoch": 0})
        state = other.get_state()
        state["index"], state["done"] = 2, [4]
        with pytest.raises(StateMismatchError, match="state is of an unordered map"):
            df.set_state(state)
        state["done"] = [1]
        with pytest.raises(StateMismatchError, match="done a list of ints greater than index"):
            df.set_state(state)
        del state["seed"]
        with pytest.raises(StateMismatchError, match="no field 'seed'"):
            df.set_state(state)


# ------------------------------------------------------------------------------- the runner

def runner(workers=1):
    return MultiProcessRunnerZMQ(source(), num_proc=workers, hwm=4)


@pytest.mark.timeout(100)
def test_one_worker_runner_forwards_its_copys_state_and_resumes_exactly():
    seeding.set_global_seed(SEED)
    reference = runner()
    reference.reset_state()
    with reference:
        full = [canon(dp) for dp in take(epochs(reference), 3 * N)]
    for cut in (0, 1, 9, N - 1, N, N + 5):
        head, text, rest = cut_and_resume(lambda _: runner(), 1, 1, cut, 3 * N - cut)
        assert head == full[:cut]
        state = json.loads(text)
        assert state["type"] == "MultiProcessRunnerZMQ" and state["input"]["type"] == "DataFromList"
        assert state["count"] == (cut if cut <= N else cut - N) and len(text) < 4096
        assert rest == full[cut:], "continuation differs after cut {}".format(cut)
    assert sorted(dp[0] for dp in full[:N]) == list(range(N))


@pytest.mark.timeout(60)
def test_runner_set_state_drops_what_the_worker_had_prefetched():
    seeding.set_global_seed(SEED)
    df = runner()
    df.reset_state()
    with df:
        initial = df.get_state()
        itr = iter(df)
        first = [next(itr)[0] for _ in range(6)]     # the worker has prefetched more by now
        itr.close()
        df.set_state(initial)
        again = [dp[0] for dp in take(iter(df), 6)]
        assert df.get_state()["input"]["position"] == 6
    assert again == first


@pytest.mark.timeout(60)
def test_runner_state_without_a_count_starts_a_fresh_runner_epoch():
    # what QueueInput(in_worker=True) sends: only "type" and "input"
    seeding.set_global_seed(SEED)
    df = runner()
    df.reset_state()
    with df:
        state = df.get_state()
        state["input"]["position"] = N - 2
        df.set_state({"type": "MultiProcessRunnerZMQ", "input": state["input"]})
        got = [dp[0] for dp in df]
    assert len(got) == N                     # the last 2 of this epoch, then the worker's next epoch
    assert len(set(got[:2])) == 2 and len(set(got[2:])) == N - 2


@pytest.mark.timeout(60)
def test_runner_with_several_workers_is_not_resumable_and_says_what_to_use():
    df = runner(2)
    assert not is_resumable(df)
    with pytest.raises(NotResumableError, match=r"MultiProcessRunnerZMQ\(num_proc=2\) is not resumable.*"
                                                r"independent copies of DataFromList.*num_proc=1.*strict=True"):
        df.get_state()
    assert is_resumable(runner(1))
    assert not is_resumable(MultiProcessRunnerZMQ(Unresumable(), num_proc=1))
