"""The controller of "auto" stages: it grows a stage whose workers limit the consumer, shrinks
one under a slow consumer, never exceeds the CPU or the memory budget (shared by the stages of
the process), reports its own cost, and says what it did (worker_count_history, worker_stats,
the InputSource's statistics and summaries). Also: "auto" is accepted wherever a worker count
is, by keyword, by position and under tensorpack's old names."""
import itertools
import math
import time

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.dataflow import (Autoscale, DataFlow, MultiProcessMapAndBatchData, MultiProcessMapData,
                                MultiProcessRunner, MultiProcessRunnerZMQ, MultiThreadMapData, MultiThreadRunner,
                                PrefetchDataZMQ, ThreadedMapData)
from inputpipe.dataflow.autoscale import auto_stages, stage_name
from inputpipe.input_source import QueueInput, hooked_session
from inputpipe.utils import resources
from autoscale_helpers import ModelStage, virtual_clock
from dataflow_helpers import Indexed
from input_source_helpers import SPECS

pytestmark = pytest.mark.timeout(60)


class Forever(DataFlow):
    def __iter__(self):
        for i in itertools.count():
            yield [i]


def identity(dp):
    return dp


def sleep_20ms(dp):
    time.sleep(0.02)
    return dp


@pytest.fixture(autouse=True)
def no_budget_override():
    resources.set_budget()
    yield
    resources.set_budget()


@pytest.fixture
def clock(monkeypatch):
    yield from virtual_clock(monkeypatch)


def iterate(df, seconds, consumer_sleep=0.0, until=None):
    """Iterate ``df`` for ``seconds`` (or until ``until(df)``); returns the datapoints taken."""
    itr = iter(df)
    count = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            next(itr)
            count += 1
            if consumer_sleep:
                time.sleep(consumer_sleep)
            if until is not None and until(df):
                break
    finally:
        itr.close()
    return count


def counts(df):
    return [change.workers for change in df.worker_count_history()]


# --------------------------------------------------------------------------- the rules at work

@pytest.mark.parametrize("cls", [MultiProcessMapData, MultiThreadMapData])
def test_a_stage_whose_workers_are_the_limit_grows_while_cpus_are_idle(cls):
    # map_func sleeps 20 ms (a worker does 50/s), the consumer takes nothing: it waits
    df = cls(Forever(), Autoscale(interval=0.1, cpu_budget=4), sleep_20ms, buffer_size="auto")
    df.reset_state()
    with df:
        iterate(df, 3.0, until=lambda d: d.num_workers >= 4)
    history = df.worker_count_history()
    assert history[0].workers == 1 and history[0].reason == "start (auto)"    # the datapoints' size unknown
    assert max(counts(df)) >= 4
    assert history[1].reason.startswith("grow: the consumer waited")
    # buffer_size="auto" follows the workers: the same tasks in flight per worker
    assert df.buffer_size == df.num_workers * df._buffer_for(1)


def sleep_5ms(dp):
    time.sleep(0.005)
    return dp


@pytest.mark.parametrize("ordered", [False, True])
def test_an_auto_buffer_holds_50ms_of_each_workers_measured_work(ordered):
    # short tasks: a worker would wait for the consumer's thread between them with only 2 in
    # flight; the buffer holds ceil(50 ms / measured time per task) per worker (pinned count)
    from inputpipe.dataflow._parallel import map_buffer as scheduler

    df = MultiThreadMapData(Forever(), 2, sleep_5ms, buffer_size="auto", ordered=ordered)
    base = 4 if ordered else 2
    assert df.buffer_size == base * 2                    # nothing measured yet
    df.reset_state()
    with df:
        iterate(df, 5.0, until=lambda d: d._measured_task_seconds is not None)
        measured = df._measured_task_seconds
        assert measured is not None and 0.005 <= measured < 0.5
        per_worker = max(base, min(32, math.ceil(scheduler.AUTO_BUFFER_SECONDS / measured)))
        assert df.buffer_size == 2 * per_worker
        if measured < 0.008:                             # a quiet host: 5 ms sleeps take about 5 ms
            assert df.buffer_size >= 2 * 7


def test_an_auto_buffer_stops_at_32_per_worker_and_long_tasks_keep_the_base(monkeypatch):
    from inputpipe.dataflow._parallel import map_buffer as scheduler

    monkeypatch.setattr(scheduler, "AUTO_BUFFER_SECONDS", 10.0)      # any task is "short"
    quick = MultiThreadMapData(Forever(), 2, identity, buffer_size="auto")
    quick.reset_state()
    with quick:
        iterate(quick, 5.0, until=lambda d: d._measured_task_seconds is not None)
        assert quick._measured_task_seconds is not None and quick.buffer_size == 2 * 32
    monkeypatch.setattr(scheduler, "AUTO_BUFFER_SECONDS", 0.02)
    slow = MultiThreadMapData(Forever(), 2, sleep_20ms, buffer_size="auto", ordered=True)
    slow.reset_state()
    with slow:
        iterate(slow, 5.0, until=lambda d: d._measured_task_seconds is not None)
        assert slow._measured_task_seconds >= 0.02 and slow.buffer_size == 2 * 4


def test_threads_that_wait_for_io_grow_beyond_the_cpus():
    # sleeping threads use no CPU: the budget of 1 CPU does not stop them (up to 8 per CPU)
    df = MultiThreadMapData(Forever(), Autoscale(interval=0.1, cpu_budget=1), sleep_20ms, buffer_size="auto")
    df.reset_state()
    with df:     # (on a busy machine a growth may be undone, then tried again 20 decisions later)
        iterate(df, 15.0, until=lambda d: d.num_workers > 2)
    assert max(counts(df)) > 2 and max(counts(df)) <= 8


@pytest.mark.parametrize("cls", [MultiProcessMapData, MultiThreadMapData])
def test_a_stage_under_a_slow_consumer_shrinks(cls):
    df = cls(Forever(), Autoscale(interval=0.1, start=4, cpu_budget=4), identity, buffer_size=16)
    df.reset_state()
    with df:     # (on a loaded machine a worker starved of CPU makes the consumer wait: no shrink
        # then, and beside three suites on 2 CPUs the first shrink came after 3.7 s, the next not in 15 s)
        iterate(df, 40.0, consumer_sleep=0.005, until=lambda d: d.num_workers == 1)
    history = df.worker_count_history()
    assert counts(df)[0] == 4 and counts(df)[-1] == 1, history
    # (on a busy machine a shrink after which the consumer waited is undone, and tried again)
    assert history[1].reason.startswith("shrink: the consumer waited"), history
    assert all(change.reason.startswith(("shrink: the consumer waited", "undo: the consumer waited"))
               for change in history[1:]), history


def test_model_a_stage_grows_toward_the_consumers_rate_at_most_doubling(clock):
    stage = ModelStage(Autoscale(interval=0.5, cpu_budget=4), per_worker=50, consumer=400, clock=clock)
    stage.run_for(6.0)
    assert [c.workers for c in stage.worker_count_history()] == [1, 2, 4, 8]   # 8 x 50/s = the consumer's 400/s
    stage.run_for(10.0)
    assert stage.workers == 8                     # the consumer no longer waits, no worker is idle


def one_worker_of_100_per_s(clock, ceiling):
    """A model stage of 1 worker giving 100/s to a consumer that takes 1000/s, at most ``ceiling``/s
    out whatever the count."""
    return ModelStage(Autoscale(interval=0.5, start=1, cpu_budget=4), per_worker=100, consumer=1000,
                      ceiling=ceiling, clock=clock)


def test_model_a_growth_that_does_not_deliver_more_is_undone_and_tried_again_later(clock):
    # the workers are all busy and the consumer waits, but 100/s come out whatever their number
    stage = one_worker_of_100_per_s(clock, ceiling=100)
    stage.run_for(3.0)
    history = stage.worker_count_history()
    assert [c.workers for c in history] == [1, 2, 1]
    assert history[1].reason.startswith("grow: the consumer waited 90%")
    # as many as before is within an interval's noise of enough: measured over three intervals
    assert history[2].reason == "undo: 2 workers delivered 100/s over 3 intervals, 1 delivered 100/s"
    stage.run_for(5.0)
    assert len(stage.worker_count_history()) == 3          # 2 stays out of reach for 20 decisions ...
    stage.run_for(10.0)
    assert [c.workers for c in stage.worker_count_history()][3:5] == [2, 1]     # ... then it is tried again


def test_model_a_growth_that_delivers_a_little_more_is_measured_over_three_intervals_before_it_is_undone(clock):
    # 2 workers deliver 105/s against 100/s: more, but short of a quarter of the ideal doubling
    stage = one_worker_of_100_per_s(clock, ceiling=105)
    stage.run_for(3.0)
    assert [c.workers for c in stage.worker_count_history()] == [1, 2, 1]
    assert stage.worker_count_history()[2].reason == \
        "undo: 2 workers delivered 105/s over 3 intervals, 1 delivered 100/s"
    # grown, one interval to settle, three measured: the undo comes 4 intervals after the growth
    assert stage.changed_at[1] - stage.changed_at[0] == pytest.approx(2.0, abs=0.25)     # (0.05 s steps)


def test_model_a_growth_short_in_its_first_interval_is_kept_when_the_intervals_together_deliver(clock):
    stage = one_worker_of_100_per_s(clock, ceiling=110)
    stage.run_for(1.5)                  # grown to 2, settled, one interval at 110/s: measured on
    assert [c.workers for c in stage.worker_count_history()] == [1, 2]
    stage.ceiling = float("inf")        # (the first interval's 110/s was noise: 2 workers give 200/s)
    stage.run_for(0.5)
    stage.run_for(4.0)
    history = stage.worker_count_history()
    assert [c.workers for c in history][:3] == [1, 2, 4], history         # (155/s over the two: kept)
    assert not any(c.reason.startswith("undo") for c in history), history


@pytest.mark.parametrize("cpu_share,grows", [(0.01, True), (0.5, False)], ids=["threads that wait", "cpu-bound"])
def test_model_threads_that_wait_grow_when_the_consumer_waits_5_percent(clock, cpu_share, grows):
    # 10 threads give 930/s to a consumer that takes 1000/s: it waits 7% of the time
    stage = ModelStage(Autoscale(interval=0.5, start=10, cpu_budget=8), per_worker=93, consumer=1000, clock=clock,
                       cpu_share=cpu_share)
    stage.run_for(4.0)
    history = stage.worker_count_history()
    if grows:     # one more thread costs no CPU: 11 x 93/s feed the consumer's 1000/s
        assert [c.workers for c in history] == [10, 11], history
        assert history[1].reason.startswith("grow: the consumer waited 7% of ") and history[1].reason.endswith(
            "s, 10 workers busy 100%, 930 results/s")
    else:         # CPU-bound threads grow once it waits 10%
        assert [c.workers for c in history] == [10], history


def test_model_a_stage_under_a_slow_consumer_shrinks_one_at_a_time_with_settling(clock):
    stage = ModelStage(Autoscale(interval=0.5, start=6, cpu_budget=8), per_worker=100, consumer=150, clock=clock)
    stage.run_for(10.0)
    history = stage.worker_count_history()
    assert [c.workers for c in history] == [6, 5, 4, 3, 2]      # 2 x 100/s feed 150/s with a worker's margin
    assert all(b - a >= 0.99 for a, b in zip(stage.changed_at, stage.changed_at[1:]))   # settle, then measure


# -------------------------------------------------------------------------------- the budgets

def spin_5ms(dp):
    end = time.thread_time() + 0.005          # CPU work: 5 ms of this process' CPU, whatever the load
    while time.thread_time() < end:
        pass
    return dp


def test_cpu_bound_worker_processes_never_exceed_the_cpu_budget():
    # each process works on a CPU all its working time (a share of 1, the waits for a CPU that
    # other programs hold taken out): one per CPU of the budget, however long the consumer waits
    df = MultiProcessMapData(Forever(), Autoscale(interval=0.05, cpu_budget=2), spin_5ms, buffer_size="auto")
    df.reset_state()
    with df:
        iterate(df, 1.5)
    assert max(counts(df)) <= 2 and df.num_workers <= 2
    resources.set_budget(cpus=1)                     # the process-wide budget, read by "auto"
    df = MultiProcessMapData(Forever(), "auto", spin_5ms, buffer_size="auto")
    df.reset_state()
    with df:
        df._controller.settings.interval = 0.05
        iterate(df, 1.5)
    assert counts(df) == [1] and df.num_workers == 1 and len(df.worker_pids) == 1


def test_cpu_bound_worker_processes_beside_cpu_hogs_stay_within_the_budget():
    # two programs keep both cores busy: the workers wait for a CPU much of the time, which is
    # not their work's waiting, so they are still charged a whole CPU each
    import subprocess
    import sys

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        df = MultiProcessMapData(Forever(), Autoscale(interval=0.05, cpu_budget=2), spin_5ms, buffer_size="auto")
        df.reset_state()
        with df:
            iterate(df, 3.0)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(10)
    assert max(counts(df)) <= 2, df.worker_count_history()


def test_worker_processes_that_wait_outnumber_the_cpus():
    # a process that sleeps uses almost no CPU: charged an eighth of one at least, so a budget of
    # one CPU takes up to 8 of them (it was one process per CPU before the CPU share was measured)
    df = MultiProcessMapData(Forever(), Autoscale(interval=0.05, cpu_budget=1), sleep_20ms, buffer_size="auto")
    df.reset_state()
    with df:
        iterate(df, 15.0, until=lambda d: d.num_workers > 2)
    assert 2 < max(counts(df)) <= 8
    grown = [c for c in df.worker_count_history()[1:] if c.reason.startswith("grow")]
    assert grown and all(c.workers <= 8 for c in grown)


@pytest.mark.parametrize("memory_budget", [True, False], ids=["memory budget", "no memory budget"])
def test_auto_stages_of_one_process_share_the_cpu_budget(memory_budget, monkeypatch):
    resources.set_budget(cpus=3)
    if not memory_budget:                  # a system that does not say how much memory is available
        monkeypatch.setattr(resources, "memory_budget", lambda: None)
    inner = MultiProcessMapData(Forever(), Autoscale(interval=0.05), spin_5ms, buffer_size="auto")
    outer = MultiProcessMapData(inner, Autoscale(interval=0.05), spin_5ms, buffer_size="auto")
    outer.reset_state()
    with outer, inner:
        seen = []
        deadline = time.monotonic() + 1.5
        itr = iter(outer)
        while time.monotonic() < deadline:
            next(itr)
            seen.append(inner.num_workers + outer.num_workers)
        itr.close()
    assert max(seen) <= 3                  # CPU-bound: each worker takes a whole CPU of the 3
    if memory_budget:                      # one each until the size of their datapoints is known
        assert counts(inner)[0] == 1 and counts(outer)[0] == 1
    else:                                  # min(2, budget), the second to start what the first left
        assert counts(inner)[0] == 2 and counts(outer)[0] == 1


def test_a_tiny_memory_budget_keeps_one_worker():
    df = MultiProcessMapData(Forever(), Autoscale(interval=0.05, cpu_budget=4, memory_budget=1), sleep_20ms,
                             buffer_size="auto")
    df.reset_state()
    with df:
        iterate(df, 1.5)          # the consumer waits for its only worker: without the budget it grows
    assert counts(df) == [1]
    df = MultiProcessMapData(Forever(), Autoscale(interval=0.05, start=2, cpu_budget=4, memory_budget=1),
                             sleep_20ms, buffer_size="auto")
    df.reset_state()
    with df:
        iterate(df, 2.0, until=lambda d: d.num_workers == 1)
        iterate(df, 0.5)
    history = df.worker_count_history()
    assert counts(df) == [2, 1]
    assert history[1].reason.startswith("shrink: memory") and "of a 0 MB budget" in history[1].reason


def test_set_num_workers_is_not_limited_by_the_budget_but_the_controller_is():
    df = MultiThreadMapData(Indexed(100), Autoscale(interval=0.05, cpu_budget=1), identity, strict=True,
                            ordered=True)
    df.reset_state()
    with df:
        df.set_num_workers(3)
        assert [dp[0] for dp in df] == list(range(100))
    assert 3 in counts(df) and df.worker_count_history()[1].reason == "requested"


# --------------------------------------------------------------------------- cost, statistics

def test_the_controller_reports_its_own_cost():
    df = MultiProcessMapData(Forever(), Autoscale(interval=0.02, cpu_budget=2), sleep_20ms)
    df.reset_state()
    with df:
        iterate(df, 10.0, until=lambda d: d.autoscale_cost()["decisions"] >= 5)
        cost = df.autoscale_cost()
    assert cost["decisions"] >= 5
    assert cost["cpu_seconds"] > 0 and cost["resize_seconds"] >= 0
    pinned = MultiThreadMapData(Indexed(3), 1, identity)
    assert pinned.autoscale_cost() == {"decisions": 0.0, "cpu_seconds": 0.0, "resize_seconds": 0.0}


def test_history_and_worker_stats_of_pinned_and_auto_stages():
    pinned = MultiProcessMapData(Indexed(20), 2, identity, strict=True)
    assert not pinned.autoscaled and pinned.worker_count_history() == []
    pinned.reset_state()
    with pinned:
        assert len(list(pinned)) == 20
        (start,) = pinned.worker_count_history()
        assert (start.workers, start.reason) == (2, "start (pinned)") and abs(start.time - time.time()) < 60
        assert [s["active"] for s in pinned.worker_stats()] == [True, True]
    auto = MultiProcessMapData(Indexed(60), Autoscale(interval=0, settle_intervals=0, cpu_budget=3,
                                                      start=2, policy=lambda m: 3 if m.workers == 2 else 1),
                               identity, strict=True)
    auto.reset_state()
    with auto:
        assert len(list(auto)) == 60
        stats = auto.worker_stats()
    assert counts(auto)[:3] == [2, 3, 1]
    assert [s["rank"] for s in stats] == [0, 1, 2] and [s["active"] for s in stats].count(True) == 1
    assert sum(s["items"] for s in stats) == 60                  # retired workers keep their counts
    assert sum(s["active"] for s in stats) == auto.num_workers
    assert auto_stages(auto) == [auto] and auto_stages(pinned) == []
    assert stage_name(auto) == "MultiProcessMapData(identity)"


def test_input_source_statistics_and_summaries_report_the_auto_stages():
    inner = MultiThreadMapData(Forever(), Autoscale(interval=0, settle_intervals=0, cpu_budget=3,
                                                    policy=lambda m: 3), identity, buffer_size="auto")
    df = MultiThreadMapData(inner, 1, lambda dp: [np.array([dp[0], 0, 0], np.float32), dp[0]])
    source = QueueInput(df)
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        _, label = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        for _ in range(10):
            run(label)
        with graph.as_default():
            merged = tf.compat.v1.summary.merge_all()
        summary = tf.compat.v1.Summary.FromString(run(merged))
    source.close()
    name = "MultiThreadMapData(identity)"
    assert source.stats.worker_counts() == {name: 3}
    assert source.stats.summary()["workers/" + name] == 3
    assert [c.workers for c in source.stats.worker_history()[name]][:2] == [1, 3]
    values = {v.tag: v.simple_value for v in summary.value}
    assert values["input/workers/MultiThreadMapData_identity"] == 3.0


# ------------------------------------------------------------------------------ the arguments

def make_auto_flows():
    return [
        MultiProcessMapData(Indexed(6), "auto", identity, strict=True),
        MultiProcessMapData(Indexed(6), num_proc="auto", map_func=identity, strict=True),
        MultiProcessMapAndBatchData(Indexed(6), "auto", identity, 2, strict=True),
        MultiThreadMapData(Indexed(6), "auto", identity, strict=True),
        MultiThreadMapData(Indexed(6), num_thread=Autoscale(start=1), map_func=identity, strict=True),
        MultiProcessRunnerZMQ(Indexed(6), "auto"),
        MultiProcessRunner(Indexed(6), 4, "auto"),
        MultiThreadRunner(lambda: Indexed(6), 4, "auto"),
    ]


def test_auto_by_position_and_keyword_runs_every_parallel_flow():
    for df in make_auto_flows():
        assert df.autoscaled, type(df).__name__
        df.reset_state()
        with df:
            got = list(df)
        assert len(got) == (3 if isinstance(df, MultiProcessMapAndBatchData) else 6), type(df).__name__
        assert df.worker_count_history()[0].reason == "start (auto)"


def test_auto_under_tensorpack_old_names(recwarn):
    flows = [MultiProcessMapData(Indexed(6), nr_proc="auto", map_func=identity, strict=True),
             ThreadedMapData(Indexed(6), nr_thread="auto", map_func=identity, strict=True),
             MultiProcessMapAndBatchData(Indexed(6), nr_proc="auto", map_func=identity, batch_size=2, strict=True),
             PrefetchDataZMQ(Indexed(6), nr_proc="auto"),
             MultiProcessRunner(Indexed(6), nr_prefetch=4, nr_proc="auto"),
             MultiThreadRunner(lambda: Indexed(6), nr_prefetch=4, nr_thread="auto")]
    assert all(df.autoscaled for df in flows)
    assert len([w for w in recwarn if issubclass(w.category, DeprecationWarning)]) >= len(flows)


@pytest.mark.parametrize("make,message", [
    (lambda: MultiProcessMapData(Indexed(3), "fast", identity),
     "MultiProcessMapData: num_proc must be an int >= 1 or 'auto', got 'fast'"),
    (lambda: MultiThreadMapData(Indexed(3), 0, identity),
     "MultiThreadMapData: num_thread must be an int >= 1 or 'auto', got 0"),
    (lambda: MultiProcessMapAndBatchData(Indexed(3), "AUTO", identity, 2),
     "MultiProcessMapAndBatchData: num_proc must be an int >= 1 or 'auto', got 'AUTO'"),
    (lambda: MultiProcessRunnerZMQ(Indexed(3), True),
     "MultiProcessRunnerZMQ: num_proc must be an int >= 1 or 'auto', got True"),
    (lambda: MultiThreadRunner(lambda: Indexed(3), 4, 2.0),
     "MultiThreadRunner: num_thread must be an int >= 1 or 'auto', got 2.0"),
    (lambda: MultiThreadMapData(Indexed(3), 2, identity, buffer_size="big"),
     "MultiThreadMapData: buffer_size must be an int >= 1 or 'auto', got 'big'"),
    (lambda: Autoscale(interval=-1), "Autoscale: interval must be a number of seconds >= 0, got -1"),
    (lambda: Autoscale(max_workers=0), "Autoscale: max_workers must be an int >= 1 or None, got 0"),
    (lambda: Autoscale(min_workers=3, max_workers=2), r"Autoscale: max_workers \(2\) is below min_workers \(3\)"),
])
def test_invalid_worker_counts_say_what_is_accepted(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_an_auto_process_runner_is_not_resumable_and_says_why():
    from inputpipe.dataflow import NotResumableError

    df = MultiProcessRunnerZMQ(Indexed(6), "auto")
    with pytest.raises(NotResumableError, match=r"MultiProcessRunnerZMQ\(num_proc='auto'\) is not resumable"):
        df.check_resumable()
