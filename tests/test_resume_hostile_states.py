"""Hostile or damaged resumable states, for every resumable flow of the package: a valid state,
mutated (wrong types, negative, huge and beyond-64-bit numbers, deep nesting, extra and missing
fields, another flow's state, repeated list items), is refused by ``set_state()`` with a
StateMismatchError naming the flow, quickly and without allocating, and the flow then continues
exactly as if ``set_state()`` had not been called (all or nothing)."""
import importlib
import json
import pkgutil
import time
import tracemalloc

import numpy as np
import pytest

import inputpipe
from inputpipe.dataflow import (
    AugmentImageComponent, AugmentImageComponents, AugmentImageCoordinates, BatchData, BatchDataByShape, CacheData,
    ConcatData, DataFromIterable, DataFromList, FakeData, FilterData, FixedSizeData, HDF5Serializer, ImageFromFile,
    JoinData, LMDBData, LMDBDataDecoder, LMDBSerializer, LocallyShuffleData, MapData, MapDataComponent,
    MultiProcessMapAndBatchData, MultiProcessMapData, MultiProcessRunner, MultiProcessRunnerZMQ, MultiThreadMapData,
    NumpySerializer, PrintData, RandomChooseData, RandomMixData, RepeatedData, RepeatedDataPoint, SelectComponent,
    StateMismatchError, SVMLightData, TestDataSpeed, TFRecordSerializer, dataset, imgaug, seeding,
)
from inputpipe.dataflow.base import DataFlow
from inputpipe.input_source.worker_feed import EpochMarked

from resume_helpers import SEED, canon, epochs, take

DEEP = 100_000            # levels of a nested list or dict (Python's recursion gives up near 1,000)
HUGE = 2 ** 53 + 1        # past every counter's bound
AFTER = 12                # datapoints compared after the refusals
MAX_SECONDS = 1.0         # of the refusing thread's CPU time (the wall clock of a busy machine says nothing)
MAX_BYTES = 2 << 20       # what one refused set_state may allocate at its peak (just over 1 MiB on Python 3.7)


def numbers(n=7, shuffle=True):
    return DataFromList([[i, "s%d" % i] for i in range(n)], shuffle=shuffle)


def shapes(n=13):
    return DataFromList([[np.zeros((i % 3 + 1,), "int32") + i, i] for i in range(n)], shuffle=True)


def images(n=6):
    rng = np.random.RandomState(0)
    return DataFromList([[rng.randint(0, 256, (8, 9, 3)).astype("uint8"), i] for i in range(n)])


def square(dp):
    return [dp[0] * dp[0], dp[1]]


def _saved(serializer, tmp_path, name, **kwargs):
    path = str(tmp_path / name)
    serializer.save(DataFromList([[np.arange(3, dtype="int32") + i, i] for i in range(6)], shuffle=False), path,
                    **kwargs)
    return path


def _svm(tmp_path):
    path = tmp_path / "d.svm"
    path.write_text("".join("{} 1:{} 3:{}\n".format(i % 2, i, i * 2) for i in range(6)))
    return str(path)


def _reader(maker, build):
    def make_case(tmp_path):
        import test_dataset_readers as files
        made = getattr(files, maker)(str(tmp_path / maker))
        return lambda: build(made)
    return make_case


# name -> (tmp_path -> factory, cut): the factory builds the flow (made under the same global seed
# each time), the cut is how many datapoints a run takes before its state is saved.
CASES = {
    "DataFromList": (lambda t: lambda: numbers(), 9),
    "DataFromIterable": (lambda t: lambda: DataFromIterable([[i] for i in range(5)]), 3),
    "FakeData": (lambda t: lambda: FakeData([[2], [1]], size=5, dtype=["float32", "int64"]), 7),
    "LMDBSerializer.load": (lambda t: (lambda p=_saved(LMDBSerializer, t, "d.lmdb"):
                                       LMDBSerializer.load(p, shuffle=True)), 4),
    "LMDBData+LMDBDataDecoder": (lambda t: (lambda p=_saved(LMDBSerializer, t, "e.lmdb"): LMDBDataDecoder(
        LMDBData(p, shuffle=True), lambda k, v: [bytes(k), len(v)])), 8),
    "TFRecordSerializer.load": (lambda t: (lambda p=_saved(TFRecordSerializer, t, "d.tfrecord"):
                                           TFRecordSerializer.load(p)), 3),
    "NumpySerializer.load": (lambda t: (lambda p=_saved(NumpySerializer, t, "d.npy"):
                                        NumpySerializer.load(p, shuffle=True)), 4),
    "HDF5Serializer.load": (lambda t: (lambda p=_saved(HDF5Serializer, t, "d.h5", data_paths=["x", "y"]):
                                       HDF5Serializer.load(p, ["x", "y"], shuffle=True)), 4),
    "SVMLightData": (lambda t: (lambda p=_svm(t): SVMLightData(p, shuffle=True)), 8),
    "ImageFromFile": (lambda t: (lambda files=__import__("test_image_components").make_image_files(str(t)):
                                 ImageFromFile(files, shuffle=True)), 3),
    "Mnist": (_reader("make_mnist", lambda d: dataset.Mnist("train", dir=d)), 3),
    "Cifar10": (_reader("make_cifar", lambda d: dataset.Cifar10("test", shuffle=True, dir=d)), 2),
    "SVHNDigit": (_reader("make_svhn", lambda d: dataset.SVHNDigit("test", data_dir=d)), 2),
    "MapData": (lambda t: lambda: MapData(numbers(), lambda dp: None if dp[0] == 3 else dp), 4),
    "MapDataComponent": (lambda t: lambda: MapDataComponent(numbers(), lambda x: x + 100, 0), 4),
    "FilterData": (lambda t: lambda: FilterData(numbers(), lambda dp: dp[0] % 2), 2),
    "SelectComponent": (lambda t: lambda: SelectComponent(numbers(), [1, 0]), 4),
    "PrintData": (lambda t: lambda: PrintData(numbers(), num=0), 4),
    "TestDataSpeed": (lambda t: lambda: TestDataSpeed(numbers(), size=3), 2),
    "AugmentImageComponent": (lambda t: lambda: AugmentImageComponent(images(), [imgaug.Flip(horiz=True)]), 4),
    "AugmentImageComponents": (lambda t: lambda: AugmentImageComponents(
        DataFromList([[np.full((4, 5, 3), i, "uint8"), np.full((4, 5), i, "uint8")] for i in range(5)]),
        [imgaug.Flip(vert=True)], index=(0, 1)), 3),
    "AugmentImageCoordinates": (lambda t: lambda: AugmentImageCoordinates(
        DataFromList([[np.full((4, 5, 3), i, "uint8"), np.array([[1.0, 2.0]], "float32")] for i in range(5)]),
        [imgaug.Flip(horiz=True)]), 3),
    "FixedSizeData": (lambda t: lambda: FixedSizeData(numbers(), 5), 6),
    "RepeatedData": (lambda t: lambda: RepeatedData(numbers(), 3), 9),
    "RepeatedDataPoint": (lambda t: lambda: RepeatedDataPoint(numbers(), 3), 4),
    "LocallyShuffleData": (lambda t: lambda: LocallyShuffleData(numbers(30), 20, num_reuse=2, shuffle_interval=3), 25),
    "CacheData": (lambda t: lambda: CacheData(numbers(), shuffle=True), 9),
    "CacheData(filling)": (lambda t: lambda: CacheData(numbers(), shuffle=True), 3),
    "BatchData": (lambda t: lambda: BatchData(numbers(10), 3, remainder=True), 4),
    "BatchDataByShape": (lambda t: lambda: BatchDataByShape(shapes(), 3, 0), 2),
    "ConcatData": (lambda t: lambda: ConcatData([numbers(3), numbers(4, False), numbers(2)]), 5),
    "JoinData": (lambda t: lambda: JoinData([numbers(5), numbers(5, False)]), 3),
    "RandomMixData": (lambda t: lambda: RandomMixData([numbers(5), numbers(7, False)]), 5),
    "RandomChooseData": (lambda t: lambda: RandomChooseData([(numbers(5), 0.3), (numbers(400, False), 0.7)]), 6),
    "MultiThreadMapData": (lambda t: lambda: MultiThreadMapData(numbers(23), 1, square, strict=True, ordered=False,
                                                                buffer_size=6), 7),
    "MultiProcessMapData": (lambda t: lambda: MultiProcessMapData(numbers(23), 2, square, strict=True, ordered=True,
                                                                  buffer_size=5), 7),
    "MultiProcessMapAndBatchData": (lambda t: lambda: MultiProcessMapAndBatchData(
        DataFromList([[np.int64(i)] for i in range(20)]), 1, lambda dp: dp, batch_size=3, strict=True), 2),
    "MultiProcessRunnerZMQ": (lambda t: lambda: MultiProcessRunnerZMQ(numbers(9), num_proc=1, hwm=4), 5),
    "MultiProcessRunner": (lambda t: lambda: MultiProcessRunner(BatchData(numbers(9), 2), num_prefetch=4,
                                                                num_proc=1), 2),
    "EpochMarked": (lambda t: lambda: EpochMarked(numbers(5), b"token123"), 3),
}

# Classes that run the same state code as a class built above (they add no get_state/set_state/
# _check_state of their own): the readers share IndexedSource's, the Ray maps _ParallelMapBase's
# (starting Ray for them would cost seconds; tests/test_resume_parallel_ray.py restores them).
SHARED_CODE = {"IndexedSource", "CifarBase", "_ParallelMapBase"}
_STATE_METHODS = ("get_state", "set_state", "_check_state")


def _import_everything():
    for module in pkgutil.walk_packages(inputpipe.__path__, "inputpipe."):
        if module.name.split(".")[-1] in ("__main__",):
            continue
        importlib.import_module(module.name)


def resumable_classes():
    """Every DataFlow class of the package whose instances implement get_state()."""
    _import_everything()
    found, todo = {}, [DataFlow]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("inputpipe.") and sub.get_state is not DataFlow.get_state:
                found[sub.__qualname__] = sub
    return found


def _state_code(cls):
    return tuple(getattr(cls, name) for name in _STATE_METHODS)


def test_every_resumable_flow_class_has_a_hostile_state_case(tmp_path):
    classes = resumable_classes()
    assert {"LocallyShuffleData", "ConcatData", "MultiProcessRunnerZMQ", "EpochMarked", "RayMapData",
            "_TFRecordFile", "Mnist"} <= set(classes)
    built = {}
    for name, (make_case, _) in CASES.items():
        directory = tmp_path / name.replace("+", "_")
        directory.mkdir()
        flow = make_case(directory)()
        built[type(flow).__qualname__] = type(flow)
        inner = getattr(flow, "ds", None)
        if inner is not None:
            built[type(inner).__qualname__] = type(inner)
        if hasattr(flow, "close"):
            flow.close()
    codes = {_state_code(cls) for cls in built.values()}
    missing = sorted(name for name, cls in classes.items()
                     if name not in built and name not in SHARED_CODE and _state_code(cls) not in codes)
    assert missing == []


# ------------------------------------------------------------------------------- mutations

def _nested_list():
    value = [1]
    for _ in range(DEEP):
        value = [value]
    return value


def _nested_state():
    value = {"type": "DataFromList"}
    for _ in range(DEEP):
        value = {"type": "MapData", "input": value}
    return value


DEEP_LIST, DEEP_STATE = _nested_list(), _nested_state()     # built once, shared by the mutations


OTHER_STATES = [{"type": "DataFromList", "epoch": 0, "position": 0, "size": 3, "seed": 5},
                {"type": "FakeData", "epoch": 0, "position": 0, "seed": 5}]
OPTIONAL = {("MultiProcessRunnerZMQ", "count"), ("MultiProcessRunner", "count")}


def _replaced(state, path, value):
    """A copy of ``state`` (shared where untouched) with the value at ``path`` replaced."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    copy = list(state) if isinstance(state, list) else dict(state)
    copy[head] = _replaced(state[head], rest, value)
    return copy


def _owner(state, path):
    """The type of the deepest flow state above the value at ``path`` (the one whose field it is)."""
    owner, node = state["type"], state
    for key in path[:-1]:
        node = node[key]
        if isinstance(node, dict) and isinstance(node.get("type"), str):
            owner = node["type"]
    return owner


def _values_for(value, key):
    if isinstance(value, bool):
        return [1, "yes", None]
    if isinstance(value, int):
        return ["7", 7.5, True, [value], -1, HUGE, 2 ** 63, -(2 ** 63) - 1, 10 ** 30, DEEP_LIST]
    if value is None:
        return ["x", 7.5, True, -1, 2 ** 63, DEEP_LIST]
    if isinstance(value, str):
        return [7, None] + (["NotThisFlow"] if key == "type" else [])
    if isinstance(value, list):
        extra = [value + [value[-1]], value + ["x"]] if value else [["x"], [-1]]
        return [{}, "x", None, DEEP_LIST] + extra
    if isinstance(value, dict):
        other = OTHER_STATES[1] if value.get("type") == "DataFromList" else OTHER_STATES[0]
        return [[], "x", None, {}, {"type": value.get("type")}, other, DEEP_STATE]
    raise AssertionError("unexpected value in a state: {!r}".format(value))


def mutations(state):
    """(description, type of the flow whose state is changed, mutated state) for every hostile
    change of ``state``: each value replaced, each field removed, an extra field added."""
    out = []

    def walk(path, node):
        other = OTHER_STATES[1] if state["type"] == "DataFromList" else OTHER_STATES[0]
        values = _values_for(node, path[-1]) if path else [[], "x", None, other, DEEP_STATE]
        for value in values:
            out.append(("{} = {}".format(list(path), _describe(value)), _owner(state, path),
                        _replaced(state, path, value)))
        if isinstance(node, dict):
            own = node["type"]
            for key in node:
                if key != "type" and (own, key) not in OPTIONAL:
                    missing = {k: v for k, v in node.items() if k != key}
                    out.append(("{} without {!r}".format(list(path), key), own, _replaced(state, path, missing)))
            out.append(("{} with an extra field".format(list(path)), own, _replaced(state, path, dict(node, bogus=1))))
            out.append(("{} with a deep extra field".format(list(path)), own,
                        _replaced(state, path, dict(node, bogus=DEEP_STATE))))
            for key in node:
                walk(path + (key,), node[key])
        elif isinstance(node, list):
            for k in sorted({0, len(node) - 1}) if node else ():
                walk(path + (k,), node[k])

    walk((), state)
    return out


def _describe(value):
    if isinstance(value, list) and value and isinstance(value[0], list):
        return "a deeply nested list"
    if isinstance(value, dict) and "input" in value and value.get("type") == "MapData":
        return "a deeply nested state"
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


# ------------------------------------------------------------------------------- the test

def _made(make):
    seeding.set_global_seed(SEED)
    try:
        flow = make()
        flow.reset_state()
    finally:
        seeding.set_global_seed(None)
    return flow


def _head(flow, count):
    seeding.set_global_seed(SEED)          # TestDataSpeed resets its input when iterated
    try:
        return [canon(dp) for dp in take(epochs(flow), count)]
    finally:
        seeding.set_global_seed(None)


def _close(flow):
    close = getattr(flow, "close", None)
    if close is not None:
        close()


def _refuse_all(flow, changes):
    """Every change is refused quickly, without a big allocation, naming the flow."""
    for what, owner, state in changes:
        tracemalloc.start()
        try:
            started = time.thread_time()        # CPU time: a verdict that a busy machine cannot change
            with pytest.raises(StateMismatchError) as refused:
                flow.set_state(state)
            elapsed = time.thread_time() - started
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        message = str(refused.value)
        assert owner in message and type(flow).__name__ in message, (what, message)
        assert elapsed < MAX_SECONDS, (what, elapsed)
        assert peak < MAX_BYTES, (what, peak)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_hostile_state_is_refused_quickly_and_changes_nothing(name, tmp_path):
    make_case, cut = CASES[name]
    make = make_case(tmp_path)
    donor = _made(make)
    try:
        itr = epochs(donor)
        take(itr, cut)
        state = json.loads(json.dumps(donor.get_state()))
        itr.close()
    finally:
        _close(donor)
    changes = mutations(state)
    assert len(changes) > 20
    flows = []
    try:
        # the references: a fresh flow, and one restored from the valid state
        fresh = _made(make)
        flows.append(fresh)
        fresh_head = _head(fresh, AFTER)
        restored = _made(make)
        flows.append(restored)
        restored.set_state(state)
        restored_head = _head(restored, AFTER)
        # the same after every hostile state was refused
        plain = _made(make)
        flows.append(plain)
        _refuse_all(plain, changes)
        assert _head(plain, AFTER) == fresh_head
        resumed = _made(make)
        flows.append(resumed)
        resumed.set_state(state)
        before = json.dumps(resumed.get_state(), sort_keys=True)
        assert json.loads(before) == state               # a restore not yet iterated is what get_state() says
        _refuse_all(resumed, changes)
        assert json.dumps(resumed.get_state(), sort_keys=True) == before
        assert _head(resumed, AFTER) == restored_head
    finally:
        for flow in flows:
            _close(flow)


# ------------------------------------------------------------------------------- the named cases

def _ready(flow):
    flow.reset_state()
    return flow


@pytest.mark.timeout(20)
def test_a_locally_shuffle_state_claiming_a_billion_entries_is_refused_without_allocating():
    df = _ready(LocallyShuffleData(numbers(50), 10))
    itr = epochs(df)
    take(itr, 15)
    state = json.loads(json.dumps(df.get_state()))
    itr.close()
    billion = dict(state, entries=10 ** 9, tail_from=0, shuffled=[], dropped=0)        # the buffer's numbers
    replay = dict(state, entries=10 ** 9 + state["entries"], anchor_entry=0,          # a replay of 10**9
                  shuffled=[e + 10 ** 9 for e in state["shuffled"]], tail_from=state["tail_from"] + 10 ** 9)
    huge_list = dict(state, shuffled=list(range(10 ** 6)))
    for hostile, message in [(billion, r"the state's buffer .* does not hold min\(entries, buffer_size\) = min\(1000000000, 10\)"),
                             (replay, "anchor_entry 0 does not fit"),
                             (huge_list, "field 'shuffled' must list at most buffer_size=10 entry numbers, got a list of 1000000")]:
        fresh = _ready(LocallyShuffleData(numbers(50), 10))
        tracemalloc.start()
        try:
            started = time.perf_counter()
            with pytest.raises(StateMismatchError, match="LocallyShuffleData.set_state: " + message):
                fresh.set_state(hostile)
            assert time.perf_counter() - started < 0.5
            assert tracemalloc.get_traced_memory()[1] < 100_000
        finally:
            tracemalloc.stop()


@pytest.mark.parametrize("make", [
    lambda: ConcatData([numbers(4, False), numbers(3, False)]),
    lambda: JoinData([numbers(4, False), numbers(4, False)]),
    lambda: RandomMixData([numbers(4, False), numbers(3, False)]),
], ids=["ConcatData", "JoinData", "RandomMixData"])
def test_a_composite_refusing_its_second_inputs_state_leaves_the_first_input_alone(make):
    donor = _made(make)
    itr = epochs(donor)
    take(itr, 6)
    state = json.loads(json.dumps(donor.get_state()))
    itr.close()
    assert state["inputs"][0] != _made(make).get_state()["inputs"][0]      # a restore would move the first input
    state["inputs"][1]["position"] = 99                     # the second input's state is damaged
    df = _made(make)
    with pytest.raises(StateMismatchError, match=r"\[1\] > DataFromList.set_state: the state is of \d datapoints "
                                                 "at position 99"):
        df.set_state(state)
    assert df.get_state() == _made(make).get_state()          # the first input was not restored either
    assert [canon(dp) for dp in df] == [canon(dp) for dp in _made(make)]     # the epoch starts at its beginning


def test_a_state_nested_100000_deep_is_refused_not_a_recursion_error():
    df = _ready(BatchData(MapData(numbers(6), lambda dp: dp), 2))
    nested = {"type": "BatchData", "ended": False, "input": DEEP_STATE}
    with pytest.raises(StateMismatchError, match=r"BatchData > MapData > DataFromList.set_state: expected a state of "
                                                 r"DataFromList .* got a state of MapData \(keys \['type', 'input'\]\)"):
        df.set_state(nested)
    mine = MultiProcessRunnerZMQ(numbers(6), num_proc=1)
    mine.reset_state()
    with mine:
        with pytest.raises(StateMismatchError, match="MultiProcessRunnerZMQ > DataFromList.set_state: the state nests "
                                                     r"deeper than 200 levels \(in DataFromList > MapData > MapData"):
            mine.set_state({"type": "MultiProcessRunnerZMQ", "input": dict(DEEP_STATE, type="DataFromList")})
        assert sorted(dp[0] for dp in mine) == list(range(6))


@pytest.mark.parametrize("value", [2 ** 63, 2 ** 64 + 1, -(2 ** 63) - 1, 10 ** 100])
def test_ints_beyond_64_bits_are_refused_when_set_not_later(value):
    df = _ready(RepeatedData(numbers(4, False), -1))
    with pytest.raises(StateMismatchError, match="RepeatedData.set_state: field 'count' must be int, got"):
        df.set_state({"type": "RepeatedData", "count": value,
                      "input": {"type": "DataFromList", "epoch": 0, "position": 0, "size": 4, "seed": None}})
    with pytest.raises(StateMismatchError, match="RepeatedData > DataFromList.set_state: field 'epoch' must be int"):
        df.set_state({"type": "RepeatedData", "count": 0,
                      "input": {"type": "DataFromList", "epoch": value, "position": 0, "size": 4, "seed": None}})
    assert [dp[0] for dp in take(iter(df), 5)] == [0, 1, 2, 3, 0]


def test_a_flow_of_your_own_in_a_chain_is_restored_before_the_library_flows_and_its_refusal_changes_nothing():
    class Counter(DataFlow):
        def __init__(self):
            self.start = 0

        def __iter__(self):
            for i in range(self.start, 5):
                yield [i]

        def get_state(self):
            return {"type": "Counter", "start": self.start}

        def set_state(self, state):
            if not isinstance(state.get("start"), int) or not 0 <= state["start"] <= 5:
                raise StateMismatchError("Counter.set_state: start must be in 0..5, got {!r}".format(state.get("start")))
            self.start = state["start"]

    df = _ready(ConcatData([numbers(3, False), Counter()]))
    good = {"type": "ConcatData", "index": 1, "inputs": [
        {"type": "DataFromList", "epoch": 1, "position": 0, "size": 3, "seed": None}, {"type": "Counter", "start": 2}]}
    with pytest.raises(StateMismatchError, match="Counter.set_state: start must be in 0..5, got 9"):
        df.set_state(dict(good, inputs=[good["inputs"][0], {"type": "Counter", "start": 9}]))
    with pytest.raises(StateMismatchError, match="ConcatData\\[1\\] > Counter.set_state: the state holds an int of more "
                                                 "than 64 bits"):
        df.set_state(dict(good, inputs=[good["inputs"][0], {"type": "Counter", "start": 2 ** 70}]))
    assert [dp[0] for dp in df] == [0, 1, 2, 0, 1, 2, 3, 4]
    df.set_state(good)
    assert [dp[0] for dp in df] == [2, 3, 4]
