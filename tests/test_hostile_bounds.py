"""Hostile values at the exact bounds of what is accepted: the first value past a bound is refused
with an error naming it, the last one inside is accepted (the tests of values far past a bound
did not notice a bound moved by one)."""
import json

import msgpack
import pytest

from inputpipe.dataflow import ConcatData, DataFlow, DataFromList, LocallyShuffleData, StateMismatchError
from inputpipe.dataflow.serialize import DatasetFormatError
from inputpipe.dataflow.tensorpack_records import decode_tensorpack_record

pytestmark = pytest.mark.timeout(30)


class Opaque(DataFlow):
    """A flow of the user's own that keeps any value in its state (only the library checks it)."""

    def __init__(self):
        self.value = None

    def __iter__(self):
        yield [0]

    def get_state(self):
        return {"type": "Opaque", "value": self.value}

    def set_state(self, state):
        self.value = state["value"]


def _concat():
    df = ConcatData([DataFromList([[1], [2]], shuffle=False), Opaque()])
    df.reset_state()
    return df


@pytest.mark.parametrize("value, bits", [(2 ** 63, 64), (-(2 ** 63) - 1, 64)])
def test_the_first_int_beyond_64_bits_in_a_flow_state_is_refused(value, bits):
    df = _concat()
    state = df.get_state()
    state["inputs"][1]["value"] = value
    with pytest.raises(StateMismatchError, match=r"ConcatData\[1\] > Opaque.set_state: the state holds an int of "
                                                 r"more than 64 bits \({} bits\)".format(bits)):
        df.set_state(state)
    assert df.get_state()["inputs"][1]["value"] is None       # nothing was changed


@pytest.mark.parametrize("value", [2 ** 63 - 1, -(2 ** 63)])
def test_the_last_int_of_64_bits_in_a_flow_state_is_accepted(value):
    df = _concat()
    state = df.get_state()
    state["inputs"][1]["value"] = value
    df.set_state(state)
    assert df.get_state()["inputs"][1]["value"] == value


def _shuffle_state():
    df = LocallyShuffleData(DataFromList([[i] for i in range(50)], shuffle=False), 10)
    df.reset_state()
    itr = iter(df)
    for _ in range(15):
        next(itr)
    state = json.loads(json.dumps(df.get_state()))
    itr.close()
    return state


def _fresh_shuffle():
    df = LocallyShuffleData(DataFromList([[i] for i in range(50)], shuffle=False), 10)
    df.reset_state()
    return df


def test_a_locally_shuffle_state_entry_equal_to_tail_from_is_refused():
    state = _shuffle_state()
    kept = state["shuffled"][state["dropped"]:]
    assert kept and max(kept) < state["tail_from"] and state["tail_from"] not in state["shuffled"]
    at = state["shuffled"].index(max(kept))
    hostile = dict(state, shuffled=list(state["shuffled"]))
    hostile["shuffled"][at] = state["tail_from"]          # the first number the buffer's tail holds
    df = _fresh_shuffle()
    with pytest.raises(StateMismatchError, match=r"LocallyShuffleData.set_state: field 'shuffled' must be distinct "
                                                 r"entry numbers below tail_from {}: item {} is {}".format(
                                                     state["tail_from"], at, state["tail_from"])):
        df.set_state(hostile)
    df.set_state(state)                          # the state itself is accepted
    assert df.get_state()["shuffled"] == state["shuffled"]


def _scalar_record(data):
    return msgpack.packb({b"nd": False, b"type": "<i4", b"kind": b"", b"data": data})


def test_a_msgpack_numpy_scalar_with_trailing_bytes_is_refused():
    assert decode_tensorpack_record(_scalar_record(b"\x07\x00\x00\x00")) == 7
    for data in (b"\x07\x00\x00\x00\x00", b"\x07\x00\x00\x00\x09\x00\x00\x00", b"\x07\x00\x00"):
        with pytest.raises(DatasetFormatError, match=r"msgpack-numpy scalar of dtype int32 has {} bytes".format(
                len(data))):
            decode_tensorpack_record(_scalar_record(data))
