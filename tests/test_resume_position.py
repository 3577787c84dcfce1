"""The input position's own bookkeeping (InputPosition, without a session): which DataFlow states
it keeps for the steps to record, and what it refuses before encoding."""
import pytest
import tensorflow as tf

from inputpipe.dataflow import BatchData, DataFromList, StateMismatchError
from inputpipe.input_source import QueueInput
from inputpipe.input_source.position import InputPosition, decode_position

from test_resume_hostile_states import DEEP_STATE


def _feeding(window, unit, partial_last=False, count=40):
    """Tag ``count`` datapoints as the feeding thread does; after each one, the batch ends a step
    may still record (those at most ``window`` datapoints before the newest) must be remembered,
    with the DataFlow's state right after them."""
    df = DataFromList([[i] for i in range(10)], shuffle=False)
    df.reset_state()
    position = InputPosition("Test", df)
    position.widen(window)
    position.batches(unit, partial_last)
    itr = iter(df)
    states = {}
    for _ in range(count):
        try:
            next(itr)
        except StopIteration:
            itr = iter(df)
            next(itr)
        seq = position.tag()
        states[seq] = df.get_state()
        for end in range(max(0, seq - window), seq + 1):
            if (end + 1) % unit == 0:
                assert position.state_at(end) == states[end], (window, unit, seq, end)
    return position


@pytest.mark.parametrize("window, unit", [(6, 4), (5, 3), (7, 2), (9, 8), (3, 4), (8, 4)])
def test_every_batch_end_inside_the_window_is_remembered_when_the_window_is_not_a_multiple_of_the_batch(window, unit):
    position = _feeding(window, unit)
    assert len(position._states) <= -(-window // unit) + 1       # and not much more


def test_the_partial_last_batch_end_is_remembered_too():
    position = _feeding(6, 4, partial_last=True)
    assert position.state_at(39) is not None                       # the latest datapoint may end a partial batch


def test_a_deeply_nested_checkpoint_position_is_a_value_error_not_a_recursion_error():
    data = b'{"format": 1, "state": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(ValueError, match="QueueInput: the checkpoint's input position nests too deeply"):
        decode_position("QueueInput", data)


def test_set_state_of_a_source_refuses_a_deeply_nested_state_before_encoding_it():
    graph = tf.Graph()
    with graph.as_default():
        source = QueueInput(BatchData(DataFromList([[i] for i in range(6)], shuffle=False), 2))
        source.setup([tf.TensorSpec([None], tf.int64, "x")])
        with pytest.raises(StateMismatchError, match=r"BatchData.set_state: the state nests deeper than 200 levels "
                                                     r"\(in BatchData > DataFromList > MapData"):
            source.set_state({"type": "BatchData", "ended": False, "input": dict(DEEP_STATE, type="DataFromList")})
        with pytest.raises(StateMismatchError, match="holds an int of more than 64 bits"):
            source.set_state({"type": "BatchData", "ended": False, "input": {"type": "DataFromList", "epoch": 2 ** 64}})
        source.close()
