"""Truncated and damaged dataset files raise DatasetFormatError naming the file, what was expected
and what was found: never a crash (LMDB maps the file, so a short file used to kill the process
with SIGBUS), never another exception type. LMDB is loaded in a subprocess, where a crash shows
as a signal instead of killing pytest."""
import json
import re
import os
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest

from inputpipe.dataflow import DataFromList, HDF5Serializer, LMDBSerializer, NumpySerializer, TFRecordSerializer
from inputpipe.dataflow.serialize import DatasetFormatError

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tensorpack_files")
PAGE = 4096
META = 16  # the meta record starts after the 16-byte page header
# Offsets inside the meta record (64-bit LMDB): magic 0, page size 24, main root 112, last page 120, txnid 128.
MAGIC, PAGE_SIZE, MAIN_ROOT, LAST_PAGE, TXNID = 0, 24, 112, 120, 128

# Loads each file given as JSON with both LMDB readers and prints one line per attempt (flushed
# before the attempt, so after a crash the last line names the file that crashed).
_LMDB_LOADER = """
import json, sys
from inputpipe.dataflow import LMDBData, LMDBSerializer
for path in json.loads(sys.argv[1]):
    for name, load in (("LMDBSerializer.load", lambda: LMDBSerializer.load(path, shuffle=False)),
                       ("LMDBData", lambda: LMDBData(path, shuffle=False))):
        print("TRYING", name, path, flush=True)
        try:
            df = load()
            df.reset_state()
            print("LOADED", len(list(df)), flush=True)
        except Exception as err:
            print("RAISED", type(err).__name__, err, flush=True)
"""


def _run_lmdb_loader(paths):
    proc = subprocess.run([sys.executable, "-c", _LMDB_LOADER, json.dumps([str(p) for p in paths])],
                          capture_output=True, text=True, timeout=60)
    died = "" if proc.returncode >= 0 else " (killed by {})".format(signal.Signals(-proc.returncode).name)
    assert proc.returncode == 0, "the loader exited with {}{}; last lines:\n{}\n{}".format(
        proc.returncode, died, "\n".join(proc.stdout.splitlines()[-3:]), proc.stderr[-2000:])
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("TRYING")]
    assert len(lines) == 2 * len(paths), proc.stdout
    return [lines[i:i + 2] for i in range(0, len(lines), 2)]


def _our_lmdb(tmp_path):
    """An inputpipe LMDB file of about 600 pages (200 records of 10 KB each, stored in overflow pages)."""
    path = tmp_path / "ours.lmdb"
    LMDBSerializer.save(DataFromList([[np.full((100, 100), i, np.uint8), i] for i in range(200)], shuffle=False),
                        str(path))
    return path


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def _meta_fields(data, page):
    """(page size, main root, last page, txnid) of meta page ``page`` of an LMDB file's bytes."""
    base = page * PAGE + META
    return (struct.unpack_from("=I", data, base + PAGE_SIZE)[0],) + \
        struct.unpack_from("=QQQ", data, base + MAIN_ROOT)


def _used_meta(data):
    """The meta page LMDB uses: the one of the later transaction."""
    return 1 if _meta_fields(data, 1)[3] > _meta_fields(data, 0)[3] else 0


@pytest.mark.timeout(60)
def test_truncated_lmdb_files_raise_a_clear_error_instead_of_sigbus(tmp_path):
    sources = {"ours": _our_lmdb(tmp_path), "tp_pickle": os.path.join(HERE, "tp_pickle.lmdb"),
               "tp_msgpack": os.path.join(HERE, "tp_msgpack.lmdb")}
    cases = []
    for name, source in sources.items():
        data = open(source, "rb").read()
        assert len(data) % PAGE == 0 and len(data) // PAGE >= 5
        cuts = {"half": len(data) // 2, "7of8": len(data) * 7 // 8, "3pages": 3 * PAGE,
                "lastpage": len(data) - PAGE, "lastbyte": len(data) - 1}
        for cut_name, size in cuts.items():
            cases.append((name, cut_name, len(data), size,
                          _write(tmp_path / "{}-{}.lmdb".format(name, cut_name), data[:size])))
        cases.append((name, "100bytes", len(data), 100, _write(tmp_path / "{}-100.lmdb".format(name), data[:100])))
    results = _run_lmdb_loader([case[-1] for case in cases])
    for (name, cut_name, full, size, path), lines in zip(cases, results):
        for line in lines:
            assert line.startswith("RAISED DatasetFormatError"), (name, cut_name, line)
            assert str(path) in line, line
            if cut_name == "100bytes":
                assert "is not an LMDB file, or truncated: meta page 0 at byte 0 is cut off (100 of its 152 bytes " \
                       "are in the file)" in line, line
            else:
                assert "is truncated: its header (meta page " in line and \
                    "says it holds {} pages of 4096 bytes ({} bytes), the file has {} bytes".format(
                        full // PAGE, full, size) in line, (name, cut_name, line)


@pytest.mark.timeout(60)
def test_lmdb_files_with_a_damaged_header_or_page_raise_a_clear_error(tmp_path):
    data = open(_our_lmdb(tmp_path), "rb").read()
    used = _used_meta(data)
    base = used * PAGE + META
    root, last_page = _meta_fields(data, used)[1:3]
    flips = {  # name: (byte offset, new value, expected message)
        "magic of meta 0": (META + MAGIC, 0x00, r"is not an LMDB file, or truncated: page 0 \(byte 0\) is not an LMDB "
                                               r"meta page: expected the flag 0x08 and the magic 0xBEEFC0DE"),
        "magic of meta 1": (PAGE + META + MAGIC + 3, 0x00, r"truncated or damaged header: page 1 \(byte 4096\) is not "
                                                           r"an LMDB meta page"),
        "page size of meta 0": (META + PAGE_SIZE + 1, 0x11, r"damaged header: meta page 0 declares a page size of "
                                                            r"4352 bytes, expected a power of 2"),
        "page size of meta 1": (PAGE + META + PAGE_SIZE + 1, 0x20, r"damaged header: meta page 1 declares a page size "
                                                                   r"of 8192 bytes, meta page 0 4096 bytes"),
        "last page": (base + LAST_PAGE + 3, 0x01, r"is truncated: its header \(meta page {}, transaction \d+\) says it "
                                                  r"holds {} pages".format(used, (1 << 24) + last_page + 1)),
        "main root": (base + MAIN_ROOT + 2, 0x7f, r"damaged header: meta page {} puts the root of the main database at "
                                                  r"page 8323\d+, outside the pages 2..{}".format(used, last_page)),
        "flags of the root page": (root * PAGE + 10, 0x00, r"is damaged: LMDB reports .*MDB_CORRUPTED"),
    }
    paths = []
    for name, (offset, value, _) in flips.items():
        damaged = bytearray(data)
        assert damaged[offset] != value, name
        damaged[offset] = value
        paths.append(_write(tmp_path / "{}.lmdb".format(name.replace(" ", "_")), bytes(damaged)))
    results = _run_lmdb_loader(paths)
    for (name, (_, _, match)), path, lines in zip(flips.items(), paths, results):
        for line in lines:
            assert line.startswith("RAISED DatasetFormatError"), (name, line)
            assert str(path) in line and re.search(match, line), (name, line)


def test_a_complete_lmdb_file_still_loads_after_the_header_check(tmp_path):
    path = _our_lmdb(tmp_path)
    df = LMDBSerializer.load(str(path), shuffle=False)
    df.reset_state()
    got = list(df)
    assert len(got) == 200 and got[199][1] == 199 and int(got[199][0][5, 5]) == 199


def _tfrecord_sources(tmp_path):
    ours = tmp_path / "ours.tfrecord"
    TFRecordSerializer.save(DataFromList([[np.full((10, 10), i, np.uint8), i] for i in range(20)], shuffle=False),
                            str(ours))
    return {"ours": (str(ours), None), "tp_msgpack": (os.path.join(HERE, "tp_msgpack.tfrecord"), None),
            "tp_pickle": (os.path.join(HERE, "tp_pickle.tfrecord"), True)}


@pytest.mark.parametrize("name", ["ours", "tp_msgpack", "tp_pickle"])
def test_truncated_or_flipped_tfrecord_files_raise_dataset_format_error(name, tmp_path):
    source, allow_pickle = _tfrecord_sources(tmp_path)[name]
    data = open(source, "rb").read()
    damaged = {"half": data[:len(data) // 2], "7of8": data[:len(data) * 7 // 8], "lastbyte": data[:-1],
               "5bytes": data[:5]}
    for offset in (3, 9, 14, len(data) // 2, len(data) - 2):   # length, its CRC, data, the last CRC
        flipped = bytearray(data)
        flipped[offset] ^= 0x01
        damaged["flip{}".format(offset)] = bytes(flipped)
    for case, content in damaged.items():
        path = _write(tmp_path / "{}.tfrecord".format(case), content)
        with pytest.raises(DatasetFormatError, match=r"TFRecordSerializer.load\('{}'\): (header )?record( \d+)?"
                                                     r"(:| is truncated)".format(path)) as caught:
            df = TFRecordSerializer.load(str(path), allow_pickle=allow_pickle)
            df.reset_state()
            list(df)
        message = str(caught.value)
        assert any(text in message for text in ("length field announces", "length bytes", "fails its CRC check",
                                                "is corrupt")), (case, message)


def test_truncated_or_damaged_npz_files_raise_dataset_format_error_before_unpickling(tmp_path, monkeypatch):
    import pickle
    data = open(os.path.join(HERE, "tp.npz"), "rb").read()
    central = data.rindex(b"PK\x01\x02")              # the central directory entry of buffer.npy
    damaged = {"half": (data[:len(data) // 2], r"not a readable \.npz \(zip\) file, or is truncated or damaged: "
                                               r"BadZipFile: File is not a zip file"),
               "7of8": (data[:len(data) * 7 // 8], r"BadZipFile"),
               "lastbyte": (data[:-1], r"BadZipFile"),
               "40bytes": (data[:40], r"BadZipFile")}
    flipped = bytearray(data)
    flipped[200] ^= 0xFF                                # inside the compressed data
    damaged["data"] = (bytes(flipped), r"(zip member 'buffer.npy' fails its CRC check|error: Error -3 while "
                                       r"decompressing)")
    bigger = bytearray(data)
    bigger[central + 20:central + 24] = struct.pack("<I", 1 << 30)   # compressed size: 1 GiB
    damaged["size"] = (bytes(bigger), r"is truncated or damaged: its zip member 'buffer.npy' needs bytes up to "
                                      r"offset 10737\d+, the file has {} bytes".format(len(data)))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: pytest.fail("unpickled a damaged file"))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled a damaged file"))
    for case, (content, match) in damaged.items():
        path = _write(tmp_path / "{}.npz".format(case), content)
        with pytest.raises(DatasetFormatError, match=r"NumpySerializer.load\('{}'\): .*{}".format(path, match)):
            NumpySerializer.load(str(path), allow_pickle=True)


def test_npz_whose_buffer_is_not_an_object_array_is_refused_before_allocating(tmp_path):
    path = tmp_path / "numeric.npz"
    np.savez_compressed(str(path), buffer=np.zeros(3, np.float32))
    with pytest.raises(DatasetFormatError, match=r"expected tensorpack's object array 'buffer', found a float32 array "
                                                 r"of shape \(3,\)"):
        NumpySerializer.load(str(path), allow_pickle=True)


def test_truncated_hdf5_files_raise_dataset_format_error(tmp_path):
    data = open(os.path.join(HERE, "tp.h5"), "rb").read()
    for case, size in {"half": len(data) // 2, "7of8": len(data) * 7 // 8, "lastbyte": len(data) - 1,
                       "100bytes": 100}.items():
        path = _write(tmp_path / "{}.h5".format(case), data[:size])
        with pytest.raises(DatasetFormatError, match=r"HDF5Data\('{}'\): cannot read {} as an HDF5 file: .*truncated "
                                                     r"file: eof = {}, .*stored_eof = {}".format(path, path, size,
                                                                                                len(data))):
            HDF5Serializer.load(str(path), ["images", "labels"])
