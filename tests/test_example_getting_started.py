"""docs/getting_started.md: its Python blocks run as written, in order, from the repository root."""
import os
import re
import sys
from pathlib import Path

import pytest

from fresh_python import run_python

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "getting_started.md"


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_the_python_blocks_of_getting_started_run_as_written(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 2
    script = tmp_path / "getting_started.py"
    script.write_text("\n".join(blocks), encoding="utf-8")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO), TMPDIR=str(tmp_path))
    proc = run_python([sys.executable, str(script)], cwd=str(REPO), env=env, capture_output=True, text=True,
                      timeout=300)      # a hang guard: about 16 s alone, several times that under load
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert re.search(r"^20 steps in \S+ s; the 15 after 5 warm-up steps: \S+ steps/s \(\S+ ms/step\), \S+ "
                     r"samples/s; waited", proc.stdout, re.M), proc.stdout
    assert (tmp_path / "getting_started.py").exists() and list(tmp_path.glob("*/shapes"))  # its data stayed in TMPDIR
