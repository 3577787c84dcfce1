"""Ray is an optional extra: inputpipe.dataflow never imports it, and a missing Ray is one clear
line. Also: a script interrupted by Ctrl-C in the middle of an epoch leaves no Ray process behind."""
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest


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
