"""A timeout fails one test, never the session: pytest-timeout's signal, under the project's
pytest.ini (xdist workers, ``timeout_method = signal``), fails the test whose setup, call or
teardown ran out of time and the run goes on, also when the time runs out just as a report is
being sent (the worker crashed there, and the run ended without naming any failure)."""
import configparser
import os
import subprocess
import sys
import textwrap

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)

CONFTEST = '''
import time
import pytest
from timeout_phases import pytest_runtest_setup, pytest_runtest_teardown  # noqa: F401


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    if report.when == "call" and "on_the_edge" in report.nodeid:
        time.sleep(3)               # a report that takes long to send: the timeout falls in it


@pytest.fixture
def slow_setup():
    time.sleep(30)


@pytest.fixture
def slow_teardown():
    yield
    time.sleep(30)
'''

TESTS_A = '''
import time
import pytest


@pytest.mark.timeout(2)
def test_on_the_edge():
    time.sleep(0.5)


@pytest.mark.timeout(1)
def test_slow_call():
    time.sleep(30)


@pytest.mark.timeout(1)
def test_slow_setup(slow_setup):
    pass


@pytest.mark.timeout(1)
def test_slow_teardown(slow_teardown):
    pass


def test_after_them():
    pass
'''

TESTS_B = '''
def test_in_another_file():
    pass
'''


def _project_ini():
    """The [pytest] section of the project's pytest.ini, without its test paths."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(os.path.join(REPO, "pytest.ini"))
    options = dict(parser["pytest"])
    options.pop("testpaths", None)
    return "[pytest]\n" + "".join("{} = {}\n".format(k, v.replace("\n", "\n    ")) for k, v in options.items())


@pytest.mark.timeout(120)
def test_a_timeout_in_any_phase_or_while_a_report_is_sent_fails_that_test_and_the_run_goes_on(tmp_path):
    (tmp_path / "pytest.ini").write_text(_project_ini())
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_a.py").write_text(textwrap.dedent(TESTS_A))
    (tmp_path / "test_b.py").write_text(textwrap.dedent(TESTS_B))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, REPO, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "-q"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=100)
    out = done.stdout
    assert "INTERNALERROR" not in out + done.stderr, out[-3000:]
    assert done.returncode == 1, out[-3000:]
    summary = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert sorted(line.split(" - ")[0] for line in summary) == [
        "ERROR test_a.py::test_slow_setup", "ERROR test_a.py::test_slow_teardown", "FAILED test_a.py::test_slow_call"]
    assert all("Timeout (>1.0s)" in line for line in summary), summary
    assert out.splitlines()[-1].startswith("1 failed, 4 passed, 2 errors in "), out[-3000:]
