"""The resumable-state API: NotResumableError / StateMismatchError, is_resumable, check_state, the
reasons given for flows that cannot resume, and derive_seed's stability."""
import json
import queue

import pytest

from inputpipe.dataflow import (
    BatchData, ConcatData, DataFlow, DataFromGenerator, DataFromIterable, DataFromList, DataFromQueue, FakeData,
    MapData, NotResumableError, ProxyDataFlow, RemoteDataZMQ, RepeatedData, StateMismatchError, is_resumable,
    seeding,
)
from inputpipe.dataflow.base import check_state


class UserProxy(ProxyDataFlow):
    def __iter__(self):
        for dp in self.ds:
            yield dp
            yield dp


class MapTwice(MapData):
    def __iter__(self):
        for dp in super().__iter__():
            yield dp
            yield dp


class NamedList(DataFromList):
    pass


class UserFlow(DataFlow):
    """A user's own flow without get_state/set_state."""

    def __iter__(self):
        yield [1]


def ready(df):
    df.reset_state()
    return df


def test_error_classes_are_the_documented_builtins():
    assert issubclass(NotResumableError, TypeError) and issubclass(StateMismatchError, ValueError)


@pytest.mark.parametrize("make, reason", [
    (lambda: DataFromGenerator(lambda: iter([[1]])), "DataFromGenerator is not resumable: a generator cannot"),
    (lambda: DataFromIterable(iter([[1]])), "DataFromIterable is not resumable over a list_iterator: only a sequence"),
    (lambda: DataFromIterable({1, 2}), "DataFromIterable is not resumable over a set"),
    (lambda: DataFromQueue(queue.Queue()), "DataFromQueue is not resumable: datapoints taken from a queue are gone"),
    (lambda: RemoteDataZMQ("tcp://127.0.0.1:1"), "RemoteDataZMQ is not resumable: datapoints taken from the socket"),
    (lambda: UserProxy(DataFromList([[1]])), r"UserProxy is not resumable: it does not implement get_state\(\)/set_state\(\)"),
    (lambda: MapTwice(DataFromList([[1]]), lambda dp: dp),
     r"MapTwice is not resumable: it overrides __iter__ of MapData but not get_state\(\)/set_state\(\)"),
])
def test_not_resumable_flows_say_why(make, reason):
    df = make()
    assert not is_resumable(df)
    with pytest.raises(NotResumableError, match=reason):
        df.check_resumable()
    with pytest.raises(NotResumableError, match=reason):
        df.get_state()
    with pytest.raises(NotResumableError, match=reason):
        df.set_state({"type": type(df).__name__})


def test_a_chain_over_a_non_resumable_source_reports_the_source():
    df = BatchData(MapData(DataFromGenerator(lambda: iter([[1]] * 4)), lambda dp: dp), 2)
    assert not is_resumable(df)
    with pytest.raises(NotResumableError, match="DataFromGenerator is not resumable"):
        df.check_resumable()
    ready(df)
    with pytest.raises(NotResumableError, match="DataFromGenerator is not resumable"):
        df.get_state()


def test_library_chains_and_plain_subclasses_are_resumable():
    assert is_resumable(BatchData(RepeatedData(ConcatData([DataFromList([[1]]), FakeData([[1]])]), 3), 2))
    assert is_resumable(NamedList([[1], [2]]))
    assert ready(NamedList([[1], [2]], shuffle=False)).get_state()["type"] == "NamedList"
    assert not is_resumable([1, 2]) and not is_resumable(UserFlow())
    with pytest.raises(NotResumableError, match=r"UserFlow is not resumable.*DataFromList instead of a generator"):
        UserFlow().get_state()


@pytest.mark.parametrize("make, state, message", [
    (lambda: FakeData([[1]]), {"type": "DataFromList", "epoch": 0, "position": 0, "size": 3, "seed": None},
     r"FakeData.set_state: expected a state of FakeData \(fields epoch \(int\), position \(int\), "
     r"seed \(int in 0..4294967295\)\), "
     r"got a state of DataFromList"),
    (lambda: DataFromList([[1], [2]], shuffle=False), {"type": "DataFromList", "epoch": 0, "position": 1, "size": 3,
                                                       "seed": None},
     "DataFromList.set_state: the state is of 3 datapoints at position 1, but this flow has 2"),
    (lambda: DataFromList([[1]]), {"type": "DataFromList", "epoch": 0, "position": 0, "size": 1, "seed": None},
     "DataFromList.set_state: shuffle=True needs a seed in the state, got None"),
    (lambda: DataFromList([[1]]), {"type": "DataFromList", "epoch": True, "position": 0, "size": 1, "seed": 1},
     "DataFromList.set_state: field 'epoch' must be int, got True"),
    (lambda: DataFromList([[1]]), {"type": "DataFromList", "epoch": 0, "size": 1, "seed": 1},
     "DataFromList.set_state: the state has no field 'position'"),
    (lambda: DataFromList([[1]]), "not a dict", "DataFromList.set_state: expected a state dict of DataFromList"),
    (lambda: MapData(DataFromList([[1]]), lambda dp: dp), {"type": "BatchData", "input": {}, "ended": False},
     "MapData.set_state: expected a state of MapData .* got a state of BatchData"),
    (lambda: ConcatData([DataFromList([[1]]), DataFromList([[2]])]),
     {"type": "ConcatData", "index": 0, "inputs": [{"type": "DataFromList"}]},
     r"ConcatData.set_state: expected a list of 2 input states \(one per input\), got 1 of them"),
    (lambda: BatchData(DataFromList([[1]] * 4, shuffle=False), 2), {"type": "BatchData", "ended": False,
                                                                     "input": {"type": "FakeData"}},
     "DataFromList.set_state: expected a state of DataFromList .* got a state of FakeData"),
])
def test_a_state_of_another_flow_is_refused(make, state, message):
    df = ready(make())
    with pytest.raises(StateMismatchError, match=message):
        df.set_state(state)


def test_check_state_returns_a_copy_of_a_valid_state():
    df = DataFromList([[1]])
    state = {"type": "DataFromList", "epoch": 1, "position": 0}
    got = check_state(df, state, {"epoch": int, "position": int})
    assert got == state and got is not state


def test_states_are_json_and_small():
    seeding.set_global_seed(3)
    try:
        df = ready(BatchData(RepeatedData(MapData(DataFromList([[i] for i in range(1000)]), lambda dp: dp), -1), 7))
    finally:
        seeding.set_global_seed(None)
    itr = iter(df)
    for _ in range(300):
        next(itr)
    text = json.dumps(df.get_state())
    assert len(text) < 400
    assert json.loads(text)["input"]["input"]["input"]["position"] == 300 * 7 - 1000 * 2
    itr.close()


def test_derive_seed_is_a_stable_hash():
    assert seeding.derive_seed(1, 2) == 3746169332
    assert seeding.derive_seed(-5) == 298507431
    assert seeding.derive_seed(1, 2) != seeding.derive_seed(2, 1)
    assert all(0 <= seeding.derive_seed(k, 7) < 2 ** 32 for k in range(100))
