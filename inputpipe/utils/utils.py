"""tensorpack's ``utils.utils`` helpers that DataFlow code imports (``get_rng`` for a flow's or an
augmentor's random state, ``get_tqdm``/``get_tqdm_kwargs`` for progress bars, ``fix_rng_seed``,
``execute_only_once``, ``change_env``, ``humanize_time_delta``, ``find_library_full_path``), at
the same path
(``inputpipe.dataflow`` has them too, as tensorpack's data modules did).

Example::

    from inputpipe.utils.utils import get_rng
    rng = get_rng(self)          # in a DataFlow's reset_state()
"""
import contextlib
import ctypes.util
import os
import re
import shutil
import subprocess
import sys
import threading
from typing import Any, Dict, Iterator, Optional, Set, Tuple

import numpy as np

from . import logger  # noqa: F401  (tensorpack's utils.utils has it: `from ...utils.utils import logger`)
from .concurrency import subproc_call  # noqa: F401  (tensorpack's utils.utils has it)
from .logger import get_logger
from .seeding import new_rng, set_global_seed

__all__ = ["change_env", "get_rng", "fix_rng_seed", "get_tqdm", "execute_only_once", "humanize_time_delta",
           "get_tqdm_kwargs"]

_logger = get_logger(__name__)

#: Environment variable (tensorpack's) that sets the seconds between progress-bar refreshes.
PROGRESS_REFRESH_ENV = "TENSORPACK_PROGRESS_REFRESH"
_TTY_REFRESH_SECONDS = 0.5
_FILE_REFRESH_SECONDS = 180.0


def get_rng(obj: Any = None) -> np.random.RandomState:
    """A new ``numpy.random.RandomState`` (tensorpack's ``get_rng``): seeded from fresh entropy,
    or reproducibly from :func:`inputpipe.dataflow.seeding.set_global_seed` when a global seed is
    set. ``obj`` is accepted for tensorpack's signature.

    Example::

        rng = get_rng(self)
        order = rng.permutation(10)
    """
    return new_rng(obj)


def _refresh_interval(stream: Any) -> float:
    value = os.environ.get(PROGRESS_REFRESH_ENV)
    if value is not None:
        try:
            return float(value)
        except ValueError:
            raise ValueError("{}={!r}: expected a number of seconds".format(PROGRESS_REFRESH_ENV, value)) from None
    isatty = getattr(stream, "isatty", None)
    return _TTY_REFRESH_SECONDS if callable(isatty) and isatty() else _FILE_REFRESH_SECONDS


def get_tqdm_kwargs(**kwargs: Any) -> Dict[str, Any]:
    """tensorpack's default ``tqdm`` arguments, updated with ``kwargs``: an ASCII bar with the rate,
    refreshed every 0.5 s on a terminal and every 180 s otherwise (a log file), or every
    ``$TENSORPACK_PROGRESS_REFRESH`` seconds.

    Example::

        bar = tqdm.tqdm(total=100, **get_tqdm_kwargs(desc="reading"))
    """
    defaults: Dict[str, Any] = {
        "smoothing": 0.5,
        "dynamic_ncols": True,
        "ascii": True,
        "bar_format": "{l_bar}{bar}|{n_fmt}/{total_fmt}[{elapsed}<{remaining},{rate_noinv_fmt}]",
        "mininterval": _refresh_interval(kwargs.get("file", sys.stderr)),
    }
    defaults.update(kwargs)
    return defaults


def get_tqdm(*args: Any, **kwargs: Any) -> Any:
    """``tqdm.tqdm(*args, **kwargs)`` with :func:`get_tqdm_kwargs`' defaults.

    Example::

        for item in get_tqdm(items, desc="converting"):
            ...
    """
    from tqdm import tqdm

    return tqdm(*args, **get_tqdm_kwargs(**kwargs))


def fix_rng_seed(seed: int) -> None:
    """tensorpack's way to make a run's randomness repeatable: here it is
    :func:`inputpipe.dataflow.seeding.set_global_seed` (every RNG of the pipeline derived from
    ``seed``, each its own stream; tensorpack gave every ``get_rng()`` the same seed).

    Example::

        fix_rng_seed(42)
        rng = get_rng()        # the same numbers on every run
    """
    set_global_seed(seed)


_executed: Set[Tuple[str, int]] = set()
_executed_lock = threading.Lock()


def execute_only_once() -> bool:
    """True the first time the line that calls it runs in this process, False afterwards.

    Example::

        if execute_only_once():
            print("the first datapoint has shape", dp[0].shape)
    """
    caller = sys._getframe(1)
    where = (caller.f_code.co_filename, caller.f_lineno)
    with _executed_lock:
        if where in _executed:
            return False
        _executed.add(where)
        return True


@contextlib.contextmanager
def change_env(name: str, val: Optional[str]) -> Iterator[None]:
    """A block in which the environment variable ``name`` is ``val`` (None: unset); its value
    before is put back after the block, even when it raises.

    Example::

        with change_env("CUDA_VISIBLE_DEVICES", ""):
            start_workers()        # they see no GPU
    """
    before = os.environ.get(name)
    _set_env(name, val)
    try:
        yield
    finally:
        _set_env(name, before)


def _set_env(name: str, val: Optional[str]) -> None:
    if val is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = val


_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60))


def humanize_time_delta(sec: float) -> str:
    """Seconds as words: ``"1 minute 27 seconds"``, ``"1 day 9 hours 2 minutes 3 seconds"``,
    ``"0.01 seconds"`` (whole seconds from a minute up; 3 significant digits below).

    Example::

        assert humanize_time_delta(61) == "1 minute 1 second"
    """
    if sec < 0:
        _logger.warning("humanize_time_delta: got negative seconds %s", sec)
        return "{:.3g} seconds".format(sec)
    if sec == 0:
        return "0 second"
    words = []
    rest: float = sec
    if sec >= 60:
        rest = int(sec)
        for unit, size in _UNITS:
            count, rest = divmod(rest, size)
            if count:
                words.append(_counted(count, unit))
    if rest:
        words.append(_counted(rest, "second"))
    return " ".join(words)


def _counted(value: float, unit: str) -> str:
    return "{:.3g} {}{}".format(value, unit, "" if value == 1 else "s")


#: Seconds ``ldconfig -p`` may take when :func:`find_library_full_path` asks it.
_LDCONFIG_TIMEOUT = 10.0


def find_library_full_path(name: str) -> Optional[str]:
    """The full path of the shared library ``name`` (as for ``ctypes.util.find_library``: ``"c"``,
    ``"tcmalloc"``, ``"jpeg"``), or None when it is not found: the file this process has mapped
    (``/proc/self/maps``) if it has loaded it, else the first match in ``LD_LIBRARY_PATH``, in
    the linker's cache (``ldconfig -p``), and what ``ctypes.util.find_library`` finds.

    Example::

        path = find_library_full_path("tcmalloc")    # e.g. "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"
    """
    if not name or os.sep in name:
        raise ValueError("find_library_full_path: expected a library name such as 'jpeg', got {!r}".format(name))
    pattern = re.compile(r"^lib{}\.so(\.[0-9.]+)?$".format(re.escape(name)))
    for look in (lambda: _mapped_library(pattern), lambda: _library_on_path(pattern), lambda: _cached_library(name)):
        found = look()                   # (in turn: ldconfig runs only when the others found nothing)
        if found:
            return found
    fallback = ctypes.util.find_library(name)
    if fallback and os.path.isabs(fallback):
        return os.path.realpath(fallback)
    if fallback:
        for directory in ("/lib", "/usr/lib", "/usr/local/lib", "/lib64", "/usr/lib64"):
            candidate = os.path.join(directory, fallback)
            if os.path.isfile(candidate):
                return os.path.realpath(candidate)
    return None


def _mapped_library(pattern: "re.Pattern[str]") -> Optional[str]:
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if path.startswith("/") and pattern.match(os.path.basename(path)) and os.path.isfile(path):
                    return os.path.realpath(path)
    except OSError:
        pass
    return None


def _library_on_path(pattern: "re.Pattern[str]") -> Optional[str]:
    for directory in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)):
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in entries:
            if pattern.match(entry) and os.path.isfile(os.path.join(directory, entry)):
                return os.path.realpath(os.path.join(directory, entry))
    return None


def _cached_library(name: str) -> Optional[str]:
    ldconfig = shutil.which("ldconfig", path=os.pathsep.join([os.environ.get("PATH", ""), "/sbin", "/usr/sbin"]))
    if ldconfig is None:
        return None
    try:
        listing = subprocess.run([ldconfig, "-p"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 timeout=_LDCONFIG_TIMEOUT, check=False).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"^\s*lib{}\.so[0-9.]*\s.*=>\s*(\S+)$".format(re.escape(name)), listing, re.MULTILINE)
    return os.path.realpath(found.group(1)) if found and os.path.isfile(found.group(1)) else None
