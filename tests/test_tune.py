"""The static tuner (inputpipe.dataflow.tune) chooses processes or threads and their number per
stage, where to batch and what to cache, from measured costs; prints code that builds that chain;
leaves the user's flow as it was and no worker running.

The stages' costs are busy loops on the thread's CPU clock (CPU work whatever the load) or sleeps
(waits), of known length. The choices follow what the tuner measured, and a machine busy with
other work changes that (a busy loop then gets less than its whole time on a CPU): the tests
assert what tune() promises whatever the measurement (:func:`assert_valid_map_choice`: the kind
its rule gives for the measured CPU share, within the budget, a chain that gives the same data),
and the exact choice where the measurement was clean (a busy loop measured at 95% CPU or more).
Rates are not asserted (the machine is shared)."""
import functools
import json
import math
import itertools
import random
import threading
import time

import numpy as np
import pytest

from conftest import _our_children  # the test's own children (not a forkserver of earlier tests)

from inputpipe.dataflow import (
    BatchData, CacheData, DataFlow, DataFlowTerminated, DataFromGenerator, DataFromList, MapData, MapDataComponent,
    MultiProcessMapAndBatchData, MultiProcessMapData, MultiProcessRunnerZMQ, MultiThreadMapData, ProxyDataFlow,
    SelectComponent, TuneResult, tune,
)
from inputpipe.dataflow._tuning import model
from inputpipe.dataflow._tuning.model import GAIN_NEEDED, MAX_THREADS
from inputpipe.dataflow.seeding import datapoint_rng
from inputpipe.utils import resources

RUN = dict(seconds=0.5, warmup=0.1)


def _spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def busy_4ms(dp):
    _spin(0.004)
    return dp


def nap_10ms(dp):
    time.sleep(0.01)
    return dp


def plus_one(dp):
    return [dp[0] + 1]


def _numbers():
    for i in itertools.count():
        yield [i]


def _slow_numbers():
    for i in itertools.count():
        time.sleep(0.004)
        yield [i]


def _built(result, **extra):
    """The chain the printed code builds, and its stages from the top down."""
    namespace = dict(result.names, **extra)
    exec(result.code, namespace)
    flow, stages = namespace["df"], []
    node = flow
    while node is not None:
        stages.append(node)
        node = getattr(node, "ds", None)
    return flow, stages


#: A busy loop measured at this CPU share or more was measured as on a quiet machine.
CLEAN = 0.95


def trials_decided(result):
    """Whether trial runs overruled the model's first choice (a note says so: the other kind of
    maps ran faster)."""
    return any(note.startswith("The first choice ran at") for note in result.notes)


def assert_valid_map_choice(choice, cpu_budget, result=None):
    """What tune() promises for a map whatever the load: the kind (serial, threads, processes)
    the model rates fastest, or within 5% of it (a near tie goes to fewer changes, processes and
    workers), unless trial runs overruled it (``result``'s notes say so); at least one worker;
    processes no more than the queue model needs to keep the CPUs busy at their measured CPU
    share, threads at most ``MAX_THREADS``."""
    assert choice.work_ms > 0 and choice.cpu_share >= 0, choice
    kind = choice.unit.replace("auto ", "") or "serial"
    assert kind in choice.rates, choice
    if result is None or not trials_decided(result):
        assert choice.rates[kind] * GAIN_NEEDED >= max(choice.rates.values()), choice
    auto = choice.unit.startswith("auto")
    if kind == "processes":
        assert choice.after in ("MultiProcessMapData", "MultiProcessMapAndBatchData"), choice
        # (the queue model's count for the measured share: one per CPU for work that never waits)
        most = model._processes_for(math.inf, 1.0, max(choice.cpu_share, 1e-3), cpu_budget,
                                    model.most_processes(cpu_budget))
        assert auto or 1 <= choice.workers <= most, (most, choice)
    elif kind == "threads":
        assert choice.after == "MultiThreadMapData", choice
        assert auto or 1 <= choice.workers <= MAX_THREADS, choice
    else:
        assert choice.after in ("MapData", "MapDataComponent") and choice.workers is None, choice


def assert_the_trial_is_the_expectation(result):
    """A configuration with parallel maps was run once: what it gave is the rate to expect."""
    if result.trial is not None and not result.trial.stalled:
        assert result.expected_datapoints_per_sec == result.trial_datapoints_per_sec > 0


def _first(flow, count):
    flow.reset_state()
    itr = iter(flow)
    try:
        return [next(itr) for _ in range(count)]
    finally:
        itr.close()
        flow.close()


def test_slow_cpu_map_goes_to_processes_bounded_by_the_cpu_budget():
    source = DataFromGenerator(_numbers)
    df = MapData(source, busy_4ms)
    result = tune(df, cpu_budget=2, **RUN)
    assert isinstance(result, TuneResult)
    choice = result.stage("MapData(busy_4ms)")
    assert_valid_map_choice(choice, 2, result)
    assert choice.work_ms > 3.5                                      # at least its CPU time
    if choice.cpu_share >= CLEAN and not trials_decided(result):
        # the GIL held all the time: threads are no faster than one; two processes are twice as fast
        assert (choice.action, choice.after, choice.workers, choice.unit) == (
            "parallel", "MultiProcessMapData", 2, "processes")
        assert choice.rates["processes"] > 1.5 * max(choice.rates["threads"], choice.rates["serial"])
        assert result.limit == "cpus" and "2 CPUs give at most" in result.limit_detail
    if choice.action == "parallel":
        assert result.code.splitlines()[-2:] == ["df = DataFromGenerator(_numbers)",
                                                 "df = {}(df, {}, busy_4ms, strict=True, ordered=True)".format(
                                                     choice.after, choice.workers)]
    assert result.fill_in == {} and result.before_measured
    assert_the_trial_is_the_expectation(result)
    # the user's chain is as it was, and nothing tune started runs any more
    assert type(df) is MapData and df.ds is source and df.func is busy_4ms
    assert _our_children() == set()
    flow, stages = _built(result)
    assert [type(s).__name__ for s in stages] == [choice.after, "DataFromGenerator"]
    if choice.action == "parallel":
        assert (flow.num_workers, flow.strict, flow.ordered, flow.map_func) == (choice.workers, True, True, busy_4ms)
    assert _first(flow, 20) == [[i] for i in range(20)]

    result = tune(MapData(DataFromGenerator(_numbers), busy_4ms), cpu_budget=3, **RUN)
    three = result.stage("MapData")
    assert_valid_map_choice(three, 3, result)
    if three.cpu_share >= CLEAN and not trials_decided(result):
        assert (three.after, three.workers) == ("MultiProcessMapData", 3)


def test_the_default_cpu_budget_is_the_process_budget_from_the_cgroup_quota(tmp_path, monkeypatch):
    """A cgroup v2 quota of 1.5 CPUs (files written here) gives the tuner 1 CPU."""
    root = tmp_path / "cgroup"
    (root / "app" / "job").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory")
    (root / "app" / "job" / "cpu.max").write_text("150000 100000")
    (tmp_path / "self_cgroup").write_text("0::/app/job\n")
    monkeypatch.setattr(resources, "cpu_budget", functools.partial(
        resources.cpu_budget, cgroup_root=str(root), proc_cgroup=str(tmp_path / "self_cgroup")))
    assert resources.available_cpus(cgroup_root=str(root), proc_cgroup=str(tmp_path / "self_cgroup")) == 1.5
    result = tune(MapData(DataFromGenerator(_numbers), busy_4ms), **RUN)
    assert result.cpu_budget == 1 and str(result).startswith("Tuned configuration (1 CPU, memory budget ")
    choice = result.stage("MapData")
    assert_valid_map_choice(choice, 1, result)
    # one CPU: a process would only add the cost of moving datapoints, when the measurement is
    # clean: the map on a CPU all along, and the source read at about its CPU time (beside two
    # suites its next() of microseconds was measured at 0.2-0.6 ms in some runs: a preemption or a
    # wait for the GIL in a few of its calls; then the model rightly rates a process above the
    # serial chain, which would wait for the source, and a trial on the busy machine confirms it)
    if choice.cpu_share >= CLEAN and choice.rates["processes"] < choice.rates["serial"] * GAIN_NEEDED:
        assert (choice.after, choice.action) == ("MapData", "keep")
        assert result.unchanged and result.limit == "cpus" and result.trial is None


def test_cpu_work_beside_cpu_hogs_is_measured_as_cpu_work():
    """Two programs that keep both cores busy (this machine's other work, too): the busy loop waits
    for a CPU most of the time, and that wait is not taken for the map's own waiting (I/O), so it
    is not given threads or more processes than the CPUs."""
    import subprocess
    import sys

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.2)
        result = tune(MapData(DataFromGenerator(_numbers), busy_4ms), cpu_budget=2, **RUN)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(10)
    choice = result.stage("MapData(busy_4ms)")
    # the wait for a CPU is estimated from the whole process' run-queue time, sampled every 20 ms:
    # 0.99-1.0 beside the two hogs alone, 0.86 beside them and three more suites on 2 CPUs; a map
    # that waits for I/O half of its time measures about 0.5 (a sleeping one, under 0.2)
    assert choice.cpu_share >= 0.75, choice
    assert_valid_map_choice(choice, 2, result)
    assert choice.unit != "processes" or choice.workers <= 2, choice


def test_a_sleeping_map_gets_threads_more_than_the_cores():
    result = tune(MapData(DataFromGenerator(_numbers), nap_10ms), consumer_rate=400, **RUN)
    choice = result.stage("MapData(nap_10ms)")
    # 400/s x (10 ms per call + up to a 5 ms switch interval to take the GIL back after the sleep,
    # charged for the share of the call that waits) x 1.1 margin: 6.6 workers -> 7 on a quiet
    # machine; on a loaded one the measured call moves the count (beside two copies of the suite it
    # chose 6), within 400 x 10 ms x 1.1 = 4.4 -> 5 (no switch interval) and 400 x (11.5 + 5) ms
    # x 1.1 = 7.3 -> 8
    assert (choice.after, choice.unit) == ("MultiThreadMapData", "threads") and 5 <= choice.workers <= 8, choice
    assert choice.cpu_share < 0.2
    assert result.limit == "consumer" and result.expected_datapoints_per_sec <= 400
    assert "MultiThreadMapData(df, {}, nap_10ms, strict=True, ordered=True)".format(choice.workers) in result.code
    flow, stages = _built(result)
    assert [type(s) for s in stages] == [MultiThreadMapData, DataFromGenerator] and flow.num_workers == choice.workers
    assert _first(flow, 12) == [[i] for i in range(12)]


def test_a_cheap_map_after_a_slow_source_is_kept_and_the_source_is_the_limit():
    result = tune(MapData(DataFromGenerator(_slow_numbers), plus_one), **RUN)
    assert result.unchanged and result.stage("MapData(plus_one)").action == "keep"
    assert result.limit == "source" and result.limit_detail.startswith("the source DataFromGenerator: ")
    assert "it waits most of that time" in result.limit_detail
    assert result.trial is None and result.expected_datapoints_per_sec == result.before_datapoints_per_sec
    assert "already configured as the tuner would configure it: keep it" in str(result)


def test_a_well_configured_parallel_map_is_kept_and_not_started():
    df = MultiProcessMapData(DataFromGenerator(_numbers), 2, busy_4ms, strict=True)
    try:
        result = tune(df, cpu_budget=2, **RUN)
        assert df.worker_pids == [] and _our_children() == set()    # never started
    finally:
        df.close()
    choice = result.stage("MultiProcessMapData(busy_4ms)")
    assert choice.before == "MultiProcessMapData, 2 processes"
    assert_valid_map_choice(choice, 2, result)
    if choice.cpu_share >= CLEAN and not trials_decided(result):
        assert (choice.action, choice.workers) == ("keep", 2)
        assert result.unchanged and result.limit == "cpus"
        assert "df = MultiProcessMapData(df, 2, busy_4ms, strict=True)" in result.code


def test_cpu_work_in_threads_is_switched_to_processes():
    df = MultiThreadMapData(DataFromGenerator(_numbers), 4, busy_4ms)
    try:
        result = tune(df, cpu_budget=2, **RUN)
    finally:
        df.close()
    choice = result.stage("MultiThreadMapData(busy_4ms)")
    assert choice.before == "MultiThreadMapData, 4 threads"
    assert_valid_map_choice(choice, 2, result)
    if choice.unit == "processes":              # the model rates processes faster: it switches
        assert choice.action == "switch" and choice.after == "MultiProcessMapData"
        assert "MultiProcessMapData(df, {}, busy_4ms)".format(choice.workers) in result.code    # strict=False kept
    if choice.cpu_share >= CLEAN and choice.gil_share is not None and choice.gil_share >= CLEAN \
            and not trials_decided(result):     # measured clean: all of it holds the GIL
        assert (choice.unit, choice.workers) == ("processes", 2)


def _image(dp):
    _spin(0.002)
    return [np.full((128, 128, 3), dp[0] % 256, np.uint8), dp[0]]    # 48 KiB + a label


def _big_image(dp):
    _spin(0.002)
    return [np.full((160, 160, 3), dp[0] % 256, np.uint8), dp[0]]    # 75 KiB + a label


def test_large_datapoints_are_batched_in_the_workers():
    result = tune(BatchData(MapData(DataFromGenerator(_numbers), _big_image), 8), cpu_budget=2, **RUN)
    choice = result.stage("MapData")
    assert_valid_map_choice(choice, 2, result)
    if choice.unit == "processes":              # large datapoints: batched where they are made
        assert choice.after == "MultiProcessMapAndBatchData"
        assert result.stage("BatchData(8)").action == "batch in workers"
        assert "MultiProcessMapAndBatchData(df, {}, _big_image, batch_size=8, strict=True, ordered=True)".format(
            choice.workers) in result.code
        flow, stages = _built(result)
        assert [type(s) for s in stages] == [MultiProcessMapAndBatchData, DataFromGenerator]
    else:
        flow, stages = _built(result)
        assert [type(s) for s in stages][0] is BatchData
    if choice.cpu_share >= CLEAN and choice.gil_share is not None and choice.gil_share >= CLEAN \
            and not trials_decided(result):
        assert (choice.after, choice.workers) == ("MultiProcessMapAndBatchData", 2)
    images, labels = _first(flow, 2)[1]
    assert images.shape == (8, 160, 160, 3) and images.dtype == np.uint8 and labels.tolist() == list(range(8, 16))

    # 48 KiB: batched in the workers only where the model rates that faster (fewer messages)
    small = tune(BatchData(MapData(DataFromGenerator(_numbers), _image), 8), cpu_budget=2, **RUN)
    assert_valid_map_choice(small.stage("MapData"), 2, small)
    batch = small.stage("BatchData(8)")
    if small.stage("MapData").after == "MultiProcessMapAndBatchData":
        assert batch.action == "batch in workers"
        assert batch.rates["in the workers"] >= batch.rates["in the consumer"] * GAIN_NEEDED, batch
    else:
        assert batch.action == "keep"


def test_a_batch_with_a_remainder_stays_out_of_the_workers_and_keeps_the_last_batch():
    """MultiProcessMapAndBatchData drops an epoch's incomplete last group, so a
    BatchData(remainder=True) is never moved into the workers (whatever the measurements): the
    tuned chain yields each epoch's last, smaller batch."""
    items = [[i] for i in range(20)]
    result = tune(BatchData(MapData(DataFromList(items, shuffle=False), _big_image), 8, remainder=True),
                  cpu_budget=2, **RUN)
    assert result.stage("BatchData(8)").action != "batch in workers"
    assert "MultiProcessMapAndBatchData" not in result.code and "BatchData(df, 8, remainder=True)" in result.code
    flow, stages = _built(result, lst=items)
    flow.reset_state()
    try:
        epochs = [list(flow) for _ in range(2)]
    finally:
        flow.close()
    for epoch in epochs:
        assert [len(labels) for _, labels in epoch] == [8, 8, 4]
        assert sorted(int(v) for _, labels in epoch for v in labels) == list(range(20))


def jitter(dp):
    return [dp[0] + np.random.rand()]


def test_a_deterministic_small_stage_is_cached_below_a_random_one():
    items = [[i] for i in range(300)]
    result = tune(MapData(MapData(DataFromList(items, shuffle=False), busy_4ms), jitter), cpu_budget=2, **RUN)
    assert result.cache == "MapData(busy_4ms)"
    assert "was the same in two passes over" in result.cache_detail and "(300 datapoints, about" in result.cache_detail
    assert result.fill_in == {"lst": "the list given as lst to DataFromList (300 items)"}
    assert result.names["lst"] is items
    choice = result.stage("MapData(busy_4ms)")
    assert_valid_map_choice(choice, 2, result)
    mapped = "df = MapData(df, busy_4ms)" if choice.workers is None else \
        "df = {}(df, {}, busy_4ms, strict=True, ordered=True)".format(choice.after, choice.workers)
    assert result.code.splitlines()[-4:] == [
        "df = DataFromList(lst, shuffle=False)", mapped, "df = CacheData(df)", "df = MapData(df, jitter)"]
    if choice.cpu_share >= CLEAN and not trials_decided(result):
        assert mapped == "df = MultiProcessMapData(df, 2, busy_4ms, strict=True, ordered=True)"
    assert result.first_epoch_datapoints_per_sec is not None
    assert result.expected_datapoints_per_sec > 2 * result.first_epoch_datapoints_per_sec
    flow, stages = _built(result)
    assert [type(s).__name__ for s in stages] == ["MapData", "CacheData", choice.after, "DataFromList"]
    values = _first(flow, 40)
    assert [int(v[0]) for v in values] == list(range(40)) and len({v[0] % 1 for v in values}) == 40


def noisy_np(dp):
    _spin(0.004)
    return [dp[0] + np.random.rand()]


def noisy_stdlib(dp):
    _spin(0.004)
    return [dp[0] + random.random()]


def noisy_per_datapoint(dp):
    _spin(0.004)
    return [dp[0] + datapoint_rng().rand()]


@pytest.mark.parametrize("func, why", [(noisy_np, "it draws random numbers"),
                                       (noisy_stdlib, "it draws random numbers"),
                                       (noisy_per_datapoint, "two passes gave different datapoints")])
def test_a_random_stage_is_not_cached(func, why):
    result = tune(MapData(DataFromList([[i] for i in range(300)], shuffle=False), func), cpu_budget=2, **RUN)
    assert result.cache is None and "CacheData" not in result.code
    assert result.cache_detail == "MapData({}): {}".format(func.__name__, why)


def test_the_sources_cost_leaves_out_the_timings_own_bookkeeping(monkeypatch):
    # the timing reads every thread's schedstat now and then (every 20 ms): slow under load (a file
    # read per thread, and other threads take the GIL meanwhile), here 20 ms a read, 4 ms a
    # datapoint of the 4 ms map; that is no cost of the source (a list read: microseconds; under
    # load its next() may still wait for the GIL: 0.3 ms seen beside three suites)
    from inputpipe.dataflow._tuning import chain as tuning_chain
    from inputpipe.dataflow._tuning import model as tuning_model

    read_schedstat, measure, sources = tuning_chain._runqueue_seconds, tuning_model.measure, []

    def slow_read():
        time.sleep(0.02)
        return read_schedstat()

    def recording_measure(*args, **kwargs):
        costs = measure(*args, **kwargs)
        sources.append(costs.source)
        return costs

    monkeypatch.setattr(tuning_chain, "_runqueue_seconds", slow_read)
    monkeypatch.setattr(tuning_model, "measure", recording_measure)
    tune(MapData(DataFromList([[i] for i in range(300)], shuffle=False), noisy_np), cpu_budget=2, **RUN)
    assert len(sources) == 1 and sources[0] < 1e-3, sources


def test_a_failing_map_raises_and_leaves_nothing_running():
    def fails_at_5(dp):
        if dp[0] == 5:
            raise ValueError("bad datapoint 5")
        return dp

    with pytest.raises(ValueError, match="bad datapoint 5"):
        tune(MapData(DataFromGenerator(_numbers), fails_at_5), **RUN)


def test_arguments_are_checked():
    df = MapData(DataFromGenerator(_numbers), plus_one)
    with pytest.raises(TypeError, match="tune: expected a DataFlow"):
        tune([1, 2], seconds=1)
    with pytest.raises(ValueError, match="tune: seconds must be > 0, got 0"):
        tune(df, seconds=0)
    with pytest.raises(ValueError, match="tune: consumer_rate must be > 0 datapoints/s or None, got -1"):
        tune(df, consumer_rate=-1)
    with pytest.raises(ValueError, match="tune: cpu_budget must be >= 1, got 0"):
        tune(df, cpu_budget=0)


class _GivesThreeThenWaits(DataFlow):
    """Three datapoints, then waits until closed (a reader whose server went away)."""

    def __init__(self):
        self.closed = threading.Event()

    def __iter__(self):
        yield from ([i] for i in range(3))
        while not self.closed.wait(0.05):
            pass
        raise DataFlowTerminated("closed")

    def close(self):
        self.closed.set()


@pytest.mark.timeout(30)
def test_a_chain_that_stalls_gives_a_stalled_result_within_the_stall_timeout():
    source = _GivesThreeThenWaits()
    started = time.perf_counter()
    result = tune(MapData(source, plus_one), seconds=0.5, warmup=0, stall_timeout=0.5)
    assert time.perf_counter() - started < 5
    assert result.stalled and result.limit == "stalled" and result.expected_datapoints_per_sec == 0
    assert str(result).startswith("Nothing tuned: no datapoint came for the stall timeout; ")
    assert source.closed.is_set()          # so the thread that waited in it has ended


class Scale(ProxyDataFlow):
    """A stage of the user's own: the tuner copies it and writes it from its constructor's arguments."""

    def __init__(self, ds, factor, *, offset=0):
        super().__init__(ds)
        self.factor = factor
        self.offset = offset

    def __iter__(self):
        for dp in self.ds:
            yield [dp[0] * self.factor + self.offset] + dp[1:]


class Doubler:
    def double(self, x):
        return 2 * x


def _pairs():
    for i in itertools.count():
        yield [i, -i]


def test_the_code_names_lambdas_methods_and_stages_it_copies():
    doubler = Doubler()
    shift = lambda dp: [dp[0], dp[1] + 1]           # noqa: E731 - a lambda on purpose
    df = Scale(SelectComponent(MapDataComponent(MapData(DataFromGenerator(_pairs), shift), doubler.double, 1),
                               [1, 0]), 3, offset=1)
    result = tune(df, **RUN)
    assert result.unchanged and result.trial is None
    assert result.code.splitlines()[-5:] == [
        "df = DataFromGenerator(_pairs)", "df = MapData(df, func)", "df = MapDataComponent(df, doubler.double, 1)",
        "df = SelectComponent(df, [1, 0])", "df = Scale(df, 3, offset=1)"]
    assert set(result.fill_in) == {"func", "doubler"}
    assert result.fill_in["func"].startswith("the lambda at {}:".format(__file__))
    assert result.fill_in["doubler"] == "your Doubler whose method double is used"
    assert result.names["func"] is shift and result.names["doubler"] is doubler and result.names["Scale"] is Scale
    assert "# Names tune could not write out (define them as in your code):" in result.code
    flow, stages = _built(result)
    assert [type(s) for s in stages] == [Scale, SelectComponent, MapDataComponent, MapData, DataFromGenerator]
    expected = _first(df, 5)
    assert expected == [[3 * (2 * (1 - i)) + 1, i] for i in range(5)]
    assert _first(flow, 5) == expected


def test_a_base_with_workers_of_its_own_is_closed_at_the_end():
    base = MultiProcessRunnerZMQ(DataFromGenerator(_numbers), 1)
    result = tune(MapData(base, busy_4ms), cpu_budget=2, **RUN)
    assert_valid_map_choice(result.stage("MapData(busy_4ms)"), 2, result)
    assert "df = MultiProcessRunnerZMQ(df, 1)" in result.code or "df = MultiProcessRunnerZMQ(df)" in result.code
    assert result.cache_detail == "MapData(busy_4ms): its length is unknown (an endless or generated source)"
    assert _our_children() == set()       # the runner's worker too


def test_an_auto_stage_stays_auto_and_gets_the_kind_its_work_needs():
    df = MultiThreadMapData(DataFromGenerator(_numbers), "auto", busy_4ms, strict=True)
    try:
        result = tune(df, cpu_budget=2, **RUN)
    finally:
        df.close()
    choice = result.stage("MultiThreadMapData(busy_4ms)")
    assert (choice.before, choice.workers) == ("MultiThreadMapData, auto threads", None)
    assert "; auto: the controller sizes it while running (the model's count: " in choice.reason
    assert_valid_map_choice(choice, 2, result)
    if choice.unit == "auto processes":         # the model rates processes faster: it switches
        assert (choice.action, choice.after, choice.unit) == ("switch", "MultiProcessMapData", "auto processes")
        assert "df = MultiProcessMapData(df, 'auto', busy_4ms, strict=True)" in result.code
        assert "MultiThreadMapData(busy_4ms)  MultiProcessMapData, auto processes: " in str(result)
    else:
        assert (choice.action, choice.unit) == ("keep", "auto threads")
    if choice.cpu_share >= CLEAN and choice.gil_share is not None and choice.gil_share >= CLEAN \
            and not trials_decided(result):
        assert choice.unit == "auto processes" and "(the model's count: 2)" in choice.reason


def test_the_result_as_plain_data_leaves_out_the_objects():
    items = [[i] for i in range(50)]
    result = tune(MapData(DataFromList(items, shuffle=False), plus_one), seconds=0.3, warmup=0)
    data = result.to_dict()
    assert "names" not in data and "measured" not in data and "trial" not in data
    assert data["fill_in"] == {"lst": "the list given as lst to DataFromList (50 items)"}
    assert data["stages"][0]["stage"] == "MapData(plus_one)" and data["code"] == result.code
    json.dumps(data)


def test_a_non_strict_map_under_the_proposed_cache_becomes_strict_so_the_cache_fills():
    # a non-strict map streams without end, so a CacheData above it would never fill
    items = [[i] for i in range(40)]
    result = tune(BatchData(MultiThreadMapData(DataFromList(items, shuffle=False), 2, busy_4ms), 4), cpu_budget=2,
                  **RUN)
    assert result.cache is not None and "CacheData" in result.code
    mapped = [line for line in result.code.splitlines() if "busy_4ms" in line]
    assert len(mapped) == 1 and "strict=True" in mapped[0], result.code
    flow, stages = _built(result)
    assert type(stages[0]) is CacheData
    flow.reset_state()
    try:
        epochs = [list(flow) for _ in range(2)]         # the first epoch ends and fills the cache
    finally:
        flow.close()
    assert len(epochs[0]) == len(epochs[1]) == 10
    assert sorted(int(v) for batch in epochs[1] for v in np.ravel(batch[0])) == list(range(40))
