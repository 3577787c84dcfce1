"""The GIL switch interval while a DataFlow runs in the training process: shortened for as long
as a feeding thread runs, restored after, left alone when the DataFlow runs in a worker or when
someone else set it meanwhile; and what it is for: the training thread gets the GIL back from a
DataFlow that holds it within about the interval."""
import statistics
import sys
import threading
import time

import pytest
import tensorflow as tf

from inputpipe.input_source import BatchQueueInput, QueueInput, StagingInput, hooked_session
from inputpipe.utils.compat import native_thread_id
from inputpipe.utils.resources import thread_schedstat
from inputpipe.utils.switch_interval import shortened_switch_interval

from input_source_helpers import BATCH_SPECS, SPECS, Counting, build, feeding_threads


@pytest.fixture(autouse=True)
def python_default_interval():
    """Every test starts from Python's 5 ms and must leave what it found."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    assert sys.getswitchinterval() == 0.005, "a test left the switch interval changed"
    sys.setswitchinterval(before)


def test_shortened_inside_and_restored_after():
    with shortened_switch_interval(0.001):
        assert sys.getswitchinterval() == 0.001
    assert sys.getswitchinterval() == 0.005


def test_none_leaves_it_alone():
    with shortened_switch_interval(None):
        assert sys.getswitchinterval() == 0.005


def test_never_raised_above_the_value_before():
    sys.setswitchinterval(0.0005)
    with shortened_switch_interval(0.001):
        assert sys.getswitchinterval() == 0.0005
    assert sys.getswitchinterval() == 0.0005
    sys.setswitchinterval(0.005)


def test_holders_combine_and_the_last_one_restores():
    with shortened_switch_interval(0.002):
        assert sys.getswitchinterval() == 0.002
        with shortened_switch_interval(0.001):
            assert sys.getswitchinterval() == 0.001
        assert sys.getswitchinterval() == 0.002          # the smallest request still held
    assert sys.getswitchinterval() == 0.005


def test_holders_in_threads_overlapping_in_any_order():
    first_in, second_in, first_may_leave = threading.Event(), threading.Event(), threading.Event()

    def first():
        with shortened_switch_interval(0.001):
            first_in.set()
            first_may_leave.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    assert first_in.wait(10)
    with shortened_switch_interval(0.002):
        second_in.set()
        assert sys.getswitchinterval() == 0.001
        first_may_leave.set()
        thread.join(10)
        assert not thread.is_alive()
        assert sys.getswitchinterval() == 0.002           # the first left: the second's request
    assert sys.getswitchinterval() == 0.005


def test_a_value_set_by_someone_else_meanwhile_stays():
    with shortened_switch_interval(0.001):
        sys.setswitchinterval(0.003)                         # the application decides
        with shortened_switch_interval(0.0005):
            assert sys.getswitchinterval() == 0.003
        assert sys.getswitchinterval() == 0.003
    assert sys.getswitchinterval() == 0.003
    sys.setswitchinterval(0.005)
    with shortened_switch_interval(0.001):                   # a new first holder manages it again
        assert sys.getswitchinterval() == 0.001
    assert sys.getswitchinterval() == 0.005


@pytest.mark.parametrize("seconds", [0, -0.001, float("nan")])
def test_bad_values_are_refused(seconds):
    with pytest.raises(ValueError, match="switch interval must be a positive number of seconds"):
        with shortened_switch_interval(seconds):
            pass
    with pytest.raises(ValueError, match=r"QueueInput: gil_switch_interval must be a positive number of "
                                         r"seconds or None, got"):
        QueueInput(Counting(3), gil_switch_interval=seconds)


def _interval_during_a_session(source, specs=SPECS):
    graph, (x, label) = build(source, specs)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        run(label)
        during = sys.getswitchinterval()
    deadline = time.monotonic() + 5
    while feeding_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not feeding_threads()
    return during


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make, specs, expected", [
    (lambda: QueueInput(Counting()), SPECS, 0.001),
    (lambda: StagingInput(QueueInput(Counting()), nr_stage=1, device="/cpu:0"), SPECS, 0.001),
    (lambda: BatchQueueInput(Counting(), 4), BATCH_SPECS, 0.001),
    (lambda: QueueInput(Counting(), gil_switch_interval=0.0002), SPECS, 0.0002),
    (lambda: QueueInput(Counting(), gil_switch_interval=None), SPECS, 0.005),
    (lambda: QueueInput(Counting(), in_worker=True), SPECS, 0.005),
], ids=["QueueInput", "StagingInput", "BatchQueueInput", "chosen", "None", "in_worker"])
def test_sources_shorten_it_while_the_dataflow_runs_in_the_training_process(make, specs, expected):
    assert _interval_during_a_session(make(), specs) == pytest.approx(expected)
    # the fixture checks it is back at 5 ms


class TickingBurner(Counting):
    """Counting whose every datapoint costs ``cost`` seconds of pure-Python CPU, holding the GIL
    throughout; ``ticks`` grows while it burns, so a reader can tell whether it ran meanwhile."""

    def __init__(self, cost):
        super().__init__()
        self.cost = cost
        self.ticks = 0

    def __iter__(self):
        for dp in super().__iter__():
            end = time.thread_time() + self.cost
            while time.thread_time() < end:
                self.ticks += 1
            yield dp


def _gil_reacquire_ms(gil_switch_interval, nap=0.002, wanted=14, seconds=8.0):
    """Times (ms) the training thread took to get the GIL back from a feeding thread that is
    burning in a DataFlow: the overshoot of a ``nap``-second sleep, counted only when the feeder
    ran during the sleep (so it held the GIL when the sleep ended), less the time the thread
    waited, runnable, for a CPU (its run-queue time from ``schedstat``: the machine's load, not the
    GIL). On a busy machine the feeder may not get a core within the nap, and a sleep it did not
    interrupt measures nothing."""
    flow = TickingBurner(0.05)
    source = QueueInput(flow, gil_switch_interval=gil_switch_interval)
    graph, (x, label) = build(source)
    overshoots = []
    me = native_thread_id()

    def runqueue_seconds():
        stat = thread_schedstat(me)
        return 0.0 if stat is None else stat[1]

    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        run(label)                                  # the feeding thread is burning now
        deadline = time.monotonic() + seconds
        while len(overshoots) < wanted and time.monotonic() < deadline:
            ticks_before = flow.ticks
            queued = runqueue_seconds()
            start = time.perf_counter()
            time.sleep(nap)
            elapsed = time.perf_counter() - start
            queued = runqueue_seconds() - queued
            if flow.ticks != ticks_before:
                overshoots.append(1e3 * max(0.0, elapsed - nap - queued))
    assert len(overshoots) >= wanted // 2, f"the feeder ran during only {len(overshoots)} naps in {seconds} s"
    return overshoots


@pytest.mark.timeout(90)
def test_the_training_thread_gets_the_gil_back_within_about_the_interval():
    """Python's 5 ms interval makes the training thread wait about 5 ms for a DataFlow that
    holds the GIL; QueueInput's 1 ms saves most of that. Rounds of the two alternate, so a load
    that comes and goes weighs on both alike (a feeder the OS stops while it holds the GIL delays
    both by the same time: the promise is what the shorter interval saves, not an absolute time)."""
    short, default = [], []
    for _ in range(3):
        short += _gil_reacquire_ms(0.001)
        default += _gil_reacquire_ms(None)
    short_ms, default_ms = statistics.median(short), statistics.median(default)
    assert default_ms >= 4.0, (default_ms, short_ms)          # Python's 5 ms
    # of the 4 ms it saves, at least 1: a load that preempts the feeder while it holds the GIL lengthens
    # the short interval's waits more (CI's TF 1.15 stack beside three others: 3.26 against 5.15 ms)
    assert short_ms <= default_ms - 1.0, (default_ms, short_ms)
