"""Library warnings reach the user without any logging setup, and never twice."""
import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.timeout(90)
def test_warning_reaches_stderr_without_setup_and_info_stays_quiet():
    proc = _run("""
        from inputpipe.utils.logger import get_logger
        log = get_logger("inputpipe.input_source.queue")
        log.info("an info line")
        log.warning("QueueInput: training is input-bound")
        log.error("an error line")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["inputpipe WARNING: QueueInput: training is input-bound",
                                        "inputpipe ERROR: an error line"]
    assert proc.stdout == ""


@pytest.mark.timeout(90)
def test_configured_logging_gets_each_record_once_and_info_when_asked():
    proc = _run("""
        import logging
        logging.basicConfig(level=logging.INFO, format="%(name)s|%(levelname)s|%(message)s")
        from inputpipe.utils.logger import get_logger
        log = get_logger("inputpipe.dataflow.parallel")
        log.info("started 2 workers")
        log.warning("worker slow")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["inputpipe.dataflow.parallel|INFO|started 2 workers",
                                        "inputpipe.dataflow.parallel|WARNING|worker slow"]


def test_records_propagate_to_pytest_caplog(caplog):
    from inputpipe.utils.logger import get_logger
    with caplog.at_level("WARNING", logger="inputpipe"):
        get_logger("inputpipe.x").warning("seen by caplog")
    assert [r.getMessage() for r in caplog.records] == ["seen by caplog"]
