"""``python -m inputpipe.doctor --tune``: prints the tuner's configuration of a script's DataFlow as
code that runs in the script's namespace; the doctor's exit codes (2: bad options, 1: stalled)."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_doctor_cli import doctor_until_stalled

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent('''
    import itertools
    import time
    from inputpipe.dataflow import BatchData, DataFromGenerator, MapData

    def read_records():
        for i in itertools.count():
            yield [i]

    def decode(dp):                    # waits: threads
        time.sleep(0.01)
        return dp

    def get_dataflow(batch=4):
        return BatchData(MapData(DataFromGenerator(read_records), decode), batch)
''')


def _doctor(*args, timeout=60):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "inputpipe.doctor", *args], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train_input.py"
    path.write_text(SCRIPT)
    return path


def _code(stdout):
    """The code block of the printed result: from the imports to the last ``df = ...`` line."""
    lines = stdout.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("from inputpipe.dataflow import "))
    end = max(k for k, line in enumerate(lines) if line.startswith("df = "))
    return "\n".join(lines[start:end + 1]) + "\n"


def test_cli_tune_prints_code_that_builds_the_tuned_chain(script, tmp_path):
    out = tmp_path / "tune.json"
    proc = _doctor("--tune", "{}:get_dataflow".format(script), "batch=4", "--seconds", "0.6", "--warmup", "0.1",
                   "--consumer-rate", "100", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "python -m inputpipe.doctor --tune: {}:get_dataflow".format(script)
    # 100 batches/s x 4 calls x (10 ms + 5 ms to take the GIL back after the sleep) x 1.1 = 6.6 threads -> 7
    code = _code(proc.stdout)
    assert code.splitlines()[-3:] == ["df = DataFromGenerator(read_records)",
                                      "df = MultiThreadMapData(df, 7, decode, strict=True, ordered=True)",
                                      "df = BatchData(df, 4)"]
    assert "Limit afterwards: the consumer: it takes 100.0 datapoints/s" in proc.stdout
    data = json.loads(out.read_text())
    assert data["code"] == code and data["limit"] == "consumer"
    assert [(s["stage"], s["after"], s["workers"]) for s in data["stages"]] == [
        ("MapData(decode)", "MultiThreadMapData", 7), ("BatchData(4)", "BatchData", None)]
    spec = importlib.util.spec_from_file_location("train_input_for_the_test", str(script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    namespace = vars(module)
    exec(code, namespace)
    df = namespace["df"]
    assert type(df).__name__ == "BatchData" and df.ds.num_workers == 7
    df.reset_state()
    try:
        batch = next(iter(df))
    finally:
        df.close()
    assert batch[0].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("arguments, message", [
    (["--consumer-rate", "50"], "--consumer-rate applies to --tune only"),
    (["--cpu-budget", "2"], "--cpu-budget applies to --tune only"),
    (["--tune", "--max-datapoints", "3"], "--max-datapoints does not apply to --tune"),
    (["--tune", "--consumer-rate", "0"], "--consumer-rate must be > 0, got 0.0"),
    (["--tune", "--cpu-budget", "0"], "--cpu-budget must be >= 1, got 0"),
])
def test_cli_tune_options_are_checked(script, arguments, message):
    proc = _doctor("{}:get_dataflow".format(script), *arguments)
    assert proc.returncode == 2
    assert message in proc.stderr.strip().splitlines()[-1] and "Traceback" not in proc.stderr


@pytest.mark.timeout(150)
def test_cli_tune_exits_1_when_the_chain_stalls(tmp_path):
    path = tmp_path / "stuck.py"
    path.write_text(textwrap.dedent('''
        import os
        import time
        from inputpipe.dataflow import DataFlow, MapData

        class Mount(DataFlow):
            def reset_state(self):
                open(os.environ["STUCK_MARKER"], "w").close()     # the stall begins
                time.sleep(3600)              # a mount that never answers

            def __iter__(self):
                yield [1]

        def get_dataflow():
            return MapData(Mount(), lambda dp: dp)
    '''))
    proc = doctor_until_stalled(tmp_path / "stalled", 1, "--tune", "{}:get_dataflow".format(path), "--seconds", "1",
                                "--stall-timeout", "1")
    assert proc.returncode == 1, proc.stderr
    assert "Nothing tuned: Mount.reset_state()" in proc.stdout
    assert "did not return within the stall timeout (1 s)" in proc.stdout
    assert "Traceback" not in proc.stderr
