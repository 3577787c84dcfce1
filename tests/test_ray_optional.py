"""Ray is an optional extra: inputpipe.dataflow never imports it, and a missing Ray is one clear
line. Also: a script interrupted by Ctrl-C in the middle of an epoch, or while the local instance
starts, leaves no Ray process behind."""
import logging
import os
import queue
import subprocess
import sys
import textwrap
import threading
import time
import types

import psutil
import pytest

# the local Ray instances these tests start (each a GCS, a raylet and agents) start one at a time
pytestmark = pytest.mark.xdist_group("test_ray_optional")


def test_importing_the_dataflow_package_and_the_ray_module_does_not_import_ray():
    code = ("import sys, inputpipe.dataflow, inputpipe.dataflow.ray as r; "
            "print('ray' in sys.modules, r.RayMapData.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "RayMapData"]


def test_a_missing_ray_is_a_one_line_import_error_naming_the_extra(monkeypatch):
    from inputpipe.dataflow import DataFromList
    from inputpipe.dataflow.ray import RayMapData, RayShardedData
    monkeypatch.setitem(sys.modules, "ray", None)      # what `import ray` does when it is not installed
    df = RayMapData(DataFromList([[1]]), 1, lambda dp: dp)
    with pytest.raises(ImportError) as info:
        df.reset_state()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("RayMapData needs Ray, which is not installed")
    assert message.endswith('pip install "inputpipe[ray]"')
    with pytest.raises(ImportError, match=r'^RayShardedData needs Ray.*pip install "inputpipe\[ray\]"$'):
        RayShardedData(["a"], 1, list).reset_state()


_INTERRUPTED_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import psutil
    from inputpipe.dataflow import DataFromList
    from inputpipe.dataflow.ray import RayMapData

    def slow(dp):
        time.sleep(0.01)
        return dp

    df = RayMapData(DataFromList([[i] for i in range(100000)], shuffle=False), 2, slow, strict=True)
    df.reset_state()
    with df:
        for i, dp in enumerate(df):
            if i == 20:
                pids = [p.pid for p in psutil.Process().children(recursive=True)]
                print(" ".join(map(str, pids)), flush=True)
                os.kill(os.getpid(), signal.SIGINT)     # Ctrl-C
                time.sleep(5)
""")


@pytest.mark.timeout(90)
def test_ctrl_c_mid_epoch_leaves_no_ray_process_behind(tmp_path):
    pytest.importorskip("ray", reason='Ray is an optional extra: pip install "inputpipe[ray]"')
    script = tmp_path / "interrupted.py"
    script.write_text(_INTERRUPTED_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=80,
                          cwd=str(tmp_path))
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr, proc.stderr[-2000:]
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) >= 3, "the local instance (gcs, raylet, the two actors) ran as its children"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not left:
            break
        time.sleep(0.1)
    assert not left, "still running after Ctrl-C: {}".format(
        [(p, psutil.Process(p).name()) for p in left if psutil.pid_exists(p)])
    assert os.getpid() not in pids


_INTERRUPTED_START_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import psutil
    import ray._private.services, ray._private.worker
    from inputpipe.dataflow import DataFromList
    from inputpipe.dataflow.ray import RayMapData

    module, name = {"raylet started": (ray._private.services, "start_raylet"),
                    "driver connected": (ray._private.worker, "connect")}[sys.argv[1]]
    real = getattr(module, name)

    def then_ctrl_c(*args, **kwargs):
        result = real(*args, **kwargs)
        print("started:", " ".join(sorted(p.name() for p in psutil.Process().children(recursive=True))), flush=True)
        os.kill(os.getpid(), signal.SIGINT)       # Ctrl-C while ray.init is still running
        time.sleep(5)
        return result

    setattr(module, name, then_ctrl_c)
    df = RayMapData(DataFromList([[i] for i in range(10)], shuffle=False), 1, abs)
    try:
        df.reset_state()
        print("not interrupted", flush=True)
    except KeyboardInterrupt as err:
        sys.last_traceback = err.__traceback__      # kept, as an interactive session (a notebook) keeps it
        print("interrupted", flush=True)
    sys.stdin.readline()        # goes on after Ctrl-C until told
""")


def _processes_in_group(group):
    """Live processes of process group ``group``: the script runs in a session of its own, and every
    process of its Ray instance (GCS, raylet, agents, workers) stays in its group."""
    found = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, ProcessLookupError):
            continue
    return found


def _kill(processes):
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("moment", ["raylet started", "driver connected"])
def test_ctrl_c_while_the_local_instance_starts_stops_every_ray_process_at_once(tmp_path, moment):
    # Before: Ray's processes (the GCS, the raylet and its agents) ran on while the interrupted
    # process lived, and the agents about a minute longer after it exited.
    pytest.importorskip("ray", reason='Ray is an optional extra: pip install "inputpipe[ray]"')
    script = tmp_path / "interrupted_start.py"
    script.write_text(_INTERRUPTED_START_SCRIPT)
    log = tmp_path / "stderr.txt"
    with open(str(log), "w") as stderr:
        proc = subprocess.Popen([sys.executable, str(script), moment], cwd=str(tmp_path), text=True,
                                start_new_session=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
    lines = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], name="test-reader")
    reader.start()
    try:
        started = lines.get(timeout=90).split()
        assert started[0] == "started:" and "gcs_server" in started and "raylet" in started, (started, log.read_text())
        assert lines.get(timeout=30) == "interrupted\n", log.read_text()[-3000:]
        stop_deadline = time.monotonic() + 5
        left = _processes_in_group(proc.pid)
        while time.monotonic() < stop_deadline and [p for p in left if p.pid != proc.pid]:
            time.sleep(0.1)
            left = _processes_in_group(proc.pid)
        assert [p.pid for p in left] == [proc.pid], "still running after Ctrl-C: {}".format(
            [(p.pid, p.name()) for p in left if p.pid != proc.pid])
    finally:
        # never leave Ray processes, also when failing (they hold the script's pipes too)
        proc.kill()
        _kill(_processes_in_group(proc.pid))
        proc.wait(timeout=30)
        reader.join(timeout=30)
        proc.stdout.close()
        proc.stdin.close()


def test_a_local_instance_started_on_a_network_address_is_warned_about_once(caplog, monkeypatch):
    # where a Ray cannot be kept on 127.0.0.1, the start says so (once per process); no Ray needed
    from inputpipe.dataflow._ray import local as _ray_local

    monkeypatch.setattr(_ray_local._Started, "warned_reachable", False)
    fake_ray = types.SimpleNamespace(__version__="9.9.9")
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        _ray_local._warn_if_reachable(fake_ray, "127.0.0.1")
        _ray_local._warn_if_reachable(fake_ray, "::1")
        _ray_local._warn_if_reachable(fake_ray, "192.0.2.7")
        _ray_local._warn_if_reachable(fake_ray, "192.0.2.7")
    assert [r.getMessage() for r in caplog.records] == [
        "the local Ray instance listens on 192.0.2.7, reachable from other machines: this Ray (9.9.9) could not "
        "be started on 127.0.0.1 (see docs/scaling_out.md); its token authentication, when on, still guards it"]
