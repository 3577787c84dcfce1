"""tensorpack's older names of the parallel flows and of their arguments."""
import warnings

import pytest

import inputpipe.dataflow as dataflow
from inputpipe.dataflow import (
    DataFlow, MultiProcessMapAndBatchData, MultiProcessMapData, MultiProcessRunner, MultiProcessRunnerZMQ,
    MultiThreadMapData, MultiThreadRunner,
)

# every name in tensorpack 0.11's dataflow/parallel.py and parallel_map.py __all__, plus ThreadedMapData
TENSORPACK_ALIASES = {
    "PrefetchData": MultiProcessRunner,
    "MultiProcessPrefetchData": MultiProcessRunner,
    "PrefetchDataZMQ": MultiProcessRunnerZMQ,
    "MultiThreadPrefetchData": MultiThreadRunner,
    "MultiProcessMapDataZMQ": MultiProcessMapData,
    "MultiProcessMapAndBatchDataZMQ": MultiProcessMapAndBatchData,
    "ThreadedMapData": MultiThreadMapData,
}


class Indexed(DataFlow):
    def __len__(self):
        return 6

    def __iter__(self):
        for i in range(6):
            yield [i]


def plus_one(dp):
    return [dp[0] + 1]


def test_every_tensorpack_alias_is_the_same_class_and_exported():
    for name, cls in TENSORPACK_ALIASES.items():
        assert getattr(dataflow, name) is cls, name
    from inputpipe.dataflow import parallel, parallel_map
    assert set(TENSORPACK_ALIASES) <= set(parallel.__all__) | set(parallel_map.__all__)


def _build(make):
    """``make()`` under a recorder; returns (flow, the DeprecationWarnings it gave)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = make()
    return df, [w for w in caught if issubclass(w.category, DeprecationWarning)]


OLD_STYLE = [  # (id, constructor call in tensorpack's old style, attribute checks, warning texts)
    ("PrefetchData(ds, nr_prefetch, nr_proc)",
     lambda: dataflow.PrefetchData(Indexed(), nr_prefetch=4, nr_proc=2),
     {"hwm": 4, "num_proc": 2}, ["nr_prefetch= is tensorpack's old name for num_prefetch=",
                                 "nr_proc= is tensorpack's old name for num_proc="]),
    ("PrefetchDataZMQ(ds, nr_proc=)", lambda: dataflow.PrefetchDataZMQ(Indexed(), nr_proc=3, hwm=9),
     {"hwm": 9, "num_proc": 3},
     ["MultiProcessRunnerZMQ: the argument nr_proc= is tensorpack's old name for num_proc="]),
    ("MultiThreadPrefetchData(get_df, nr_prefetch, nr_thread)",
     lambda: dataflow.MultiThreadPrefetchData(Indexed, nr_prefetch=5, nr_thread=2),
     {"num_prefetch": 5}, ["nr_prefetch=", "nr_thread="]),
    ("ThreadedMapData(ds, nr_thread=, map_func=, buffer_size)",
     lambda: dataflow.ThreadedMapData(Indexed(), nr_thread=2, map_func=plus_one, buffer_size=7),
     {"num_workers": 2, "buffer_size": 7}, ["nr_thread= is tensorpack's old name for num_thread="]),
    ("MultiThreadMapData(ds, 2, f, 7, True) positional",
     lambda: MultiThreadMapData(Indexed(), 2, plus_one, 7, True),
     {"buffer_size": 7, "strict": True}, ["buffer_size and strict passed by position"]),
    ("MultiProcessMapData(ds, nr_proc=, map_func=, buffer_size, strict)",
     lambda: MultiProcessMapData(Indexed(), nr_proc=2, map_func=plus_one, buffer_size=5, strict=True),
     {"num_workers": 2, "buffer_size": 5, "strict": True}, ["nr_proc= is tensorpack's old name for num_proc="]),
    ("MultiProcessMapDataZMQ(ds, 2, f, 5) positional",
     lambda: dataflow.MultiProcessMapDataZMQ(Indexed(), 2, plus_one, 5),
     {"buffer_size": 5, "strict": False}, ["buffer_size and strict passed by position"]),
    ("MultiProcessMapAndBatchDataZMQ(ds, nr_proc=, ...)",
     lambda: dataflow.MultiProcessMapAndBatchDataZMQ(Indexed(), nr_proc=2, map_func=plus_one, batch_size=3),
     {"num_workers": 2}, ["nr_proc="]),
]


@pytest.mark.parametrize("make,attributes,texts", [c[1:] for c in OLD_STYLE], ids=[c[0] for c in OLD_STYLE])
def test_old_argument_style_works_with_a_deprecation_warning_at_the_callers_line(make, attributes, texts):
    df, caught = _build(make)
    assert len(caught) == len(texts)
    for warning, text in zip(caught, texts):
        assert text in str(warning.message) and "deprecated" in str(warning.message)
        assert warning.filename == __file__               # points at the user's call, not at inputpipe
    for name, value in attributes.items():
        assert getattr(df, name) == value, name
    df.close()


def test_an_old_style_flow_still_runs():
    df, caught = _build(lambda: dataflow.ThreadedMapData(Indexed(), nr_thread=2, map_func=plus_one,
                                                         buffer_size=3, strict=True))
    assert len(caught) == 1
    df.reset_state()
    with df:
        assert sorted(dp[0] for dp in df) == [1, 2, 3, 4, 5, 6]


def test_new_and_old_names_together_or_unknown_names_are_refused():
    with pytest.raises(TypeError, match=r"MultiProcessRunnerZMQ: got both num_proc=2 and its old name nr_proc=3"):
        dataflow.PrefetchDataZMQ(Indexed(), 2, nr_proc=3)
    with pytest.raises(TypeError, match=r"MultiProcessRunnerZMQ\(\) got an unexpected keyword argument 'nr_procs'"):
        MultiProcessRunnerZMQ(Indexed(), nr_procs=3)
    with pytest.raises(TypeError, match=r"MultiThreadMapData\(\) got an unexpected keyword argument 'threads'"):
        MultiThreadMapData(Indexed(), 2, plus_one, threads=3)
    with pytest.raises(TypeError, match="buffer_size/strict passed both by position and by keyword"):
        MultiThreadMapData(Indexed(), 2, plus_one, 7, buffer_size=9)
    with pytest.raises(TypeError, match=r"takes at most 5 positional arguments \(6 given\)"):
        MultiProcessMapData(Indexed(), 2, plus_one, 7, True, "extra")
    with pytest.raises(TypeError, match="MultiProcessMapData: map_func must be callable, got None"):
        MultiProcessMapData(Indexed(), 2)
    with pytest.raises(ValueError, match="MultiThreadMapData: num_thread must be an int >= 1 or 'auto', got None"):
        MultiThreadMapData(Indexed(), map_func=plus_one)
    with pytest.raises(ValueError, match="MultiProcessRunner: num_prefetch must be an int >= 1, got None"):
        MultiProcessRunner(Indexed(), num_proc=2)


def test_the_current_names_give_no_warning():
    for make in (lambda: MultiProcessRunner(Indexed(), 4, 2), lambda: MultiProcessRunnerZMQ(Indexed(), num_proc=2),
                 lambda: MultiThreadRunner(Indexed, 2, 2), lambda: MultiThreadMapData(Indexed(), 2, plus_one),
                 lambda: MultiProcessMapData(Indexed(), 2, plus_one, buffer_size=4, strict=True),
                 lambda: MultiProcessMapAndBatchData(Indexed(), 2, plus_one, 3)):
        df, caught = _build(make)
        assert caught == []
        df.close()
