"""The Ray side of :mod:`inputpipe.dataflow.ray`: the connection, the actors, their answers.

- :func:`import_ray` imports the real ``ray`` package lazily (through importlib, so this package's
  own ``ray`` module never shadows it) with a one-line error naming the extra when it is missing.
- :func:`acquire` / :func:`release`: a flow connects to Ray when it starts. With no address and no
  Ray in this process it starts a local instance sized to this machine (on loopback, its files
  private, shut down again if the start is interrupted: :mod:`.local`) and shuts it down when
  the last flow that needed it closes; an instance that was already there (``ray.init`` by the
  user, :func:`start_local_ray`, a cluster) is joined and left running.
- :class:`ActorPool`: ``num_actors`` restartable actors running :class:`RayWorker`, calls on them
  by rank, and each finished call classified as a result, a failure of the user's function (with
  its traceback) or a lost call (the actor or its node died; the caller sends it again).
"""
import importlib
import logging
import os
import sys
import threading
import time
import traceback
from itertools import islice
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ...utils.concurrency import POLL_INTERVAL
from ...utils.errors import WorkerError, exception_type_named, worker_error_class
from ...utils.logger import get_logger
from ...utils.seeding import enter_worker, get_global_seed
from .local import start_local_instance

logger = get_logger(__name__)

#: Seconds the actors of a flow may take to start before the flow says why they have not.
ACTOR_START_TIMEOUT = 60.0
#: Seconds after which actors still waiting to start get a warning saying what they wait for.
ACTOR_START_WARNING = 10.0
#: Seconds ``close()`` waits for the processes of this node's killed actors to exit.
ACTOR_EXIT_TIMEOUT = 5.0

_GiB = 1 << 30


def import_ray(owner: str) -> Any:
    """The ``ray`` package, or an ImportError naming ``owner`` and the pip command."""
    try:
        return importlib.import_module("ray")
    except ImportError as err:
        raise ImportError('{} needs Ray, which is not installed ({}): pip install "inputpipe[ray]"'.format(
            owner, err)) from None


def local_object_store_bytes() -> int:
    """Object store size for a local instance: a tenth of the RAM, between 512 MiB and 4 GiB
    (2.4 GiB on a 24 GiB machine), so other processes and the page cache keep the rest."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 8 * _GiB
    return int(min(4 * _GiB, max(_GiB // 2, total // 10)))


def _local_init_options(**overrides: Any) -> Dict[str, Any]:
    options: Dict[str, Any] = dict(
        num_cpus=os.cpu_count() or 1,
        object_store_memory=local_object_store_bytes(),
        include_dashboard=False,
        logging_level=logging.WARNING,
        # the workers of a local instance can import what this process can (modules next to the
        # script, a test directory), as a forked worker pool could
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(
            p for p in [os.getcwd()] + sys.path if p and os.path.isdir(p))}},
        # Ray runs its workers at nice 15 (below the driver); the actors here are the pipeline's
        # workers, as a process pool's are, and at nice 15 a busy machine starves them: their start
        # took 55 s beside 8 busy processes on 2 CPUs, 2.4 s at nice 0
        _system_config={"worker_niceness": 0},
    )
    system_config = dict(options["_system_config"], **(overrides.pop("_system_config", None) or {}))
    options.update(overrides)
    options["_system_config"] = system_config
    return options


def start_local_ray(**init_options: Any) -> None:
    """Start the local Ray instance a flow would start (sized to this machine, no dashboard,
    quiet logs, listening on 127.0.0.1 only, its files private to the user), owned by the caller:
    flows made later join it and leave it running, so several flows and epochs share one
    instance. Stop it with ``ray.shutdown()``. An exception or Ctrl-C during the start leaves no
    Ray process behind.

    ``init_options`` override the defaults given to ``ray.init`` (e.g. ``num_cpus=2``).

    Example::

        start_local_ray(num_cpus=2)
        ...   # RayMapData(...) flows join it
        import ray; ray.shutdown()
    """
    ray = import_ray("start_local_ray")
    if ray.is_initialized():
        raise RuntimeError("start_local_ray: Ray is already initialized in this process")
    start_local_instance(ray, _local_init_options(**init_options))


class _Connection:
    """Whether this module started Ray, and how many open flows use the instance it started."""

    lock = threading.Lock()
    started_here = False
    users = 0


def acquire(owner: str, address: Optional[str]) -> Tuple[Any, bool]:
    """Connect to Ray for ``owner``; returns ``(ray, counted)``; call :func:`release` once when
    ``counted`` (the flow shares an instance this module started)."""
    ray = import_ray(owner)
    with _Connection.lock:
        if ray.is_initialized():
            if _Connection.started_here:
                _Connection.users += 1
                return ray, True
            logger.debug("%s: joining the Ray instance already initialized in this process", owner)
            return ray, False
        if address is None:
            logger.info("%s: starting a local Ray instance (%d CPUs, %.1f GiB object store)", owner,
                        os.cpu_count() or 1, local_object_store_bytes() / _GiB)
            start_local_instance(ray, _local_init_options())
        else:
            logger.info("%s: connecting to the Ray cluster at %s", owner, address)
            ray.init(address=address, logging_level=logging.WARNING)
        _Connection.started_here = True
        _Connection.users = 1
        return ray, True


def release(ray: Any) -> None:
    """One flow counted by :func:`acquire` is done; the last one shuts down (or disconnects)."""
    with _Connection.lock:
        _Connection.users -= 1
        if _Connection.users > 0 or not _Connection.started_here:
            return
        _Connection.started_here = False
        if ray.is_initialized():
            ray.shutdown()


# ------------------------------------------------------------------------------------ in actors

class RemoteFailure:
    """What a worker sends back instead of a result when the user's function raised."""

    def __init__(self, err: BaseException, pid: int):
        self.module = type(err).__module__
        self.qualname = type(err).__qualname__
        self.summary = "raised {}: {}".format(type(err).__name__, err)
        self.traceback_text = traceback.format_exc()
        self.pid = pid


class RayWorker:
    """The object inside each actor: maps tasks (``map``) or reads shards in chunks (``read``)."""

    def __init__(self, rank: int, func: Callable, batch_size: Optional[int], global_seed: Optional[int]):
        enter_worker(rank, global_seed)
        self.func = func
        self.batch_size = batch_size
        self.pid = os.getpid()
        self._shard: Optional[Tuple[int, int]] = None      # (shard index, position) of _reader
        self._reader: Optional[Iterator[Any]] = None
        self._exhausted = False

    def where(self) -> Tuple[int, Optional[str]]:
        """This actor's pid and node id (the driver waits on the pids of its own node)."""
        import ray
        return self.pid, ray.get_runtime_context().get_node_id()

    def map(self, task: Any, ticket: List[int]) -> Any:
        """``(result, seconds)``: ``task`` mapped, each datapoint seeded from ``ticket = [key, base
        seed, epoch, index]`` (an actor runs one call at a time, so numpy's and Python's global
        RNGs are reseeded too), and the seconds it took."""
        from .._parallel.map_task import _apply
        started = time.perf_counter()
        try:
            return _apply(self.func, self.batch_size, task, ticket, reseed_global=True), time.perf_counter() - started
        except BaseException as err:  # noqa: BLE001 - reported to the consumer, which raises it
            return RemoteFailure(err, self.pid)

    def read(self, index: int, shard: Any, start: int, count: int) -> Any:
        """``(chunk, ended, seconds)``: up to ``count`` datapoints of ``shard`` from position
        ``start``, whether the shard ended, and the seconds the call took.

        Consecutive chunks continue one reader; any other position (a new shard, or the same
        shard after this actor was restarted) opens the shard again and skips to ``start``.
        """
        started = time.perf_counter()
        try:
            if self._shard != (index, start) or self._reader is None:
                if self._shard is not None and self._shard[0] == index and self._exhausted and start >= self._shard[1]:
                    return [], True, time.perf_counter() - started
                self._reader = islice(iter(self.func(shard)), start, None)
                self._shard, self._exhausted = (index, start), False
            chunk = list(islice(self._reader, count))
            self._exhausted = len(chunk) < count
            self._shard = (index, start + len(chunk))
            return chunk, self._exhausted, time.perf_counter() - started
        except BaseException as err:  # noqa: BLE001 - reported to the consumer, which raises it
            self._shard, self._reader = None, None
            return RemoteFailure(err, self.pid)


# ------------------------------------------------------------------------------------ in the driver

class Lost(Exception):
    """A call whose actor (or the node holding its result) died: send it again once the actor
    is back (``pid`` is the process that held it)."""

    def __init__(self, message: str, pid: Optional[int]):
        super().__init__(message)
        self.pid = pid


#: Seconds between checks of whether a restarting actor is back.
RESTART_POLL = 0.2


class ActorPool:
    """``num_actors`` restartable :class:`RayWorker` actors of one flow, in the driver.

    ``submit(rank, method, *args)`` starts a call and returns its id; ``wait(ids, timeout)``
    returns the ids of finished calls; ``outcome(rank, id)`` returns the result, raises
    :class:`~inputpipe.utils.errors.WorkerError` for a failure of the user's function, or
    :class:`Lost` for a call to redo. After a loss the actor is ``restarting`` until it answers
    again; ``back()`` returns the ranks that came back since the last call (send their work
    again then). ``add_actor()`` starts one more (a new rank, ``restarting`` until it answers:
    ``back()`` returns it once), ``retire(rank)`` kills one that holds no call. ``close()`` kills
    the actors and waits for the processes of those on this node.
    """

    def __init__(self, owner: str, num_actors: int, func: Callable, batch_size: Optional[int],
                 address: Optional[str], actor_options: Optional[Dict[str, Any]]):
        self.owner = owner
        self.num_actors = num_actors
        self._ray, self._counted = acquire(owner, address)
        self._exceptions = importlib.import_module("ray.exceptions")
        options = {"num_cpus": 1, "max_restarts": -1, "max_task_retries": 0}
        options.update(actor_options or {})
        self.options = options
        actor_class = self._ray.remote(RayWorker).options(**options)
        self._new_actor = lambda rank: actor_class.remote(rank, func, batch_size, get_global_seed())
        self._closed = False
        self._probes: Dict[int, Tuple[Any, float]] = {}   # restarting rank -> (where() call, when sent)
        self._starting: Dict[int, float] = {}             # rank added while running -> when
        self._retired: List[int] = []
        try:
            self.actors = [self._new_actor(rank) for rank in range(num_actors)]
            self.pids: List[Optional[int]] = [None] * num_actors
            self._nodes: List[Optional[str]] = [None] * num_actors
            self._await_start(options)
        except BaseException:
            self.close()
            raise

    def _await_start(self, options: Dict[str, Any]) -> None:
        ray = self._ray
        refs = {actor.where.remote(): rank for rank, actor in enumerate(self.actors)}
        deadline = time.monotonic() + ACTOR_START_TIMEOUT
        warned = False
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=POLL_INTERVAL * 4)
            for ref in ready:
                rank = refs.pop(ref)
                try:
                    self.pids[rank], self._nodes[rank] = ray.get(ref)
                except self._exceptions.RayError as err:
                    raise WorkerError(self.owner, "actor {}".format(rank), reason="could not start: {}".format(
                        _first_line(err))) from None
            if refs and not warned and time.monotonic() > deadline - ACTOR_START_TIMEOUT + ACTOR_START_WARNING:
                warned = True
                logger.warning("%s: %s", self.owner, self._not_started(refs, options, "are still waiting to start"))
            if refs and time.monotonic() > deadline:
                raise WorkerError(self.owner, "actors", reason=self._not_started(
                    refs, options, "did not start within {:.0f} s".format(ACTOR_START_TIMEOUT)))

    def _not_started(self, refs: Dict[Any, int], options: Dict[str, Any], what: str) -> str:
        asked = {k: v for k, v in options.items() if k in ("num_cpus", "num_gpus", "memory", "resources")}
        return ("{} of {} actors (ranks {}) {}: each asks for {} (actor_options) and the cluster has {} in "
                "all, part of it maybe held by other flows' actors (close() them first)".format(
                    len(refs), self.num_actors, sorted(refs.values()), what, asked,
                    self._ray.cluster_resources()))

    def describe(self, rank: int) -> Tuple[str, Optional[int]]:
        return "actor {}".format(rank), self.pids[rank]

    def add_actor(self) -> int:
        """Start one more actor; returns its rank. It is ``restarting`` until :meth:`back`
        returns it (Ray places it when the cluster has the resources it asks for)."""
        rank = len(self.actors)
        self.actors.append(self._new_actor(rank))
        self.pids.append(None)
        self._nodes.append(None)
        self._probes[rank] = (self.actors[rank].where.remote(), time.monotonic())
        self._starting[rank] = time.monotonic()
        return rank

    def overdue(self, seconds: Optional[float] = None) -> List[int]:
        """Ranks added by :meth:`add_actor` that have not started within ``seconds`` (default
        :data:`ACTOR_START_TIMEOUT`)."""
        seconds = ACTOR_START_TIMEOUT if seconds is None else seconds
        now = time.monotonic()
        return [rank for rank, since in self._starting.items() if now - since > seconds]

    def retire(self, rank: int) -> None:
        """Kill actor ``rank``, which holds no call (its process is waited for at close)."""
        self._probes.pop(rank, None)
        self._starting.pop(rank, None)
        self._retired.append(rank)
        try:
            self._ray.kill(self.actors[rank], no_restart=True)
        except Exception as err:  # noqa: BLE001 - e.g. already dead; close() waits for it anyway
            logger.debug("%s: while killing actor %d: %s", self.owner, rank, err)

    def free_cpus(self) -> Optional[float]:
        """CPUs the cluster has free now (None when Ray cannot say)."""
        try:
            return float(self._ray.available_resources().get("CPU", 0.0))
        except Exception:  # noqa: BLE001 - a diagnostic: no answer means no limit known
            return None

    def restarting(self, rank: int) -> bool:
        return rank in self._probes

    def current_pid(self, rank: int, timeout: float) -> Optional[int]:
        """The pid of actor ``rank``, waiting up to ``timeout`` seconds for a restarting actor."""
        deadline = time.monotonic() + timeout
        while self.restarting(rank) and time.monotonic() < deadline:
            self.back()
            time.sleep(POLL_INTERVAL)
        return self.pids[rank]

    def back(self) -> List[int]:
        """Ranks of restarting actors that answer again (each reported once); raises WorkerError
        for an actor Ray could not restart."""
        returned = []
        errors = self._exceptions
        for rank, (probe, sent) in list(self._probes.items()):
            ready, _ = self._ray.wait([probe], timeout=0)
            if not ready:
                continue
            try:
                self.pids[rank], self._nodes[rank] = self._ray.get(probe)
            except errors.ActorDiedError as err:
                raise WorkerError(self.owner, "actor {}".format(rank), pid=self.pids[rank], reason=(
                    "died and Ray did not restart it (actor_options max_restarts, or no node left to "
                    "run it): {}".format(_first_line(err)))) from None
            except errors.RayError:
                if time.monotonic() - sent >= RESTART_POLL:
                    self._probes[rank] = (self.actors[rank].where.remote(), time.monotonic())
                continue
            del self._probes[rank]
            if self._starting.pop(rank, None) is None:
                logger.info("%s: actor %d is back as pid %s", self.owner, rank, self.pids[rank])
            returned.append(rank)
        return returned

    def submit(self, rank: int, method: str, *args: Any) -> Any:
        return getattr(self.actors[rank], method).remote(*args)

    def wait(self, ids: List[Any], timeout: float) -> List[Any]:
        """The ids among ``ids`` that have finished (waiting up to ``timeout`` for the first)."""
        if not ids:
            time.sleep(timeout)
            return []
        ray = self._ray
        ready, rest = ray.wait(ids, num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return ready

    def outcome(self, rank: int, ref: Any) -> Any:
        """The result of a finished call on actor ``rank``; see the class doc."""
        errors = self._exceptions
        try:
            result = self._ray.get(ref)
        except (errors.RayActorError, errors.ObjectLostError, errors.WorkerCrashedError,
                errors.NodeDiedError, errors.OutOfMemoryError) as err:
            if rank not in self._probes:
                logger.warning("%s: actor %d (pid %s) was lost (%s); Ray restarts it and its work is sent "
                               "again", self.owner, rank, self.pids[rank], _first_line(err))
                self._probes[rank] = (self.actors[rank].where.remote(), time.monotonic())
            raise Lost("actor {} (pid {}) was lost: {}".format(rank, self.pids[rank], _first_line(err)),
                       self.pids[rank]) from None
        except errors.RayError as err:
            raise WorkerError(self.owner, "actor {}".format(rank), pid=self.pids[rank], reason="failed in Ray: {}".format(
                _first_line(err)), remote_traceback=str(err)) from None
        if isinstance(result, RemoteFailure):
            error_class = worker_error_class(exception_type_named(result.module, result.qualname))
            raise error_class(self.owner, "actor {}".format(rank), pid=result.pid, reason=result.summary,
                              remote_traceback=result.traceback_text)
        return result

    def close(self) -> None:
        """Kill the actors, wait (up to ``ACTOR_EXIT_TIMEOUT``) for their processes on this node
        to exit, and release the connection. Safe to call twice, and at interpreter exit."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        try:
            if ray.is_initialized():
                for rank in list(self._probes):
                    if rank not in self._starting:     # a restart: its new process, to wait for it
                        self.current_pid(rank, timeout=2.0)
                for actor in getattr(self, "actors", []):
                    ray.kill(actor, no_restart=True)
                here = ray.get_runtime_context().get_node_id()
                pids = [pid for pid, node in zip(getattr(self, "pids", []), getattr(self, "_nodes", []))
                        if pid is not None and node == here]
                _wait_exited(pids, ACTOR_EXIT_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - e.g. Ray already shut down at interpreter exit
            logger.debug("%s: while killing the actors: %s", self.owner, err)
        finally:
            if self._counted:
                release(ray)


def _wait_exited(pids: List[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                break
            time.sleep(POLL_INTERVAL)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return "{}: {}".format(type(err).__name__, text.splitlines()[0] if text else "")
