"""The bottleneck doctor (inputpipe.dataflow.profiling.profile) names the slow stage of a chain,
leaves the chain as it was, and reports numbers that add up.

Slow stages sleep, so the results hold on a loaded machine: the slow stage is at least 10x slower
than the others. Each test measures for about a second."""
import json
import threading
import time

import numpy as np
import pytest

from inputpipe.dataflow import (
    BatchData, ConcatData, DataFlow, DataFromGenerator, DataFromList, JoinData, MapData, MapDataComponent,
    MultiProcessMapData, MultiProcessRunnerZMQ, MultiThreadMapData, RemoteDataZMQ,
)
from inputpipe.dataflow.profiling import ProfileReport, profile

SLOW, FAST = 0.003, 0.0002
RUN = dict(seconds=1.0, warmup=0.2)


def _endless(delay):
    def generate():
        i = 0
        while True:
            time.sleep(delay)
            yield [i]
            i += 1
    return generate


def _sleepy(delay):
    def step(dp):
        time.sleep(delay)
        return dp
    step.__name__ = "sleep_{}ms".format(delay * 1e3)
    return step


def _sleep_20ms(dp):
    time.sleep(0.02)
    return dp


def test_slow_source_feeding_a_fast_map_names_the_source():
    df = MapData(DataFromGenerator(_endless(SLOW)), _sleepy(FAST))
    report = profile(df, **RUN)
    assert report.limiting.name == "DataFromGenerator"
    assert report.limiting.kind == "source"
    source, mapper = report.stages                      # sources first
    assert mapper.name == "MapData(sleep_0.2ms)"
    assert source.inputs == [] and mapper.inputs == [0]
    assert source.datapoints == mapper.datapoints == report.datapoints > 50
    # a loaded machine delays every wake-up from sleep alike, so only wide ratios are asserted
    assert source.own_ms_per_datapoint > 2.5 and mapper.own_ms_per_datapoint < source.own_ms_per_datapoint / 2
    assert source.share > 0.6 and source.share > 2 * mapper.share
    assert "Make reading faster" in report.suggestion and "LocallyShuffleData" in report.suggestion


def test_slow_map_after_a_fast_source_names_the_map():
    df = MapData(DataFromGenerator(_endless(FAST)), _sleepy(SLOW))
    report = profile(df, **RUN)
    assert report.limiting.name == "MapData(sleep_3.0ms)"
    assert report.limiting_index == 1
    assert report.stage("DataFromGenerator").own_ms_per_datapoint < report.limiting.own_ms_per_datapoint / 2
    assert "MultiProcessMapData(ds, num_proc=" in report.suggestion
    # own times and the consumer's account for the whole window (up to the timing cost)
    accounted = sum(s.own_seconds for s in report.stages) + report.consumer_seconds
    assert abs(accounted - report.seconds) < 0.05 * report.seconds


def test_batchdata_counts_and_a_slow_stacking_step_is_named():
    big = np.ones((256, 256, 8), dtype="float32")      # 2 MiB per datapoint: stacking 32 costs ms
    df = BatchData(DataFromList([[big, i] for i in range(64)], shuffle=False), 32)
    report = profile(df, **RUN)
    source, batch = report.stages
    assert batch.name == "BatchData(32)" and batch.kind == "batch"
    assert source.datapoints == 32 * batch.datapoints and batch.datapoints == report.datapoints > 0
    assert report.limiting is batch
    assert "MultiProcessMapAndBatchData" in report.suggestion


def test_slow_multithreadmapdata_is_named_with_its_threads():
    df = BatchData(MultiThreadMapData(DataFromList([[i] for i in range(400)], shuffle=False), 2, _sleep_20ms,
                                      strict=True), 4)
    try:
        report = profile(df, **RUN)
    finally:
        df.close()
    stage = report.limiting
    assert stage.type_name == "MultiThreadMapData" and stage.kind == "thread_map"
    assert (stage.workers, stage.worker_unit) == (2, "threads")
    assert stage.name == "MultiThreadMapData(_sleep_20ms)"
    assert report.stage("BatchData").datapoints * 4 == stage.datapoints
    assert "GIL" in report.suggestion and "MultiProcessMapData" in report.suggestion


def test_slow_multiprocessmapdata_is_named_with_its_processes():
    df = MultiProcessMapData(DataFromList([[i] for i in range(400)], shuffle=False), 2, _sleep_20ms)
    try:
        report = profile(df, **RUN)
    finally:
        df.close()
    stage = report.limiting
    assert stage.type_name == "MultiProcessMapData" and (stage.workers, stage.worker_unit) == (2, "processes")
    assert stage.share > 0.8
    # the workers sleep in map_func: they hardly use the CPU (read from /proc on Linux)
    assert stage.worker_cpu_share is not None and stage.worker_cpu_share < 0.5
    assert "2 processes" in report.table()
    assert "use more processes (2 now" in report.suggestion


def test_slow_serial_map_after_a_parallel_map_is_told_to_move_into_it():
    inner = MultiProcessMapData(DataFromList([[i] for i in range(400)], shuffle=False), 2, _identity)
    df = MapData(inner, _sleepy(SLOW))
    try:
        report = profile(df, **RUN)
    finally:
        df.close()
    assert report.limiting.name == "MapData(sleep_3.0ms)"
    assert "into its map_func" in report.suggestion and "MultiProcessMapData(_identity)" in report.suggestion


def _identity(dp):
    return dp


def test_runner_is_a_boundary_and_its_waiting_is_named():
    df = MultiProcessRunnerZMQ(MapData(DataFromGenerator(_endless(0.0)), _sleep_20ms), num_proc=2)
    try:
        report = profile(df, **RUN)
    finally:
        df.close()
    assert [s.name for s in report.stages] == ["MultiProcessRunnerZMQ"]
    assert report.limiting.kind == "runner"
    assert "its input MapData runs in the workers" in report.limiting.note
    assert "profile(df.ds)" in report.suggestion


def test_combined_inputs_are_each_timed_and_the_slow_one_named():
    slow = MapData(DataFromList([[i] for i in range(20)], shuffle=False), _sleepy(SLOW))
    fast = DataFromList([[i] for i in range(20)], shuffle=False)
    df = JoinData([fast, slow])
    report = profile(df, **RUN)
    assert [s.name for s in report.stages] == ["DataFromList", "DataFromList", "MapData(sleep_3.0ms)", "JoinData"]
    assert report.limiting.path == "df.df_lists[1]"
    assert report.stages[-1].inputs == [0, 2]
    assert report.stages[0].depth == 1 and report.stages[-1].depth == 0


def test_profile_leaves_the_chain_unchanged_and_datapoints_in_order():
    seen = []

    def record(dp):
        seen.append(list(dp))
        return dp

    a = DataFromList([[i] for i in range(7)], shuffle=False)
    b = DataFromList([[i] for i in range(100, 105)], shuffle=False)
    concat = ConcatData([a, b])
    mapped = MapDataComponent(concat, lambda x: x * 2)
    df = MapData(BatchData(mapped, 3, remainder=True), record)
    inputs_before = (df.ds, df.ds.ds, mapped.ds, list(concat.df_lists))
    report = profile(df, seconds=5, warmup=0, max_datapoints=8)
    assert report.datapoints == 8
    assert (df.ds, df.ds.ds, mapped.ds, concat.df_lists) == inputs_before
    assert type(concat.df_lists[0]) is DataFromList
    expected_epoch = [[[0, 2, 4]], [[6, 8, 10]], [[12, 200, 202]], [[204, 206, 208]]]
    seen_batches = [[b[0].tolist()] for b in seen]
    assert seen_batches == expected_epoch + expected_epoch
    df.reset_state()
    assert [b[0].tolist() for b in df] == [e[0] for e in expected_epoch]


def test_random_choose_and_mix_inputs_are_timed_and_put_back():
    from inputpipe.dataflow import RandomChooseData

    a = DataFromList([[i] for i in range(1000)], shuffle=False)
    b = DataFromList([[i] for i in range(1000)], shuffle=False)
    choose = RandomChooseData([(a, 0.5), (b, 0.5)])
    entries = list(choose.df_lists)
    c = DataFromList([[i] for i in range(30)], shuffle=False)
    df = ConcatData([choose, c])
    report = profile(df, seconds=5, warmup=0, max_datapoints=500)
    assert choose.df_lists == entries and all(type(e[0]) is DataFromList for e in choose.df_lists)
    assert [s.name for s in report.stages] == ["DataFromList", "DataFromList", "RandomChooseData", "DataFromList",
                                               "ConcatData"]
    assert [s.kind for s in report.stages] == ["source", "source", "combine", "source", "combine"]
    first, second, chooser, third, concat = report.stages
    assert chooser.datapoints == first.datapoints + second.datapoints
    assert concat.datapoints == chooser.datapoints + third.datapoints == 500
    assert [first.depth, chooser.depth, third.depth, concat.depth] == [2, 1, 1, 0]


def test_an_error_in_the_chain_is_raised_and_the_chain_restored():
    def fail_at_five(dp):
        if dp[0] == 5:
            raise KeyError("datapoint five")
        return dp

    source = DataFromList([[i] for i in range(10)], shuffle=False)
    df = MapData(source, fail_at_five)
    with pytest.raises(KeyError, match="datapoint five"):
        profile(df, seconds=5, warmup=0)
    assert df.ds is source


def test_a_stalled_chain_names_the_stuck_stage_and_returns():
    df = RemoteDataZMQ("tcp://127.0.0.1:*")
    started = time.monotonic()
    try:
        report = profile(df, seconds=5, warmup=0, stall_timeout=0.5)
    finally:
        df.close()
    assert time.monotonic() - started < 4
    assert report.stalled and report.datapoints == 0
    assert report.limiting.name == "RemoteDataZMQ" and report.limiting.kind == "remote"
    assert "are the producers running" in report.suggestion
    assert "Limiting stage: RemoteDataZMQ" in str(report) and "stalled" in str(report)


def test_a_healthy_chain_warmed_up_and_profiled_longer_than_its_stall_timeout_is_not_stalled():
    """The stall timeout bounds the silence between two datapoints, not the warm-up or the window."""
    df = MapData(DataFromGenerator(_endless(0.001)), _sleepy(FAST))
    started = time.monotonic()
    report = profile(df, seconds=2.5, warmup=1.2, stall_timeout=1.0)
    assert time.monotonic() - started >= 3.7
    assert not report.stalled and report.stalled_in is None and not report.thread_left_running
    assert report.seconds >= 2.5 and report.datapoints > 100
    assert report.limiting.name == "DataFromGenerator" and "stalled" not in str(report)


class WaitsInReset(DataFlow):
    """A source whose reset_state() waits for something (a mount, a lock, a download)."""

    def __init__(self, release):
        self.release = release
        self.iterations = 0

    def reset_state(self):
        self.release.wait()

    def __iter__(self):
        self.iterations += 1
        yield [1]


def _profile_threads():
    return [t for t in threading.enumerate() if t.name == "inputpipe-profile"]


@pytest.mark.timeout(20)
def test_a_reset_state_that_blocks_is_reported_within_the_stall_timeout():
    release = threading.Event()
    source = WaitsInReset(release)
    df = MapData(source, _sleepy(FAST))
    started = time.monotonic()
    try:
        report = profile(df, seconds=5, warmup=0, stall_timeout=0.5)
        took = time.monotonic() - started
        still_blocked = len(_profile_threads())
    finally:
        release.set()
    assert took < 2, took
    assert still_blocked == 1
    assert report.stalled and report.datapoints == 0 and report.limiting is None
    assert report.stalled_in == "WaitsInReset.reset_state()"
    assert report.thread_left_running
    text = str(report)
    assert ("WaitsInReset.reset_state() (called by MapData(sleep_0.2ms).reset_state()) did not return within the "
            "stall timeout (0.5 s)") in text
    assert "test_doctor_profile.py:" in text                  # where in reset_state it waits
    assert "cannot be stopped from Python" in text
    assert "Limiting stage" not in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["stalled_in"] == "WaitsInReset.reset_state()" and data["thread_left_running"] is True
    # once reset_state returns, the thread ends without iterating the flow
    deadline = time.monotonic() + 2
    while _profile_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _profile_threads() == [] and source.iterations == 0
    assert df.ds is source


def test_a_reset_state_that_raises_is_raised():
    class BrokenMount(DataFlow):
        def reset_state(self):
            raise OSError("mount /data: no such device")

        def __iter__(self):
            yield [1]

    with pytest.raises(OSError, match="no such device"):
        profile(MapData(BrokenMount(), _sleepy(FAST)), seconds=1, warmup=0, stall_timeout=5)


def test_report_is_a_table_and_json_ready():
    df = MapData(DataFromGenerator(_endless(FAST)), _sleepy(SLOW))
    report = profile(df, seconds=0.5, warmup=0.1)
    assert isinstance(report, ProfileReport)
    text = str(report)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["stage", "(source", "first)"]
    assert "datapoints/s" in lines[0] and "own ms/datapoint" in lines[0]
    assert lines[3].startswith("MapData(sleep_3.0ms)") and lines[3].rstrip().endswith("<- limits")
    assert "Limiting stage: MapData(sleep_3.0ms)" in text and "Suggestion: " in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["limiting"] == "MapData(sleep_3.0ms)"
    assert [s["name"] for s in data["stages"]] == ["DataFromGenerator", "MapData(sleep_3.0ms)"]
    assert data["datapoints"] == report.datapoints and data["stages"][1]["inputs"] == [0]


def test_a_finite_flow_is_run_epoch_after_epoch():
    df = DataFromList([[i] for i in range(5)], shuffle=False)
    report = profile(df, seconds=5, warmup=0, max_datapoints=12)
    assert report.datapoints == 12 and report.stages[0].datapoints == 12
    assert not report.ended


def test_an_empty_flow_ends_the_profile():
    df = MapData(DataFromList([[1]], shuffle=False), lambda dp: None)
    report = profile(df, seconds=5, warmup=0)
    assert report.ended and report.datapoints == 0
    assert "The flow ended" in str(report)
    # nothing came out, so no stage limits anything: the report says what happened instead
    assert report.limiting is None and report.to_dict()["limiting"] is None
    assert "Limiting stage" not in str(report)
    assert report.suggestion.startswith("Nothing to profile: an epoch of the flow ended without a datapoint.")


@pytest.mark.parametrize("kwargs, message", [
    (dict(seconds=0), "profile: seconds must be > 0, got 0"),
    (dict(seconds=1, stall_timeout=-1), "profile: stall_timeout must be > 0, got -1"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        profile(DataFromList([[1]], shuffle=False), **kwargs)


def test_something_else_than_a_dataflow_is_refused():
    with pytest.raises(TypeError, match=r"profile: expected a DataFlow \(an iterable with reset_state\(\)\), got a list"):
        profile([[1], [2]], seconds=1)
    # the class itself has __iter__ and reset_state too, but is not a flow to run
    with pytest.raises(TypeError, match=r"expected a DataFlow \(an iterable with reset_state\(\)\), got the class DataFromList \(make an instance\)"):
        profile(DataFromList, seconds=1)


def test_report_stage_lookup_names_the_stages_when_missing():
    report = profile(DataFromList([[1]], shuffle=False), seconds=5, warmup=0, max_datapoints=3)
    with pytest.raises(KeyError, match=r"no stage named 'BatchData'; the stages are \['DataFromList'\]"):
        report.stage("BatchData")


def test_slow_image_augmentation_is_named_with_its_augmentors():
    pytest.importorskip("cv2")
    from inputpipe.dataflow import AugmentImageComponent, imgaug

    image = np.zeros((1500, 1500, 3), dtype="uint8")        # copying and flipping 6.75 MB: milliseconds
    df = AugmentImageComponent(DataFromList([[image, 0]] * 4, shuffle=False), [imgaug.Flip(horiz=True, prob=1.0)])
    report = profile(df, **RUN)
    assert [s.kind for s in report.stages] == ["source", "image"]
    assert report.limiting.name == "AugmentImageComponent(Flip)"
    assert "Run decoding/augmenting in parallel: MultiProcessMapData(ds, num_proc=" in report.suggestion


class _ReportingThreadMap(MultiThreadMapData):
    """A thread map that reports its workers' busy time (the worker_stats() hook the doctor reads)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.busy = [0.0, 0.0]
        self.created = time.perf_counter()

    def worker_stats(self):
        # each worker claims to have been busy a tenth of the time since it was created
        elapsed = time.perf_counter() - self.created
        return [{"rank": r, "busy_seconds": 0.1 * elapsed, "items": 0} for r in range(2)]


def test_busy_share_from_worker_stats_points_at_the_transfer():
    df = _ReportingThreadMap(DataFromList([[i] for i in range(400)], shuffle=False), 2, _sleep_20ms, strict=True)
    try:
        report = profile(df, **RUN)
    finally:
        df.close()
    stage = report.limiting
    assert stage.type_name == "_ReportingThreadMap" and stage.kind == "thread_map"
    assert stage.busy_share == pytest.approx(0.1, abs=0.02)
    assert "2 threads, busy 10%" in report.table()
    assert "busy only 10% of the time: the cost is in moving results" in report.suggestion


def test_a_process_map_whose_workers_wait_is_told_how_many_the_cores_keep_busy():
    """From the numbers of a report (no timing): workers busy 95% of the window and on a CPU 30%
    of it spend 32% of their working time on a CPU, so 2 cores keep 6 of them busy, the count
    num_proc='auto' grows to (each charged its CPU share); CPU-bound workers get no such note."""
    from inputpipe.dataflow.diagnosis import PARALLEL_MAP, SOURCE, StageProfile, suggest

    def report(cpu):
        source = StageProfile("DataFromList", SOURCE, "DataFromList", "df.ds", 1, datapoints=100, own_seconds=0.001)
        stage = StageProfile("MultiProcessMapData(fetch)", PARALLEL_MAP, "MultiProcessMapData", "df", 0,
                             datapoints=100, own_seconds=0.999, share=0.999, inputs=[1], workers=2,
                             worker_unit="processes", busy_share=0.95, worker_cpu_share=cpu)
        return ProfileReport([stage, source], 1.0, 100, 0.0, 0.1, limiting_index=0, cpu_count=2)

    assert ("Its workers spend 32% of their working time on a CPU and wait the rest (I/O): at that share the 2 "
            "cores keep about 6 of them busy (num_proc='auto' grows that far)." in suggest(report(0.3)))
    assert "of their working time on a CPU" not in suggest(report(0.9))
