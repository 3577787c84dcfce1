"""Dataset files written by tensorpack 0.11 (committed fixtures made by
tests/data/tensorpack_files/make.py) load in inputpipe, without pickle unless asked."""
import importlib.util
import os
import subprocess
import sys

import msgpack
import numpy as np
import pytest

from inputpipe.dataflow import HDF5Serializer, LMDBData, LMDBSerializer, NumpySerializer, TFRecordSerializer
from inputpipe.dataflow.serialize import DatasetFormatError
from inputpipe.dataflow.tensorpack_records import decode_tensorpack_record
from inputpipe.utils import serialize
from inputpipe.utils.serialize import WireFormatError, dumps, loads, loads_frames

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
    with pytest.raises(DatasetFormatError, match=r"a .npz \(zip\) file, like those of tensorpack's NumpySerializer, which "
                                                 r"hold pickled objects; inputpipe unpickles only when asked.*"
                                                 r"pass allow_pickle=True"):
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


# ------------------------------------------- loads() on values read from tensorpack-made files

def _raw_values(name):
    """The raw values of a tensorpack LMDB fixture, in key order (what user code reads with lmdb)."""
    return [value for _, value in _all(LMDBData(os.path.join(HERE, name), shuffle=False))]


def _raw_tfrecords(name):
    """The raw records of a tensorpack TFRecord fixture (length, its CRC, data, its CRC each)."""
    records = []
    with open(os.path.join(HERE, name), "rb") as f:
        while True:
            head = f.read(12)
            if not head:
                return records
            records.append(f.read(int.from_bytes(head[:8], "little")))
            f.read(4)


def test_loads_decodes_values_of_tensorpack_msgpack_files_as_data(monkeypatch):
    import pickle
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    want = make.datapoints()
    for values in (_raw_values("tp_msgpack.lmdb"), _raw_tfrecords("tp_msgpack.tfrecord")):
        assert len(values) == 8
        for value, expected in zip(values, want):
            got = loads(value)
            assert_datapoint(got, expected)
            assert got[0].flags.writeable
            assert_datapoint(loads(bytearray(value), max_bytes=len(value)), expected)
    assert "msgpack_numpy" not in sys.modules
    with pytest.raises(WireFormatError, match=r"loads: message of \d+ bytes exceeds the limit of 10 bytes"):
        loads(_raw_values("tp_msgpack.lmdb")[0], max_bytes=10)


def test_loads_refuses_pickled_values_unless_asked_and_names_every_way(monkeypatch):
    monkeypatch.delenv("INPUTPIPE_ALLOW_PICKLE", raising=False)
    values = _raw_values("tp_pickle.lmdb") + _raw_tfrecords("tp_pickle.tfrecord")
    assert len(values) == 16
    for value in values:
        with pytest.raises(WireFormatError, match=r"^loads: it is pickled \(tensorpack 0.11's default serializer, "
                                                  r"TENSORPACK_SERIALIZE=pickle\); inputpipe unpickles only when asked, "
                                                  r"since unpickling runs code chosen by whoever wrote the file: pass "
                                                  r"allow_pickle=True if the file is a trusted local file, or set "
                                                  r"INPUTPIPE_ALLOW_PICKLE=1 for the same without a code change, or "
                                                  r"convert the file once into inputpipe's format: python -m "
                                                  r"inputpipe.dataflow.convert IN OUT --allow-pickle$"):
            loads(value)
    for value, expected in zip(values, make.datapoints() * 2):
        assert_datapoint(loads(value, allow_pickle=True), expected)
    monkeypatch.setenv("INPUTPIPE_ALLOW_PICKLE", "1")
    assert_datapoint(loads(values[3]), make.datapoints()[3])
    with pytest.raises(WireFormatError, match=r"it is pickled"):    # an explicit False wins over the variable
        loads(values[3], allow_pickle=False)


UNPICKLED = []


class _RunsCodeWhenUnpickled:
    def __reduce__(self):
        return UNPICKLED.append, ("ran code",)


def test_loads_never_runs_code_from_hostile_bytes_and_keeps_the_wire_format_strict(monkeypatch):
    import pickle
    monkeypatch.setenv("INPUTPIPE_ALLOW_PICKLE", "1")          # even with the opt-in for files set
    hostile = pickle.dumps([_RunsCodeWhenUnpickled()], protocol=4)
    with pytest.raises(WireFormatError, match=r"it is pickled"):
        loads(hostile, allow_pickle=False)
    with pytest.raises(WireFormatError, match=r"looks like a pickle; inputpipe never unpickles"):
        loads_frames([hostile])                                # sockets and worker channels
    with pytest.raises(WireFormatError, match=r"looks like a pickle"):
        serialize._loads_wire(hostile)                         # inputpipe's own dataset files
    # msgpack-numpy's object array carries a pickle in its data: refused, never unpickled
    object_array = msgpack.packb({b"nd": True, b"type": b"|O", b"kind": b"O", b"shape": [1], b"data": hostile})
    with pytest.raises(WireFormatError, match=r"loads: msgpack-numpy object array: its data is a pickle"):
        loads(object_array)
    with pytest.raises(WireFormatError, match=r"loads: msgpack ext type 7 in a tensorpack record"):
        loads(msgpack.packb([1, msgpack.ExtType(7, hostile)]))
    # a plain map, or bytes that look like a pickle inside a record or a wire message, are data
    plain = {b"data": hostile, "nd": "yes", "k": [1, 2.5, None]}
    assert loads(msgpack.packb(plain, use_bin_type=True)) == plain
    assert loads(msgpack.packb([hostile], use_bin_type=True)) == [hostile]
    assert loads(dumps({"pickle": hostile})) == {"pickle": hostile}
    assert UNPICKLED == []
    # a wire-format message is never read as msgpack, whatever follows its magic
    with pytest.raises(WireFormatError, match=r"loads: truncated: a message starts with a 20 byte preamble"):
        loads(b"IPWF" + msgpack.packb([1]))


def test_the_pickle_opt_in_variable_applies_to_every_reader_and_warns_once_per_process():
    script = """
import os
from inputpipe.dataflow import LMDBSerializer, NumpySerializer, TFRecordSerializer, LMDBData
from inputpipe.utils.serialize import loads
here = {!r}
counts = []
for df in (LMDBSerializer.load(os.path.join(here, "tp_pickle.lmdb"), shuffle=True),
           TFRecordSerializer.load(os.path.join(here, "tp_pickle.tfrecord")),
           NumpySerializer.load(os.path.join(here, "tp.npz"), shuffle=False)):
    df.reset_state()
    counts.append(len(list(df)))
raw = LMDBData(os.path.join(here, "tp_pickle.lmdb"), shuffle=False)
raw.reset_state()
counts.append(sum(len(loads(value)) for _, value in raw))
print(counts)
""".format(HERE)
    env = dict(os.environ, INPUTPIPE_ALLOW_PICKLE="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[8, 8, 8, 72]"
    warnings = [line for line in proc.stderr.splitlines() if "INPUTPIPE_ALLOW_PICKLE" in line]
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith("inputpipe WARNING: INPUTPIPE_ALLOW_PICKLE=1: pickled records of dataset files are "
                                  "unpickled in this process (pid ")
    assert "Unpickling runs code chosen by whoever wrote the file" in warnings[0]
    assert warnings[0].endswith("python -m inputpipe.dataflow.convert IN OUT --allow-pickle")


def test_every_reader_refuses_pickle_naming_the_argument_the_variable_and_the_converter(monkeypatch):
    monkeypatch.delenv("INPUTPIPE_ALLOW_PICKLE", raising=False)
    ways = r".*pass allow_pickle=True if the file is a trusted local file, or set INPUTPIPE_ALLOW_PICKLE=1 for the " \
           r"same without a code change, or convert the file once into inputpipe's format: python -m " \
           r"inputpipe.dataflow.convert IN OUT --allow-pickle$"
    df = LMDBSerializer.load(os.path.join(HERE, "tp_pickle.lmdb"), shuffle=False)
    df.reset_state()
    with pytest.raises(DatasetFormatError, match=r"tp_pickle.lmdb'\) record b'00000000': it is pickled" + ways):
        next(iter(df))
    with pytest.raises(DatasetFormatError, match=r"tp_pickle.tfrecord'\) record 0: it is pickled" + ways):
        TFRecordSerializer.load(os.path.join(HERE, "tp_pickle.tfrecord"))
    with pytest.raises(DatasetFormatError, match=r"tp.npz'\): this is a .npz \(zip\) file" + ways):
        NumpySerializer.load(os.path.join(HERE, "tp.npz"))
    monkeypatch.setenv("INPUTPIPE_ALLOW_PICKLE", "1")
    with pytest.raises(DatasetFormatError, match=r"it is pickled"):     # an explicit False wins over the variable
        TFRecordSerializer.load(os.path.join(HERE, "tp_pickle.tfrecord"), allow_pickle=False)
    assert len(_all(TFRecordSerializer.load(os.path.join(HERE, "tp_pickle.tfrecord")))) == 8
    monkeypatch.setenv("INPUTPIPE_ALLOW_PICKLE", "maybe")
    with pytest.raises(ValueError, match=r"INPUTPIPE_ALLOW_PICKLE='maybe': expected 1 \(unpickle trusted files\) "
                                         r"or 0 \(refuse pickles, the default\)"):
        NumpySerializer.load(os.path.join(HERE, "tp.npz"))
    monkeypatch.setenv("INPUTPIPE_ALLOW_PICKLE", "0")
    with pytest.raises(DatasetFormatError, match=r"this is a .npz \(zip\) file"):
        NumpySerializer.load(os.path.join(HERE, "tp.npz"))


def test_a_pickle_that_cannot_be_loaded_names_the_record():
    with pytest.raises(DatasetFormatError, match=r"^my.lmdb record b'7': the pickle cannot be loaded: "
                                                 r"(UnpicklingError|EOFError|KeyError|ValueError): ") as caught:
        decode_tensorpack_record(b"\x80\x04garbage", allow_pickle=True, what="my.lmdb record b'7'")
    assert caught.value.__cause__ is not None                  # the unpickler's own traceback is kept
    with pytest.raises(WireFormatError, match=r"^loads: the pickle cannot be loaded: AttributeError: .*NoSuchClass"):
        loads(b"\x80\x04\x95\x1a\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x0bNoSuchClass\x94\x93\x94.",
              allow_pickle=True)


class _Indexable(LMDBData):
    """tensorpack-style random access: keys right after the constructor, ``_txn`` and ``_guard``
    after reset_state (a third-party LMDB getter)."""

    def __init__(self, path):
        super().__init__(path, shuffle=False)
        assert self.keys is not None
        self.index_to_key = dict(enumerate(self.keys))

    def __getitem__(self, index):
        with self._guard:
            return self._txn.get(self.index_to_key[index])


class _Sharded(LMDBData):
    """tensorpack's ``_set_keys`` hook overridden to read a shard of the keys with ``_txn``."""

    def __init__(self, path, rank, shards):
        self.rank, self.shards = rank, shards
        super().__init__(path, shuffle=False)

    def _set_keys(self, keys=None):
        cursor = self._txn.cursor()
        self.keys = [k for k in cursor.iternext(keys=True, values=False) if k != b"__keys__"][self.rank::self.shards]

    def __iter__(self):
        with self._guard:
            for key in self.keys:
                yield [key, self._txn.get(key)]

    def __len__(self):
        return len(self.keys)


def test_lmdbdata_subclasses_written_for_tensorpack_run():
    from inputpipe.dataflow import MapData
    path = os.path.join(HERE, "tp_msgpack.lmdb")
    want = make.datapoints()
    indexable = _Indexable(path)
    assert indexable.keys == [b"%08d" % i for i in range(8)] and len(indexable) == 8
    assert not hasattr(indexable, "_txn")          # closed after the constructor, as in tensorpack
    indexable.reset_state()
    assert_datapoint(decode_tensorpack_record(indexable[5]), want[5])
    for rank in range(2):
        shard = MapData(_Sharded(path, rank, 2), LMDBSerializer._deserialize_lmdb)
        assert len(shard) == 4
        for got, index in zip(_all(shard), range(rank, 8, 2)):
            assert_datapoint(got, want[index])
    pickled = MapData(LMDBData(os.path.join(HERE, "tp_pickle.lmdb"), shuffle=False), LMDBSerializer._deserialize_lmdb)
    pickled.reset_state()
    with pytest.raises(DatasetFormatError, match=r"LMDBSerializer record b'00000000'.*it is pickled"):
        next(iter(pickled))


def test_the_serializer_helpers_custom_serializers_import_work_on_both_kinds_of_file(tmp_path):
    from inputpipe.dataflow import DataFromList, MapData
    from inputpipe.dataflow.serialize import _reset_df_and_get_size
    from inputpipe.utils.compatible_serialize import dumps as compat_dumps, loads as compat_loads
    points = [[np.arange(3) * i, "name%d" % i] for i in range(5)]
    assert _reset_df_and_get_size(DataFromList(points, shuffle=False)) == 5
    path = str(tmp_path / "own.lmdb")
    LMDBSerializer.save(DataFromList(points, shuffle=False), path)
    # the recipe of tensorpack's subclasses, over a file inputpipe wrote
    own = _all(MapData(LMDBData(path, shuffle=False), LMDBSerializer._deserialize_lmdb))
    assert [(dp[0].tolist(), dp[1]) for dp in own] == [(p[0].tolist(), p[1]) for p in points]
    assert compat_loads(compat_dumps(points[2]))[1] == "name2"
