"""``python -m inputpipe.doctor``: profiles a script's DataFlow and names its slow stage; a bad
``script:function`` gets a one-line error and exit code 2."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from inputpipe.doctor import TargetError, load_factory, parse_arguments

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent('''
    import time
    from inputpipe.dataflow import BatchData, DataFromGenerator, MapData
    import helper_next_to_the_script

    def _source():
        i = 0
        while True:
            time.sleep(0.0002)
            yield [i]
            i += 1

    def decode(dp):
        time.sleep(0.003)
        return dp

    def get_dataflow():
        return BatchData(MapData(DataFromGenerator(_source), decode), 8)

    def get_data(name, batch=8, *, slow_ms=3):
        assert name == "train", name
        def decode_slowly(dp):
            time.sleep(slow_ms / 1e3)
            return dp
        return BatchData(MapData(DataFromGenerator(_source), decode_slowly), batch)

    NOT_A_FUNCTION = 3

    if __name__ == "__main__":
        raise SystemExit("the training code ran: the doctor must import the script, not run it")
''')


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "my_train.py"
    path.write_text(SCRIPT)
    (tmp_path / "helper_next_to_the_script.py").write_text("VALUE = 1\n")
    return path


def _doctor(*args, cwd=None, timeout=60):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "inputpipe.doctor", *args], cwd=cwd or str(REPO), env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_names_the_slow_stage_of_a_script_and_writes_json(script, tmp_path):
    out = tmp_path / "report.json"
    proc = _doctor("{}:get_dataflow".format(script), "--seconds", "1", "--warmup", "0.2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Limiting stage: MapData(decode)" in proc.stdout
    assert "MultiProcessMapAndBatchData" in proc.stdout          # a BatchData follows the slow map
    lines = proc.stdout.splitlines()
    assert lines[0] == "python -m inputpipe.doctor: {}:get_dataflow".format(script)
    names = [line.split()[0] for line in lines[3:6]]
    assert names == ["DataFromGenerator", "MapData(decode)", "BatchData(8)"]
    data = json.loads(out.read_text())
    assert data["limiting"] == "MapData(decode)" and data["datapoints"] > 0
    assert "training code ran" not in proc.stdout + proc.stderr


def test_cli_accepts_module_colon_function(script):
    proc = _doctor("my_train:get_dataflow", "--seconds", "0.5", "--warmup", "0", cwd=str(script.parent))
    assert proc.returncode == 0, proc.stderr
    assert "Limiting stage: MapData(decode)" in proc.stdout


@pytest.mark.parametrize("target, message", [
    ("{script}:get_df", "has no function or DataFlow 'get_df' (it defines: decode, get_data, get_dataflow)"),
    ("{script}:NOT_A_FUNCTION", ":NOT_A_FUNCTION is neither a DataFlow nor callable (it is of type int); expected a "
                                "function that returns a DataFlow"),
    ("{script}:", "expected SCRIPT.py:NAME, MODULE:NAME, SCRIPT.py or MODULE, got '{script}:'"),
    ("{dir}/missing.py:get_dataflow", "the script '{dir}/missing.py' does not exist"),
    ("no_such_module_xyz:get", "no module named 'no_such_module_xyz'"),
    ("json:dumps", "json:dumps cannot be called with no arguments (missing a required argument: 'obj'): give the "
                   "function's arguments after the target, each VALUE or NAME=VALUE"),
    ("json:JSONDecodeError", "json:JSONDecodeError cannot be called with no arguments (missing a required argument"),
    ("json", "name the DataFlow or the function that makes it: json:NAME (no :NAME given, and json has functions: "),
])
def test_cli_bad_target_is_a_one_line_error(script, target, message):
    target = target.format(script=script, dir=script.parent)
    proc = _doctor(target, "--seconds", "1")
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m inputpipe.doctor: error: ")
    assert message.format(script=script, dir=script.parent) in last
    assert "Traceback" not in proc.stderr


def test_cli_factory_returning_something_else_is_refused(tmp_path):
    (tmp_path / "not_a_flow.py").write_text("def get():\n    return [1, 2]\n")
    proc = _doctor("{}:get".format(tmp_path / "not_a_flow.py"), "--seconds", "1")
    assert proc.returncode == 2
    assert "returned a list, not a DataFlow" in proc.stderr


def test_cli_bad_seconds_is_refused(script):
    proc = _doctor("{}:get_dataflow".format(script), "--seconds", "0")
    assert proc.returncode == 2 and "--seconds must be > 0, got 0.0" in proc.stderr


def test_load_factory_in_process(script):
    factory = load_factory("{}:get_dataflow".format(script))
    assert factory.__name__ == "get_dataflow"
    with pytest.raises(TargetError, match="expected SCRIPT.py:NAME, MODULE:NAME, SCRIPT.py or MODULE, got 'x:'"):
        load_factory("x:")


def test_cli_passes_literal_and_keyword_arguments_to_the_function(script):
    proc = _doctor("{}:get_data".format(script), "train", "4", "slow_ms=6", "--seconds", "0.6", "--warmup", "0.1")
    assert proc.returncode == 0, proc.stderr
    assert "Limiting stage: MapData(decode_slowly)" in proc.stdout
    assert "BatchData(4)" in proc.stdout


@pytest.mark.parametrize("arguments, message", [
    ([], "get_data cannot be called with no arguments (missing a required argument: 'name')"),
    (["train", "slow_ms=1", "5"], "the positional argument '5' comes after keyword arguments"),
    (["train", "colour=1"], "get_data cannot be called with ('train', colour=1) (got an unexpected keyword argument "
                            "'colour')"),
])
def test_cli_arguments_that_do_not_fit_are_a_one_line_error(script, arguments, message):
    proc = _doctor("{}:get_data".format(script), *arguments, "--seconds", "0.5")
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr


def test_parse_arguments_reads_literals_and_never_runs_code():
    args, kwargs = parse_arguments(["train", "64", "0.5", "None", "[1, 2]", "'x y'", "__import__('os')", "size=(3, 4)",
                                    "flag=True", "path=/data/x=1"])
    assert args == ["train", 64, 0.5, None, [1, 2], "x y", "__import__('os')"]
    assert kwargs == {"size": (3, 4), "flag": True, "path": "/data/x=1"}


def test_cli_without_a_name_takes_the_usual_function(script):
    proc = _doctor(str(script), "--seconds", "0.5", "--warmup", "0.1")
    assert proc.returncode == 0, proc.stderr
    assert "Limiting stage: MapData(decode)" in proc.stdout        # get_dataflow, the first usual name


def test_cli_profiles_a_dataflow_the_script_made_at_import(tmp_path):
    path = tmp_path / "flows.py"
    path.write_text(textwrap.dedent('''
        import time
        from inputpipe.dataflow import DataFromList, MapData

        def slow(dp):
            time.sleep(0.002)
            return dp

        train_flow = MapData(DataFromList([[i] for i in range(50)], shuffle=False), slow)
    '''))
    for target in ("{}:train_flow".format(path), str(path)):
        proc = _doctor(target, "--seconds", "0.4", "--warmup", "0")
        assert proc.returncode == 0, proc.stderr
        assert "Limiting stage: MapData(slow)" in proc.stdout
    proc = _doctor("{}:train_flow".format(path), "3", "--seconds", "0.4")
    assert proc.returncode == 2
    assert ":train_flow is a DataFlow, not a function: it takes no arguments" in proc.stderr


def test_cli_without_a_name_and_two_flows_asks_for_one(tmp_path):
    path = tmp_path / "two.py"
    path.write_text("from inputpipe.dataflow import DataFromList\n"
                    "train = DataFromList([[1]])\nval = DataFromList([[2]])\n")
    proc = _doctor(str(path), "--seconds", "0.4")
    assert proc.returncode == 2
    assert "no :NAME given, and {} has several DataFlows: train, val; functions: none".format(path) in proc.stderr


STUCK_SCRIPT = textwrap.dedent('''
    import os
    import time
    from inputpipe.dataflow import BatchData, DataFlow

    class MountedFiles(DataFlow):
        def reset_state(self):
            open(os.environ["STUCK_MARKER"], "w").close()     # the stall begins
            time.sleep(3600)              # a mount that never answers

        def __iter__(self):
            yield [1]

    def get_dataflow():
        return BatchData(MountedFiles(), 2)
''')


#: Seconds the doctor may take to report and exit once its stall timeout has passed.
EXIT_MARGIN = 10.0


def doctor_until_stalled(marker, stall_timeout, *args):
    """Run the doctor on a script whose flow creates the file ``marker`` when it starts to block;
    it must exit within ``stall_timeout`` + :data:`EXIT_MARGIN` s of that, however long starting
    Python and the imports took. One that does not is killed with everything it started, and the
    test fails at once, saying so."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               STUCK_MARKER=str(marker))
    proc = subprocess.Popen([sys.executable, "-m", "inputpipe.doctor", *args], cwd=str(REPO), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90                  # Python and the imports, on a busy machine
        while not os.path.exists(str(marker)) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert os.path.exists(str(marker)), "the stuck flow was never reached"
        try:
            stdout, stderr = proc.communicate(timeout=stall_timeout + EXIT_MARGIN)
        except subprocess.TimeoutExpired:
            stdout = stderr = None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    if stdout is None:
        pytest.fail("the doctor did not exit within {:g} s of the stall (stall timeout {:g} s)".format(
            stall_timeout + EXIT_MARGIN, stall_timeout))
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.timeout(150)
def test_cli_exits_within_the_stall_timeout_when_reset_state_never_returns(tmp_path):
    path = tmp_path / "stuck.py"
    path.write_text(STUCK_SCRIPT)
    proc = doctor_until_stalled(tmp_path / "stalled", 1, "{}:get_dataflow".format(path), "--seconds", "5",
                                "--stall-timeout", "1")
    assert proc.returncode == 1, proc.stderr
    assert ("MountedFiles.reset_state() (called by BatchData(2).reset_state()) did not return within the stall "
            "timeout (1 s)") in proc.stdout
    assert "stuck.py:" in proc.stdout
    assert "cannot be stopped from Python" in proc.stdout and "exits without waiting for it" in proc.stdout
    assert "Traceback" not in proc.stderr
