"""Shared fixtures. Every test is checked for leaked threads and child processes."""
import os
import signal
import threading
import time

import psutil
import pytest

from fresh_python import ZYGOTE_PIDS

# pytest-timeout's timer around setup and teardown too (pytest.ini times the call phase)
from timeout_phases import pytest_runtest_setup, pytest_runtest_teardown  # noqa: F401

# Threads and processes that are not ours and live for the whole interpreter.
_FOREIGN_THREAD_PREFIXES = ("pydevd", "pytest_timeout")
_FOREIGN_THREAD_CLASSES = (
    "TMonitor",  # tqdm's process-wide monitor thread
    "GarbageCollectorThread",  # pyzmq's zero-copy frame collector, lives until exit
)
_FOREIGN_PROCESS_MARKERS = ("resource_tracker", "forkserver", "semaphore_tracker")
LEAK_GRACE_SECONDS = 3.0

# The files with the longest tests (--durations on 2 cores), longest first. pytest.ini hands tests
# out to the workers in collection order (--dist loadgroup), so these start first: a long test (or a
# module kept on one worker by its xdist_group) begun when the rest is nearly done would keep the
# run going alone.
LONG_FILES = ("test_ray_map.py", "test_nested_worker_errors.py", "test_doc_snippets.py", "test_resume_parallel_ray.py",
              "test_docs.py", "test_resume_kill.py", "test_estimator_input.py", "test_autoscale_resize.py",
              "test_tensorpack_interop.py", "test_example.py", "test_ray_optional.py", "test_estimator_tf.py",
              "test_resume_input_stop.py", "test_shm_segments.py", "test_nested_workers.py", "test_example_compare.py")

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# A suite started in the background by a shell without job control (`cmd &` in a script, nohup-like
# wrappers) inherits SIGINT ignored, and so would every child the tests start (an ignored signal
# stays ignored across exec): the tests that press Ctrl-C in a child would then test nothing. Python's
# own handler is put back here, so children start with SIGINT at its default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items):
    """Run LONG_FILES first (in that order), every other file after them as collected."""
    rank = {name: index for index, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(LONG_FILES)))


def _our_threads():
    return {
        t for t in threading.enumerate()
        if t.is_alive() and t is not threading.main_thread()
        and not t.name.startswith(_FOREIGN_THREAD_PREFIXES)
        and type(t).__name__ not in _FOREIGN_THREAD_CLASSES
    }


def _our_children():
    children = set()
    for child in psutil.Process().children(recursive=True):
        if child.pid in ZYGOTE_PIDS:        # (tests/fresh_python.py: what they fork is counted)
            continue
        try:
            cmdline = " ".join(child.cmdline())
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if not cmdline and child.memory_info().rss == 0:
                continue        # exiting: its memory is gone, it runs no more code (seen for over 3 s under load)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
        if any(marker in cmdline for marker in _FOREIGN_PROCESS_MARKERS):
            continue
        children.add(child.pid)
    return children


@pytest.fixture(autouse=True)
def no_leaked_threads_or_processes(request):
    """Fail a test that leaves a thread or child process behind (after a short grace period), and
    kill the processes it left, also when the test failed for another reason."""
    threads_before = _our_threads()
    children_before = _our_children()
    yield
    if request.node.get_closest_marker("allow_leaks"):
        return
    deadline = time.monotonic() + LEAK_GRACE_SECONDS
    while True:
        new_threads = _our_threads() - threads_before
        new_children = _our_children() - children_before
        if not new_threads and not new_children:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    names = _kill_with_descendants(new_children)
    pytest.fail(
        "test leaked threads {} and child processes {} (the processes were killed)".format(
            sorted(t.name for t in new_threads), names
        )
    )


def _kill_with_descendants(pids):
    """SIGKILL the leaked processes and everything below them, so that a failing test (or a bug
    it caught) leaves nothing running to slow, confuse or hang the rest of the run; returns
    ``"pid (command)"`` of each."""
    victims, names = [], []
    for pid in sorted(pids):
        try:
            process = psutil.Process(pid)
            names.append("{} ({})".format(pid, " ".join(process.cmdline())[:80]))
            victims += [process] + process.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
    for process in victims:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(victims, timeout=5)
    return names
