"""The local Ray instance a Ray flow starts when there is none: reachable from this machine only,
its files private to the user, and never left half-started.

- **Loopback only.** Ray binds its servers (GCS, raylet and object manager, the core workers of
  the driver and the actors, the runtime-env agent) on the node's address, and on Linux it
  replaces a node address of 127.0.0.1 with the machine's network address, unless its
  ``ENABLE_RAY_CLUSTER`` constant is off (Ray sets it from ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``
  when it is imported; off, Ray runs single-node, as on Windows and macOS).
  :func:`start_local_instance` turns it off only while ``ray.init`` starts the instance, so the
  node's address is 127.0.0.1 and every server listens on loopback; the dashboard (off unless
  asked for) binds 127.0.0.1. When the instance still ends up on another address (a Ray that
  works otherwise), a warning says so once.
- **Private files.** Ray makes its directories world-writable (0777, again whenever it creates
  one), so the instance's temp directory (sessions, logs, unix sockets) is put inside a
  directory of the user's that Ray never touches, mode 0700: :func:`private_temp_dir`. Ray's
  token file (``~/.ray/auth_token``, or ``RAY_AUTH_TOKEN_PATH``) is made 0600 and ``~/.ray``
  0700, before the start (so a token Ray creates is never readable by others) and after.
- **Never half-started.** An exception or Ctrl-C while ``ray.init`` runs shuts the instance down,
  also the processes Ray started but had not recorded yet: Ray's processes among this process's
  descendants that were not there before are stopped (so that none can start more), then killed.

Example::

    context = start_local_instance(ray, {"num_cpus": 2, "include_dashboard": False})
"""
import importlib
import ipaddress
import os
import stat
import sys
import tempfile
from contextlib import contextmanager, suppress
from typing import Any, Dict, Iterator, List, Optional, Set

from ...utils.logger import get_logger
from ...utils.processes import adopting_orphans

logger = get_logger(__name__)

LOOPBACK = "127.0.0.1"
#: Seconds the processes of a half-started instance get to exit once killed.
HALF_STARTED_EXIT_TIMEOUT = 5.0
#: Longest temp directory for Ray: its unix socket paths (about 62 more characters) must fit in 107.
_MAX_TEMP_DIR_CHARS = 45


class _Started:
    """Whether the warning about a local instance reachable from other machines was given."""

    warned_reachable = False


def start_local_instance(ray: Any, options: Dict[str, Any]) -> Any:
    """``ray.init(**options)`` for a new local instance, on loopback with private files (see the
    module doc); returns ``ray.init``'s context. Any exception or interrupt on the way shuts the
    instance down and stops every process it had started, then propagates."""
    options = dict(options)
    options.setdefault("_node_ip_address", LOOPBACK)
    options.setdefault("dashboard_host", LOOPBACK)
    before = _ray_processes(ray)
    try:
        if "_temp_dir" not in options:
            options["_temp_dir"] = os.path.join(private_temp_dir(), "ray")
        _make_token_private()
        with _loopback_node(_is_loopback(options["_node_ip_address"])):
            context = ray.init(**options)
        _make_token_private()
        info = getattr(context, "address_info", None) or {}
        _warn_if_reachable(ray, info.get("node_ip_address"))
        return context
    except BaseException:
        _stop_half_started(ray, before)
        raise


def private_temp_dir() -> str:
    """``inputpipe-ray-<uid>`` in Ray's temp location (``RAY_TMPDIR``, ``TMPDIR``, ``/tmp``):
    a directory of this user's, mode 0700, which holds the local instances' temp directory.
    One that someone else made, or a symlink, is not used (a new one from ``mkdtemp`` is).

    Example::

        ray.init(_temp_dir=os.path.join(private_temp_dir(), "ray"))
    """
    base = os.environ.get("RAY_TMPDIR") or (sys.platform.startswith("linux") and os.environ.get("TMPDIR")) or "/tmp"
    path = os.path.join(base, "inputpipe-ray-{}".format(os.getuid()))
    if len(path) + len("/ray") > _MAX_TEMP_DIR_CHARS:
        path = os.path.join("/tmp", "inputpipe-ray-{}".format(os.getuid()))
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as err:
        logger.debug("could not make %s: %s", path, err)
    try:
        status = os.lstat(path)
        if stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid():
            if status.st_mode & 0o077:
                os.chmod(path, 0o700)
            return path
    except OSError as err:
        logger.debug("could not use %s: %s", path, err)
    return tempfile.mkdtemp(prefix="inputpipe-ray-", dir="/tmp")


@contextmanager
def _loopback_node(wanted: bool) -> Iterator[None]:
    """Ray's ENABLE_RAY_CLUSTER off while the block runs, when a loopback node is wanted."""
    constants: Any = None
    try:
        constants = importlib.import_module("ray._private.ray_constants")
    except ImportError:
        pass
    if not wanted or not hasattr(constants, "ENABLE_RAY_CLUSTER"):
        yield
        return
    before = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = before


def _is_loopback(address: Any) -> bool:
    try:
        return ipaddress.ip_address(str(address)).is_loopback
    except ValueError:
        return address == "localhost"


def _warn_if_reachable(ray: Any, node_address: Optional[str]) -> None:
    if node_address is None or _is_loopback(node_address) or _Started.warned_reachable:
        return
    _Started.warned_reachable = True
    logger.warning("the local Ray instance listens on %s, reachable from other machines: this Ray (%s) could not be "
                   "started on 127.0.0.1 (see docs/scaling_out.md); its token authentication, when on, still "
                   "guards it", node_address, getattr(ray, "__version__", "unknown version"))


def _make_token_private() -> None:
    """``~/.ray`` (made if missing) 0700, Ray's token file(s) 0600."""
    ray_home = os.path.join(os.path.expanduser("~"), ".ray")
    try:
        os.makedirs(ray_home, 0o700, exist_ok=True)
    except OSError as err:
        logger.debug("could not make %s: %s", ray_home, err)
    _make_private(ray_home, 0o700)
    for path in (os.environ.get("RAY_AUTH_TOKEN_PATH"), os.path.join(ray_home, "auth_token")):
        if path:
            _make_private(path, 0o600)


def _make_private(path: str, mode: int) -> None:
    """chmod ``path`` to ``mode`` if it exists, is this user's, and others may use it."""
    try:
        status = os.stat(path)
        if status.st_uid == os.getuid() and status.st_mode & 0o077:
            os.chmod(path, mode)
    except FileNotFoundError:
        pass
    except OSError as err:
        logger.debug("could not make %s private: %s", path, err)


def _psutil() -> Any:
    try:
        return importlib.import_module("psutil")      # Ray ships it (ray/thirdparty_files) if not installed
    except ImportError:
        return None


def _ray_processes(ray: Any) -> Set[int]:
    """Pids of Ray's processes among this process's descendants."""
    return {process.pid for process in _ray_descendants(_psutil(), ray)}


def _ray_descendants(psutil: Any, ray: Any) -> List[Any]:
    if psutil is None:
        return []
    ray_dir = os.path.dirname(getattr(ray, "__file__", None) or "/nonexistent/ray")
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            name, command = process.name(), " ".join(process.cmdline())
        except psutil.Error:
            continue
        if name in ("gcs_server", "raylet") or command.startswith("ray::") or ray_dir in command:
            found.append(process)
    return found


def _stop_half_started(ray: Any, before: Set[int]) -> None:
    """Shut down what ``ray.init`` had started (Ray's own shutdown, then every Ray process that
    was not there ``before``: stopped first, so that none starts another, then killed). Meanwhile
    this process adopts orphans: the agents of a raylet killed by the shutdown, started a moment
    before, would otherwise leave this process's tree and run on until they noticed."""
    psutil = _psutil()
    with adopting_orphans():        # the agents of a raylet that shutdown() kills stay findable
        try:
            ray.shutdown()
        except Exception as err:  # noqa: BLE001 - it may not have got far enough to shut down
            logger.debug("ray.shutdown() after a failed start: %s", err)
        if psutil is None:
            logger.warning("Ray's start was interrupted; without psutil, processes it had started may run on")
            return
        _kill_new_ray_processes(psutil, ray, before)


def _kill_new_ray_processes(psutil: Any, ray: Any, before: Set[int]) -> None:
    stopped: Dict[int, Any] = {}
    for _ in range(100):                  # stopped processes start no more: a few rounds suffice
        new = [p for p in _ray_descendants(psutil, ray) if p.pid not in before and p.pid not in stopped]
        if not new:
            break
        for process in new:
            stopped[process.pid] = process
            with suppress(psutil.Error):
                process.suspend()
    for process in stopped.values():
        with suppress(psutil.Error):
            process.kill()
    _, alive = psutil.wait_procs(list(stopped.values()), timeout=HALF_STARTED_EXIT_TIMEOUT)
    if alive:
        logger.warning("Ray's start was interrupted; its processes %s did not exit within %.0f s",
                       sorted(p.pid for p in alive), HALF_STARTED_EXIT_TIMEOUT)
    elif stopped:
        logger.info("Ray's start was interrupted; stopped its %d processes", len(stopped))
