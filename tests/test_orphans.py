"""adopting_orphans(): while it is on, a grandchild whose parent dies stays this process's
descendant (found, killed and reaped); after it, orphans go where they went before."""
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    import psutil
    from inputpipe.utils.processes import adopting_orphans

    def orphan():
        # a middle process that starts a sleeping grandchild, prints its pid and exits at once
        middle = subprocess.run([sys.executable, "-c",
                                 "import subprocess, sys; d = subprocess.DEVNULL; "
                                 "p = subprocess.Popen(['sleep', '60'], stdout=d, stderr=d); print(p.pid)"],
                                capture_output=True, text=True, timeout=30)
        pid = int(middle.stdout)
        deadline = time.monotonic() + 10
        while psutil.Process(pid).ppid() not in (os.getpid(), 1) and time.monotonic() < deadline:
            time.sleep(0.01)          # re-parented when the middle process has exited
        return psutil.Process(pid)

    with adopting_orphans():
        adopted = orphan()
        mine = [p.pid for p in psutil.Process().children(recursive=True)]
        print("adopted", adopted.ppid() == os.getpid(), adopted.pid in mine)
        adopted.kill()
        adopted.wait(timeout=10)
        print("reaped", not psutil.pid_exists(adopted.pid))
    elsewhere = orphan()
    print("after", elsewhere.ppid() != os.getpid())
    elsewhere.kill()
""")


@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_an_orphan_is_adopted_only_while_the_block_runs_and_is_reaped_when_killed():
    # A fresh process: the setting is process-wide, so it is not tried on the test runner itself.
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:3] == ["adopted True True", "reaped True", "after True"], out.stdout
