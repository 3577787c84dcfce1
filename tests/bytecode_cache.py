"""One bytecode cache for a test session run where Python may not write ``.pyc`` files.

With ``PYTHONDONTWRITEBYTECODE`` set, every Python process the suite starts (scripts, trainers,
documentation pages, spawned workers: a few hundred) compiles the package, the examples and the
test helpers it imports from source again, about 0.5 s of CPU for ``inputpipe.dataflow`` alone.
The session's first process compiles them once into a folder of its own and points every
process started after it at that folder (``PYTHONPYCACHEPREFIX``, Python 3.8+), which Python
reads even where it may not write. Nothing is written next to the sources, a source changed
during the run is compiled again as usual (its cached file no longer matches it), and the folder
is removed when the session ends. Where Python may write ``__pycache__`` folders, or a prefix is
already set, nothing changes.

Example (tests/conftest.py)::

    def pytest_configure(config):
        if not hasattr(config, "workerinput"):          # the controller, not an xdist worker
            config._bytecode_cache = bytecode_cache.start()

    def pytest_unconfigure(config):
        bytecode_cache.stop(getattr(config, "_bytecode_cache", None))
"""
import compileall
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
#: The folders whose modules the suite's processes import from source.
SOURCES = ("inputpipe", "examples", "tests")


def start() -> Optional[str]:
    """Compile :data:`SOURCES` into a new folder and set ``PYTHONPYCACHEPREFIX`` to it for the
    processes started from now on; returns the folder, or None when there is nothing to do."""
    if not sys.dont_write_bytecode or os.environ.get("PYTHONPYCACHEPREFIX") or sys.version_info < (3, 8):
        return None
    folder = tempfile.mkdtemp(prefix="inputpipe-test-pyc-")
    before = sys.pycache_prefix
    sys.pycache_prefix = folder          # where compileall puts each module's cached file
    try:
        for name in SOURCES:
            compileall.compile_dir(str(REPO / name), quiet=2, workers=1)
    finally:
        sys.pycache_prefix = before
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    return folder


def stop(folder: Optional[str]) -> None:
    """Remove the folder made by :func:`start`, if any."""
    if folder:
        if os.environ.get("PYTHONPYCACHEPREFIX") == folder:
            del os.environ["PYTHONPYCACHEPREFIX"]
        shutil.rmtree(folder, ignore_errors=True)
