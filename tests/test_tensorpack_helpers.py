"""The ``tensorpack.utils`` helpers that tensorpack's data modules expose work here
(inputpipe.dataflow.tensorpack_helpers), and the stand-ins for removed backends say what replaces
them: Plasma's flows, ``get_caffe_pb``."""
import ctypes
import logging
import multiprocessing as mp
import os
import signal
import sys
import time
import weakref

import numpy as np
import pytest

from inputpipe.dataflow import seeding
from inputpipe.dataflow import tensorpack_helpers as helpers
from inputpipe.dataflow.dataset import DatasetDownloadError
from inputpipe.utils import concurrency


@pytest.fixture
def caplog_info(caplog):
    caplog.set_level(logging.INFO, logger="inputpipe")
    return caplog


def test_get_rng_follows_the_global_seed():
    try:
        seeding.set_global_seed(5)
        first = helpers.get_rng(object()).randint(1 << 30, size=4)
        seeding.set_global_seed(5)
        again = helpers.get_rng(object()).randint(1 << 30, size=4)
    finally:
        seeding.set_global_seed(None)
    assert isinstance(helpers.get_rng(), np.random.RandomState)
    assert first.tolist() == again.tolist()


def test_get_tqdm_kwargs_defaults_and_overrides(monkeypatch):
    monkeypatch.delenv(helpers.PROGRESS_REFRESH_ENV, raising=False)

    class Terminal:
        def isatty(self):
            return True

    kwargs = helpers.get_tqdm_kwargs(file=Terminal(), desc="x")
    assert kwargs["mininterval"] == 0.5 and kwargs["ascii"] is True and kwargs["smoothing"] == 0.5
    assert kwargs["desc"] == "x" and kwargs["dynamic_ncols"] is True and "{rate_noinv_fmt}" in kwargs["bar_format"]
    assert helpers.get_tqdm_kwargs(file=open(os.devnull, "w"))["mininterval"] == 180.0
    assert helpers.get_tqdm_kwargs(mininterval=3)["mininterval"] == 3
    monkeypatch.setenv(helpers.PROGRESS_REFRESH_ENV, "7.5")
    assert helpers.get_tqdm_kwargs()["mininterval"] == 7.5
    monkeypatch.setenv(helpers.PROGRESS_REFRESH_ENV, "often")
    with pytest.raises(ValueError, match=r"TENSORPACK_PROGRESS_REFRESH='often': expected a number of seconds"):
        helpers.get_tqdm_kwargs()


def test_get_tqdm_iterates_with_the_defaults():
    bar = helpers.get_tqdm(range(3), file=open(os.devnull, "w"), mininterval=0)
    try:
        assert list(bar) == [0, 1, 2]
        assert bar.ascii is True
    finally:
        bar.close()


def test_log_once_logs_each_message_once(caplog_info):
    message = "log_once test message {}".format(time.monotonic())
    helpers.log_once(message, "warn")
    helpers.log_once(message, "warn")
    helpers.log_once(message)
    records = [(r.levelname, r.getMessage()) for r in caplog_info.records if r.getMessage() == message]
    assert records == [("WARNING", message), ("INFO", message)]
    with pytest.raises(ValueError, match=r"log_once: func must be one of .*got 'shout'"):
        helpers.log_once("x", "shout")


def test_log_deprecated_messages_and_limit(caplog):
    helpers.log_deprecated("OldFlow", "Use NewFlow.", "2031-02-03")
    helpers.log_deprecated("OldArg", "Use new_arg=.")
    helpers.log_deprecated(text="Plain text.", eos="2031-02-03")
    for _ in range(3):
        helpers.log_deprecated("Limited", "x", max_num_warnings=2)
    messages = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[Deprecated]")]
    assert messages == ["[Deprecated] OldFlow will be deprecated after 03 Feb. Use NewFlow.",
                        "[Deprecated] OldArg was deprecated. Use new_arg=.",
                        "[Deprecated] Plain text. Legacy period ends after 03 Feb",
                        "[Deprecated] Limited was deprecated. x", "[Deprecated] Limited was deprecated. x"]
    with pytest.raises(ValueError, match="give the name of the deprecated thing or a text"):
        helpers.log_deprecated()
    with pytest.raises(ValueError, match=r"eos must be a date 'YYYY-MM-DD', got 'soon'"):
        helpers.log_deprecated("x", eos="soon")


def test_deprecated_decorator_names_the_function_and_caller(caplog):
    @helpers.deprecated("Use g().")
    def f(x):
        return x + 1

    assert f(1) == 2
    (message,) = [r.getMessage() for r in caplog.records if "[Deprecated] f [" in r.getMessage()]
    assert message.startswith("[Deprecated] f [{}:".format(__file__)) and message.endswith("] was deprecated. Use g().")
    assert f.__name__ == "f"


def test_timed_operation_logs_start_and_duration(caplog_info):
    with helpers.timed_operation("loading things", log_start=True):
        pass
    messages = [r.getMessage() for r in caplog_info.records if "oading things" in r.getMessage()]
    assert messages[0] == "Start loading things ..."
    assert messages[1].startswith("Loading things finished, time:") and messages[1].endswith(" sec.")
    with pytest.raises(ValueError, match="msg must be a non-empty message"):
        with helpers.timed_operation(""):
            pass


def test_mkdir_p(tmp_path):
    target = tmp_path / "a" / "b"
    helpers.mkdir_p(str(target))
    helpers.mkdir_p(str(target))
    helpers.mkdir_p("")
    assert target.is_dir()


def test_download_fetches_keeps_and_replaces(tmp_path):
    source = tmp_path / "remote" / "data.bin"
    source.parent.mkdir()
    source.write_bytes(b"0123456789")
    url = source.as_uri()
    out = tmp_path / "out"
    path = helpers.download(url, str(out))
    assert path == str(out / "data.bin") and open(path, "rb").read() == b"0123456789"
    assert helpers.download(url, str(out), filename="renamed.bin", expect_size=10) == str(out / "renamed.bin")
    (out / "renamed.bin").write_bytes(b"short")               # wrong size: downloaded again
    assert open(helpers.download(url, str(out), filename="renamed.bin", expect_size=10), "rb").read() == b"0123456789"
    (out / "kept.bin").write_bytes(b"mine")                    # no size given: kept as it is
    assert open(helpers.download(url, str(out), filename="kept.bin"), "rb").read() == b"mine"
    with pytest.raises(DatasetDownloadError, match=r"has 10 bytes, but the standard other.bin has 11"):
        helpers.download(url, str(out), filename="other.bin", expect_size=11)
    assert sorted(os.listdir(out)) == ["data.bin", "kept.bin", "renamed.bin"]   # no partial file left
    with pytest.raises(ValueError, match="cannot tell a file name from the URL 'http://'; pass filename="):
        helpers.download("http://", str(out))


def test_create_dummy_class_names_the_dependency():
    Dummy = helpers.create_dummy_class("LMDBThing", "lmdb")
    assert Dummy.__name__ == "LMDBThing"
    with pytest.raises(ImportError, match=r"LMDBThing is not available: it needs 'lmdb', which cannot be imported"):
        Dummy(1, x=2)
    with pytest.raises(AttributeError, match="LMDBThing is not available"):
        Dummy.load  # noqa: B018  (reading a class attribute is what raises)


def test_shape2d():
    assert helpers.shape2d(5) == [5, 5]
    assert helpers.shape2d(np.int64(3)) == [3, 3]
    assert helpers.shape2d((2, 3)) == [2, 3] and helpers.shape2d([4, 1]) == [4, 1]
    for bad in (True, (1, 2, 3), "ab", 2.0):
        with pytest.raises(ValueError, match="shape2d: expected an int or a list/tuple of two"):
            helpers.shape2d(bad)


def test_call_only_once_and_memoized_method():
    class Thing:
        def __init__(self):
            self.calls = 0

        @helpers.call_only_once
        def setup(self, x):
            return x * 2

        @helpers.memoized_method
        def compute(self, a, b=0):
            self.calls += 1
            return None if a < 0 else a + b

    one, two = Thing(), Thing()
    assert one.setup(2) == 4 and two.setup(3) == 6
    with pytest.raises(RuntimeError, match=r"Thing.setup can only be called once per object"):
        one.setup(2)
    assert [one.compute(1), one.compute(1), one.compute(1, b=2), one.compute(1, b=2), one.compute(-1),
            one.compute(-1)] == [1, 1, 3, 3, None, None]
    assert one.calls == 3 and two.compute(1) == 1 and two.calls == 1


def _report_death_signal(conn):
    helpers.enable_death_signal()
    value = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)   # PR_GET_PDEATHSIG
    conn.send(value.value)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_enable_death_signal_sets_sigkill_on_parent_death():
    reader, writer = mp.Pipe(duplex=False)
    proc = mp.get_context("fork").Process(target=_report_death_signal, args=(writer,))
    proc.start()
    try:
        assert reader.poll(10) and reader.recv() == signal.SIGKILL
    finally:
        proc.join(5)
    assert proc.exitcode == 0


def _sleep_forever():
    while True:
        time.sleep(0.05)


def test_start_proc_mask_signal_and_ensure_proc_terminate():
    procs = [mp.get_context("fork").Process(target=_sleep_forever, daemon=True) for _ in range(2)]
    before = signal.getsignal(signal.SIGINT)
    try:
        helpers.start_proc_mask_signal(procs)
        assert signal.getsignal(signal.SIGINT) is before
        os.kill(procs[0].pid, signal.SIGINT)               # ignored by the child
        time.sleep(0.2)
        assert procs[0].is_alive()
        helpers.ensure_proc_terminate(procs)
        concurrency._stop_at_exit(weakref.ref(procs[0]))           # what runs at exit
        concurrency._stop_at_exit(weakref.ref(procs[0]))           # an ended one: nothing to do
        assert procs[0].exitcode == -signal.SIGTERM
    finally:
        for p in procs:
            p.kill()
            p.join(5)
    with pytest.raises(TypeError, match=r"ensure_proc_terminate: expected a multiprocessing.Process or a list of them, "
                                        r"got 3"):
        helpers.ensure_proc_terminate(3)


def test_del_weakref_closes_or_deletes():
    class Closable:
        closed = 0

        def close(self):
            Closable.closed += 1

    obj = Closable()
    helpers.del_weakref(weakref.ref(obj))
    assert Closable.closed == 1
    helpers.del_weakref(weakref.ref(Closable()))        # collected at once: nothing to do
    assert Closable.closed == 1
    assert helpers.DIE is not None and isinstance(helpers.DIE, type)


def test_get_caffe_pb_names_caffe_lmdb():
    from inputpipe.dataflow.format import get_caffe_pb

    with pytest.raises(NotImplementedError, match=r"get_caffe_pb: .*inputpipe.dataflow.CaffeLMDB\(lmdb_path, "
                                                  r"shuffle=...\)"):
        get_caffe_pb()


@pytest.mark.parametrize("name", ["PlasmaPutData", "PlasmaGetData"])
def test_plasma_flows_import_and_name_their_replacement(name):
    from inputpipe.dataflow import DataFromList, ProxyDataFlow, parallel

    cls = getattr(parallel, name)
    assert issubclass(cls, ProxyDataFlow)
    with pytest.raises(NotImplementedError, match=r"{}: tensorpack's Plasma flows need pyarrow.plasma, which pyarrow "
                                                  r"removed in version 12.0.*MultiProcessRunnerZMQ\(ds, num_proc\).*"
                                                  r"MultiProcessMapData".format(name)):
        cls(DataFromList([[1]]), socket="/tmp/plasma")


def test_the_utils_imports_next_to_tensorpack_dataflow_code_work(caplog):
    # `from tensorpack.utils import logger` / `from tensorpack.utils.utils import get_rng`, after
    # the import change: the logger module has tensorpack's module-level calls
    import numpy as np

    from inputpipe.utils import logger
    from inputpipe.utils.utils import get_rng, get_tqdm, get_tqdm_kwargs
    from inputpipe.utils.utils import logger as logger_of_utils     # tensorpack's utils.utils imports it
    from inputpipe.utils import get_rng as get_rng_of_the_package  # and tensorpack.utils exports get_rng
    assert logger_of_utils is logger and get_rng_of_the_package is get_rng
    assert isinstance(get_rng(None), np.random.RandomState) and callable(get_tqdm) and callable(get_tqdm_kwargs)
    for name in ("debug", "info", "warning", "warn", "error", "critical", "fatal", "exception", "log"):
        assert callable(getattr(logger, name)), name
    logger.warn("the data loader found %d images", 3)
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("inputpipe", "WARNING", "the data loader found 3 images")]
