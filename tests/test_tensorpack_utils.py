"""tensorpack 0.11's ``utils`` submodules that data code imports work at their paths under
``inputpipe.utils`` (``from tensorpack.utils.timer import timed_operation`` becomes
``from inputpipe.utils.timer import timed_operation``), with tensorpack's names and behaviour, and
the data modules' helpers are the same objects."""
import importlib
import logging
import os
import threading
import time

import numpy as np
import pytest

# tensorpack 0.11's __all__ of each submodule, and the names outside it that its own modules and
# real scripts import from there
TENSORPACK_NAMES = {
    "argtools": ["map_arg", "memoized", "memoized_method", "graph_memoized", "shape2d", "shape4d",
                 "memoized_ignoreargs", "log_once", "call_only_once", "get_data_format"],
    "timer": ["timed_operation", "IterSpeedCounter", "Timer", "total_timer", "print_total_timer", "timer"],
    "fs": ["mkdir_p", "download", "recursive_walk", "get_dataset_path", "normpath", "execute_only_once"],
    "stats": ["StatCounter", "BinaryStatistics", "RatioCounter", "Accuracy", "OnlineMoments"],
    "develop": ["create_dummy_class", "create_dummy_func", "building_rtfd", "log_deprecated", "deprecated",
                "HIDE_DOC", "LazyLoader"],
    "concurrency": ["StoppableThread", "LoopThread", "ensure_proc_terminate", "start_proc_mask_signal", "DIE",
                    "enable_death_signal", "is_main_thread", "mask_sigint", "OrderedContainer", "subproc_call",
                    "OrderedResultGatherProc", "ShareSessionThread", "log_once"],
    "utils": ["change_env", "get_rng", "fix_rng_seed", "get_tqdm", "execute_only_once", "humanize_time_delta",
              "get_tqdm_kwargs", "find_library_full_path", "subproc_call"],
    "viz": ["interactive_imshow", "stack_patches", "gen_stack_patches", "dump_dataflow_images", "intensity_to_rgb",
            "draw_boxes", "draw_text", "Canvas"],
    "palette": ["PALETTE_RGB"],
    "gpu": ["change_gpu", "get_nr_gpu", "get_num_gpu"],
}
TENSORPACK_ALL = {
    "argtools": {"map_arg", "memoized", "memoized_method", "graph_memoized", "shape2d", "shape4d",
                 "memoized_ignoreargs", "log_once"},
    "timer": {"timed_operation", "IterSpeedCounter", "Timer"},
    "fs": {"mkdir_p", "download", "recursive_walk", "get_dataset_path", "normpath"},
    "stats": {"StatCounter", "BinaryStatistics", "RatioCounter", "Accuracy", "OnlineMoments"},
    "develop": set(),
    "viz": {"interactive_imshow", "stack_patches", "gen_stack_patches", "dump_dataflow_images", "intensity_to_rgb",
            "draw_boxes"},
    "palette": {"PALETTE_RGB"},
    "gpu": {"change_gpu", "get_nr_gpu", "get_num_gpu"},
}


@pytest.mark.parametrize("module", sorted(TENSORPACK_NAMES))
def test_every_name_is_at_tensorpacks_path(module):
    mod = importlib.import_module("inputpipe.utils." + module)
    assert [name for name in TENSORPACK_NAMES[module] if not hasattr(mod, name)] == []


@pytest.mark.parametrize("module", sorted(TENSORPACK_ALL))
def test_star_imports_give_what_tensorpacks_give(module):
    mod = importlib.import_module("inputpipe.utils." + module)
    assert set(mod.__all__) == TENSORPACK_ALL[module]


def test_the_package_exports_what_tensorpacks_utils_package_exported():
    import inputpipe.utils as utils
    from inputpipe.utils import logger

    for name in ("change_env", "get_rng", "fix_rng_seed", "get_tqdm", "execute_only_once", "humanize_time_delta"):
        assert getattr(utils, name) is getattr(importlib.import_module("inputpipe.utils.utils"), name), name
    assert callable(logger.info) and callable(logger.warn)


def test_the_data_modules_helpers_are_the_same_objects():
    from inputpipe.dataflow import tensorpack_helpers as helpers
    from inputpipe.dataflow.dataset import DatasetDownloadError, get_dataset_path
    from inputpipe.utils import argtools, concurrency, develop, fs, timer

    same = {"log_once": argtools, "shape2d": argtools, "call_only_once": argtools, "memoized_method": argtools,
            "timed_operation": timer, "mkdir_p": fs, "download": fs, "create_dummy_class": develop,
            "log_deprecated": develop, "deprecated": develop, "DIE": concurrency, "enable_death_signal": concurrency,
            "ensure_proc_terminate": concurrency, "start_proc_mask_signal": concurrency}
    assert [name for name, mod in same.items() if getattr(helpers, name) is not getattr(mod, name)] == []
    assert fs.get_dataset_path is get_dataset_path and fs.DatasetDownloadError is DatasetDownloadError


def test_importing_them_imports_neither_tensorflow_nor_opencv():
    import subprocess
    import sys

    code = ("import sys; import inputpipe.utils.argtools, inputpipe.utils.timer, inputpipe.utils.fs, "
            "inputpipe.utils.stats, inputpipe.utils.develop, inputpipe.utils.concurrency, inputpipe.utils.gpu, "
            "inputpipe.utils.viz, inputpipe.utils.palette, inputpipe.utils.logger, inputpipe.utils.utils; "
            "print(sorted(m for m in ('tensorflow', 'cv2') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


# -- argtools --------------------------------------------------------------------------------------

def test_memoized_keeps_results_per_arguments():
    from inputpipe.utils.argtools import memoized

    calls = []

    @memoized
    def square(x):
        calls.append(x)
        return x * x

    assert [square(3), square(3), square(4)] == [9, 9, 16]
    assert calls == [3, 4]


def test_memoized_ignoreargs_returns_the_first_result_whatever_the_arguments():
    from inputpipe.utils.argtools import memoized_ignoreargs

    calls = []

    @memoized_ignoreargs
    def load(path):
        calls.append(path)
        return path.upper()

    assert [load("a"), load("b")] == ["A", "A"]
    assert calls == ["a"]


def test_map_arg_maps_positional_and_keyword_arguments_and_refuses_unknown_names():
    from inputpipe.utils.argtools import map_arg, shape2d

    @map_arg(size=shape2d)
    def resize(image, size, mode="linear"):
        return image, size, mode

    assert resize("img", 32) == ("img", [32, 32], "linear")
    assert resize("img", size=(2, 3), mode="area") == ("img", [2, 3], "area")
    with pytest.raises(TypeError, match="map_arg: f has no argument sizes"):
        @map_arg(sizes=shape2d)
        def f(size):
            return size


def test_shapes_and_data_formats():
    from inputpipe.utils.argtools import get_data_format, shape2d, shape4d

    assert shape2d(5) == [5, 5] and shape2d(np.int64(5)) == [5, 5] and shape2d((2, 3)) == [2, 3]
    assert shape4d(3) == [1, 3, 3, 1] and shape4d((2, 3), "NCHW") == [1, 1, 2, 3]
    assert shape4d(2, "channels_first") == [1, 1, 2, 2]
    assert get_data_format("NHWC") == "channels_last" and get_data_format("channels_first", False) == "NCHW"
    with pytest.raises(ValueError, match="shape2d: expected an int or a list/tuple of two, got"):
        shape2d((1, 2, 3))
    with pytest.raises(ValueError, match="unknown data_format 'NDHWC'"):
        shape4d(2, "NDHWC")


def test_graph_memoized_keeps_one_cache_per_graph():
    tf = pytest.importorskip("tensorflow")
    from inputpipe.utils.argtools import graph_memoized

    @graph_memoized
    def constant(value):
        return tf.constant(value)

    with tf.Graph().as_default() as first:
        a, b = constant(1), constant(1)
    with tf.Graph().as_default() as second:
        c = constant(1)
    assert a is b and c is not a
    assert a.graph is first and c.graph is second


def test_call_only_once_and_memoized_method():
    from inputpipe.utils.argtools import call_only_once, memoized_method

    class Source:
        def __init__(self):
            self.built = 0

        @call_only_once
        def setup(self):
            return "set up"

        @memoized_method
        def hooks(self, kind="all"):
            self.built += 1
            return [kind]

    s = Source()
    assert s.setup() == "set up"
    with pytest.raises(RuntimeError, match="Source.setup can only be called once per object"):
        s.setup()
    assert s.hooks() is s.hooks() and s.built == 1
    assert s.hooks(kind="x") == ["x"] and s.built == 2
    assert Source().setup() == "set up"


# -- timer -----------------------------------------------------------------------------------------

def test_timer_counts_seconds_without_its_pauses():
    from inputpipe.utils.timer import Timer

    t = Timer()
    t.pause()
    assert t.is_paused()
    at_pause = t.seconds()
    time.sleep(0.05)
    assert t.seconds() == at_pause                 # paused: the count stands still
    t.resume()
    assert not t.is_paused() and t.seconds() >= at_pause
    with pytest.raises(RuntimeError, match="Timer.resume: the timer is not paused"):
        t.resume()
    t.pause()
    with pytest.raises(RuntimeError, match="Timer.pause: the timer is already paused"):
        t.pause()
    t.reset()
    assert not t.is_paused() and t.seconds() < at_pause + 1.0


def test_timed_operation_total_timer_and_iter_speed_log_what_tensorpacks_did(caplog):
    from inputpipe.utils.timer import IterSpeedCounter, print_total_timer, timed_operation, total_timer

    caplog.set_level(logging.INFO, logger="inputpipe")
    with timed_operation("loading the index", log_start=True):
        pass
    for _ in range(3):
        with total_timer("a block of test_tensorpack_utils"):
            pass
    print_total_timer()
    speed = IterSpeedCounter(2, "reader")
    for _ in range(4):
        speed()
    messages = [r.getMessage() for r in caplog.records]
    assert "Start loading the index ..." in messages
    assert any(m.startswith("Loading the index finished, time:") and m.endswith(" sec.") for m in messages)
    assert any(m.startswith("Total Time: a block of test_tensorpack_utils -> ") and ", 3 times, " in m
               for m in messages)
    assert [m.split(":")[0] for m in messages if m.startswith("reader:")] == ["reader", "reader"]
    assert [m.split(", ")[1] for m in messages if m.startswith("reader:")] == ["2 times", "4 times"]
    with pytest.raises(ValueError, match="print_every must be at least 1"):
        IterSpeedCounter(0)


# -- stats -----------------------------------------------------------------------------------------

def test_stat_counter_ratio_counter_and_accuracy():
    from inputpipe.utils.stats import Accuracy, RatioCounter, StatCounter

    s = StatCounter()
    with pytest.raises(ValueError, match="StatCounter.average: no value was fed"):
        _ = s.average
    for v in (0.5, 1.5, 4.0):
        s.feed(v)
    assert (s.count, s.sum, s.average, s.max, s.min) == (3, 6.0, 2.0, 4.0, 0.5)
    assert s.samples() == [0.5, 1.5, 4.0]
    s.reset()
    assert s.count == 0
    r = RatioCounter()
    assert r.ratio == 0
    r.feed(3, 4)
    r.feed(1)
    assert (r.count, r.total, r.ratio) == (4, 5, 0.8)
    a = Accuracy()
    a.feed(9, 10)
    assert a.accuracy == 0.9


def test_binary_statistics_and_online_moments():
    from inputpipe.utils.stats import BinaryStatistics, OnlineMoments

    b = BinaryStatistics()
    assert (b.precision, b.recall, b.false_positive, b.false_negative) == (0, 0, 0, 0)
    b.feed(np.array([1, 1, 0, 0]), np.array([1, 0, 1, 0]))
    assert (b.nr_pos, b.nr_neg, b.nr_pred_pos, b.corr_pos, b.corr_neg) == (2, 2, 2, 1, 1)
    assert (b.precision, b.recall, b.false_positive, b.false_negative) == (0.5, 0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match=r"pred has shape \(2,\), label \(3,\)"):
        b.feed(np.array([1, 0]), np.array([1, 0, 1]))
    values = np.random.RandomState(0).rand(50, 3)
    m = OnlineMoments()
    for row in values:
        m.feed(row)
    np.testing.assert_allclose(m.mean, values.mean(axis=0))
    np.testing.assert_allclose(m.variance, values.var(axis=0, ddof=1))
    np.testing.assert_allclose(m.std, values.std(axis=0, ddof=1))
    with pytest.raises(ValueError, match="needs two values at least, got 1"):
        one = OnlineMoments()
        one.feed(1.0)
        _ = one.variance


# -- fs, develop, utils ------------------------------------------------------------------------------

def test_fs_paths(tmp_path, monkeypatch):
    from inputpipe.utils.fs import get_dataset_path, mkdir_p, normpath, recursive_walk

    mkdir_p(str(tmp_path / "a" / "b"))
    mkdir_p(str(tmp_path / "a" / "b"))            # exists: nothing to do
    (tmp_path / "a" / "b" / "x.txt").write_text("x")
    (tmp_path / "a" / "y.txt").write_text("y")
    assert sorted(os.path.relpath(p, str(tmp_path)) for p in recursive_walk(str(tmp_path))) == \
        [os.path.join("a", "b", "x.txt"), os.path.join("a", "y.txt")]
    assert normpath("/data//train/") == "/data/train" and normpath("gs://bucket//x/") == "gs://bucket//x/"
    monkeypatch.delenv("INPUTPIPE_DATASET", raising=False)
    monkeypatch.setenv("TENSORPACK_DATASET", str(tmp_path))
    assert get_dataset_path("mnist_data") == os.path.join(str(tmp_path), "mnist_data")


def test_download_of_a_local_url_and_a_wrong_size(tmp_path):
    from inputpipe.utils.fs import DatasetDownloadError, download

    source = tmp_path / "served.bin"
    source.write_bytes(b"12345")
    url = source.as_uri()
    path = download(url, str(tmp_path / "out"), expect_size=5)
    assert path == str(tmp_path / "out" / "served.bin") and open(path, "rb").read() == b"12345"
    with pytest.raises(DatasetDownloadError, match="has 5 bytes, but the standard other.bin has 6"):
        download(url, str(tmp_path / "out"), filename="other.bin", expect_size=6)
    assert sorted(os.listdir(str(tmp_path / "out"))) == ["served.bin"]        # no partial file left


def test_dummy_class_and_function_name_the_missing_dependency(monkeypatch):
    from inputpipe.utils.develop import building_rtfd, create_dummy_class, create_dummy_func, HIDE_DOC

    Reader = create_dummy_class("Reader", "lmdb")
    with pytest.raises(ImportError, match="Reader is not available: it needs 'lmdb'"):
        Reader()
    read = create_dummy_func("read_mat", ["scipy", "h5py"])
    assert read.__name__ == "read_mat"
    with pytest.raises(ImportError, match="read_mat is not available: it needs 'scipy', 'h5py'"):
        read("x.mat")

    @HIDE_DOC
    def helper():
        """Kept."""
    assert helper.__HIDE_SPHINX_DOC__ is True and helper.__doc__ == "Kept."
    monkeypatch.delenv("READTHEDOCS", raising=False)
    monkeypatch.delenv("DOC_BUILDING", raising=False)
    assert building_rtfd() is False
    monkeypatch.setenv("READTHEDOCS", "True")
    assert building_rtfd() is True
    monkeypatch.delenv("READTHEDOCS")
    monkeypatch.setenv("DOC_BUILDING", "1")
    assert building_rtfd() is True


def test_fix_rng_seed_makes_get_rng_repeatable():
    from inputpipe.utils import fix_rng_seed, get_rng
    from inputpipe.utils.seeding import set_global_seed

    try:
        fix_rng_seed(42)
        first = [get_rng().randint(1 << 30) for _ in range(3)]
        fix_rng_seed(42)
        again = [get_rng().randint(1 << 30) for _ in range(3)]
    finally:
        set_global_seed(None)
    assert first == again and len(set(first)) == 3


def test_execute_only_once_change_env_and_humanize_time_delta(monkeypatch):
    from inputpipe.utils.utils import change_env, execute_only_once, humanize_time_delta

    assert [execute_only_once() for _ in range(3)] == [True, False, False]
    assert execute_only_once()                       # another line: its own first time
    monkeypatch.setenv("INPUTPIPE_TEST_ENV", "before")
    with change_env("INPUTPIPE_TEST_ENV", None):
        assert "INPUTPIPE_TEST_ENV" not in os.environ
    with pytest.raises(KeyError):
        with change_env("INPUTPIPE_TEST_ENV", "inside"):
            assert os.environ["INPUTPIPE_TEST_ENV"] == "inside"
            raise KeyError("x")
    assert os.environ["INPUTPIPE_TEST_ENV"] == "before"
    assert [humanize_time_delta(s) for s in (0, 0.01, 1, 61, 87.6, 3601, 86400 + 9 * 3600 + 120 + 3)] == [
        "0 second", "0.01 seconds", "1 second", "1 minute 1 second", "1 minute 27 seconds", "1 hour 1 second",
        "1 day 9 hours 2 minutes 3 seconds"]


# -- concurrency -----------------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_loop_thread_pauses_resumes_and_stops():
    from inputpipe.utils.concurrency import LoopThread

    calls = []
    thread = LoopThread(lambda: (calls.append(1), time.sleep(0.001)))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        thread.pause()
        time.sleep(0.1)                              # a call under way when paused may end
        held = len(calls)
        time.sleep(0.1)
        assert len(calls) == held                    # no call while paused
        thread.resume()
        while len(calls) <= held and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(calls) > held
    finally:
        thread.stop()
        thread.join(5)
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="made with pausable=False"):
        LoopThread(lambda: None, pausable=False).pause()


def test_mask_sigint_ignores_ctrl_c_in_the_main_thread_only():
    import signal

    from inputpipe.utils.concurrency import is_main_thread, mask_sigint

    before = signal.getsignal(signal.SIGINT)
    with mask_sigint() as masked:
        assert masked is True and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is before and is_main_thread()
    seen = []

    def elsewhere():
        with mask_sigint() as masked:
            seen.append((masked, is_main_thread()))
    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(5)
    assert seen == [(False, False)]


@pytest.mark.timeout(30)
def test_threads_made_with_one_stop_event_stop_together():
    import queue

    from inputpipe.utils.concurrency import StoppableThread

    class Getter(StoppableThread):
        def __init__(self, evt, q):
            super().__init__(evt)                     # tensorpack's signature: the event first
            self.q = q
            self.got = "nothing yet"

        def run(self):
            try:
                self.got = self.queue_get_stoppable(self.q)
            except queue.Empty:                       # stopped while waiting (tensorpack: None)
                self.got = "stopped"

    event = threading.Event()
    threads = [Getter(event, queue.Queue()), StoppableThread(target=lambda: None, evt=event)]
    threads[0].start()
    threads[1].stop()                                 # sets the shared event
    threads[0].join(5)
    assert not threads[0].is_alive() and threads[0].stopped() and threads[0].got == "stopped"
    with pytest.raises(TypeError, match="got a stop event twice"):
        StoppableThread(threading.Event(), evt=threading.Event())


def test_ordered_container_gives_items_in_rank_order_and_refuses_a_rank_twice():
    from inputpipe.utils.concurrency import OrderedContainer

    box = OrderedContainer(start=5)
    assert not box.has_next()
    for rank in (7, 5, 8):
        box.put(rank, "item {}".format(rank))
    assert box.get() == (5, "item 5") and not box.has_next()
    with pytest.raises(ValueError, match="rank 6 is not there yet"):
        box.get()
    box.put(6, "item 6")
    assert [box.get() for _ in range(3)] == [(6, "item 6"), (7, "item 7"), (8, "item 8")]
    assert box.wait_for == 9 and not box.has_next()
    with pytest.raises(ValueError, match="rank 8 was already put"):
        box.put(8, "again")
    box.put(10, "x")
    with pytest.raises(ValueError, match="rank 10 was already put"):
        box.put(10, "y")


@pytest.mark.timeout(30)
def test_subproc_call_returns_output_and_code_and_kills_at_its_timeout(caplog):
    import sys

    from inputpipe.utils.concurrency import subproc_call

    assert subproc_call("echo out; echo err 1>&2") == (b"out\nerr\n", 0)
    assert subproc_call([sys.executable, "-c", "import sys; print('a'); sys.exit(4)"]) == (b"a\n", 4)
    started = time.monotonic()
    output, code = subproc_call([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5)
    assert (output, code) == (b"", -1) and time.monotonic() - started < 20
    assert subproc_call(["/nonexistent/program"]) == (b"", -2)
    text = caplog.text
    assert "return code 4" in text and "ran over its timeout of 0.5 s" in text and "could not be started" in text


def test_lazy_loader_imports_on_first_use_and_replaces_itself():
    import sys

    from inputpipe.utils.develop import LazyLoader

    namespace = {}
    sys.modules.pop("colorsys", None)
    namespace["colorsys"] = LazyLoader("colorsys", namespace, "colorsys")
    assert "colorsys" not in sys.modules
    assert namespace["colorsys"].rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert namespace["colorsys"] is sys.modules["colorsys"]
    missing = LazyLoader("nothing", namespace, "inputpipe_no_such_module")
    with pytest.raises(ModuleNotFoundError, match="inputpipe_no_such_module"):
        missing.anything  # noqa: B018  (the read imports)


def test_find_library_full_path_finds_a_loaded_library_and_none_for_a_missing_one():
    import ctypes

    from inputpipe.utils.utils import find_library_full_path

    libc = find_library_full_path("c")
    assert libc is not None and os.path.isabs(libc) and os.path.basename(libc).startswith("libc.so")
    ctypes.CDLL(libc)                                  # the file is the library
    assert find_library_full_path("inputpipe_no_such_library") is None
    with pytest.raises(ValueError, match="a library name"):
        find_library_full_path("/usr/lib/libc.so.6")


def _produce(out, ranks):
    from inputpipe.utils.concurrency import DIE

    for rank in ranks:
        out.put((rank, rank * rank))
    out.put((DIE, "done"))


@pytest.mark.timeout(60)
def test_ordered_result_gather_proc_puts_back_the_order_of_two_producers():
    import multiprocessing
    import queue

    from inputpipe.utils.concurrency import DIE, OrderedResultGatherProc

    ctx = multiprocessing.get_context("fork")
    work = ctx.Queue()
    gather = OrderedResultGatherProc(work, nr_producer=2, start=0)
    gather.start()
    producers = [ctx.Process(target=_produce, args=(work, ranks)) for ranks in ([5, 1, 3, 7], [0, 6, 2, 4])]
    for p in producers:
        p.start()
    got = [gather.get(timeout=20) for _ in range(10)]
    for p in producers + [gather]:
        p.join(10)
    assert [pair for pair in got if pair[0] is not DIE] == [(r, r * r) for r in range(8)]
    assert [pair for pair in got if pair[0] is DIE] == [(DIE, "done"), (DIE, "done")]
    assert not any(p.is_alive() for p in producers + [gather]) and gather.exitcode == 0
    with pytest.raises(RuntimeError, match="expected the next result \\(rank 8 on\\), but the process ended"):
        gather.get(timeout=5)
    waiting = OrderedResultGatherProc(ctx.Queue(), nr_producer=1)
    waiting.start()
    try:
        with pytest.raises(queue.Empty):
            waiting.get(timeout=0.3)
    finally:
        waiting.terminate()
        waiting.join(10)
    assert not waiting.is_alive()
    with pytest.raises(ValueError, match="nr_producer must be >= 1"):
        OrderedResultGatherProc(ctx.Queue(), nr_producer=0)


@pytest.fixture
def logger_dir_state():
    from inputpipe.utils import logger as ip_logger

    level = ip_logger.logger.level
    yield ip_logger
    if ip_logger._file_handler is not None:
        ip_logger.logger.removeHandler(ip_logger._file_handler)
        ip_logger._file_handler.close()
    ip_logger._file_handler, ip_logger._log_dir = None, None
    ip_logger.logger.setLevel(level)


def _log_files(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith("log.log"))


def test_set_logger_dir_writes_the_log_and_treats_an_existing_directory_as_told(tmp_path, logger_dir_state,
                                                                                monkeypatch):
    logger = logger_dir_state
    target = tmp_path / "train_log" / "run"
    logger.set_logger_dir(str(target))
    assert logger.get_logger_dir() == str(target) and _log_files(target) == ["log.log"]
    logger.info("step %d", 1)
    logger.warn("careful")
    text = (target / "log.log").read_text()
    assert "INFO step 1" in text and "WARNING careful" in text
    logger.set_logger_dir(str(target), action="k")           # a resumed run: the old log kept aside
    assert len(_log_files(target)) == 2 and "INFO step 1" not in (target / "log.log").read_text()
    monkeypatch.setattr("sys.stdin", None)                   # a batch job: nobody to ask
    with pytest.raises(OSError, match="exists and holds files, and there is no terminal to ask what to do: "
                                      "pass action="):
        logger.set_logger_dir(str(target))
    with pytest.raises(OSError, match="exists and holds files"):
        logger.set_logger_dir(str(target), action="q")
    with pytest.raises(ValueError, match="action must be one of 'k'"):
        logger.set_logger_dir(str(target), action="x")
    logger.set_logger_dir(str(target), action="n")
    assert logger.get_logger_dir().startswith(str(target)) and logger.get_logger_dir() != str(target)
    assert _log_files(logger.get_logger_dir()) == ["log.log"]
    logger.set_logger_dir(str(target), action="b")
    assert _log_files(target) == ["log.log"] and len(os.listdir(tmp_path / "train_log")) == 3
    (target / "notes.txt").write_text("x")
    logger.set_logger_dir(str(target), action="d")
    assert os.listdir(target) == ["log.log"]
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / ".keep").write_text("")            # hidden files only: no question
    logger.set_logger_dir(str(tmp_path / "hidden"))
    assert logger.get_logger_dir() == str(tmp_path / "hidden")


def test_auto_set_dir_names_the_directory_after_the_main_script(tmp_path, logger_dir_state, monkeypatch):
    import sys
    import types

    logger = logger_dir_state
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__="/somewhere/train_resnet.py"))
    logger.auto_set_dir(name="v2")
    assert logger.get_logger_dir() == os.path.join("train_log", "train_resnet:v2")
    assert (tmp_path / "train_log" / "train_resnet:v2" / "log.log").is_file()
    logger.setLevel(logging.DEBUG)                            # tensorpack's module-level setLevel
    assert logger.logger.level == logging.DEBUG


def _fake_tensorflow(gpus, built_with_cuda=True):
    import types

    tf = types.ModuleType("tensorflow")
    tf.config = types.SimpleNamespace(list_physical_devices=lambda kind: ["/gpu:{}".format(i) for i in range(gpus)]
                                      if kind == "GPU" else [])
    tf.test = types.SimpleNamespace(is_built_with_cuda=lambda: built_with_cuda)
    return tf


def _fake_nvidia_smi(directory, script):
    path = directory / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


@pytest.mark.timeout(60)
def test_get_num_gpu_reads_cuda_visible_devices_then_nvidia_smi_then_tensorflow(tmp_path, monkeypatch, caplog):
    import sys

    from inputpipe.utils.gpu import change_gpu, get_nr_gpu, get_num_gpu

    assert get_nr_gpu is get_num_gpu
    monkeypatch.setenv("PATH", str(tmp_path))                      # no nvidia-smi
    monkeypatch.setitem(sys.modules, "tensorflow", _fake_tensorflow(3))
    for visible, count in [("0,2", 2), ("1", 1), ("0,-1,1", 1), ("-1", 0), ("GPU-5d1c, GPU-77aa", 2)]:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert get_num_gpu() == count, visible
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")                # empty: not a list
    assert get_num_gpu() == 3                                      # TensorFlow's
    _fake_nvidia_smi(tmp_path, "echo 'GPU 0: A100 (UUID: GPU-1)'; echo 'GPU 1: A100 (UUID: GPU-2)'\n")
    assert get_num_gpu() == 2
    _fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed'; exit 9\n")
    assert get_num_gpu() == 3
    monkeypatch.setitem(sys.modules, "tensorflow", None)          # no TensorFlow either
    assert get_num_gpu() == 0
    monkeypatch.setitem(sys.modules, "tensorflow", _fake_tensorflow(0, built_with_cuda=False))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with caplog.at_level("WARNING"):
        assert get_num_gpu() == 1
    assert "built without CUDA and cannot use GPUs" in caplog.text
    with change_gpu(-1):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and get_num_gpu() == 0
    with change_gpu("2,3"):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
