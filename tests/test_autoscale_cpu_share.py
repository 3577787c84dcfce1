"""The controller of "auto" stages charges each worker, process or thread, its measured CPU share
(the CPU it uses over the time it works, without the time it waited for a CPU that other
programs held): workers that wait outnumber the CPUs until their shares fill the budget, the
stage shrinks back when the work turns CPU-bound, and a machine busy with other work does not
make CPU-bound work look like waiting. Checked on a model stage on a virtual clock (no timing);
the readers of the shares are checked on /proc-like files."""
import pytest

from inputpipe.dataflow import Autoscale
from inputpipe.utils import resources
from autoscale_helpers import ModelStage, run_together, virtual_clock


@pytest.fixture(autouse=True)
def no_budget_override():
    resources.set_budget()
    yield
    resources.set_budget()


@pytest.fixture
def clock(monkeypatch):
    yield from virtual_clock(monkeypatch)


def grows(stage):
    return [c for c in stage.worker_count_history()[1:] if c.reason.startswith("grow")]


@pytest.mark.parametrize("kind", ["processes", "threads"])
def test_workers_that_wait_two_thirds_of_their_time_fill_two_cpus_with_six(clock, kind):
    # 3 ms of CPU and 6 ms of waiting per datapoint: a worker maps 111/s and uses a third of a CPU
    stage = ModelStage(Autoscale(interval=0.5, cpu_budget=2), per_worker=111, consumer=1000, cpu_share=1 / 3,
                       kind=kind, clock=clock)
    stage.run_for(10.0)
    assert stage.counts() == [1, 2, 4, 6]
    assert grows(stage)[-1].reason.endswith("(CPU budget 2, a worker's CPU share 33%)")
    assert stage._controller.claimed_cpus == pytest.approx(2.0)          # 6 x 1/3 of a CPU
    stage.run_for(10.0)
    assert stage.workers == 6                      # the consumer still waits, the CPUs are full


def test_cpu_bound_workers_stay_one_per_cpu(clock):
    stage = ModelStage(Autoscale(interval=0.5, cpu_budget=2), per_worker=300, consumer=3000, cpu_share=1.0,
                       kind="processes", clock=clock)
    stage.run_for(10.0)
    assert stage.counts() == [1, 2]


def test_waiting_for_a_cpu_held_by_other_programs_is_not_taken_for_waiting(clock):
    # CPU-bound work on a machine where other programs hold the CPUs half of the time: a worker's
    # busy time is half on a CPU, half in the run queue. Counted as waiting (I/O), its share would
    # read 1/2 and the stage would grow to 4; the run queue taken out, it reads 1 and stays at 2
    stage = ModelStage(Autoscale(interval=0.5, cpu_budget=2), per_worker=150, consumer=3000, cpu_share=1.0,
                       runqueue_share=0.5, kind="processes", clock=clock)
    stage.run_for(10.0)
    assert max(stage.counts()) == 2
    assert stage._controller._share == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["processes", "threads"])
def test_a_map_that_turns_cpu_bound_shrinks_to_the_budget_and_grows_back_when_it_waits_again(clock, kind):
    stage = ModelStage(Autoscale(interval=0.5, cpu_budget=2), per_worker=111, consumer=1000, cpu_share=1 / 3,
                       kind=kind, clock=clock)
    stage.run_for(10.0)
    assert stage.workers == 6
    stage.per_worker, stage.cpu_share = 200, 1.0        # now 5 ms of CPU (it was 3) and no wait per datapoint
    changes = len(stage.worker_count_history())
    stage.run_for(10.0)
    shrinks = stage.worker_count_history()[changes:]
    assert stage.workers == 2 and [c.workers for c in shrinks] == [3, 2]
    assert all(c.reason.startswith("shrink: CPU budget: ") for c in shrinks)
    assert shrinks[0].reason.endswith("of 2 CPUs")
    stage.per_worker, stage.cpu_share = 111, 1 / 3      # waiting again
    stage.run_for(10.0)
    assert stage.workers == 6


def test_a_share_that_jumps_is_taken_at_once_and_one_that_wobbles_is_averaged(clock):
    """From CPU-bound work (share 1) to work that waits 8 ms per 1 ms of CPU (share 1/9): the
    first share measured after the change is the stage's share at once (averaged, 0.56 would
    hold it to 4 workers for another interval); a share that moves less is averaged in."""
    stage = ModelStage(Autoscale(interval=0.5, cpu_budget=2), per_worker=250, consumer=1000, cpu_share=1.0,
                       kind="processes", clock=clock)
    stage.run_for(10.0)
    assert stage.workers == 2 and stage._controller._share == pytest.approx(1.0)
    stage.per_worker, stage.cpu_share = 111, 1 / 9
    changes = len(stage.worker_count_history())
    stage.run_for(10.0)
    grown = stage.worker_count_history()[changes:]
    # doubling each interval, the budget (2 CPUs at 1/9 each: 18) out of the way (averaged: 3, 5, 8, 10)
    assert [c.workers for c in grown] == [4, 8, 10] and not any("CPU budget" in c.reason for c in grown), grown
    stage.cpu_share = 1 / 6                                  # a wobble of 1.5x: averaged
    stage.run_for(3.0)
    assert 1 / 9 < stage._controller._share < 1 / 6


def test_threads_are_charged_their_share_as_processes_are(clock):
    # half of the work releases the GIL in C code on a CPU, half holds it... a share of 1/2
    stage = ModelStage(Autoscale(interval=0.5, cpu_budget=2), per_worker=100, consumer=2000, cpu_share=0.5,
                       kind="threads", clock=clock)
    stage.run_for(10.0)
    assert max(stage.counts()) == 4


def test_stages_of_one_process_share_the_budget_by_their_cpu_shares(clock):
    resources.set_budget(cpus=2, memory_bytes=1 << 30)
    cpu_bound = ModelStage(Autoscale(interval=0.5, max_workers=1), per_worker=300, consumer=3000, cpu_share=1.0,
                           kind="processes", clock=clock)
    waiting = ModelStage(Autoscale(interval=0.5), per_worker=111, consumer=1000, cpu_share=1 / 3,
                         kind="processes", clock=clock)
    run_together([cpu_bound, waiting], 10.0)
    assert cpu_bound.workers == 1 and waiting.workers == 3        # 1 CPU + 3 x 1/3 of a CPU
    total = cpu_bound._controller.claimed_cpus + waiting._controller.claimed_cpus
    assert total == pytest.approx(2.0)


def test_a_shrink_to_the_budget_is_not_undone(clock):
    stage = ModelStage(Autoscale(interval=0.5, start=8, cpu_budget=2), per_worker=333, consumer=5000, cpu_share=1.0,
                       kind="processes", clock=clock)
    stage.run_for(10.0)
    history = stage.worker_count_history()
    assert [c.workers for c in history] == [8, 4, 2]
    assert not any(c.reason.startswith("undo") for c in history)


# ----------------------------------------------------------------- growing on CPUs measured idle

@pytest.fixture
def system_budget_of_two(monkeypatch, clock):
    """The system's own budget (no set_budget, no cpu_budget) is 2 CPUs; the model's machine has
    2 CPUs, whose idle time the controller reads."""
    monkeypatch.setattr(resources, "cpu_budget", lambda: 2)
    clock.machine_cpus = 2
    return clock


def nested(clock, inner_share=1.0):
    """The nested chain's shape: an outer stage that waits on its slow source (one worker charged
    a whole CPU, using 0.45 of one) beside an inner CPU-bound stage whose consumer waits."""
    outer = ModelStage(Autoscale(interval=0.5, max_workers=1), per_worker=1000, consumer=450, cpu_share=1.0,
                       kind="processes", clock=clock)
    inner = ModelStage(Autoscale(interval=0.5), per_worker=500, consumer=1000, cpu_share=inner_share,
                       kind="processes", clock=clock)
    return outer, inner


def test_under_the_system_budget_a_stage_grows_past_its_share_while_cpus_are_idle(system_budget_of_two):
    """The outer stage is charged a whole CPU and uses 0.45: the shares leave the inner stage one
    worker, the machine has 0.55 of a CPU idle, so it grows to two (and does not shrink back for
    the CPU budget while its work stays the same)."""
    outer, inner = nested(system_budget_of_two)
    run_together([outer, inner], 20.0)
    assert inner.counts() == [1, 2], inner.worker_count_history()
    assert grows(inner)[0].reason.endswith("500 results/s (0.5 CPUs idle)")


@pytest.mark.parametrize("how", ["no idle reading", "set_budget", "cpu_budget"])
def test_without_a_reading_or_under_an_explicit_budget_the_shares_alone_hold_it(system_budget_of_two, how):
    clock = system_budget_of_two
    if how == "no idle reading":
        clock.machine_cpus = None
    elif how == "set_budget":
        resources.set_budget(cpus=2)
    outer, inner = nested(clock)
    if how == "cpu_budget":
        inner._controller.settings.cpu_budget = 2
    run_together([outer, inner], 20.0)
    # (a budget of its own: the other stage's claim does not count)
    assert inner.counts() == ([1, 2] if how == "cpu_budget" else [1]), inner.worker_count_history()


@pytest.mark.parametrize("kind,budget,most", [
    ("processes", "system", 10), ("processes", "cpu_budget", 6), ("threads", "system", 6)])
def test_under_the_system_budget_processes_that_wait_grow_to_keep_the_cpus_busy(system_budget_of_two, kind,
                                                                                budget, most):
    """Six processes of share 1/3 add up to 2 CPUs but keep them 84% busy (their waits do not line
    up): under the system's budget they grow to the 10 the queue model needs for 98%, even without
    a reading of the idle CPUs; an explicit budget holds them to their shares, and threads (whose
    Python shares the GIL) too."""
    clock = system_budget_of_two
    clock.machine_cpus = None
    stage = ModelStage(Autoscale(interval=0.5, cpu_budget=2 if budget == "cpu_budget" else None), per_worker=111,
                       consumer=1000, cpu_share=1 / 3, kind=kind, clock=clock)
    stage.run_for(20.0)
    assert stage.workers == most and max(stage.counts()) == most, stage.worker_count_history()
    assert stage._controller._share == pytest.approx(1 / 3)
    # processes that wait go to the count the consumer needs at once, within the model's; the
    # others at most double per step
    assert stage.counts() == ([1, 10] if most == 10 else [1, 2, 4, 6]), stage.worker_count_history()


@pytest.mark.parametrize("cpus,share,workers", [
    (2, 1 / 3, 8), (2, 1.0, 2), (2, 0.5, 6), (2, 0.9, 3), (1, 0.5, 4), (2, 0.125, 20), (4, 1 / 3, 14)])
def test_the_workers_that_keep_the_cpus_busy(cpus, share, workers):
    assert resources.workers_to_fill(cpus, share) == workers
    assert resources.closed_loop_rate(workers, 1 - share, share, cpus) >= 0.95 * cpus / share
    assert workers == 1 or resources.closed_loop_rate(workers - 1, 1 - share, share, cpus) < 0.95 * cpus / share
    assert resources.workers_to_fill(cpus, share, most=4) == min(workers, 4)


@pytest.mark.parametrize("rate,wait,cpu,cpus,most,workers", [
    (600, 0.006, 0.003, 2, 64, 7), (100, 0.009, 0.001, 2, 64, 1), (700, 0.006, 0.003, 2, 64, 64),
    (600, 0.006, 0.003, 2, 5, 5), (300, 0.0, 0.005, 4, 64, 2)])
def test_the_workers_that_deliver_a_rate(rate, wait, cpu, cpus, most, workers):
    """The fewest workers whose queue-model rate reaches ``rate``; ``most`` when none of them
    does (700/s is above the 667/s two CPUs allow 3 ms of CPU each)."""
    assert resources.workers_for_rate(rate, wait, cpu, cpus, most) == workers
    if workers < most:
        assert resources.closed_loop_rate(workers, wait, cpu, cpus) >= rate
        assert workers == 1 or resources.closed_loop_rate(workers - 1, wait, cpu, cpus) < rate


def test_a_growth_onto_idle_cpus_that_delivers_nothing_is_undone(system_budget_of_two):
    """Idle CPUs do not make a useless worker stay: the inner stage's results come out at most at
    one worker's rate (a ceiling: a source it waits on, say), so its second process delivers no
    more and is undone, however idle the CPUs."""
    outer, inner = nested(system_budget_of_two)
    inner.ceiling = 500
    run_together([outer, inner], 6.0)
    history = inner.worker_count_history()
    assert [c.workers for c in history][:3] == [1, 2, 1], history
    assert "CPUs idle" in history[1].reason and history[2].reason.startswith("undo: 2 workers delivered 500/s")


def test_a_stage_grown_past_its_shares_shrinks_when_its_work_turns_cpu_bound(system_budget_of_two):
    clock = system_budget_of_two
    outer, inner = nested(clock, inner_share=0.5)
    inner.consumer = 2000
    run_together([outer, inner], 20.0)
    # its share (1/2) fills the 1 CPU the outer stage's claim leaves with two; the queue model keeps
    # that CPU busy with four: processes that wait grow to them at once (the consumer would take more)
    assert inner.counts() == [1, 4] == [1, resources.workers_to_fill(1, 0.5, 0.98)]
    assert grows(inner)[0].reason.endswith("(CPU budget 1, a worker's CPU share 50%)")
    inner.cpu_share = 1.0                                # the same rate, all of it on a CPU now
    changes = len(inner.worker_count_history())
    run_together([outer, inner], 20.0)
    after = inner.worker_count_history()[changes:]
    # the smoothed share rises past FILL_SHARE (5/6: CPU-bound for the queue model): halved, down to
    # the budget's one worker, then 2: 1 + 0.45 of 2 CPUs leave half a CPU idle
    assert [c.workers for c in after] == [2, 1, 2], after
    assert after[0].reason.startswith("shrink: CPU budget: 4 workers at a CPU share of 83%")
    assert after[1].reason.startswith("shrink: CPU budget: 2 workers") and after[2].reason.endswith("CPUs idle)")


# ------------------------------------------------------------------------------------ the accounting

def test_cpu_share_takes_the_run_queue_out_of_the_working_time():
    assert resources.cpu_share(0.3, 0.9) == pytest.approx(1 / 3)
    assert resources.cpu_share(0.3, 0.6, 0.3) == 1.0
    assert resources.cpu_share(0.3, 0.2) == 1.0                         # clocks read a moment apart
    assert resources.cpu_share(0.0, 0.5) == 0.0 and resources.cpu_share(0.1, 0.0) is None


@pytest.mark.parametrize("cpus,share,workers", [
    (2, 1.0, 2), (2, 1 / 3, 6), (2, 0.36, 6), (2, 0.5, 4), (2, 0.9, 2), (2, 0.62, 3), (2, 0.01, 16),
    (2, None, 2), (1, 1.0, 1), (0.4, 1.0, 0), (3, 0.75, 4), (2, 0.8, 3),
])
def test_workers_within_the_budget(cpus, share, workers):
    assert resources.workers_within(cpus, share) == workers


def test_the_charge_is_the_share_at_least_an_eighth_and_one_cpu_unmeasured():
    assert resources.cpu_charge(6, 1 / 3) == pytest.approx(2.0)
    assert resources.cpu_charge(4, 0.01) == 0.5 and resources.cpu_charge(3, None) == 3.0


def test_schedstat_readers(tmp_path):
    for task, text in (("77", "3000000000 500000000 120\n"), ("80", "1000000000 250000000 3\n")):
        (tmp_path / "77" / "task" / task).mkdir(parents=True)
        (tmp_path / "77" / "task" / task / "schedstat").write_text(text)
    assert resources.process_schedstat(77, proc_root=str(tmp_path)) == (4.0, 0.75)     # its threads summed
    task = tmp_path / "self" / "task" / "9"
    task.mkdir(parents=True)
    (task / "schedstat").write_text("1500 2500 3\n")
    assert resources.thread_schedstat(9, proc_root=str(tmp_path)) == (1.5e-6, 2.5e-6)
    assert resources.process_schedstat(78, proc_root=str(tmp_path)) is None
    (tmp_path / "79" / "task" / "79").mkdir(parents=True)
    (tmp_path / "79" / "task" / "79" / "schedstat").write_text("garbage\n")
    assert resources.process_schedstat(79, proc_root=str(tmp_path)) is None


def test_a_stage_under_a_slow_consumer_shrinks_on_a_busy_machine_too(clock):
    # 2 workers feed a consumer that takes 90/s: each is busy 45% of the time, half of it waiting
    # for a CPU that other programs hold. Counted as busy, 1.1 workers' worth is idle (no shrink);
    # the waits taken out, 1.55 is: one worker is enough
    stage = ModelStage(Autoscale(interval=0.5, start=2, cpu_budget=2), per_worker=100, consumer=90, cpu_share=1.0,
                       runqueue_share=0.5, kind="processes", clock=clock)
    stage.run_for(10.0)
    history = stage.worker_count_history()
    assert [c.workers for c in history] == [2, 1]
    assert history[1].reason.startswith("shrink: the consumer waited 0%") and history[1].reason.endswith(
        "(1.5 workers idle)")
