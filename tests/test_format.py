"""inputpipe.dataflow.format: LMDBData, LMDBDataDecoder, CaffeLMDB, SVMLightData, HDF5Data; and
HDF5Serializer."""
import struct
import sys

import lmdb
import numpy as np
import pytest

from inputpipe.dataflow import (
    CaffeLMDB, DataFromList, HDF5Data, HDF5Serializer, LMDBData, LMDBDataDecoder, LMDBSerializer, SVMLightData,
)
from inputpipe.dataflow.caffe_datum import parse_datum
from inputpipe.dataflow.serialize import DatasetFormatError


def _varint(value):
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def datum(channels, height, width, data=b"", label=0, floats=(), packed=True, extra=b""):
    """A serialized caffe.Datum, built field by field from the protobuf wire format."""
    out = _varint(1 << 3) + _varint(channels) + _varint(2 << 3) + _varint(height) + _varint(3 << 3) + _varint(width)
    if data:
        out += _varint(4 << 3 | 2) + _varint(len(data)) + data
    out += extra + _varint(5 << 3) + _varint(label)
    if floats and packed:
        payload = struct.pack("<%df" % len(floats), *floats)
        out += _varint(6 << 3 | 2) + _varint(len(payload)) + payload
    for value in (floats if not packed else ()):
        out += _varint(6 << 3 | 5) + struct.pack("<f", value)
    return out


def _write_lmdb(path, items):
    env = lmdb.open(str(path), subdir=False, map_size=1 << 24)
    with env.begin(write=True) as txn:
        for key, value in items.items():
            txn.put(key, value)
    env.close()


def _all(df):
    df.reset_state()
    return list(df)


def test_parse_datum_reads_every_field_and_skips_unknown_ones():
    unknown = _varint(9 << 3) + _varint(300) + _varint(10 << 3 | 1) + bytes(8) + _varint(11 << 3 | 2) + b"\x02ab"
    fields = parse_datum(datum(3, 2, 1, data=bytes(range(6)), label=-7, extra=unknown))
    assert fields == {"channels": 3, "height": 2, "width": 1, "data": bytes(range(6)), "label": -7,
                      "float_data": [], "encoded": False}
    assert parse_datum(datum(1, 1, 2, floats=(1.5, -2.0), packed=False))["float_data"] == [1.5, -2.0]
    for bad, match in [(b"\x08", "truncated or overlong varint"), (b"\x22\x05ab", "field 4 needs 5 bytes"),
                       (b"\x0b", "unsupported protobuf wire type 3"), (b"\x35\x00", "truncated 32-bit field 6")]:
        with pytest.raises(ValueError, match=match):
            parse_datum(bad)


def test_caffe_lmdb_gives_hwc_images_and_labels_and_drops_bad_records(tmp_path, caplog):
    chw = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    _write_lmdb(tmp_path / "caffe", {
        b"00000000": datum(2, 3, 4, data=chw.tobytes(), label=5),
        b"00000001": datum(1, 1, 2, floats=(0.25, 4.0), label=1),
        b"00000002": b"\x0b garbage",
        b"00000003": datum(2, 2, 2, data=b"short", label=3),
    })
    df = CaffeLMDB(str(tmp_path / "caffe"), shuffle=False)
    assert len(df) == 4
    got = _all(df)
    assert len(got) == 2
    image, label = got[0]
    assert image.dtype == np.uint8 and image.shape == (3, 4, 2) and label == 5
    np.testing.assert_array_equal(image, chw.transpose(1, 2, 0))
    assert got[1][0].dtype == np.float32 and got[1][0].tolist() == [[[0.25], [4.0]]] and got[1][1] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and "not a readable Caffe Datum: unsupported protobuf wire type 3" in warnings[0]
    assert "a Datum of 2x2x2 (channels x height x width) holds 5 values" in warnings[1]


def test_lmdbdata_of_an_inputpipe_file_skips_its_header_and_decoder_maps(tmp_path):
    LMDBSerializer.save(DataFromList([[i] for i in range(5)], shuffle=False), str(tmp_path / "ip.lmdb"))
    raw = LMDBData(str(tmp_path / "ip.lmdb"), shuffle=False)
    assert len(raw) == 5
    decoded = LMDBDataDecoder(raw, lambda k, v: None if k.endswith(b"3") else [k])
    assert _all(decoded) == [[b"%08d" % i] for i in (0, 1, 2, 4)]
    shuffled = LMDBData(str(tmp_path / "ip.lmdb"), shuffle=True)
    assert sorted(_all(shuffled)) == sorted(_all(raw))


def test_lmdbdata_with_a_key_that_is_not_there_names_it(tmp_path):
    _write_lmdb(tmp_path / "d", {b"a": b"1"})
    df = LMDBData(str(tmp_path / "d"), shuffle=True, keys=["a", "zz"])
    df.reset_state()
    with pytest.raises(DatasetFormatError, match=r"key b'zz' is not in the file"):
        list(df)


def test_svmlight_one_based_and_zero_based(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("# comment\n1 1:0.5 3:2\n-1 qid:4 2:1.5  # trailing\n\n0 3:-1\n")
    df = SVMLightData(str(path), shuffle=False)
    got = _all(df)
    assert len(df) == 3
    assert [x.tolist() for x, _ in got] == [[0.5, 0.0, 2.0], [0.0, 1.5, 0.0], [0.0, 0.0, -1.0]]
    assert [y for _, y in got] == [1.0, -1.0, 0.0] and got[0][0].dtype == np.float64
    path.write_text("2 0:1 1:2\n")
    assert [x.tolist() for x, _ in _all(SVMLightData(str(path), shuffle=False))] == [[1.0, 2.0]]
    path.write_text("1 a:b\n")
    with pytest.raises(ValueError, match=r"line 1 is not 'label index:value \.\.\.'"):
        SVMLightData(str(path))


def test_hdf5_round_trip_with_string_components_byte_exact(tmp_path):
    points = [[np.full((2, 2), i, np.float32), np.array(["a" * i, "é"]), np.array([b"x\x00" * i, b"y"]),
               i, np.array(["ab"], dtype=">U2")] for i in range(4)]
    HDF5Serializer.save(DataFromList(points, shuffle=False), str(tmp_path / "d.h5"), ["x", "s", "b", "y", "big"])
    got = _all(HDF5Serializer.load(str(tmp_path / "d.h5"), ["x", "s", "b", "y", "big"], shuffle=False))
    stacked = [np.asarray([dp[k] for dp in points]) for k in range(5)]
    for i, dp in enumerate(got):
        for k, value in enumerate(dp):
            assert value.dtype.str == stacked[k][i].dtype.str and value.tobytes() == stacked[k][i].tobytes()
    with pytest.raises(FileExistsError, match=r"already exists"):
        HDF5Serializer.save(DataFromList(points, shuffle=False), str(tmp_path / "d.h5"), ["x"])
    with pytest.raises(ValueError, match=r"datapoint 0 has 5 components, but 1 data_paths were given"):
        HDF5Serializer.save(DataFromList(points, shuffle=False), str(tmp_path / "e.h5"), ["x"])
    with pytest.raises(KeyError, match=r"no dataset \['nope'\] in the file"):
        HDF5Data(str(tmp_path / "d.h5"), ["x", "nope"])


def test_missing_h5py_is_a_one_line_error_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(ImportError, match=r'^HDF5 files need h5py: pip install "inputpipe\[hdf5\]"$'):
        HDF5Data(str(tmp_path / "x.h5"), ["a"])
