"""Tests of the DataFlow transforms other than batching (see test_dataflow_batch.py)."""
import logging

import numpy as np
import pytest

from inputpipe.dataflow import (
    CacheData, ConcatData, DataFlow, DataFlowLengthUnknown, DataFromGenerator, DataFromList, FilterData,
    FixedSizeData, JoinData, LocallyShuffleData, MapData, MapDataComponent, PrintData, RandomChooseData,
    RandomMixData, RepeatedData, RepeatedDataPoint, SelectComponent, TestDataSpeed, get_length, seeding,
)


@pytest.fixture(autouse=True)
def reproducible_rngs():
    """Every RNG in these tests derives from one seed: the same data on every run."""
    seeding.set_global_seed(2024)
    yield
    seeding.set_global_seed(None)


def flow(items, shuffle=False):
    df = DataFromList(items, shuffle=shuffle)
    df.reset_state()
    return df


def ready(df):
    df.reset_state()
    return df


def unsized(n, start=0):
    """A flow of ``[start], [start + 1], ...`` (n datapoints) without a length."""
    return DataFromGenerator(lambda: ([i] for i in range(start, start + n)))


class CountingFlow(DataFlow):
    """A sized flow that records how many iterations were started and finished."""

    def __init__(self, n, claimed_len=None):
        self.n, self.claimed_len = n, claimed_len
        self.started = self.finished = 0

    def __len__(self):
        return self.n if self.claimed_len is None else self.claimed_len

    def __iter__(self):
        self.started += 1
        for i in range(self.n):
            yield [i]
        self.finished += 1


# --- MapData / MapDataComponent / FilterData / SelectComponent ---------------------------------

def test_map_data_maps_and_drops_none():
    df = ready(MapData(flow([[i] for i in range(5)]), lambda dp: None if dp[0] % 2 else [dp[0] * 10]))
    assert list(df) == [[0], [20], [40]]
    assert len(df) == 5  # the input's length, as in tensorpack


def test_map_data_gives_func_a_copy_so_the_source_is_not_modified():
    items = [[1, "a"], [2, "b"]]
    tuple_items = [(1,)]
    dict_items = [{"k": 1}]

    def in_place(dp):
        dp[0] = dp[0] * 100
        return dp

    df = ready(MapData(flow(items), in_place))
    assert list(df) == [[100, "a"], [200, "b"]]
    assert list(df) == [[100, "a"], [200, "b"]]  # not 10000: each epoch starts from the source data
    assert items == [[1, "a"], [2, "b"]]
    assert list(ready(MapData(flow(tuple_items), lambda dp: list(dp) + [2]))) == [[1, 2]]
    assert list(ready(MapData(flow(dict_items), lambda dp: dp.update(k=5) or dp))) == [{"k": 5}]
    assert dict_items == [{"k": 1}]


def test_map_data_copies_other_datapoint_types_with_copy():
    class Record(list):
        pass

    source = Record([1])
    assert list(ready(MapData(flow([source]), in_place_double))) == [[2]]
    assert source == [1]


def in_place_double(dp):
    dp[0] *= 2
    return dp


def test_map_data_without_input_length():
    df = ready(MapData(unsized(3), lambda dp: [dp[0] + 1]))
    with pytest.raises(DataFlowLengthUnknown):
        len(df)
    assert list(df) == [[1], [2], [3]]


def test_map_data_component_by_index_and_key():
    items = [[1, "a"], [2, "b"], [3, "c"]]
    df = ready(MapDataComponent(flow(items), lambda x: None if x == 2 else x * 10))
    assert list(df) == [[10, "a"], [30, "c"]]
    assert items == [[1, "a"], [2, "b"], [3, "c"]]
    df = ready(MapDataComponent(flow([("x", 1)]), str.upper, index=0))
    assert list(df) == [["X", 1]]
    dicts = [{"img": 1, "label": 2}]
    df = ready(MapDataComponent(flow(dicts), lambda v: v + 1, index="label"))
    assert list(df) == [{"img": 1, "label": 3}]
    assert dicts == [{"img": 1, "label": 2}]
    assert df.func({"img": 0, "label": 0}) == {"img": 0, "label": 1}


def test_filter_data():
    df = ready(FilterData(flow([[i] for i in range(6)]), lambda dp: dp[0] % 3 == 0))
    assert list(df) == [[0], [3]]
    with pytest.raises(DataFlowLengthUnknown, match="FilterData has no length: it depends on the predicate"):
        len(df)


def test_select_component():
    df = ready(SelectComponent(flow([[1, 2, 3], [4, 5, 6]]), [2, 0]))
    assert list(df) == [[3, 1], [6, 4]] and len(df) == 2
    df = ready(SelectComponent(flow([{"a": 1, "b": 2}]), ["b"]))
    assert list(df) == [[2]]


# --- FixedSizeData / RepeatedData / RepeatedDataPoint ------------------------------------------

def test_fixed_size_keeps_state_between_epochs():
    df = ready(FixedSizeData(flow([[0], [1], [2]]), 2))
    assert len(df) == 2
    assert [list(df) for _ in range(3)] == [[[0], [1]], [[2], [0]], [[1], [2]]]
    df.reset_state()
    assert list(df) == [[0], [1]]


def test_fixed_size_without_keep_state_restarts_and_closes_the_input():
    inner = CountingFlow(3)
    df = ready(FixedSizeData(inner, 5, keep_state=False))
    assert list(df) == [[0], [1], [2], [0], [1]]
    assert list(df) == [[0], [1], [2], [0], [1]]
    assert inner.started == 4


def test_fixed_size_over_a_flow_without_length():
    df = ready(FixedSizeData(unsized(2), 3))
    assert len(df) == 3 and list(df) == [[0], [1], [0]]


def test_fixed_size_errors():
    with pytest.raises(ValueError, match="FixedSizeData: size must be >= 0, got -2"):
        FixedSizeData(flow([[1]]), -2)
    df = ready(FixedSizeData(flow([]), 3))
    with pytest.raises(RuntimeError, match="FixedSizeData: its input produced no datapoints, so 3 cannot be produced"):
        list(df)
    df = ready(FixedSizeData(flow([[1]]), 3))
    first = iter(df)
    next(first)
    with pytest.raises(RuntimeError, match="FixedSizeData is not re-entrant"):
        next(iter(df))
    first.close()


def test_repeated_data():
    df = ready(RepeatedData(flow([[0], [1]]), 3))
    assert len(df) == 6 and list(df) == [[0], [1]] * 3
    assert list(ready(RepeatedData(flow([[0]]), 0))) == []
    forever = ready(RepeatedData(flow([[0], [1]]), -1))
    with pytest.raises(DataFlowLengthUnknown, match=r"RepeatedData\(num=-1\) has no length: it repeats forever"):
        len(forever)
    itr = iter(forever)
    assert [next(itr) for _ in range(5)] == [[0], [1], [0], [1], [0]]


def test_repeated_data_over_a_flow_without_length():
    df = ready(RepeatedData(unsized(2), 2))
    with pytest.raises(DataFlowLengthUnknown, match="RepeatedData has no length because its input has none "
                                                    r"\(DataFromGenerator has no length\)"):
        len(df)
    assert list(df) == [[0], [1], [0], [1]]


def test_repeated_data_errors():
    for bad in (-2, 1.5, True):
        with pytest.raises(ValueError, match="RepeatedData: num must be an int >= 0, or -1 for forever, got"):
            RepeatedData(flow([[1]]), bad)
    with pytest.raises(RuntimeError, match=r"RepeatedData\(num=-1\): its input produced no datapoints in an epoch, "
                                           "so repeating it forever would never produce any"):
        next(iter(ready(RepeatedData(flow([]), -1))))


def test_repeated_datapoint():
    df = ready(RepeatedDataPoint(flow([[0], [1]]), 3))
    assert len(df) == 6 and list(df) == [[0], [0], [0], [1], [1], [1]]
    with pytest.raises(ValueError, match="RepeatedDataPoint: num must be a positive int, got 0"):
        RepeatedDataPoint(flow([[0]]), 0)
    with pytest.raises(DataFlowLengthUnknown):
        len(RepeatedDataPoint(unsized(1), 2))


# --- combining flows ---------------------------------------------------------------------------

def test_concat_data():
    df = ready(ConcatData([flow([[0], [1]]), flow([[2]]), flow([])]))
    assert len(df) == 3 and list(df) == [[0], [1], [2]]
    partial = ready(ConcatData([flow([[0]]), unsized(2, start=5)]))
    with pytest.raises(DataFlowLengthUnknown, match=r"ConcatData has no length because its input 1 "
                                                    r"\(DataFromGenerator\) has none"):
        len(partial)
    assert list(partial) == [[0], [5], [6]]
    with pytest.raises(ValueError, match="ConcatData: needs at least one DataFlow, got none"):
        ConcatData([])


def test_join_data_lists_and_dicts():
    df = ready(JoinData([flow([[1, 2], [3, 4]]), flow([("a",), ("b",)])]))
    assert len(df) == 2 and list(df) == [[1, 2, "a"], [3, 4, "b"]]
    df = ready(JoinData([flow([{"x": 1}]), flow([{"y": 2}])]))
    assert list(df) == [{"x": 1, "y": 2}]


def test_join_data_stops_at_shortest_and_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        df = ready(JoinData([flow([[0], [1], [2]]), flow([[9]])]))
    assert "JoinData: the inputs have different lengths [3, 1]; it stops at the shortest" in caplog.text
    assert len(df) == 1 and list(df) == [[0, 9]]
    with pytest.raises(DataFlowLengthUnknown, match=r"JoinData has no length because its input 1"):
        len(JoinData([flow([[0]]), unsized(1)]))


def test_join_data_closes_unfinished_inputs():
    inner = CountingFlow(5)
    assert list(ready(JoinData([inner, flow([[7]])]))) == [[0, 7]]
    assert inner.started == 1 and inner.finished == 0
    guarded = ready(FixedSizeData(flow([[0], [1]]), 2))
    df = ready(JoinData([guarded, flow([[5]])]))
    assert list(df) == [[0, 5]]
    # [1] was taken from the FixedSizeData before the other input ran out; its iterator was then
    # closed, so it can be iterated again (no "not re-entrant" error)
    assert list(df) == [[0, 5]]


def test_join_data_errors():
    with pytest.raises(ValueError, match="JoinData: key 'x' of input 1 is also produced by an earlier input"):
        list(ready(JoinData([flow([{"x": 1}]), flow([{"x": 2}])])))
    with pytest.raises(ValueError, match="JoinData: input 1 produced a dict but input 0 produced a list; all inputs "
                                         "must produce lists/tuples, or all dicts"):
        list(ready(JoinData([flow([[1]]), flow([{"x": 2}])])))
    with pytest.raises(ValueError, match="JoinData: input 1 produced a list but input 0 produced a dict; all inputs "
                                         "must produce lists/tuples, or all dicts"):
        list(ready(JoinData([flow([{"x": 2}]), flow([[1]])])))


def test_random_choose_data_uniform_and_weighted():
    a, b = flow([["a"]] * 200), flow([["b"]] * 200)
    df = ready(RandomChooseData([a, b]))
    out = [dp[0] for dp in df]
    assert 200 <= len(out) <= 400 and set(out) == {"a", "b"}  # 400: both ran out together
    assert out.count("a") == 200 or out.count("b") == 200  # stops when the chosen one is exhausted
    df = ready(RandomChooseData([(flow([["a"]] * 1000), 0.9), (flow([["b"]] * 1000), 0.1)]))
    out = [dp[0] for dp in df]
    assert len(out) >= 1000 and 0.03 < out.count("b") / len(out) < 0.2
    with pytest.raises(DataFlowLengthUnknown, match="RandomChooseData has no length: it stops at a random point"):
        len(df)


def test_random_choose_data_accepts_probabilities_summing_to_one_within_tolerance():
    thirds = [(flow([[k]] * 50), 0.3333333) for k in range(3)]  # sum 0.9999999: numpy's choice() refuses it
    out = [dp[0] for dp in ready(RandomChooseData(thirds))]
    assert 50 <= len(out) <= 150 and set(out) == {0, 1, 2}


def test_random_choose_data_errors():
    with pytest.raises(ValueError, match=r"RandomChooseData: probabilities must be >= 0 and sum to 1, "
                                         r"got \[0.5, 0.6\]"):
        RandomChooseData([(flow([[1]]), 0.5), (flow([[2]]), 0.6)])
    with pytest.raises(ValueError, match="RandomChooseData: give either DataFlows or"):
        RandomChooseData([(flow([[1]]), 0.5), flow([[2]])])
    with pytest.raises(RuntimeError, match="RandomChooseData has no RNG yet"):
        next(iter(RandomChooseData([flow([[1]])])))


def test_random_mix_data_keeps_every_datapoint_and_each_input_order():
    a = [["a", i] for i in range(30)]
    b = [["b", i] for i in range(20)]
    df = ready(RandomMixData([flow(a), flow(b)]))
    out = list(df)
    assert len(df) == 50 and len(out) == 50
    assert [dp for dp in out if dp[0] == "a"] == a
    assert [dp for dp in out if dp[0] == "b"] == b
    assert out[:30] != a  # mixed
    assert list(df) != out  # a new order every epoch


def test_random_mix_data_errors():
    with pytest.raises(DataFlowLengthUnknown, match=r"RandomMixData has no length because its input 1 "
                                                    r"\(DataFromGenerator\) has none"):
        RandomMixData([flow([[1]]), unsized(2)])
    short = ready(RandomMixData([CountingFlow(2, claimed_len=3)]))
    with pytest.raises(RuntimeError, match=r"RandomMixData: input 0 \(CountingFlow\) produced 2 datapoints but its "
                                           "length is 3"):
        list(short)
    long = ready(RandomMixData([CountingFlow(3, claimed_len=2)]))
    with pytest.raises(RuntimeError, match=r"RandomMixData: input 0 \(CountingFlow\) produced more datapoints than "
                                           "its length 2"):
        list(long)
    with pytest.raises(ValueError, match="RandomMixData: needs at least one DataFlow, got none"):
        RandomMixData([])


# --- LocallyShuffleData --------------------------------------------------------------------------

def test_locally_shuffle_epoch_length_buffer_carry_over_and_no_loss():
    items = [[i] for i in range(100)]
    df = ready(LocallyShuffleData(flow(items), buffer_size=10))
    assert len(df) == 100
    epochs = [[dp[0] for dp in df] for _ in range(3)]
    assert [len(e) for e in epochs] == [100, 100, 100]
    assert epochs[0] != list(range(100))
    # a continuous stream: 3 epochs plus the 10 still in the buffer are 3 full passes + 10 of the 4th
    everything = sorted(sum(epochs, []) + [dp[0] for dp in df._buffer])
    assert everything == sorted(list(range(100)) * 3 + list(range(10)))
    # local: a datapoint never moves far ahead of its position in the input
    assert all(v - pos <= 10 for pos, v in enumerate(epochs[0]))


def test_locally_shuffle_num_reuse_and_shuffle_interval():
    df = ready(LocallyShuffleData(flow([[i] for i in range(20)]), buffer_size=4, num_reuse=2, shuffle_interval=1))
    assert df.shuffle_interval == 1 and len(df) == 40
    out = [dp[0] for dp in df]
    assert len(out) == 40
    assert max(out.count(v) for v in set(out)) <= 4
    assert LocallyShuffleData(flow([[1]]), buffer_size=2).shuffle_interval == 1
    assert LocallyShuffleData(flow([[1]]), buffer_size=30).shuffle_interval == 10


def test_locally_shuffle_input_without_length_ends_epoch_with_input_epoch():
    df = ready(LocallyShuffleData(unsized(10), buffer_size=4))
    with pytest.raises(DataFlowLengthUnknown):
        len(df)
    first, second = [dp[0] for dp in df], [dp[0] for dp in df]
    assert len(first) == 6 and len(second) == 10
    assert sorted(first + second + [dp[0] for dp in df._buffer]) == sorted(list(range(10)) * 2)


def test_locally_shuffle_errors():
    with pytest.raises(RuntimeError, match="LocallyShuffleData: its input produced no datapoints in an epoch, so 5 "
                                           "cannot be produced"):
        list(ready(LocallyShuffleData(CountingFlow(0, claimed_len=5), buffer_size=2)))
    with pytest.raises(ValueError, match="LocallyShuffleData: buffer_size must be a positive int, got 0"):
        LocallyShuffleData(flow([[1]]), 0)
    with pytest.raises(ValueError, match="LocallyShuffleData: num_reuse must be a positive int, got -1"):
        LocallyShuffleData(flow([[1]]), 5, num_reuse=-1)
    df = ready(LocallyShuffleData(flow([[i] for i in range(10)]), 2))
    first = iter(df)
    next(first)
    with pytest.raises(RuntimeError, match="LocallyShuffleData is not re-entrant"):
        next(iter(df))
    first.close()


# --- CacheData -----------------------------------------------------------------------------------

def test_cache_data_reads_the_input_once():
    inner = CountingFlow(5)
    df = ready(CacheData(inner))
    assert len(df) == 5
    assert list(df) == list(df) == [[i] for i in range(5)]
    assert inner.started == 1
    df.reset_state()
    assert list(df) == [[i] for i in range(5)] and inner.started == 2


def test_cache_data_shuffle():
    df = ready(CacheData(flow([[i] for i in range(50)]), shuffle=True))
    first, second, third = list(df), list(df), list(df)
    assert first == [[i] for i in range(50)]  # the first pass is the input's order
    assert sorted(second) == first and second != first and third != second


def test_cache_data_interrupted_first_pass_is_not_kept():
    inner = CountingFlow(4)
    df = ready(CacheData(inner))
    itr = iter(df)
    assert [next(itr), next(itr)] == [[0], [1]]
    with pytest.raises(RuntimeError, match=r"CacheData \(while filling its cache\) is not re-entrant"):
        next(iter(df))
    itr.close()
    assert list(df) == [[i] for i in range(4)]  # all of it, not the 2 cached before the interruption
    assert list(df) == [[i] for i in range(4)] and inner.started == 2


def test_cache_data_length_of_a_flow_without_length_becomes_known_once_cached():
    df = ready(CacheData(unsized(3)))
    with pytest.raises(DataFlowLengthUnknown, match="CacheData has no length because its input has none"):
        len(df)
    list(df)
    assert len(df) == 3


# --- PrintData / TestDataSpeed -----------------------------------------------------------------

def test_print_data_logs_structure_and_passes_data_through(caplog, capsys):
    items = [[np.arange(6, dtype=np.float32).reshape(2, 3), 5, [np.int8(1), "x" * 50, [[1]], 4, 5, 6],
              {"k": b"ab"}, None, 2.5]] * 3
    df = ready(PrintData(flow(items), num=2, name="train", max_depth=2, max_list=3))
    with caplog.at_level(logging.INFO, logger="inputpipe"):
        assert list(df) == items
        assert list(df) == items  # counts since reset_state: nothing more is logged
    assert len(caplog.records) == 2
    assert capsys.readouterr().out == ""  # logged, never printed
    assert caplog.records[0].getMessage() == "\n".join([
        "datapoint 0/2 (train): list with 6 components",
        "  0: ndarray:float32 of shape (2, 3) in range [0.0, 5.0]",
        "  1: int with value 5",
        "  2: list of len 6",
        "    0: int8 with value 1",
        "    1: str of len 50: '{}'...".format("x" * 40),
        "    2: list of len 1",
        "      ...",
        "    ...",
        "  3: dict of len 1",
        "    k: bytes of len 2: b'ab'",
        "  4: NoneType",
        "  5: float with value 2.5",
    ])
    assert caplog.records[1].getMessage().startswith("datapoint 1/2 (train)")
    df.reset_state()
    with caplog.at_level(logging.INFO, logger="inputpipe"):
        next(iter(df))
    assert len(caplog.records) == 3


def test_print_data_dict_and_empty_array():
    df = ready(PrintData(flow([{"a": np.zeros((0, 2))}])))
    assert df.describe({"a": np.zeros((0, 2))}) == "datapoint 0/1: dict with 1 components\n" \
                                                   "  a: ndarray:float64 of shape (0, 2)"


def test_test_data_speed_measures_and_logs(caplog):
    items = [[np.zeros(10, np.float32), i] for i in range(100)]
    speed = TestDataSpeed(flow(items), size=50, warmup=5)
    with caplog.at_level(logging.INFO, logger="inputpipe"):
        stats = speed.start()
    assert stats["datapoints"] == 50
    assert stats["bytes"] == 50 * 40
    assert stats["seconds"] > 0
    assert stats["datapoints_per_sec"] == pytest.approx(50 / stats["seconds"])
    assert stats["bytes_per_sec"] == pytest.approx(2000 / stats["seconds"])
    text = caplog.text
    assert "TestDataSpeed of DataFromList" in text and "datapoints/s" in text and "MB/s" in text


def test_test_data_speed_without_arrays_or_length_and_short_input(caplog):
    speed = TestDataSpeed(MapData(unsized(30), lambda dp: dp), size=100)
    with caplog.at_level(logging.INFO, logger="inputpipe"):
        stats = speed.start()
    assert stats["datapoints"] == 30  # the input ended first
    assert stats["bytes"] is None and stats["bytes_per_sec"] is None
    assert "MB/s" not in caplog.text
    with pytest.raises(DataFlowLengthUnknown):
        len(speed)


def test_test_data_speed_iteration_runs_the_test_then_yields_data():
    df = TestDataSpeed(flow([[i] for i in range(10)]), size=5)
    assert len(df) == 10
    assert list(df) == [[i] for i in range(10)]


# --- length protocol across wrappers -------------------------------------------------------------

@pytest.mark.parametrize("wrap", [
    lambda ds: MapData(ds, lambda dp: dp),
    lambda ds: MapDataComponent(ds, lambda x: x),
    lambda ds: SelectComponent(ds, [0]),
    lambda ds: RepeatedData(ds, 2),
    lambda ds: RepeatedDataPoint(ds, 2),
    lambda ds: ConcatData([ds]),
    lambda ds: JoinData([ds]),
    lambda ds: LocallyShuffleData(ds, 3),
    lambda ds: CacheData(ds),
    lambda ds: PrintData(ds),
    lambda ds: TestDataSpeed(ds, size=2),
])
def test_wrappers_accept_flows_without_length_and_list_works(wrap):
    df = wrap(unsized(4))
    df.reset_state()
    with pytest.raises(NotImplementedError):
        len(df)
    with pytest.raises(TypeError):
        len(df)
    assert get_length(df) is None
    assert all(isinstance(dp, list) for dp in list(df))


# --- seeding -------------------------------------------------------------------------------------

def _seeded_pipeline_output(seed):
    seeding.set_global_seed(seed)
    shuffled = LocallyShuffleData(DataFromList([["a", i] for i in range(40)], shuffle=True), buffer_size=8)
    df = RandomMixData([shuffled, DataFromList([["b", i] for i in range(20)], shuffle=True)])
    df.reset_state()
    return [list(df) for _ in range(2)]


def test_pipeline_is_reproducible_with_a_global_seed():
    try:
        first, second = _seeded_pipeline_output(123), _seeded_pipeline_output(123)
        other = _seeded_pipeline_output(124)
    finally:
        seeding.set_global_seed(None)
    assert first == second
    assert first[0] != first[1]  # epochs still differ from each other
    assert other != first
    assert sorted(dp[1] for dp in first[0] if dp[0] == "b") == list(range(20))


def test_pipeline_differs_between_runs_without_a_seed():
    try:
        first, second = _seeded_pipeline_output(None), _seeded_pipeline_output(None)
    finally:
        seeding.set_global_seed(None)
    assert first != second


def test_test_data_speed_prints_large_numbers_readably(caplog, monkeypatch):
    from inputpipe.dataflow import debug

    clock = iter([100.0, 100.00001])
    monkeypatch.setattr(debug.time, "perf_counter", lambda: next(clock))
    items = [[np.zeros(1000, np.float32), i] for i in range(50)]
    with caplog.at_level(logging.INFO, logger="inputpipe"):
        stats = TestDataSpeed(flow(items), size=50).start()
    assert stats["datapoints_per_sec"] == pytest.approx(5e6)
    text = caplog.text
    assert "e+" not in text
    assert "5,000,000.0" in text and "20,000.0" in text   # datapoints/s, MB/s


def test_print_data_and_test_data_speed_show_their_report_without_logging_setup():
    import subprocess
    import sys

    code = ("from inputpipe.dataflow import DataFromList, PrintData, TestDataSpeed\n"
            "df = PrintData(DataFromList([[1, 'a']] * 20, shuffle=False), num=1, name='check')\n"
            "TestDataSpeed(df, size=10).start()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "inputpipe: datapoint 0/1 (check): list with 2 components" in proc.stderr
    assert "inputpipe: TestDataSpeed of PrintData:" in proc.stderr and "datapoints/s" in proc.stderr
    assert "10/10" in proc.stderr          # the progress bar


class _Closable(DataFlow):
    def __init__(self, log, name, fail=False):
        self.log, self.name, self.fail = log, name, fail

    def __iter__(self):
        yield [self.name]

    def __len__(self):
        return 1

    def close(self):
        self.log.append(self.name)
        if self.fail:
            raise RuntimeError("close failed: " + self.name)


@pytest.mark.parametrize("make", [
    lambda flows: ConcatData(flows), lambda flows: JoinData(flows), lambda flows: RandomMixData(flows),
    lambda flows: RandomChooseData(flows), lambda flows: RandomChooseData([(f, 1 / len(flows)) for f in flows]),
])
def test_composite_flows_close_every_input_even_when_one_fails(make):
    log = []
    flows = [_Closable(log, "a"), _Closable(log, "b", fail=True), _Closable(log, "c")]
    composite = make(flows + [DataFromList([[0]], shuffle=False)])   # a flow without close() is skipped
    with pytest.raises(RuntimeError, match="close failed: b"):
        composite.close()
    assert log == ["a", "b", "c"]


class _OldStyle(DataFlow):
    def get_data(self):
        yield from ([0], [1], [2])

    def size(self):
        return 3


def test_pre_09_api_subclass_iterates_and_has_length():
    df = _OldStyle()
    assert list(df) == [[0], [1], [2]] and len(df) == 3
    assert list(MapData(df, lambda dp: [dp[0] * 2])) == [[0], [2], [4]]

    class OnlyData(DataFlow):
        def get_data(self):
            yield [7]

    with pytest.raises(DataFlowLengthUnknown):
        len(OnlyData())
    assert list(OnlyData()) == [[7]]
