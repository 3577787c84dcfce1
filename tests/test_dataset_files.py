"""Dataset files: LMDB, TFRecord and NumPy serializers (round trips, format tags, corruption)."""
import multiprocessing
import os
import pickle
import struct
import sys

import numpy as np
import pytest

from inputpipe.dataflow import DataFromList, DataFlow, seeding
from inputpipe.dataflow.serialize import (
    DATASET_FORMAT_VERSION,
    DatasetFormatError,
    LMDBSerializer,
    NumpySerializer,
    TFRecordSerializer,
)
from inputpipe.utils import serialize as wire
from inputpipe.utils.crc32c import _crc32c_loop, crc32c, masked_crc32c

# a module-scoped fixture is made once: the module's tests run in one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_dataset_files")

SERIALIZERS = ["lmdb", "tfrecord", "numpy"]


def list_datapoints(n=40):
    return [[np.arange(i, i + 600, dtype=np.float32).reshape(20, 30), np.int64(i), "img%d" % i,
             np.full((50, 50), i % 256, np.uint8)] for i in range(n)]


def dict_datapoints(n=25):
    return [{"image": np.full((8, 8, 3), i, np.uint8), "label": i, "meta": ("x", i * 0.5)} for i in range(n)]


def save(kind, datapoints, path):
    serializer = {"lmdb": LMDBSerializer, "tfrecord": TFRecordSerializer, "numpy": NumpySerializer}[kind]
    serializer.save(DataFromList(datapoints, shuffle=False), str(path))


def load(kind, path, shuffle=False):
    if kind == "lmdb":
        df = LMDBSerializer.load(str(path), shuffle=shuffle)
    elif kind == "tfrecord":
        df = TFRecordSerializer.load(str(path))
    else:
        df = NumpySerializer.load(str(path), shuffle=shuffle)
    df.reset_state()
    return df


def assert_datapoints_equal(expected, got):
    assert len(got) == len(expected)
    for want, have in zip(expected, got):
        assert type(have) is type(want)
        items = want.items() if isinstance(want, dict) else enumerate(want)
        for key, value in items:
            if isinstance(value, np.ndarray):
                assert have[key].dtype == value.dtype and have[key].shape == value.shape
                np.testing.assert_array_equal(have[key], value)
            else:
                assert have[key] == value and type(have[key]) is type(value)


# ----------------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("kind", SERIALIZERS)
@pytest.mark.parametrize("make", [list_datapoints, dict_datapoints])
def test_round_trip_in_order(kind, make, tmp_path):
    datapoints = make()
    path = tmp_path / "data"
    save(kind, datapoints, path)
    df = load(kind, path)
    assert len(df) == len(datapoints)
    assert_datapoints_equal(datapoints, list(df))
    assert_datapoints_equal(datapoints, list(df))  # a second epoch
    assert os.listdir(tmp_path) == ["data"]  # no temporary or lock file left behind


@pytest.mark.parametrize("kind", SERIALIZERS)
def test_loaded_arrays_are_writable(kind, tmp_path):
    save(kind, list_datapoints(3), tmp_path / "data")
    loaded = 0
    for dp in load(kind, tmp_path / "data"):
        i = int(dp[1])
        dp[0] += 1
        dp[3][0, 0] = 7
        assert dp[0][0, 0] == i + 1 and dp[3][0, 0] == 7 and dp[3][0, 1] == i
        loaded += 1
    assert loaded == 3


@pytest.mark.parametrize("kind", SERIALIZERS)
def test_empty_flow(kind, tmp_path):
    save(kind, [], tmp_path / "data")
    df = load(kind, tmp_path / "data")
    assert len(df) == 0 and list(df) == []


@pytest.mark.parametrize("kind", ["lmdb", "numpy"])
def test_shuffle_is_a_seeded_permutation_per_epoch(kind, tmp_path):
    datapoints = [[i] for i in range(200)]
    save(kind, datapoints, tmp_path / "data")
    seeding.set_global_seed(7)
    try:
        df = load(kind, tmp_path / "data", shuffle=True)
        first, second = [dp[0] for dp in df], [dp[0] for dp in df]
        seeding.set_global_seed(7)
        again = [dp[0] for dp in load(kind, tmp_path / "data", shuffle=True)]
    finally:
        seeding.set_global_seed(None)
    assert sorted(first) == list(range(200)) and sorted(second) == list(range(200))
    assert first != list(range(200)) and first != second
    assert again == first


def test_lmdb_into_an_existing_directory(tmp_path):
    datapoints = list_datapoints(5)
    LMDBSerializer.save(DataFromList(datapoints, shuffle=False), str(tmp_path))
    assert (tmp_path / "data.mdb").is_file()
    assert_datapoints_equal(datapoints, list(load("lmdb", tmp_path)))


def test_lmdb_grows_its_map_and_commits_in_batches(tmp_path, monkeypatch):
    from inputpipe.dataflow import serialize as files
    monkeypatch.setattr(files, "_LMDB_INITIAL_MAP_SIZE", 1 << 16)
    datapoints = [[np.full(5000, i, np.uint8)] for i in range(100)]
    LMDBSerializer.save(DataFromList(datapoints, shuffle=False), str(tmp_path / "d"), write_frequency=7)
    assert_datapoints_equal(datapoints, list(load("lmdb", tmp_path / "d")))


def test_lmdb_save_of_a_flow_without_length(tmp_path):
    class Gen(DataFlow):
        def __iter__(self):
            for i in range(12):
                yield [i]

    LMDBSerializer.save(Gen(), str(tmp_path / "d"))
    assert [dp[0] for dp in load("lmdb", tmp_path / "d")] == list(range(12))


def _iterate_in_child(df, queue):
    df.reset_state()
    queue.put([dp[1] for dp in df])


def test_lmdb_flow_built_before_fork_works_in_the_child(tmp_path):
    save("lmdb", list_datapoints(10), tmp_path / "d")
    df = LMDBSerializer.load(str(tmp_path / "d"), shuffle=False)
    df.reset_state()
    assert len(list(df)) == 10  # used in the parent, then forked
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_iterate_in_child, args=(df, queue))
    child.start()
    try:
        assert queue.get(timeout=30) == list(range(10))
    finally:
        child.join(timeout=30)
        queue.close()
        queue.join_thread()
    assert child.exitcode == 0


def test_lmdb_flow_pickles_for_spawned_workers(tmp_path):
    save("lmdb", list_datapoints(6), tmp_path / "d")
    df = LMDBSerializer.load(str(tmp_path / "d"), shuffle=False)
    df.reset_state()  # an open environment is not sent along; the copy opens its own
    copy = pickle.loads(pickle.dumps(df))
    with pytest.raises(RuntimeError, match=r"call reset_state\(\) before iterating"):
        next(iter(copy))
    copy.reset_state()
    assert [dp[1] for dp in copy] == list(range(6)) and len(copy) == 6


def test_lmdb_save_ignores_a_stale_temporary_file(tmp_path):
    target = tmp_path / "d.lmdb"
    save("lmdb", list_datapoints(8), tmp_path / "old.lmdb")
    # What a save killed with SIGKILL leaves behind, under the pid this process has.
    os.rename(str(tmp_path / "old.lmdb"), "{}.tmp-{}".format(target, os.getpid()))
    save("lmdb", list_datapoints(3), target)
    assert [dp[1] for dp in load("lmdb", target)] == [0, 1, 2]
    assert sorted(os.listdir(str(tmp_path))) == ["d.lmdb"]


def test_lmdb_iterating_before_reset_state_is_refused(tmp_path):
    save("lmdb", list_datapoints(2), tmp_path / "d")
    df = LMDBSerializer.load(str(tmp_path / "d"))
    with pytest.raises(RuntimeError, match=r"call reset_state\(\) before iterating"):
        next(iter(df))


def test_tfrecord_size_argument_sets_the_length(tmp_path):
    save("tfrecord", list_datapoints(4), tmp_path / "d")
    assert len(TFRecordSerializer.load(str(tmp_path / "d"), size=3)) == 3
    assert len(TFRecordSerializer.load(str(tmp_path / "d"))) == 4


# ----------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("kind", SERIALIZERS)
def test_missing_paths_are_named(kind, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"\.load\('.*nowhere'\): .*nowhere does not exist"):
        load(kind, tmp_path / "nowhere")


@pytest.mark.parametrize("kind", SERIALIZERS)
def test_existing_files_are_never_overwritten(kind, tmp_path):
    (tmp_path / "data").write_bytes(b"precious")
    with pytest.raises(FileExistsError, match=r"data already exists; remove it first"):
        save(kind, list_datapoints(2), tmp_path / "data")
    assert (tmp_path / "data").read_bytes() == b"precious"


@pytest.mark.parametrize("kind", SERIALIZERS)
def test_a_failing_flow_leaves_no_file(kind, tmp_path):
    class Failing(DataFlow):
        def __iter__(self):
            yield [1]
            raise ValueError("source broke")

    serializer = {"lmdb": LMDBSerializer, "tfrecord": TFRecordSerializer, "numpy": NumpySerializer}[kind]
    with pytest.raises(ValueError, match="source broke"):
        serializer.save(Failing(), str(tmp_path / "data"))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("writer, reader, match", [
    ("numpy", "tfrecord", r"length field fails its CRC check \(corrupt file, or not a TFRecord file\)"),
    ("tfrecord", "numpy", r"not a \.npy file"),
    ("numpy", "lmdb", r"data is not an LMDB file, or truncated: page 0 \(byte 0\) is not an LMDB meta page"),
    ("lmdb", "numpy", r"not a \.npy file"),
])
def test_files_of_another_serializer_are_refused(writer, reader, match, tmp_path):
    save(writer, list_datapoints(2), tmp_path / "data")
    with pytest.raises(DatasetFormatError, match=match):
        load(reader, tmp_path / "data")


def _write_lmdb(path, items):
    import lmdb
    env = lmdb.open(str(path), subdir=False, map_size=1 << 24)
    with env.begin(write=True) as txn:
        for key, value in items.items():
            txn.put(key, value)
    env.close()
    os.remove(str(path) + "-lock")


@pytest.mark.parametrize("meta, match", [
    (wire.dumps({"inputpipe_dataset": "numpy", "version": 1, "count": 0}),
     r"this is an inputpipe 'numpy' dataset file, expected 'lmdb'"),
    (wire.dumps({"inputpipe_dataset": "lmdb", "version": DATASET_FORMAT_VERSION + 1, "count": 0}),
     r"dataset format version 2, this inputpipe reads version 1"),
    (wire.dumps({"inputpipe_dataset": "lmdb", "version": 1}), r"metadata has no valid record count: None"),
    (wire.dumps([1, 2]), r"not an inputpipe dataset file \(no format tag\)"),
    (b"\x80\x04garbage", r"corrupt metadata: .*looks like a pickle"),
])
def test_lmdb_wrong_format_tags_are_refused(meta, match, tmp_path):
    _write_lmdb(tmp_path / "d", {b"__inputpipe__": meta})
    with pytest.raises(DatasetFormatError, match=match):
        LMDBSerializer.load(str(tmp_path / "d"))


def test_pickled_tensorpack_lmdb_records_are_refused_without_the_opt_in(tmp_path):
    _write_lmdb(tmp_path / "d", {b"__keys__": b"\x80\x04...", b"00000000": b"\x80\x04..."})
    df = LMDBSerializer.load(str(tmp_path / "d"), shuffle=False)
    df.reset_state()
    with pytest.raises(DatasetFormatError, match=r"record b'00000000': it is pickled \(tensorpack 0.11's default "
                                                 r"serializer.*pass allow_pickle=True if the file is a trusted"):
        next(iter(df))


def test_lmdb_without_any_metadata_key_is_refused(tmp_path):
    _write_lmdb(tmp_path / "d", {b"00000000": b"x"})
    with pytest.raises(DatasetFormatError, match=r"no '__inputpipe__' key, and no tensorpack '__keys__' key"):
        LMDBSerializer.load(str(tmp_path / "d"))


def test_lmdb_corrupt_and_missing_records_are_named(tmp_path):
    meta = wire.dumps({"inputpipe_dataset": "lmdb", "version": 1, "count": 3})
    _write_lmdb(tmp_path / "d", {b"__inputpipe__": meta, b"0000000000": wire.dumps([0]),
                                 b"0000000001": b"garbage"})
    df = load("lmdb", tmp_path / "d")
    it = iter(df)
    assert next(it) == [0]
    with pytest.raises(DatasetFormatError, match=r"record 1 is corrupt: loads: not an inputpipe wire-format"):
        next(it)
    _write_lmdb(tmp_path / "e", {b"__inputpipe__": meta, b"0000000000": wire.dumps([0])})
    with pytest.raises(DatasetFormatError, match=r"record 1 of 3 is missing"):
        list(load("lmdb", tmp_path / "e"))
    with pytest.raises(DatasetFormatError, match=r"record (1|2) of 3 is missing"):
        list(load("lmdb", tmp_path / "e", shuffle=True))


def test_lmdb_without_the_extra_names_it(tmp_path, monkeypatch):
    save("lmdb", list_datapoints(1), tmp_path / "d")
    monkeypatch.setitem(sys.modules, "lmdb", None)
    with pytest.raises(ImportError, match=r"pip install 'inputpipe\[lmdb\]'"):
        LMDBSerializer.load(str(tmp_path / "d"))
    with pytest.raises(ImportError, match=r"pip install 'inputpipe\[lmdb\]'"):
        LMDBSerializer.save(DataFromList([[1]]), str(tmp_path / "e"))


def _record(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def test_tfrecord_corruption_is_detected(tmp_path):
    save("tfrecord", list_datapoints(3), tmp_path / "d")
    raw = bytearray((tmp_path / "d").read_bytes())
    flipped = bytearray(raw)
    flipped[-10] ^= 0x01
    (tmp_path / "flipped").write_bytes(flipped)
    with pytest.raises(DatasetFormatError, match=r"record 2: data fails its CRC check \(corrupt file\)"):
        list(load("tfrecord", tmp_path / "flipped"))
    (tmp_path / "short").write_bytes(raw[:-100])
    df = load("tfrecord", tmp_path / "short")
    with pytest.raises(DatasetFormatError, match=r"record 2 is truncated: its length field announces \d+ bytes of data and a 4-byte "
                                                 r"CRC, \d+ bytes are left in the file"):
        list(df)
    with pytest.raises(DatasetFormatError, match=r"record 2 is truncated"):
        len(df)
    (tmp_path / "cut").write_bytes(raw + b"\x01\x02")
    with pytest.raises(DatasetFormatError, match=r"record 3 is truncated \(2 of 12 length bytes\)"):
        list(load("tfrecord", tmp_path / "cut"))
    bad_record = _record(b"not a message")
    (tmp_path / "bad").write_bytes(raw + bad_record)
    with pytest.raises(DatasetFormatError, match=r"record 3 is corrupt: loads: not an inputpipe wire-format"):
        list(load("tfrecord", tmp_path / "bad"))


def test_tfrecord_header_checks(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(DatasetFormatError, match=r"empty file, expected an inputpipe header record"):
        TFRecordSerializer.load(str(tmp_path / "empty"))
    (tmp_path / "foreign").write_bytes(_record(b"\x0a\x00tf.Example bytes"))
    with pytest.raises(DatasetFormatError, match=r"first record is not an inputpipe header"):
        TFRecordSerializer.load(str(tmp_path / "foreign"))
    header = wire.dumps({"inputpipe_dataset": "tfrecord", "version": 9})
    (tmp_path / "future").write_bytes(_record(header))
    with pytest.raises(DatasetFormatError, match=r"dataset format version 9, this inputpipe reads version 1"):
        TFRecordSerializer.load(str(tmp_path / "future"))


def test_numpy_refuses_npz_other_arrays_and_corrupt_content(tmp_path):
    np.savez_compressed(str(tmp_path / "tp.npz"), buffer=np.arange(3))
    with pytest.raises(DatasetFormatError, match=r"a \.npz \(zip\) file, like those of tensorpack's NumpySerializer"):
        NumpySerializer.load(str(tmp_path / "tp.npz"))
    np.save(str(tmp_path / "floats.npy"), np.zeros((2, 3)))
    with pytest.raises(DatasetFormatError, match=r"holds a float64 array of shape \(2, 3\), expected a uint8 vector"):
        NumpySerializer.load(str(tmp_path / "floats.npy"))
    np.save(str(tmp_path / "bytes.npy"), np.frombuffer(b"random bytes", np.uint8))
    with pytest.raises(DatasetFormatError, match=r"not an inputpipe dataset, or corrupt: loads: not an inputpipe"):
        NumpySerializer.load(str(tmp_path / "bytes.npy"))
    np.save(str(tmp_path / "other.npy"), np.frombuffer(wire.dumps({"inputpipe_dataset": "lmdb", "version": 1}), np.uint8))
    with pytest.raises(DatasetFormatError, match=r"inputpipe 'lmdb' dataset file, expected 'numpy'"):
        NumpySerializer.load(str(tmp_path / "other.npy"))
    save("numpy", list_datapoints(2), tmp_path / "ok.npy")
    size = len((tmp_path / "ok.npy").read_bytes())
    (tmp_path / "cut.npy").write_bytes((tmp_path / "ok.npy").read_bytes()[:-50])
    with pytest.raises(DatasetFormatError, match=r"corrupt \.npy file: its header declares {} bytes of data, "
                                                 r"the file holds {}".format(size - 128, size - 178)):
        NumpySerializer.load(str(tmp_path / "cut.npy"))
    (tmp_path / "header.npy").write_bytes(b"\x93NUMPY\x01\x00\x04\x00{'de")
    with pytest.raises(DatasetFormatError, match=r"unreadable \.npy header"):
        NumpySerializer.load(str(tmp_path / "header.npy"))


def test_numpy_header_declaring_a_huge_array_is_refused_before_allocating(tmp_path):
    with open(str(tmp_path / "huge.npy"), "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|u1", "fortran_order": False, "shape": (10 ** 13,)})
        f.write(wire.dumps([1]))
    with pytest.raises(DatasetFormatError, match=r"its header declares 10000000000000 bytes of data, the file "
                                                 r"holds \d+"):
        NumpySerializer.load(str(tmp_path / "huge.npy"))


def test_numpy_file_opens_with_numpy_without_pickle(tmp_path):
    save("numpy", list_datapoints(2), tmp_path / "d.npy")
    vector = np.load(str(tmp_path / "d.npy"), allow_pickle=False)
    assert vector.dtype == np.uint8 and vector.ndim == 1
    assert wire.loads(vector)["inputpipe_dataset"] == "numpy"


# ----------------------------------------------------------------------------------- CRC-32C

def test_crc32c_known_values():
    # Test vectors of RFC 3720 (iSCSI), appendix B.4, and the usual check value.
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C


def test_crc32c_vectorised_path_matches_the_loop():
    rng = np.random.RandomState(3)
    for n in [1024, 1025, 1500, 4095, 4096, 70001, 300000]:
        data = rng.bytes(n)
        assert crc32c(data) == _crc32c_loop(memoryview(data)), n


# ----------------------------------------------------------------------------------- TensorFlow

@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


def _read_in_a_graph(tf, dataset_of):
    """Every element of ``dataset_of()``, read in graph mode (which TF 1.15 and TF 2 both have)."""
    with tf.Graph().as_default():
        element = tf.compat.v1.data.make_one_shot_iterator(dataset_of()).get_next()
        with tf.compat.v1.Session() as sess:
            elements = []
            while True:
                try:
                    elements.append(sess.run(element))
                except tf.errors.OutOfRangeError:
                    return elements


def test_tf_data_reads_files_written_by_inputpipe(tf, tmp_path):
    datapoints = list_datapoints(6) + [[np.zeros(300000, np.uint8), 1, "big", np.zeros((1, 1), np.uint8)]]
    save("tfrecord", datapoints, tmp_path / "d.tfrecord")
    records = _read_in_a_graph(tf, lambda: tf.data.TFRecordDataset(str(tmp_path / "d.tfrecord")))
    assert wire.loads(records[0]) == {"inputpipe_dataset": "tfrecord", "version": 1}
    assert_datapoints_equal(datapoints, [wire.loads(r) for r in records[1:]])


def test_inputpipe_reads_files_written_by_tf(tf, tmp_path):
    datapoints = dict_datapoints(5) + [{"image": np.ones((300, 300, 3), np.uint8), "label": -1, "meta": ("y", 0.0)}]
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(wire.dumps({"inputpipe_dataset": "tfrecord", "version": 1}))
        for dp in datapoints:
            writer.write(wire.dumps(dp))
    df = load("tfrecord", path)
    assert len(df) == 6
    assert_datapoints_equal(datapoints, list(df))


def test_lmdb_files_have_tensorpacks_layout_for_code_that_reads_them_with_lmdb_itself(tmp_path):
    # keys 00000000, 00000001, ... and a __keys__ list, as tensorpack's LMDBSerializer.save wrote:
    # PyTorch datasets that read such files with `lmdb` (by formatted index, through the __keys__
    # list, or with a cursor that skips __keys__) read inputpipe's files too, with `loads`
    import lmdb
    path = str(tmp_path / "d.lmdb")
    points = [[np.arange(4, dtype=np.int16) * i, "x%d" % i] for i in range(12)]
    LMDBSerializer.save(DataFromList(points, shuffle=False), path)
    env = lmdb.open(path, subdir=False, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            assert txn.stat()["entries"] - 1 == 12
            by_index = [wire.loads(txn.get(u"{:08}".format(i).encode("ascii"))) for i in range(12)]
            keys = wire.loads(txn.get(b"__keys__"))
            by_list = [wire.loads(txn.get(k)) for k in keys]
            by_cursor = [wire.loads(v) for k, v in txn.cursor() if k != b"__keys__"]
    finally:
        env.close()
    assert keys == [b"%08d" % i for i in range(12)]
    for got in (by_index, by_list, by_cursor):
        assert [(dp[0].tolist(), dp[1]) for dp in got] == [(p[0].tolist(), p[1]) for p in points]


def test_lmdb_files_written_before_0_3_still_load(tmp_path):
    # 10-digit keys and an __inputpipe__ header with the count
    meta = wire.dumps({"inputpipe_dataset": "lmdb", "version": 1, "count": 3})
    _write_lmdb(tmp_path / "old", {b"__inputpipe__": meta, **{b"%010d" % i: wire.dumps([i]) for i in range(3)}})
    for shuffle in (False, True):
        df = LMDBSerializer.load(str(tmp_path / "old"), shuffle=shuffle)
        df.reset_state()
        assert len(df) == 3 and sorted(dp[0] for dp in df) == [0, 1, 2]


def test_lmdb_data_yields_the_records_of_a_file_with_a_header_and_never_the_header(tmp_path):
    from inputpipe.dataflow import LMDBData

    meta = wire.dumps({"inputpipe_dataset": "lmdb", "version": 1, "count": 3})
    records = {b"%010d" % i: wire.dumps([i]) for i in range(3)}
    _write_lmdb(tmp_path / "old", {**records, b"__inputpipe__": meta})
    _write_lmdb(tmp_path / "tp", {**{b"%08d" % i: wire.dumps([i]) for i in range(3)},
                                  b"__keys__": wire.dumps([b"%08d" % i for i in range(3)])})
    for shuffle in (False, True):
        df = LMDBData(str(tmp_path / "old"), shuffle=shuffle)
        df.reset_state()
        got = sorted((bytes(key), bytes(value)) for key, value in df)
        assert len(df) == 3 and got == sorted(records.items())
        df = LMDBData(str(tmp_path / "tp"), shuffle=shuffle)
        df.reset_state()
        assert len(df) == 3 and sorted(bytes(key) for key, _ in df) == [b"00000000", b"00000001", b"00000002"]
    assert LMDBData(str(tmp_path / "old"), shuffle=False).keys == sorted(records)


@pytest.mark.parametrize("keys, match", [
    (wire.dumps({"a": 1}), r"the '__keys__' record must list the keys b'00000000', b'00000001', \.\.\. in order; got a dict"),
    (wire.dumps([b"00000000", b"00000005"]), r"got b'00000005' at position 1 of 2"),
    (wire._MAGIC + b"\x00garbage", r"corrupt '__keys__' record"),
])
def test_an_lmdb_file_with_a_wrong_key_list_is_refused(keys, match, tmp_path):
    _write_lmdb(tmp_path / "d", {b"__keys__": keys, b"00000000": wire.dumps([0])})
    with pytest.raises(DatasetFormatError, match=match):
        LMDBSerializer.load(str(tmp_path / "d"))
