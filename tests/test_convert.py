"""``python -m inputpipe.dataflow.convert IN OUT``: tensorpack's files (pickled or msgpack-numpy
LMDB, TFRecord, .npz; committed fixtures) rewritten once into inputpipe's format, checked record
by record; consent to unpickle, no overwriting, one-line errors with exit code 2."""
import collections
import importlib.util
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest

from inputpipe.dataflow import LMDBSerializer, MapData, NumpySerializer, TFRecordSerializer
from inputpipe.dataflow import convert

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tensorpack_files")
_spec = importlib.util.spec_from_file_location("tensorpack_files_make", os.path.join(HERE, "make.py"))
make = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make)
PROG = "python -m inputpipe.dataflow.convert"
Point = collections.namedtuple("Point", "x y")
USAGE = "(usage: python -m inputpipe.dataflow.convert IN OUT [--allow-pickle])"


@pytest.fixture(autouse=True)
def no_pickle_variable(monkeypatch):
    monkeypatch.delenv("INPUTPIPE_ALLOW_PICKLE", raising=False)


def _datapoints(df):
    df.reset_state()
    return list(df)


def assert_same_datapoints(got, want):
    assert len(got) == len(want)
    for g_dp, w_dp in zip(got, want):
        assert isinstance(g_dp, list) and len(g_dp) == len(w_dp)
        for g, w in zip(g_dp, w_dp):
            if isinstance(w, (np.ndarray, np.generic)):
                assert type(g) is type(w) and g.dtype.str == w.dtype.str and np.shape(g) == np.shape(w)
                assert np.asarray(g).tobytes() == np.asarray(w).tobytes()
            else:
                assert type(g) is type(w) and g == w


def _run(argv, capsys):
    code = convert.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name, flags, loader", [
    ("tp_pickle.lmdb", ["--allow-pickle"], lambda p: LMDBSerializer.load(p, shuffle=False)),
    ("tp_msgpack.lmdb", [], lambda p: LMDBSerializer.load(p, shuffle=False)),
    ("tp_pickle.tfrecord", ["--allow-pickle"], TFRecordSerializer.load),
    ("tp_msgpack.tfrecord", [], TFRecordSerializer.load),
    ("tp.npz", ["--allow-pickle"], lambda p: NumpySerializer.load(p, shuffle=False)),
])
def test_a_tensorpack_file_becomes_an_inputpipe_file_that_loads_without_pickle(name, flags, loader, tmp_path,
                                                                                 capsys, monkeypatch):
    out = tmp_path / "out"
    code, stdout, stderr = _run([os.path.join(HERE, name), out] + flags, capsys)
    assert code == 0, stderr
    assert stdout == "{}: {} -> {}: 8 records, each read back and found equal\n".format(
        PROG, os.path.join(HERE, name), out)
    assert "writing {}: 100%".format(out) in stderr and "checking {}: 100%".format(out) in stderr  # tqdm
    assert sorted(os.listdir(tmp_path)) == ["out"]
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: pytest.fail("unpickled"))
    assert_same_datapoints(_datapoints(loader(str(out))), make.datapoints())


def test_an_lmdb_directory_converts_too(tmp_path, capsys):
    os.mkdir(tmp_path / "in")
    shutil.copy(os.path.join(HERE, "tp_msgpack.lmdb"), tmp_path / "in" / "data.mdb")
    code, _, stderr = _run([tmp_path / "in", tmp_path / "out.lmdb"], capsys)
    assert code == 0, stderr
    assert_same_datapoints(_datapoints(LMDBSerializer.load(str(tmp_path / "out.lmdb"), shuffle=False)),
                           make.datapoints())


def _one_line_error(code, stdout, stderr):
    assert code == 2 and stdout == ""
    assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    assert stderr.startswith(PROG + ": error: ") and stderr.rstrip("\n").endswith(USAGE)
    return stderr


def test_pickled_input_needs_consent_given_by_the_flag_or_the_variable(tmp_path, capsys, monkeypatch):
    for name in ("tp_pickle.lmdb", "tp_pickle.tfrecord", "tp.npz"):
        stderr = _one_line_error(*_run([os.path.join(HERE, name), tmp_path / "out"], capsys))
        assert "IN {} holds pickled records, and unpickling runs code chosen by whoever wrote the file: if it is " \
               "your own trusted file, pass --allow-pickle (or set INPUTPIPE_ALLOW_PICKLE=1)".format(
                   os.path.join(HERE, name)) in stderr
        assert not os.path.exists(tmp_path / "out")
    monkeypatch.setenv("INPUTPIPE_ALLOW_PICKLE", "1")
    code, _, stderr = _run([os.path.join(HERE, "tp_pickle.lmdb"), tmp_path / "out"], capsys)
    assert code == 0, stderr
    assert len(_datapoints(LMDBSerializer.load(str(tmp_path / "out")))) == 8


def test_an_existing_out_is_never_overwritten(tmp_path, capsys):
    (tmp_path / "out").write_bytes(b"keep me")
    stderr = _one_line_error(*_run([os.path.join(HERE, "tp_msgpack.lmdb"), tmp_path / "out"], capsys))
    assert "OUT {} already exists; the converter never overwrites a file".format(tmp_path / "out") in stderr
    assert (tmp_path / "out").read_bytes() == b"keep me"


def test_bad_arguments_exit_with_code_2_and_one_line(tmp_path, capsys):
    (tmp_path / "text").write_bytes(b"just some text, not a dataset")
    TFRecordSerializer.save(MapData(make_flow(), lambda dp: dp), str(tmp_path / "ours.tfrecord"))
    NumpySerializer.save(make_flow(), str(tmp_path / "ours.npy"))
    os.mkdir(tmp_path / "empty_dir")
    cases = [
        ([], r"the following arguments are required: IN, OUT"),
        ([tmp_path / "text"], r"the following arguments are required: OUT"),
        ([tmp_path / "text", tmp_path / "out", "--bogus"], r"unrecognized arguments: --bogus"),
        ([tmp_path / "missing", tmp_path / "out"], r"IN {} does not exist".format(tmp_path / "missing")),
        ([tmp_path / "text", tmp_path / "out"], r"IN {} is neither an LMDB, a TFRecord nor a .npz file (it starts "
                                                r"with b'just som')".format(tmp_path / "text")),
        ([tmp_path / "empty_dir", tmp_path / "out"], r"is a directory without data.mdb"),
        ([tmp_path / "ours.tfrecord", tmp_path / "out"], r"is already an inputpipe TFRecord file: nothing to convert"),
        ([tmp_path / "ours.npy", tmp_path / "out"], r"is a .npy file: already inputpipe's format"),
    ]
    for argv, text in cases:
        stderr = _one_line_error(*_run(argv, capsys))
        assert text in stderr, (argv, stderr)
    assert not os.path.exists(tmp_path / "out")


def make_flow():
    from inputpipe.dataflow import DataFromList
    return DataFromList([[np.arange(3), i] for i in range(4)], shuffle=False)


def _changing_what_is_read_back(monkeypatch, change):
    """``convert._load`` giving OUT's records (read back under their temporary name) through ``change``."""
    real_load = convert._load
    seen = []

    def load(kind, path, allow_pickle):
        df = real_load(kind, path, allow_pickle)
        if path.startswith(os.path.join(HERE, "")):
            return df
        seen.append(path)
        return MapData(df, change)

    monkeypatch.setattr(convert, "_load", load)
    return seen


def test_a_record_that_does_not_read_back_equal_fails_and_out_is_removed(tmp_path, capsys, monkeypatch):
    _changing_what_is_read_back(monkeypatch, lambda dp: dp[:2] + [dp[2] + 1] + dp[3:] if dp[2] == 5 else dp)
    code, stdout, stderr = _run([os.path.join(HERE, "tp_msgpack.lmdb"), tmp_path / "out"], capsys)
    assert code == 1 and stdout == ""
    assert stderr.splitlines()[-1] == "{}: error: {} does not read back as {} (record 5[2]: IN has int 5, OUT has " \
                                      "int 6); nothing was written to {}".format(PROG, tmp_path / "out",
                                                                                os.path.join(HERE, "tp_msgpack.lmdb"),
                                                                                tmp_path / "out")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("change, found", [
    (lambda array: array.__setitem__((2, 1), -1.0), "record 3[0]: the float32 arrays of shape (3, 4) differ first at "
                                                    "(2, 1): IN has 27.0, OUT has -1.0"),
    (lambda array: array.astype(np.float64), "record 3[0]: IN has a float32 array of shape (3, 4), OUT has a float64 "
                                             "array of shape (3, 4)"),
    (lambda array: array.reshape(4, 3), "record 3[0]: IN has a float32 array of shape (3, 4), OUT has a float32 array "
                                        "of shape (4, 3)"),
])
def test_an_array_whose_values_dtype_or_shape_do_not_read_back_equal_fails(tmp_path, capsys, monkeypatch, change,
                                                                            found):
    def changed(dp):
        if dp[2] != 3:
            return dp
        array = dp[0].copy()
        out = change(array)                          # a new array, or None: the copy changed in place
        return [array if out is None else out] + dp[1:]

    _changing_what_is_read_back(monkeypatch, changed)
    code, stdout, stderr = _run([os.path.join(HERE, "tp_msgpack.tfrecord"), tmp_path / "out"], capsys)
    assert (code, stdout) == (1, "")
    assert "does not read back as {} ({}); nothing was written".format(os.path.join(HERE, "tp_msgpack.tfrecord"),
                                                                        found) in stderr.splitlines()[-1]
    assert os.listdir(tmp_path) == []


def test_out_gets_its_name_only_after_the_check_passed(tmp_path, capsys, monkeypatch):
    real_check = convert._check
    during = []

    def check(kind, source, written, target, allow_pickle):
        during.append((os.path.lexists(target), os.path.basename(written), os.listdir(tmp_path)))
        return real_check(kind, source, written, target, allow_pickle)

    monkeypatch.setattr(convert, "_check", check)
    code, _, stderr = _run([os.path.join(HERE, "tp_msgpack.lmdb"), tmp_path / "out.lmdb"], capsys)
    assert code == 0, stderr
    name = ".out.lmdb.converting-{}".format(os.getpid())
    assert during == [(False, name, [name])]           # a kill during the check leaves no OUT
    assert os.listdir(tmp_path) == ["out.lmdb"]
    assert_same_datapoints(_datapoints(LMDBSerializer.load(str(tmp_path / "out.lmdb"), shuffle=False)),
                           make.datapoints())


def test_a_killed_run_leaves_no_out_and_the_next_run_converts(tmp_path):
    script = ("import os, signal, sys\nfrom inputpipe.dataflow import convert\n"
              "def check(*args):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
              "convert._check = check\nconvert.main(sys.argv[1:])\n")
    argv = [os.path.join(HERE, "tp_msgpack.tfrecord"), str(tmp_path / "out.tfrecord")]
    killed = subprocess.run([sys.executable, "-c", script] + argv, capture_output=True, timeout=60)
    assert killed.returncode == -9
    assert not os.path.lexists(tmp_path / "out.tfrecord")
    assert [name.startswith(".out.tfrecord.converting-") for name in os.listdir(tmp_path)] == [True]
    done = subprocess.run([sys.executable, "-m", "inputpipe.dataflow.convert"] + argv, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert_same_datapoints(_datapoints(TFRecordSerializer.load(str(tmp_path / "out.tfrecord"))), make.datapoints())


def test_an_out_that_is_a_dangling_symlink_is_refused_and_never_written_through(tmp_path, capsys):
    os.symlink(tmp_path / "elsewhere" / "target.lmdb", tmp_path / "link")
    os.mkdir(tmp_path / "elsewhere")
    for name in ("tp_msgpack.lmdb", "tp_msgpack.tfrecord"):
        stderr = _one_line_error(*_run([os.path.join(HERE, name), tmp_path / "link"], capsys))
        assert "OUT {} already exists; the converter never overwrites a file".format(tmp_path / "link") in stderr
        assert os.listdir(tmp_path / "elsewhere") == [] and os.path.islink(tmp_path / "link")


def _without_write_permission():
    """The command prefix that runs a process which the folder permissions bind (root ignores them
    unless it drops CAP_DAC_OVERRIDE)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to drop root's CAP_DAC_OVERRIDE")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]


@pytest.mark.parametrize("name", ["tp_msgpack.lmdb", "tp_msgpack.tfrecord"])
def test_a_read_only_or_missing_out_folder_is_one_line_naming_it(tmp_path, name):
    folder = tmp_path / "read_only"
    os.mkdir(folder)
    os.chmod(folder, 0o555)
    try:
        cases = [(folder / "out", "its folder {} is not writable".format(folder)),
                 (tmp_path / "missing" / "out", "its folder {} does not exist".format(tmp_path / "missing"))]
        for out, text in cases:
            proc = subprocess.run(_without_write_permission() + [sys.executable, "-m", "inputpipe.dataflow.convert",
                                                                 os.path.join(HERE, name), str(out)],
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 2 and proc.stdout == "", proc.stderr
            assert proc.stderr.splitlines() == ["{}: error: OUT {}: {} {}".format(PROG, out, text, USAGE)]
        assert os.listdir(folder) == []
    finally:
        os.chmod(folder, 0o755)


def test_a_write_that_fails_inside_lmdb_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    import lmdb

    def refuse(df, path):
        raise lmdb.ReadonlyError("{}: Permission denied".format(path))

    monkeypatch.setitem(convert._SAVERS, "lmdb", refuse)
    code, stdout, stderr = _run([os.path.join(HERE, "tp_msgpack.lmdb"), tmp_path / "out"], capsys)
    assert (code, stdout) == (1, "")
    assert stderr.splitlines() == ["{}: error: {} was not converted: {}: Permission denied".format(
        PROG, os.path.join(HERE, "tp_msgpack.lmdb"), tmp_path / ".out.converting-{}".format(os.getpid()))]


def test_a_damaged_input_or_a_value_the_format_cannot_carry_is_not_converted(tmp_path, capsys):
    data = open(os.path.join(HERE, "tp_msgpack.lmdb"), "rb").read()
    (tmp_path / "cut.lmdb").write_bytes(data[:len(data) // 2])
    code, _, stderr = _run([tmp_path / "cut.lmdb", tmp_path / "out"], capsys)
    assert code == 1 and "{}: error: {} was not converted: ".format(PROG, tmp_path / "cut.lmdb") in stderr
    assert "is truncated: its header" in stderr
    _write_tensorpack_lmdb(tmp_path / "set.lmdb", [[{1, 2}, 0]])
    code, _, stderr = _run([tmp_path / "set.lmdb", tmp_path / "out", "--allow-pickle"], capsys)
    assert code == 1 and "cannot serialize an object of type builtins.set" in stderr
    assert sorted(os.listdir(tmp_path)) == ["cut.lmdb", "set.lmdb"]


def _write_tensorpack_lmdb(path, datapoints):
    """An LMDB file laid out as tensorpack's LMDBSerializer writes it, with pickled records."""
    import lmdb
    env = lmdb.open(str(path), subdir=False, map_size=1 << 24, lock=False)
    with env.begin(write=True) as txn:
        for i, dp in enumerate(datapoints):
            txn.put(b"%08d" % i, pickle.dumps(dp, protocol=4))
        txn.put(b"__keys__", pickle.dumps([b"%08d" % i for i in range(len(datapoints))], protocol=4))
    env.close()


def test_values_the_wire_format_carries_as_their_plain_type_pass_the_check(tmp_path, capsys):
    _write_tensorpack_lmdb(tmp_path / "in.lmdb", [[np.str_("a"), np.bytes_(b"b"), Point(1, 2.5),
                                                  collections.OrderedDict(k=float("nan")), np.float32(-0.0)]])
    code, _, stderr = _run([tmp_path / "in.lmdb", tmp_path / "out", "--allow-pickle"], capsys)
    assert code == 0, stderr
    (got,) = _datapoints(LMDBSerializer.load(str(tmp_path / "out"), shuffle=False))
    assert got[:3] == ["a", b"b", (1, 2.5)] and type(got[2]) is tuple and type(got[3]) is dict
    assert np.isnan(got[3]["k"]) and got[4].dtype == np.float32 and np.signbit(got[4])


def test_the_module_runs_as_a_command(tmp_path):
    out = tmp_path / "out.tfrecord"
    proc = subprocess.run([sys.executable, "-m", "inputpipe.dataflow.convert", os.path.join(HERE, "tp_pickle.tfrecord"),
                           str(out), "--allow-pickle"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("-> {}: 8 records, each read back and found equal\n".format(out))
    assert "100%" in proc.stderr
    assert_same_datapoints(_datapoints(TFRecordSerializer.load(str(out))), make.datapoints())
