"""The code in the parallel-flows page (docs/parallel.md) runs as written."""
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "parallel.md"


def test_parallel_page_code_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    runnable = [b for b in blocks if not b.startswith("# on each data host")]   # needs other hosts
    assert len(runnable) >= 4
    proc = subprocess.run([sys.executable, "-W", "error::DeprecationWarning:__main__", "-c", "\n".join(runnable)],
                          cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^\d+ KeyError: 'b'$", proc.stdout, flags=re.M), proc.stdout
