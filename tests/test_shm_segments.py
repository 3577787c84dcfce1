"""Shared-memory segments of worker channels: never a file to leave behind, memory taken as used,
a full /dev/shm, a datapoint larger than the segment, running out of file descriptors.

The scenarios that need their own /dev/shm (to count its files and to make it small) run in a
subprocess under ``unshare -m`` with a private tmpfs mounted on /dev/shm; they are skipped where
that is not permitted.
"""
import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from inputpipe.dataflow import DataFlow, MultiProcessMapData, MultiProcessRunnerZMQ
from inputpipe.utils import _shm_files as shm_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.path.join(REPO, "tests"))


class Arrays(DataFlow):
    """``[i, uint8 array of nbytes filled with i % 251]`` for i in range(n)."""

    def __init__(self, n, nbytes):
        self.n, self.nbytes = n, nbytes

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield [i, np.full(self.nbytes, i % 251, np.uint8)]


def _private_shm_works():
    try:
        done = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                              capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


PRIVATE_SHM = _private_shm_works()
needs_private_shm = pytest.mark.skipif(
    not PRIVATE_SHM, reason="needs `unshare -m` and `mount -t tmpfs` (root or user namespaces) for a private /dev/shm")


def run_with_private_shm(code, size_mib, *args, timeout=90):
    """Run ``code`` in a new mount namespace whose /dev/shm is an empty tmpfs of ``size_mib``."""
    command = ["unshare", "-m", "sh", "-c",
               'mount -t tmpfs -o size={}m tmpfs /dev/shm && exec "$0" "$@"'.format(size_mib),
               sys.executable, "-c", textwrap.dedent(code)] + [str(a) for a in args]
    done = subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture
def shm_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(shm_files, "shm_dir", lambda: str(tmp_path))
    return tmp_path


def _fds_into(directory):
    """``{descriptor: target}`` of this process' files in ``directory`` (a nameless one shows as
    '<directory>/#123 (deleted)')."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith((str(directory) + "/", "/memfd:inputpipe")):
            found[int(fd)] = target
    return found


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_no_file_is_ever_visible_and_every_start_method_gets_the_segment(method, shm_dir):
    df = MultiProcessRunnerZMQ(Arrays(12, 1 << 20), num_proc=2, hwm=4, start_method=method)
    assert list(shm_dir.iterdir()) == []
    df.reset_state()
    try:
        assert list(shm_dir.iterdir()) == []       # deterministic: the segments never had a name
        points = [(i, arr) for i, arr in df]
        assert len(points) == 12 and list(shm_dir.iterdir()) == []
        for i, arr in points:
            assert arr.shape == (1 << 20,) and arr[0] == i % 251 and arr[-1] == i % 251
        assert df.pipe_fallbacks == 0              # large arrays came through shared memory
        del points, arr
    finally:
        df.close()
    assert list(shm_dir.iterdir()) == [] and _fds_into(shm_dir) == {}


def test_close_releases_every_descriptor_of_the_segments(shm_dir):
    df = MultiProcessMapData(Arrays(50, 1), 3, _big_result, strict=True)
    df.reset_state()
    with df:
        assert len(list(df)) == 50
        assert len(_fds_into(shm_dir)) == 3        # the parent's mapping of each worker's segment
    assert _fds_into(shm_dir) == {}


def test_a_segment_takes_memory_as_it_is_used_not_up_front(shm_dir):
    df = MultiProcessRunnerZMQ(Arrays(100, 200000), num_proc=2, hwm=4)     # 96 MiB segments by default
    df.reset_state()
    with df:
        assert sum(1 for _ in df) == 100                # each datapoint dropped when the next comes
        fds = list(_fds_into(shm_dir))
        held = [os.fstat(fd).st_blocks * 512 for fd in fds]
        sizes = [os.fstat(fd).st_size for fd in fds]
    assert len(held) == 2 and all(size > 96 << 20 for size in sizes)   # sparse files of the full size
    assert all(0 < n <= 2 << 20 for n in held), held                   # table + the first step or two


def _big_result(dp):
    return [dp[0], np.full(300000, dp[0] % 251, np.uint8)]


def test_a_datapoint_larger_than_the_segment_comes_through_the_pipe_with_one_warning(caplog):
    df = MultiProcessRunnerZMQ(Arrays(6, 3 << 20), num_proc=2, hwm=4, shm_bytes=1 << 20)
    df.reset_state()
    with df, caplog.at_level(logging.WARNING, logger="inputpipe"):
        points = list(df)
        assert len(points) == 6 and df.pipe_fallbacks == 6
    for i, arr in points:
        assert arr.shape == (3 << 20,) and arr[0] == i % 251 and arr[-1] == i % 251
    warnings = [r.getMessage() for r in caplog.records if "larger than a worker's shared memory" in r.getMessage()]
    assert warnings == ["MultiProcessRunnerZMQ: a datapoint of 3145728 bytes is larger than a worker's shared "
                        "memory (shm_bytes=1048576); datapoints that large come through a pipe (slower). Pass a "
                        "shm_bytes larger than the datapoints."]


_SMALL_SHM = """
    import json, logging, sys
    import numpy as np
    from test_shm_segments import Arrays
    from inputpipe.dataflow import MultiProcessRunnerZMQ
    from inputpipe.utils import _shm_files as shm_files

    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger("inputpipe").addHandler(handler)
    nbytes, hwm, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    keep = sys.argv[4:] == ["keep"]         # hold on to every datapoint: their memory stays in use
    df = MultiProcessRunnerZMQ(Arrays(n, nbytes), num_proc=2, hwm=hwm)
    df.reset_state()
    used, kept = [], []
    with df:
        for i, arr in df:
            assert arr.shape == (nbytes,) and arr[0] == i % 251 and arr[-1] == i % 251, i
            size, free = shm_files.shm_space()
            used.append(size - free)
            if keep:
                kept.append(arr)
        fallbacks = df.pipe_fallbacks
    print(json.dumps({"fallbacks": fallbacks, "max_used": max(used), "messages": messages}))
"""


@needs_private_shm
def test_a_16_mib_dev_shm_runs_1_mib_datapoints_with_2_workers_in_shared_memory():
    done = run_with_private_shm(_SMALL_SHM, 16, 1 << 20, 8, 60)
    result = json.loads(done.stdout.splitlines()[-1])
    # 96 MiB per worker reserved up front could not even start; memory taken as used fits
    assert result["fallbacks"] == 0 and result["messages"] == []
    assert 2 << 20 <= result["max_used"] <= 16 << 20


@needs_private_shm
def test_when_dev_shm_has_no_room_datapoints_come_through_the_pipe_with_one_warning():
    # The consumer keeps every 3 MiB datapoint, so 8 MiB run out after two whatever the timing (when
    # it dropped each, whether both workers' datapoints were in memory at once depended on scheduling)
    done = run_with_private_shm(_SMALL_SHM, 8, 3 << 20, 4, 12, "keep")
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["fallbacks"] >= 1
    assert len(result["messages"]) == 1, result["messages"]
    assert result["messages"][0].startswith(
        "MultiProcessRunnerZMQ: /dev/shm (8.0 MiB, ")
    assert "has no room for a worker to grow its shared memory for a datapoint of 3145728 bytes" in \
        result["messages"][0]
    assert "Enlarge /dev/shm (e.g. docker run --shm-size=1g) or pass a smaller shm_bytes." in result["messages"][0]


_TRAINER = """
    import sys
    from test_shm_segments import Arrays
    from inputpipe.dataflow import MultiProcessRunnerZMQ, MultiProcessMapData
    method = sys.argv[1]
    flows = [MultiProcessRunnerZMQ(Arrays(10 ** 6, 1 << 20), num_proc=3, hwm=6, start_method=method),
             MultiProcessMapData(Arrays(10 ** 6, 1 << 20), 2, lambda dp: dp, start_method="fork")]
    print("starting", flush=True)
    for df in flows:
        df.reset_state()
    print("started", flush=True)
    for dp in flows[0]:
        pass
"""

_KILL_SWEEP = """
    import ctypes, json, os, subprocess, sys, time
    TRAINER = sys.argv[2]
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)      # PR_SET_CHILD_SUBREAPER: orphaned workers come to us

    def reap_all(deadline):
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                time.sleep(0.01)
        return False

    results = []
    for method, phase, delay in json.loads(sys.argv[1]):
        trainer = subprocess.Popen([sys.executable, "-c", TRAINER, method], stdout=subprocess.PIPE, text=True)
        assert trainer.stdout.readline() == "starting\\n"
        if phase == "after":
            assert trainer.stdout.readline() == "started\\n"
        time.sleep(delay)
        trainer.kill()
        trainer.stdout.close()
        all_gone = reap_all(time.monotonic() + 10)
        results.append({"case": [method, phase, delay], "all_gone": all_gone, "files": os.listdir("/dev/shm")})
    print(json.dumps(results))
"""


@needs_private_shm
@pytest.mark.slow
def test_killing_the_trainer_at_any_instant_of_worker_start_up_leaves_no_file():
    # delays spread over each phase (a worker's start-up takes about 0.05-0.3 s, longer under load)
    cases = [["fork", "during", d] for d in (0.0, 0.05, 0.15, 0.3)]
    cases += [["fork", "after", d] for d in (0.0, 0.003, 0.03, 0.3)]
    cases += [["spawn", "during", d] for d in (0.1, 0.4)] + [["spawn", "after", 0.0]]
    done = run_with_private_shm(_KILL_SWEEP, 1024, json.dumps(cases), textwrap.dedent(_TRAINER), timeout=110)
    results = json.loads(done.stdout.splitlines()[-1])
    assert [r["case"] for r in results] == cases
    assert [r for r in results if r["files"] or not r["all_gone"]] == []


_FD_LIMIT = """
    import gc, json, os, resource, sys
    import psutil
    from test_shm_segments import Arrays
    from inputpipe.dataflow import MultiProcessRunnerZMQ
    from inputpipe.utils import _shm_files as shm_files

    shm_files.shm_dir = lambda: sys.argv[1]
    df = MultiProcessRunnerZMQ(Arrays(10, 1 << 20), num_proc=64, hwm=64)
    fds_before = sorted(os.listdir("/proc/self/fd"))
    limit = len(fds_before) + 40
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    try:
        df.reset_state()
        error = None
    except OSError as err:
        error = [err.errno, str(err)]
    gc.collect()
    children = [p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    fds_left = sorted(set(os.listdir("/proc/self/fd")) - set(fds_before))
    print(json.dumps({"limit": limit, "error": error, "fds_left": fds_left,
                      "children": children, "files": os.listdir(sys.argv[1])}))
"""


def test_running_out_of_file_descriptors_half_way_names_the_limit_and_leaves_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_FD_LIMIT), str(tmp_path)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    errno_, message = result["error"]
    assert errno_ == 24
    worker = int(message.split("could not start worker ")[1].split()[0])
    assert 1 <= worker < 64
    assert message == ("[Errno 24] MultiProcessRunnerZMQ: could not start worker {} of 64: too many open files "
                       "(RLIMIT_NOFILE={}); lower num_proc or raise the limit (ulimit -n)".format(
                           worker, result["limit"]))
    # the listing of /proc/self/fd itself holds one descriptor while it runs
    assert len(result["fds_left"]) <= 1 and result["children"] == [] and result["files"] == []
