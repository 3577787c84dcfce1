"""pytest-timeout's timer around each phase of a test (setup, call, teardown), never around the
sending of its reports.

With ``timeout_method = signal`` pytest-timeout raises in the main thread wherever it is when the
time is up. Armed for the whole test protocol (its default), that can be while pytest-xdist sends
a report to the controller: the exception breaks the worker's channel, the worker crashes and the
run ends without naming any failure ("Unexpectedly no active workers available"). So pytest.ini
sets ``timeout_func_only = true`` (pytest-timeout then times the call phase alone) and these
hooks, imported into ``tests/conftest.py``, time setup and teardown the same way: each phase gets
the test's timeout, and a timeout fails that test, never the session.

Example (tests/conftest.py)::

    from timeout_phases import pytest_runtest_setup, pytest_runtest_teardown  # noqa: F401
"""
import pytest
import pytest_timeout


def _timed(item):
    """Arm pytest-timeout's timer for one phase of ``item``; returns the disarming function."""
    settings = pytest_timeout._get_item_settings(item)
    if settings.timeout is None or settings.timeout <= 0:
        return lambda: None
    hooks = item.config.pluginmanager.hook
    hooks.pytest_timeout_set_timer(item=item, settings=settings)
    return lambda: hooks.pytest_timeout_cancel_timer(item=item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    disarm = _timed(item)
    try:
        yield
    finally:
        disarm()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    disarm = _timed(item)
    try:
        yield
    finally:
        disarm()
