"""ContinuingStream: the data side that outlives Estimator's graphs (carry-over, passes, restore,
failures, shutdown), driven directly as the per-session sources drive it."""
import threading
import time

import pytest

from inputpipe.dataflow import DataFromList, MultiProcessMapData
from inputpipe.dataflow.base import DataFlow, DataFlowTerminated
from inputpipe.input_source.continuing import ContinuingStream, FlowFeed, WorkerStreamFeed
from inputpipe.input_source.errors import InputSourceError
from inputpipe.input_source.worker_feed import WorkerFeed

pytestmark = pytest.mark.timeout(60)


def numbers(n, shuffle=False):
    return DataFromList([[i] for i in range(n)], shuffle=shuffle)


def take(iterator, count):
    return [next(iterator)[0] for _ in range(count)]


def wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in {} s".format(timeout)
        time.sleep(0.01)


@pytest.fixture
def streams():
    made = []
    yield made
    for stream in made:
        stream.shutdown()


def make(streams, flow, mode="continue", **options):
    stream = ContinuingStream(FlowFeed(flow, "test"), mode, **options)
    streams.append(stream)
    stream.reset_state()
    return stream


def test_a_session_continues_after_what_the_last_one_consumed(streams):
    stream = make(streams, numbers(10), capacity=3)
    first = iter(stream)
    assert take(first, 6) == [0, 1, 2, 3, 4, 5]
    stream.session_ended(consumed=4)           # 4 and 5 were queued, not consumed
    assert stream.carried == 2
    second = iter(stream)
    assert take(second, 9) == [4, 5, 6, 7, 8, 9, 0, 1, 2]      # across the end of the pass
    stream.session_ended(consumed=9)
    assert take(iter(stream), 2) == [3, 4]


def test_a_session_that_consumed_nothing_hands_everything_out_again(streams):
    stream = make(streams, numbers(5))
    assert take(iter(stream), 3) == [0, 1, 2]
    stream.session_ended(consumed=0)
    assert take(iter(stream), 5) == [0, 1, 2, 3, 4]


def test_the_older_session_stops_reading_when_a_newer_one_starts(streams):
    stream = make(streams, numbers(5))
    old = iter(stream)
    assert take(old, 1) == [0]
    new = iter(stream)
    with pytest.raises(DataFlowTerminated):
        next(old)
    assert take(new, 2) == [0, 1]


def test_states_are_taken_after_every_unit_and_match_the_datapoints(streams):
    flow = numbers(20)
    stream = make(streams, flow, unit=4, capacity=8)
    session = iter(stream)
    take(session, 4)
    state = stream.get_state()
    take(session, 1)
    with pytest.raises(InputSourceError, match="every 4 datapoints"):
        stream.get_state()
    reference = numbers(20)
    reference.reset_state()
    reference.set_state(state)
    assert [dp[0] for dp in reference][:3] == [4, 5, 6]


def test_set_state_where_the_stream_is_continues_and_elsewhere_restarts_the_data(streams):
    stream = make(streams, numbers(30))
    session = iter(stream)
    take(session, 10)
    state_at_8 = None
    # the state after datapoint 7: ask a twin flow for it
    twin = numbers(30)
    twin.reset_state()
    twin_iter = iter(twin)
    for _ in range(8):
        next(twin_iter)
    state_at_8 = twin.get_state()
    stream.session_ended(consumed=8, state=state_at_8)
    stream.set_state(state_at_8)               # the checkpoint the next session restores: where the stream is
    assert stream.carried == 2
    assert take(iter(stream), 3) == [8, 9, 10]
    stream.session_ended(consumed=1, state=None)
    for _ in range(3):
        next(twin_iter)
    older = numbers(30)
    older.reset_state()
    older_iter = iter(older)
    for _ in range(3):
        next(older_iter)
    stream.set_state(older.get_state())        # an older checkpoint: the data restarts there
    assert stream.carried == 0
    assert take(iter(stream), 3) == [3, 4, 5]


def test_a_failed_session_that_let_consumed_datapoints_go_restarts_at_the_last_reported_state(streams):
    stream = make(streams, numbers(50), window=5)
    session = iter(stream)
    take(session, 4)
    twin = numbers(50)
    twin.reset_state()
    it = iter(twin)
    for _ in range(4):
        next(it)
    stream.session_ended(consumed=4, state=twin.get_state())
    session = iter(stream)
    take(session, 20)                          # the session fails without saying what it consumed
    assert stream.carried == 5                 # more than its window went: consumed, and forgotten
    assert take(iter(stream), 3) == [4, 5, 6]  # restarted at the last reported position


def test_passes_mode_reads_one_whole_pass_per_session_and_reads_the_next_ahead(streams):
    stream = make(streams, numbers(4), mode="passes", capacity=8)
    assert [dp[0] for dp in stream] == [0, 1, 2, 3]
    wait_until(lambda: stream.buffered >= 4)   # the next pass, read ahead
    assert [dp[0] for dp in stream] == [0, 1, 2, 3]


def test_passes_mode_after_a_session_stopped_early_starts_a_new_whole_pass(streams):
    stream = make(streams, numbers(40), mode="passes", capacity=4)
    assert take(iter(stream), 3) == [0, 1, 2]
    assert [dp[0] for dp in stream] == list(range(40))
    # stopped early with the end of the pass already read ahead
    small = make(streams, numbers(3), mode="passes", capacity=8)
    assert take(iter(small), 1) == [0]
    wait_until(lambda: small.buffered >= 4)
    assert [dp[0] for dp in small] == [0, 1, 2]
    assert [dp[0] for dp in small] == [0, 1, 2]


def test_a_worker_feed_pass_cut_short_is_read_to_its_end_and_dropped(streams):
    flow = numbers(30)
    stream = ContinuingStream(WorkerStreamFeed(WorkerFeed(flow, "test", hwm=4), "test"), "passes", capacity=4)
    streams.append(stream)
    stream.reset_state()
    assert take(iter(stream), 2) == [0, 1]
    assert [dp[0] for dp in stream] == list(range(30))
    assert [dp[0] for dp in stream] == list(range(30))


class FailsAfter(DataFlow):
    def __init__(self, good):
        self.good = good

    def __iter__(self):
        for i in range(self.good):
            yield [i]
        raise KeyError("missing file {}".format(self.good))


def test_a_failure_comes_after_the_datapoints_read_before_it_and_stays(streams):
    stream = make(streams, FailsAfter(3), capacity=8)
    session = iter(stream)
    assert take(session, 3) == [0, 1, 2]
    with pytest.raises(KeyError, match="missing file 3"):
        next(session)
    stream.session_ended(consumed=3)
    with pytest.raises(KeyError, match="missing file 3"):
        next(iter(stream))


class Empty(DataFlow):
    def __iter__(self):
        return iter(())


def test_a_flow_without_datapoints_is_an_error_not_a_spin(streams):
    stream = make(streams, Empty())
    with pytest.raises(InputSourceError, match="produced no datapoint"):
        next(iter(stream))


def test_iterating_before_reset_state_and_after_shutdown_are_errors():
    stream = ContinuingStream(FlowFeed(numbers(3), "test"), "continue")
    with pytest.raises(InputSourceError, match="reset_state"):
        iter(stream)
    stream.reset_state()
    stream.shutdown()
    with pytest.raises(InputSourceError, match="shut down"):
        stream.reset_state()
    with pytest.raises(ValueError, match="mode must be one of"):
        ContinuingStream(FlowFeed(numbers(3), "test"), "forever")


def test_close_does_nothing_and_shutdown_stops_the_reader_and_the_workers():
    flow = MultiProcessMapData(numbers(100), 2, lambda dp: dp, strict=True)
    stream = ContinuingStream(FlowFeed(flow, "test"), "continue", capacity=4)
    stream.reset_state()
    assert len(set(take(iter(stream), 2))) == 2
    stream.close()                              # what a session's source calls at its end
    readers = [t for t in threading.enumerate() if t.name == "test-reader"]
    assert len(readers) == 1 and readers[0].is_alive()
    stream.shutdown()
    assert not readers[0].is_alive()
    stream.shutdown()                           # idempotent


def test_a_consumer_waiting_for_data_ends_when_its_thread_is_told_to_stop(streams):
    from inputpipe.utils.concurrency import StoppableThread

    class Slow(DataFlow):
        def __iter__(self):
            while True:
                time.sleep(0.05)
                yield [0]

    stream = make(streams, Slow(), capacity=1)
    outcome = []

    def consume():
        try:
            for _ in stream:
                pass
        except DataFlowTerminated:
            outcome.append("terminated")

    thread = StoppableThread(target=consume, name="consumer")
    thread.start()
    time.sleep(0.2)
    thread.stop()
    thread.join(5)
    assert not thread.is_alive() and outcome == ["terminated"]
