"""The code in the doctor's page (docs/doctor.md) runs as written and its assertions hold."""
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "doctor.md"


def test_doctor_page_code_runs():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 3                   # the doctor's, then the tuner's two (tests/test_tune_docs.py)
    proc = subprocess.run([sys.executable, "-c", blocks[0]], cwd=str(REPO), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Limiting stage: MapData(decode)" in proc.stdout
    assert proc.stdout.splitlines()[0].split()[:3] == ["stage", "(source", "first)"]


def test_doctor_page_shows_the_table_the_code_prints():
    text = PAGE.read_text(encoding="utf-8")
    shown = re.search(r"```text\n(.*?)```", text, flags=re.S).group(1)
    assert "MapData(decode)" in shown and "<- limits" in shown
    assert "Limiting stage: MapData(decode)" in shown
