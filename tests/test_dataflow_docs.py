"""The code in the DataFlow tutorial (docs/dataflow.md) runs and its assertions hold."""
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TUTORIAL = REPO / "docs" / "dataflow.md"


def test_tutorial_code_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 8
    # in a child process: the tutorial configures logging and the global seed
    proc = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=str(REPO), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DataFromList has no RNG yet: call reset_state() once before iterating it" in proc.stdout
    assert "BatchData: cannot batch component 0: datapoint 1 of the batch has a numpy array of shape (2, 3)" \
        in proc.stdout
    assert "BatchData has no length because its input has none (DataFromGenerator has no length)" in proc.stdout
    assert "datapoint 0/1 (samples): list with 2 components" in proc.stderr
