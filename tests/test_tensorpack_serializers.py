"""tensorpack's serializer classes in ``utils.serialize``: MsgpackSerializer (our wire format out,
tensorpack's msgpack-numpy records in, never a pickle), PickleSerializer (unpickles only when
allowed), PyarrowSerializer (a stand-in naming the wire format), MAX_MSGPACK_LEN."""
import pickle

import numpy as np
import pytest

from inputpipe.utils import serialize
from inputpipe.utils.serialize import MAX_MSGPACK_LEN, MsgpackSerializer, PickleSerializer, PyarrowSerializer

# tensorpack 0.11's MsgpackSerializer.dumps([np.arange(3, dtype=np.int16), "x", np.float32(1.5)])
# (msgpack-numpy 0.4.8), made with /opt/tpvenv's tensorpack.
TENSORPACK_MSGPACK = (b"\x93\x85\xc4\x02nd\xc3\xc4\x04type\xa3<i2\xc4\x04kind\xc4\x00\xc4\x05shape\x91\x03\xc4\x04data"
                      b"\xc4\x06\x00\x00\x01\x00\x02\x00\xa1x\x83\xc4\x02nd\xc2\xc4\x04type\xa3<f4\xc4\x04data\xc4\x04"
                      b"\x00\x00\xc0?")


def test_msgpack_serializer_round_trip_in_the_wire_format():
    dp = [np.arange(6, dtype=np.float32).reshape(2, 3), "label", 7, {"k": b"v"}]
    data = MsgpackSerializer.dumps(dp)
    assert data == serialize.dumps(dp) and data[:4] == b"IPWF"
    array, label, number, meta = MsgpackSerializer.loads(data)
    assert array.dtype == np.float32 and array.tolist() == dp[0].tolist()
    assert (label, number, meta) == ("label", 7, {"k": b"v"})


def test_msgpack_serializer_reads_tensorpack_records():
    array, text, scalar = MsgpackSerializer.loads(TENSORPACK_MSGPACK)
    assert array.dtype == np.int16 and array.tolist() == [0, 1, 2]
    assert text == "x" and scalar.dtype == np.float32 and scalar == 1.5


def test_msgpack_serializer_never_unpickles(monkeypatch):
    monkeypatch.setenv("INPUTPIPE_ALLOW_PICKLE", "1")
    with pytest.raises(serialize.WireFormatError, match=r"MsgpackSerializer.loads: these bytes are a pickle, not "
                                                        r"msgpack; PickleSerializer.loads reads a trusted pickle"):
        MsgpackSerializer.loads(pickle.dumps([1], protocol=4))


def test_pickle_serializer_unpickles_only_when_allowed(monkeypatch):
    monkeypatch.delenv("INPUTPIPE_ALLOW_PICKLE", raising=False)
    data = PickleSerializer.dumps({"a": np.arange(2)})
    assert data[:2] == bytes([0x80, pickle.HIGHEST_PROTOCOL])      # tensorpack's protocol=-1
    with pytest.raises(serialize.WireFormatError, match=r"PickleSerializer.loads: it is pickled .*pass "
                                                        r"allow_pickle=True .*INPUTPIPE_ALLOW_PICKLE=1"):
        PickleSerializer.loads(data)
    assert PickleSerializer.loads(data, allow_pickle=True)["a"].tolist() == [0, 1]
    monkeypatch.setenv("INPUTPIPE_ALLOW_PICKLE", "1")
    assert PickleSerializer.loads(bytearray(data))["a"].tolist() == [0, 1]
    with pytest.raises(serialize.WireFormatError, match=r"PickleSerializer.loads: expected a pickle of protocol 2 "
                                                        r"to 5, got bytes starting with b'IPWF"):
        PickleSerializer.loads(serialize.dumps([1]))


@pytest.mark.parametrize("method, args", [("dumps", ([1],)), ("dumps_bytes", ([1],)), ("loads", (b"x",))])
def test_pyarrow_serializer_names_the_wire_format(method, args):
    with pytest.raises(NotImplementedError, match=r"PyarrowSerializer.{}: pyarrow.serialize\(\)/deserialize\(\) were "
                                                  r"deprecated in pyarrow 2.0 and removed in pyarrow 12.0.*"
                                                  r"inputpipe.utils.serialize.dumps/loads".format(method)):
        getattr(PyarrowSerializer, method)(*args)


def test_max_msgpack_len_and_star_import():
    assert MAX_MSGPACK_LEN == 1000000000
    namespace = {}
    exec("from inputpipe.utils.serialize import *", namespace)
    assert not {"MsgpackSerializer", "PickleSerializer", "PyarrowSerializer", "MAX_MSGPACK_LEN"} & set(namespace)
