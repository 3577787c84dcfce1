"""A worker's small results travel several to a message (WorkerEnd.hold_datapoint), a process
map's tasks several to a command: what is held always arrives, in order, before anything sent
after it, and never waits on the worker's next task."""
import threading

import numpy as np
import pytest

from inputpipe.dataflow import DataFlow, DataFromList, MultiProcessMapData, MultiProcessRunnerZMQ
from inputpipe.utils import channel, serialize
from inputpipe.utils.channel import ChannelClosed

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def ends():
    parent, spec = channel.open_channel("HoldTest", shm_bytes=8 << 20)
    worker = spec.open()
    try:
        yield parent, worker
    finally:
        parent.close()
        spec.close_in_parent()


def test_small_datapoints_held_travel_in_one_message_in_order(ends):
    parent, worker = ends
    for i in range(5):
        worker.hold_datapoint([i, "x" * i, np.full(3, i, np.int16)], within=60)
    assert not parent.connection.poll(0.05) and worker.held_seconds() > 0
    worker.count_work(0.25, 5)
    worker.send_held()
    kind, values = parent.receive()
    assert kind == "many" and [v[:2] for v in values] == [[i, "x" * i] for i in range(5)]
    assert all(v[2].dtype == np.int16 and v[2].tolist() == [i] * 3 for i, v in enumerate(values))
    assert parent.items == 5 and parent.busy_seconds == 0.25
    assert not parent.connection.poll(0.05) and worker.held_seconds() == 0


def test_a_datapoint_with_array_frames_goes_at_once_after_those_held(ends):
    parent, worker = ends
    worker.hold_datapoint([1], within=60)
    worker.hold_datapoint([2], within=60)
    worker.hold_datapoint([np.arange(100000, dtype=np.int64)], within=60)     # 800 KB: shared memory
    assert parent.receive() == ("many", [[1], [2]])
    kind, (big,) = parent.receive()
    assert kind == "data" and big.sum() == 100000 * 99999 // 2
    worker.hold_datapoint([3], within=60)
    worker.send_datapoint([4])                         # sent otherwise: those held go first
    assert parent.receive() == ("many", [[3]])
    assert parent.receive() == ("data", [4])


def test_held_datapoints_go_once_hold_most_are_held(ends):
    parent, worker = ends
    for i in range(channel.HOLD_MOST):
        assert not parent.connection.poll(0)
        worker.hold_datapoint(i, within=60)
    assert parent.receive() == ("many", list(range(channel.HOLD_MOST)))


def test_the_held_sender_sends_them_while_the_worker_does_something_else(ends):
    parent, worker = ends
    worker.hold_datapoint({"label": 7}, within=0.02)
    # this thread sends nothing more (a worker inside a task that never ends): they still come
    assert parent.connection.poll(10)
    assert parent.receive() == ("many", [{"label": 7}])


def test_a_worker_sends_what_it_holds_before_it_waits_for_a_command(ends):
    parent, worker = ends
    worker.hold_datapoint([3], within=60)
    assert worker.receive_command(0.01) is None
    assert parent.connection.poll(0) and parent.receive() == ("many", [[3]])


def test_a_worker_that_only_looks_for_commands_keeps_holding(ends):
    parent, worker = ends
    worker.hold_datapoint([3], within=60)
    assert worker.receive_command(0) is None           # (it does not wait: it goes on making more)
    assert not parent.connection.poll(0.05)
    worker.send_held()
    assert parent.receive() == ("many", [[3]])


def test_a_worker_told_to_stop_sends_what_it_holds_first(ends):
    parent, worker = ends
    parent.send_command("task")
    assert worker.receive_command(5) == "task"
    worker.hold_datapoint([1], within=60)
    worker.hold_datapoint([2], within=60)
    parent.close_commands()
    with pytest.raises(ChannelClosed):
        while True:                           # (the close arrives after the reader's next read)
            worker.receive_command(0.05)
    assert parent.receive() == ("many", [[1], [2]])


def test_an_error_arrives_after_the_datapoints_held(ends):
    parent, worker = ends
    worker.hold_datapoint([1], within=60)
    try:
        raise ValueError("bad record 2")
    except ValueError as err:
        worker.send_error(err)
    assert parent.receive() == ("many", [[1]])
    kind, (reason, traceback, original_type, _) = parent.receive()
    assert kind == "error" and original_type is ValueError and "bad record 2" in traceback


@pytest.mark.parametrize("held, expected", [
    ([1, 2], "HoldTest: expected a list of encoded datapoints from a worker, got list"),
    ("abc", "HoldTest: expected a list of encoded datapoints from a worker, got str"),
    ([b"not the wire format"], "loads"),
])
def test_a_malformed_message_of_several_is_refused(ends, held, expected):
    parent, worker = ends
    worker._send_control({"k": "many", "v": held, "b": 0.0, "n": 0, "s": 0.0})
    with pytest.raises(serialize.WireFormatError, match=expected):
        parent.receive()


def test_the_held_sender_ends_when_the_channel_closes():
    parent, spec = channel.open_channel("HoldTest", shm_bytes=8 << 20)
    worker = spec.open()
    worker.hold_datapoint(1, within=60)
    sender = worker._held_sender
    assert sender is not None and sender.is_alive()
    parent.close()
    spec.close_in_parent()
    sender.join(5)
    assert not sender.is_alive()


def _square(dp):
    return [dp[0], dp[0] * dp[0]]


def test_a_process_map_sends_each_worker_its_tasks_together():
    df = MultiProcessMapData(DataFromList([[i] for i in range(200)], shuffle=False), 2, _square, strict=True,
                             ordered=True, buffer_size=12)
    df.reset_state()
    sent, send = [], df._pool.send
    lock = threading.Lock()

    def counting_send(rank, tasks):
        with lock:
            sent.append((rank, [ticket[0] for _, ticket, _ in tasks]))
        send(rank, tasks)

    df._pool.send = counting_send
    with df:
        for _ in range(2):
            assert list(df) == [[i, i * i] for i in range(200)]
    first_epoch = [key for _, keys in sent for key in keys][:200]
    assert sorted(first_epoch) == list(range(200))           # each task sent once
    assert sorted(rank for rank, _ in sent[:2]) == [0, 1] and [len(keys) for _, keys in sent[:2]] == [6, 6]
    assert len(sent) < 2 * 200                               # far fewer commands than tasks


class FiveThenStuck(DataFlow):
    """Five small datapoints, then a read that does not return (a hung file system)."""

    def __iter__(self):
        import time
        for i in range(5):
            yield [i]
        time.sleep(3600)


def test_a_runner_whose_source_gets_stuck_still_delivers_what_it_made():
    df = MultiProcessRunnerZMQ(FiveThenStuck(), 1)
    df.reset_state()
    with df:
        itr = iter(df)
        assert [next(itr) for _ in range(5)] == [[i] for i in range(5)]
