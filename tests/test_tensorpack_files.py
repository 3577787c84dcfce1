"""Dataset files written by tensorpack 0.11 (committed fixtures made by
tests/data/tensorpack_files/make.py) load in inputpipe, without pickle unless asked."""
import importlib.util
import os
import sys

import numpy as np
import pytest

from inputpipe.dataflow import HDF5Serializer, LMDBData, LMDBSerializer, NumpySerializer, TFRecordSerializer
from inputpipe.dataflow.serialize import DatasetFormatError
from inputpipe.dataflow.tensorpack_records import decode_tensorpack_record

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tensorpack_files")
_spec = importlib.util.spec_from_file_location("tensorpack_files_make", os.path.join(HERE, "make.py"))
make = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make)


def assert_datapoint(got, want):
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, (np.ndarray, np.generic)):
            assert type(g) is type(w), (type(g), type(w))
            assert g.dtype.str == w.dtype.str and np.shape(g) == np.shape(w)
            assert np.asarray(g).tobytes() == np.asarray(w).tobytes()
        else:
            assert type(g) is type(w) and g == w


def _all(df):
    df.reset_state()
    return list(df)


@pytest.mark.parametrize("shuffle", [False, True])
def test_msgpack_lmdb_of_tensorpack_loads_without_pickle(shuffle, monkeypatch):
    import pickle
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    df = LMDBSerializer.load(os.path.join(HERE, "tp_msgpack.lmdb"), shuffle=shuffle)
    assert len(df) == 8
    got = _all(df)
    want = make.datapoints()
    if shuffle:
        got.sort(key=lambda dp: dp[2])
    for g, w in zip(got, want):
        assert_datapoint(g, w)
    assert got[3][0].flags.writeable
    assert "msgpack_numpy" not in sys.modules


def test_pickled_lmdb_of_tensorpack_needs_the_opt_in():
    df = LMDBSerializer.load(os.path.join(HERE, "tp_pickle.lmdb"), shuffle=False)
    df.reset_state()
    with pytest.raises(DatasetFormatError, match=r"it is pickled \(tensorpack 0.11's default serializer, "
                                                 r"TENSORPACK_SERIALIZE=pickle\).*allow_pickle=True"):
        next(iter(df))
    got = _all(LMDBSerializer.load(os.path.join(HERE, "tp_pickle.lmdb"), shuffle=False, allow_pickle=True))
    for g, w in zip(got, make.datapoints()):
        assert_datapoint(g, w)


@pytest.mark.parametrize("kind", ["msgpack", "pickle"])
def test_tfrecord_of_tensorpack_loads(kind):
    path = os.path.join(HERE, "tp_{}.tfrecord".format(kind))
    if kind == "pickle":
        with pytest.raises(DatasetFormatError, match=r"record 0: it is pickled"):
            TFRecordSerializer.load(path)
    df = TFRecordSerializer.load(path, allow_pickle=kind == "pickle")
    assert len(df) == 8
    got = _all(df)
    assert len(got) == 8
    for g, w in zip(got, make.datapoints()):
        assert_datapoint(g, w)


def test_npz_of_tensorpack_needs_the_opt_in():
    path = os.path.join(HERE, "tp.npz")
    with pytest.raises(DatasetFormatError, match=r"loads it only with allow_pickle=True"):
        NumpySerializer.load(path)
    got = _all(NumpySerializer.load(path, shuffle=False, allow_pickle=True))
    for g, w in zip(got, make.datapoints()):
        assert_datapoint(g, w)


def test_hdf5_of_tensorpack_loads():
    got = _all(HDF5Serializer.load(os.path.join(HERE, "tp.h5"), ["images", "labels"], shuffle=False))
    assert len(got) == 8
    for i, (image, label) in enumerate(got):
        np.testing.assert_array_equal(image, np.arange(12, dtype=np.float32).reshape(3, 4) * i)
        assert image.dtype == np.float32 and label == i and label.dtype == np.int64


def test_lmdbdata_gives_raw_records_and_skips_the_key_list():
    df = LMDBData(os.path.join(HERE, "tp_msgpack.lmdb"), shuffle=False)
    records = _all(df)
    assert len(df) == 8 and [k for k, _ in records] == [b"%08d" % i for i in range(8)]
    assert_datapoint(decode_tensorpack_record(records[5][1]), make.datapoints()[5])
    shuffled = LMDBData(os.path.join(HERE, "tp_msgpack.lmdb"), shuffle=True, keys="{:08d}")
    assert sorted(k for k, _ in _all(shuffled)) == [b"%08d" % i for i in range(8)]


@pytest.mark.parametrize("record, match", [
    (b"\x81\xc4\x02nd\xc3", r"msgpack-numpy map without bytes data"),
    (b"\x85\xc4\x02nd\xc3\xc4\x04type\xa3|O8\xc4\x04kind\xc4\x01O\xc4\x05shape\x91\x01\xc4\x04data\xc4\x01x",
     r"object array: its data is a pickle"),
    (b"\x85\xc4\x02nd\xc3\xc4\x04type\xa3<f4\xc4\x04kind\xc4\x00\xc4\x05shape\x91\x03\xc4\x04data\xc4\x04abcd",
     r"dtype float32 and shape \(3,\) needs 12 bytes, has 4"),
    (b"\x85\xc4\x02nd\xc3\xc4\x04type\xa3<M8\xc4\x04kind\xc4\x00\xc4\x05shape\x91\x01\xc4\x04data\xc4\x08abcdefgh",
     r"dtype '<M8', expected a numeric, bool or fixed-width string dtype"),
    (b"\xd6\xff\x00\x00\x00\x01", r"ext type -1 \(timestamp\)"),
    (b"\xd4\x05\x00", r"msgpack ext type 5 in a tensorpack record"),
    (b"\xc1", r"not a tensorpack msgpack or pickle record"),
])
def test_hostile_msgpack_numpy_records_are_refused(record, match):
    with pytest.raises(DatasetFormatError, match=match):
        decode_tensorpack_record(record)
