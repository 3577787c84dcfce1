"""What this process may use: CPUs and memory (the budget of the tuner and the controller).

The CPU budget is the number of CPUs the process may run on at once: the CPUs of its affinity
mask (``os.sched_getaffinity``, which ``taskset`` and ``docker --cpuset-cpus`` set), lowered by
a cgroup CPU quota (``docker --cpus``, Kubernetes CPU limits: cgroup v2 ``cpu.max``, cgroup v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, in the process' cgroup or any of its parents).
The memory budget is a fraction (half by default) of the memory available when it is read:
``MemAvailable`` of ``/proc/meminfo``, lowered by a cgroup memory limit (v2 ``memory.max``
minus ``memory.current``, v1 ``memory.limit_in_bytes`` minus ``memory.usage_in_bytes``).
:func:`set_budget` overrides either for the whole process.

A worker (a process or a thread) is charged to the CPU budget at its measured **CPU share**: the
CPU time it uses over the time it works, without the time it waited for a CPU that other work
held (Linux ``schedstat``: waiting for a CPU is the machine's load, not the work's own waiting).
A map that reads for 6 ms and decodes for 3 ms has a share of 1/3, so three of them cost one
CPU (:func:`cpu_share`, :func:`cpu_charge`, :func:`workers_within`). The controller of ``"auto"``
stages and :func:`inputpipe.dataflow.tune` count workers this way.

Every reader takes the files' locations as arguments (tests pass files of their own) and
returns None (or the next best answer) where a file is missing or unreadable: nothing here
raises for a system that lacks cgroups or ``/proc``.

Example::

    from inputpipe.utils.resources import cpu_budget, memory_budget, set_budget
    cpu_budget()                   # e.g. 2 in a container started with --cpus=2.5 on 8 cores
    workers_within(2, cpu_share(cpu_seconds=0.3, busy_seconds=0.9))   # 6 workers of share 1/3
    set_budget(cpus=4, memory_bytes=8 << 30)
    set_budget()                   # back to what the system says
"""
import math
import os
import threading
from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple

__all__ = [
    "Budget", "set_budget", "overrides", "budget", "cpu_budget", "memory_budget", "available_cpus", "affinity_cpu_count",
    "cgroup_cpu_limit", "available_memory", "meminfo_available", "cgroup_memory_room", "process_memory",
    "process_private_memory", "process_anon_share", "process_cpu_seconds", "thread_cpu_seconds", "process_schedstat", "thread_schedstat",
    "MIN_CPU_SHARE", "cpu_share", "cpu_charge", "workers_within", "closed_loop_rate", "workers_to_fill", "workers_for_rate",
]

#: Where the cgroup file systems are mounted, and the file naming this process' cgroups.
CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"
MEMINFO = "/proc/meminfo"
#: The share of the available memory that the memory budget is by default.
DEFAULT_MEMORY_FRACTION = 0.5
# cgroup v1 writes "no limit" as a huge number (LONG_MAX rounded to pages)
_NO_LIMIT = 1 << 60


class Budget(NamedTuple):
    """What the controller and the tuner may use: ``cpus`` (whole CPUs, >= 1) and
    ``memory_bytes`` (None when unknown: no memory limit is applied).

    Example::

        if budget().cpus >= 4:
            ...
    """
    cpus: int
    memory_bytes: Optional[int]


class _Override:
    lock = threading.Lock()
    cpus: Optional[int] = None
    memory_bytes: Optional[int] = None


def set_budget(cpus: Optional[int] = None, memory_bytes: Optional[int] = None) -> None:
    """Set the process' budget: ``cpus`` (an int >= 1) and ``memory_bytes`` (an int >= 1) replace
    what the system says; None (the default) measures it again. Applies to every stage with
    ``"auto"`` workers or buffers in this process from its next decision on, and to the tuner."""
    for name, value in (("cpus", cpus), ("memory_bytes", memory_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError("set_budget: {} must be an int >= 1 or None, got {!r}".format(name, value))
    with _Override.lock:
        _Override.cpus, _Override.memory_bytes = cpus, memory_bytes


def overrides() -> Budget:
    """What :func:`set_budget` set: ``Budget(cpus, memory_bytes)`` with None for what it did not
    (reading it costs no system call)."""
    return Budget(_Override.cpus, _Override.memory_bytes)  # type: ignore[arg-type]


def budget() -> Budget:
    """The budget now: :func:`cpu_budget` and :func:`memory_budget`."""
    return Budget(cpu_budget(), memory_budget())


# ----------------------------------------------------------------------------------------- CPUs

def affinity_cpu_count(affinity: Optional[Iterable[int]] = None) -> int:
    """CPUs in this process' affinity mask (``os.cpu_count()`` where there is none)."""
    if affinity is not None:
        return max(1, len(set(affinity)))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_paths(proc_cgroup: str) -> List[Sequence[str]]:
    """``(controllers, path)`` of each line of ``/proc/self/cgroup`` (controllers empty for v2)."""
    text = _read(proc_cgroup)
    found: List[Sequence[str]] = []
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            found.append((parts[1], parts[2]))
    return found


def _levels(mount: str, path: str) -> List[str]:
    """The cgroup directory of ``path`` under ``mount`` and its parents up to the mount (deepest
    first). A path that does not exist under the mount (a container that sees its own cgroup as
    the root) falls back to the mount itself."""
    parts = [p for p in path.split("/") if p and p != ".."]
    levels = [os.path.join(mount, *parts[:k]) for k in range(len(parts), 0, -1)]
    levels = [d for d in levels if os.path.isdir(d)]
    return levels + [mount]


def _v2_mount(cgroup_root: str) -> Optional[str]:
    for mount in (cgroup_root, os.path.join(cgroup_root, "unified")):
        if os.path.exists(os.path.join(mount, "cgroup.controllers")):
            return mount
    return None


def _v1_mount(cgroup_root: str, controller: str, listed: str) -> Optional[str]:
    for name in (listed, controller):
        mount = os.path.join(cgroup_root, name)
        if os.path.isdir(mount):
            return mount
    return None


def _v2_cpu_limit(text: Optional[str]) -> Optional[float]:
    fields = (text or "").split()
    if len(fields) < 1 or fields[0] == "max":
        return None
    try:
        quota = int(fields[0])
        period = int(fields[1]) if len(fields) > 1 else 100000
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_cpu_limit(quota_text: Optional[str], period_text: Optional[str]) -> Optional[float]:
    try:
        quota, period = int(quota_text or ""), int(period_text or "")
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_cpu_limit(cgroup_root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> Optional[float]:
    """The CPU quota of this process' cgroups in CPUs (e.g. 2.5), the lowest of its cgroup and
    its parents, v2 and v1; None when there is none."""
    limits: List[float] = []
    for controllers, path in _cgroup_paths(proc_cgroup):
        if controllers == "":
            mount = _v2_mount(cgroup_root)
            if mount is not None:
                limits += [v for v in (_v2_cpu_limit(_read(os.path.join(d, "cpu.max")))
                                       for d in _levels(mount, path)) if v is not None]
        elif "cpu" in controllers.split(","):
            mount = _v1_mount(cgroup_root, "cpu", controllers)
            if mount is not None:
                for d in _levels(mount, path):
                    limit = _v1_cpu_limit(_read(os.path.join(d, "cpu.cfs_quota_us")),
                                          _read(os.path.join(d, "cpu.cfs_period_us")))
                    if limit is not None:
                        limits.append(limit)
    return min(limits) if limits else None


def available_cpus(*, affinity: Optional[Iterable[int]] = None, cgroup_root: str = CGROUP_ROOT,
                   proc_cgroup: str = PROC_CGROUP) -> float:
    """CPUs this process may use: its affinity mask, lowered by a cgroup quota (may be fractional)."""
    cpus: float = affinity_cpu_count(affinity)
    quota = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    return cpus if quota is None else min(cpus, quota)


def cpu_budget(*, affinity: Optional[Iterable[int]] = None, cgroup_root: str = CGROUP_ROOT,
               proc_cgroup: str = PROC_CGROUP) -> int:
    """Whole CPUs for worker processes: the :func:`set_budget` value, else :func:`available_cpus`
    rounded down (a quota of 2.5 CPUs gives 2), at least 1."""
    override = _Override.cpus
    if override is not None:
        return override
    return max(1, int(math.floor(available_cpus(affinity=affinity, cgroup_root=cgroup_root,
                                                proc_cgroup=proc_cgroup) + 1e-9)))


# --------------------------------------------------------------------------------------- memory

def meminfo_available(meminfo: str = MEMINFO) -> Optional[int]:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where there is none)."""
    for line in (_read(meminfo) or "").splitlines():
        if line.startswith("MemAvailable:"):
            fields = line.split()
            try:
                return int(fields[1]) * (1024 if len(fields) < 3 or fields[2].lower() == "kb" else 1)
            except (ValueError, IndexError):
                return None
    return None


def _number(text: Optional[str]) -> Optional[int]:
    try:
        value = int(text or "")
    except ValueError:
        return None
    return value if 0 <= value < _NO_LIMIT else None


def cgroup_memory_room(cgroup_root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> Optional[int]:
    """Bytes this process' cgroups may still take (limit minus usage, the lowest over the cgroup
    and its parents, v2 and v1); None without a memory limit."""
    rooms: List[int] = []
    for controllers, path in _cgroup_paths(proc_cgroup):
        if controllers == "":
            mount = _v2_mount(cgroup_root)
            names = ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            mount = _v1_mount(cgroup_root, "memory", controllers)
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        if mount is None:
            continue
        for d in _levels(mount, path):
            limit = _number(_read(os.path.join(d, names[0])))
            if limit is not None:
                used = _number(_read(os.path.join(d, names[1]))) or 0
                rooms.append(max(0, limit - used))
    return min(rooms) if rooms else None


def available_memory(*, meminfo: str = MEMINFO, cgroup_root: str = CGROUP_ROOT,
                     proc_cgroup: str = PROC_CGROUP) -> Optional[int]:
    """Bytes of memory available to this process now: ``MemAvailable``, lowered by the room left
    under a cgroup memory limit; None when neither is known."""
    known = [v for v in (meminfo_available(meminfo), cgroup_memory_room(cgroup_root, proc_cgroup)) if v is not None]
    return min(known) if known else None


def memory_budget(fraction: float = DEFAULT_MEMORY_FRACTION, *, meminfo: str = MEMINFO,
                  cgroup_root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> Optional[int]:
    """Bytes the workers and buffers of the tuned stages may hold: the :func:`set_budget` value,
    else ``fraction`` of :func:`available_memory` (None when that is unknown)."""
    override = _Override.memory_bytes
    if override is not None:
        return override
    available = available_memory(meminfo=meminfo, cgroup_root=cgroup_root, proc_cgroup=proc_cgroup)
    return None if available is None else int(available * fraction)


# ------------------------------------------------------------------------ what a process uses

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS: Optional[int] = None


def process_memory(pid: int, proc_root: str = "/proc") -> Optional[int]:
    """Bytes of memory process ``pid`` holds of its own: resident pages that are not file or
    shared-memory pages (``/proc/<pid>/statm``: resident minus shared). Pages a forked worker
    still shares with its parent count too (an upper bound). None when unreadable."""
    fields = (_read(os.path.join(proc_root, str(pid), "statm")) or "").split()
    try:
        return max(0, int(fields[1]) - int(fields[2])) * _PAGE
    except (ValueError, IndexError):
        return None


def process_private_memory(pid: int, proc_root: str = "/proc") -> Optional[int]:
    """Bytes that only process ``pid`` holds (its unique set size: ``Private_Clean`` +
    ``Private_Dirty`` of ``/proc/<pid>/smaps_rollup``): what ending it would free, without the
    pages a forked worker still shares with its parent. Slower to read than
    :func:`process_memory` (the kernel walks the process' pages); None when unreadable."""
    total = None
    for line in (_read(os.path.join(proc_root, str(pid), "smaps_rollup")) or "").splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            try:
                total = (total or 0) + int(line.split()[1]) * 1024
            except (ValueError, IndexError):
                return None
    return total


def process_anon_share(pid: int, proc_root: str = "/proc") -> Optional[int]:
    """Bytes of anonymous memory process ``pid`` accounts for, a page it shares with ``n - 1``
    other processes counted ``1/n`` (``Pss_Anon`` of ``/proc/<pid>/smaps_rollup``; on kernels
    before 5.9, which lack it, the private pages: :func:`process_private_memory`). Summed over
    forked workers it counts what they hold beyond their parent at most once, and the pages they
    still share with it in part: an upper bound of what they cost, also when the parent has
    since rewritten pages the workers keep (copy-on-write), which only their shares count. None
    when unreadable.

    Example::

        workers = sum(process_anon_share(pid) or 0 for pid in pool.pids)
    """
    for line in (_read(os.path.join(proc_root, str(pid), "smaps_rollup")) or "").splitlines():
        if line.startswith("Pss_Anon:"):
            try:
                return int(line.split()[1]) * 1024
            except (ValueError, IndexError):
                return None
    return process_private_memory(pid, proc_root)


def _stat_cpu_seconds(path: str) -> Optional[float]:
    global _TICKS
    text = _read(path)
    if not text:
        return None
    try:
        fields = text.rsplit(")", 1)[1].split()
        if _TICKS is None:
            _TICKS = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / _TICKS       # utime + stime
    except (ValueError, IndexError, AttributeError, OSError):
        return None


def process_cpu_seconds(pid: int, proc_root: str = "/proc") -> Optional[float]:
    """User + system CPU seconds of process ``pid`` (``/proc/<pid>/stat``); None when unreadable."""
    return _stat_cpu_seconds(os.path.join(proc_root, str(pid), "stat"))


def thread_cpu_seconds(native_id: int, proc_root: str = "/proc") -> Optional[float]:
    """User + system CPU seconds of thread ``native_id`` of this process
    (``threading.get_native_id()`` in that thread); None when unreadable."""
    return _stat_cpu_seconds(os.path.join(proc_root, "self", "task", str(native_id), "stat"))


def _schedstat(path: str) -> Optional[Tuple[float, float]]:
    """``(seconds on a CPU, seconds runnable but waiting for a CPU)`` of one task, from its
    ``schedstat`` (nanoseconds); None when unreadable. (``os.read``: a third of ``open()``'s cost,
    read for every worker at every decision of the controller.)"""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            fields = os.read(fd, 128).split()
        finally:
            os.close(fd)
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def process_schedstat(pid: int, proc_root: str = "/proc") -> Optional[Tuple[float, float]]:
    """``(CPU seconds, run-queue seconds)`` of process ``pid``, summed over its threads, to the
    nanosecond (``/proc/<pid>/task/*/schedstat``): the time on a CPU and the time its threads
    waited, runnable, for a CPU held by other work (a worker's main thread also waits while the
    thread it hands the GIL to waits for a CPU); None when unreadable."""
    task_dir = os.path.join(proc_root, str(pid), "task")
    try:
        tasks = os.listdir(task_dir)
    except OSError:
        return None
    cpu = queued = 0.0
    found = False
    for task in tasks:
        one = _schedstat(os.path.join(task_dir, task, "schedstat"))
        if one is not None:
            cpu, queued, found = cpu + one[0], queued + one[1], True
    return (cpu, queued) if found else None


def thread_schedstat(native_id: int, proc_root: str = "/proc") -> Optional[Tuple[float, float]]:
    """``(CPU seconds, run-queue seconds)`` of thread ``native_id`` of this process, to the
    nanosecond (``/proc/self/task/<id>/schedstat``); None when unreadable."""
    return _schedstat(os.path.join(proc_root, "self", "task", str(native_id), "schedstat"))


# ------------------------------------------------------------------ what a worker costs: its CPU share

#: The least share of a CPU a worker is charged: at most 8 workers per CPU, however little they use.
MIN_CPU_SHARE = 0.125


def cpu_share(cpu_seconds: float, busy_seconds: float, runqueue_seconds: float = 0.0) -> Optional[float]:
    """The share of its working time a worker spends on a CPU, between 0 and 1: ``cpu_seconds``
    over ``busy_seconds`` (the wall time it worked) less ``runqueue_seconds`` (the time it was
    runnable and waited for a CPU: other programs' load, not the work's own waiting). None when
    it did not work.

    Example::

        cpu_share(0.3, 0.9)           # 1/3: it read for 6 ms and decoded for 3 ms, say
        cpu_share(0.3, 0.6, 0.3)      # 1.0: all its time off a CPU was spent waiting for one
    """
    if not busy_seconds > 0:
        return None
    working = max(busy_seconds - max(runqueue_seconds, 0.0), cpu_seconds, 1e-9)
    return max(0.0, min(1.0, cpu_seconds / working))


def cpu_charge(workers: float, share: Optional[float]) -> float:
    """CPUs that ``workers`` workers of CPU ``share`` take from the budget: each its share (at
    least :data:`MIN_CPU_SHARE`); a worker whose share was not measured yet takes one CPU."""
    return workers * (1.0 if share is None else max(MIN_CPU_SHARE, share))


def workers_within(cpus: float, share: Optional[float]) -> int:
    """The most workers of CPU ``share`` that ``cpus`` CPUs keep busy: ``cpus / share`` to the
    nearest worker (their shares add up to at most half a share more than ``cpus``: workers that
    wait do not all want a CPU at once, and a share read a little high does not cost a worker);
    one per CPU while the share is not known.

    Example::

        workers_within(2, 1.0)        # 2: CPU-bound work, one per CPU
        workers_within(2, 1 / 3)      # 6: each waits for two thirds of its time
        workers_within(2, 0.62)       # 3: 5 ms of CPU and 3 ms of waiting each
    """
    per_worker = cpu_charge(1, share)
    return max(0, int(math.floor(cpus / per_worker + 0.5 + 1e-9)))


def closed_loop_rate(workers: int, wait: float, cpu: float, cpus: float) -> float:
    """Results per second of ``workers`` workers that each wait ``wait`` seconds (I/O, a sleep)
    and then need ``cpu`` seconds on one of ``cpus`` CPUs, in turn: the machine-repair queue
    (exponential times: the workers' waits do not line up, so some CPUs idle while others have
    a queue). It approaches ``cpus / cpu`` only with more workers than the shares add up to.

    Example::

        closed_loop_rate(6, 0.006, 0.003, 2)      # 563/s: 6 workers of share 1/3 on 2 CPUs
        closed_loop_rate(12, 0.006, 0.003, 2)     # 666/s, of the 667/s the CPUs allow
    """
    if cpu <= 0:
        return math.inf if wait <= 0 else workers / wait
    if wait <= cpu * 1e-6:
        return min(workers, cpus) / cpu
    weight, total, served = 1.0, 1.0, 0.0    # of the states "j workers at the CPUs", relative
    for j in range(1, workers + 1):
        weight *= (workers - j + 1) / wait * cpu / min(j, cpus)
        total += weight
        served += weight * min(j, cpus)
        if total > 1e250:                        # rescale: the ratio is what counts
            weight, total, served = weight * 1e-250, total * 1e-250, served * 1e-250
    return served / total / cpu


def workers_to_fill(cpus: float, share: float, goal: float = 0.95, most: int = 64) -> int:
    """The fewest workers of CPU ``share`` (on a CPU that share of their working time, waiting
    the rest) that keep ``goal`` of ``cpus`` CPUs busy by :func:`closed_loop_rate` (their waits
    do not line up, so they need more than their shares add up to); at most ``most``.

    Example::

        workers_to_fill(2, 1 / 3)        # 8: workers_within(2, 1 / 3) is 6, which keep 84% busy
        workers_to_fill(2, 1.0)          # 2
    """
    share = min(1.0, max(MIN_CPU_SHARE, share))
    return workers_for_rate(goal * cpus / share, 1.0 - share, share, cpus, most)


def workers_for_rate(rate: float, wait: float, cpu: float, cpus: float, most: int) -> int:
    """The fewest workers (at most ``most``) that deliver ``rate`` results/s by
    :func:`closed_loop_rate`, each waiting ``wait`` seconds and computing ``cpu`` seconds per
    result on ``cpus`` CPUs.

    Example::

        workers_for_rate(600, 0.006, 0.003, 2, 64)    # 7
    """
    for workers in range(1, most + 1):
        if closed_loop_rate(workers, wait, cpu, cpus) >= rate:
            return workers
    return most
