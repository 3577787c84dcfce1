"""tests/fresh_python.py runs a script as ``subprocess.run([sys.executable, ...])`` would: the
script's own arguments, directory, environment, streams, exit status, interpreter exit and
timeout, in a process forked from a zygote that imported TensorFlow."""
import os
import signal
import subprocess
import sys

import pytest

import fresh_python
from fresh_python import ZYGOTE_PIDS, run_python

pytestmark = pytest.mark.timeout(400)        # (the zygote's start: TensorFlow's import, under load)


def test_a_script_gets_its_arguments_directory_environment_and_streams_and_its_exit_code(tmp_path):
    code = ("import os, sys; print('out', sys.argv, os.getcwd(), os.environ['PROBE'], sys.path[0] == ''); "
            "print('err', file=sys.stderr); sys.exit(3)")
    proc = run_python([sys.executable, "-c", code, "first", "second"], cwd=str(tmp_path),
                      env=dict(os.environ, PROBE="here"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert proc.stdout == "out ['-c', 'first', 'second'] {} here True\n".format(tmp_path)
    assert proc.stderr == "err\n"
    assert proc.args[:2] == [sys.executable, "-c"]


def test_a_script_file_runs_as_main_with_atexit_and_threads_finished_before_the_result(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("import atexit, sys, threading, time\n"
                      "import tensorflow as tf\n"
                      "atexit.register(lambda: print('atexit'))\n"
                      "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\n"
                      "print(__name__, __file__ == sys.argv[0], sys.path[0] == {!r}, tf.__name__)\n".format(
                          str(tmp_path)))
    proc = run_python([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "__main__ True True tensorflow\nthread\natexit\n"), proc.stderr


def test_an_exception_a_signal_and_a_warning_made_an_error_end_the_script_as_in_an_interpreter():
    raised = run_python([sys.executable, "-c", "raise KeyError('the key')"], capture_output=True, text=True,
                        timeout=120)
    assert raised.returncode == 1 and raised.stderr.rstrip().endswith("KeyError: 'the key'")
    killed = run_python([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
                        capture_output=True, timeout=120)
    assert killed.returncode == -15 and killed.stdout == b""
    warned = run_python([sys.executable, "-W", "error::DeprecationWarning:__main__", "-c",
                         "import warnings; warnings.warn('old', DeprecationWarning)"],
                        capture_output=True, text=True, timeout=120)
    assert warned.returncode == 1 and warned.stderr.rstrip().endswith("DeprecationWarning: old")


def test_each_script_draws_its_own_random_numbers():
    code = "import random; import numpy as np; print(random.random(), np.random.random())"
    draws = {run_python([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
             for _ in range(3)}
    assert len(draws) == 3


def test_a_timeout_kills_the_script_and_what_it_started():
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
           "print('started', flush=True); time.sleep(60)"
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_python([sys.executable, "-c", code], capture_output=True, text=True, timeout=3)
    assert raised.value.timeout == 3 and raised.value.output == b"started\n"
    # (the leak check of tests/conftest.py fails the test if the script or its child lived on)


def test_start_up_settings_no_zygote_has_and_other_interpreter_options_run_in_an_ordinary_subprocess(monkeypatch):
    forked = run_python([sys.executable, "-c", "import os; print(os.getppid())"], capture_output=True, text=True,
                        timeout=120)
    assert int(forked.stdout) in ZYGOTE_PIDS
    isolated = run_python([sys.executable, "-I", "-c", "import os; print(os.getppid())"], capture_output=True,
                          text=True, timeout=120)
    assert int(isolated.stdout) == os.getpid()
    monkeypatch.setattr(fresh_python, "MOST_ZYGOTES", 0)       # (no room for one more zygote)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", OMP_NUM_THREADS="1")
    other = run_python([sys.executable, "-c", "import os; print(os.getppid(), os.environ['OMP_NUM_THREADS'])"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert other.stdout.split() == [str(os.getpid()), "1"]


def test_a_test_stopped_while_its_script_runs_kills_the_script_and_the_next_call_works():
    class Stopped(Exception):
        pass

    def stop(*_):
        raise Stopped()

    previous = signal.signal(signal.SIGALRM, stop)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.5)         # (as pytest-timeout's signal method would)
        with pytest.raises(Stopped):
            run_python([sys.executable, "-c", "import time; time.sleep(60)"], capture_output=True, timeout=120)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    proc = run_python([sys.executable, "-c", "print('next')"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "next\n")
    # (the leak check of tests/conftest.py fails the test if the stopped script lived on)
