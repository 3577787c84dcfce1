"""The tuning section of docs/doctor.md runs as written, and the output it shows is what the code
prints (up to the numbers)."""
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "doctor.md"


def _section():
    text = PAGE.read_text(encoding="utf-8")
    return text[text.index("## Tuning: a configuration for the whole chain"):]


def _shape(text):
    """The text with its numbers replaced, to compare what was shown with what is printed, and
    without a map's GIL share: it is printed once enough of the probe's moments fell in the map's
    calls, which a cheap map's calls reach on a loaded machine (slower) and not on a quiet one."""
    return re.sub(r"\d+(\.\d+)?", "N", text).replace(", N% holding the GIL", "")


def test_tuning_example_runs_and_prints_what_the_page_shows():
    section = _section()
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", section, flags=re.S).group(1)
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]      # (what tune() printed says why)
    printed = [line for line in proc.stdout.splitlines()       # (the trials' notes depend on the load)
               if not line.startswith(("The trial ran", "The first choice ran"))]
    assert [_shape(line) for line in printed] == [_shape(line) for line in shown.rstrip("\n").splitlines()]


def test_tuning_section_documents_the_cli_and_every_limit():
    section = _section()
    assert "python -m inputpipe.doctor --tune train.py:get_dataflow" in section
    for limit in ("`cpus`", "`source`", "`stage`", "`consumer`", "`workers`"):
        assert limit in section, limit


def test_the_split_example_runs_and_prints_what_the_page_shows():
    """The second example: a map that waits 6 ms and computes 3 ms of Python. What it prints has
    the page's shape; the choice (processes) and the split suggestion follow from what the tuner
    measures, so they are compared where it printed them."""
    section = _section()
    code = re.findall(r"```python\n(.*?)```", section, flags=re.S)[1]
    shown = re.findall(r"```text\n(.*?)```", section, flags=re.S)[1].rstrip("\n").splitlines()
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    printed = proc.stdout.splitlines()
    assert re.fullmatch(r"Multi(Process|Thread)MapData \d+", printed[0]), printed
    if printed[0].startswith("MultiProcessMapData") and len(printed) > 1:
        assert [_shape(line) for line in printed] == [_shape(line) for line in shown]
