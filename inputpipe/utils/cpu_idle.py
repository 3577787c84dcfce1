"""CPUs left idle: how much of the CPUs this process may run on went unused over an interval.

The controller of ``"auto"`` stages grows a stage past what the workers' CPU shares say the
budget holds while this says CPUs are idle (workers that wait do not wait at the same moments:
a count whose shares add up to the CPUs leaves them idle part of the time). Read from
``/proc/stat`` for the CPUs of the process' affinity mask (time not spent in ``idle`` or
``iowait``; ``steal``, the time a hypervisor gave to others, counts as used), and, under a cgroup
CPU quota, from the usage of the cgroup that sets it (v2 ``cpu.stat`` ``usage_usec``, v1
``cpuacct.usage``): the lower of the two. None where neither can be read.

Example::

    idle = IdleCpus()
    ...                          # an interval of work
    idle.sample()                # e.g. 0.4: of the 2 CPUs, 0.4 went unused since the last sample
"""
import functools
import os
import time
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from .resources import CGROUP_ROOT, PROC_CGROUP, _cgroup_paths, _levels, _read, _v1_cpu_limit, _v1_mount, \
    _v2_cpu_limit, _v2_mount

__all__ = ["IdleCpus", "busy_cpu_seconds", "cgroup_quota_usage"]

PROC_STAT = "/proc/stat"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# /proc/stat's columns after the name: user nice system idle iowait irq softirq steal (guest is in user)
_IDLE_COLUMNS = (3, 4)
_USED_COLUMNS = (0, 1, 2, 5, 6, 7)
#: /proc/stat counts in ticks: over a shorter window one tick more or less is the whole answer
#: (a controller deciding at every datapoint read the file thousands of times a second for that).
_SHORTEST_WINDOW_SECONDS = 2.0 / _TICKS


def busy_cpu_seconds(cpus: Iterable[int], proc_stat: str = PROC_STAT) -> Optional[float]:
    """CPU seconds the listed CPUs spent on any work since boot (``/proc/stat``); None when a
    listed CPU is missing or the file is unreadable."""
    wanted = {"cpu{}".format(c) for c in cpus}
    found: Dict[str, float] = {}
    for line in (_read(proc_stat) or "").splitlines():
        fields = line.split()
        if fields and fields[0] in wanted:
            try:
                values = [int(v) for v in fields[1:9]]
            except ValueError:
                return None
            values += [0] * (8 - len(values))
            found[fields[0]] = sum(values[i] for i in _USED_COLUMNS) / _TICKS
    if not wanted or set(found) != wanted:
        return None
    return sum(found.values())


def _v2_usage(directory: str) -> Optional[float]:
    for line in (_read(os.path.join(directory, "cpu.stat")) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == "usage_usec":
            try:
                return int(value) / 1e6
            except ValueError:
                return None
    return None


def _v1_usage(path: Optional[str]) -> Optional[float]:
    try:
        return int(_read(path) or "") / 1e9 if path else None
    except ValueError:
        return None


def cgroup_quota_usage(cgroup_root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP
                       ) -> Optional[Tuple[float, Callable[[], Optional[float]]]]:
    """``(quota in CPUs, reader of the CPU seconds used under it)`` of the cgroup that sets the
    lowest CPU quota of this process (itself or a parent; v2 or v1); None without a quota."""
    best: Optional[Tuple[float, Callable[[], Optional[float]]]] = None
    for controllers, path in _cgroup_paths(proc_cgroup):
        levels: List[Tuple[Optional[float], Callable[[], Optional[float]]]] = []
        if controllers == "":
            mount = _v2_mount(cgroup_root)
            if mount is not None:
                levels = [(_v2_cpu_limit(_read(os.path.join(d, "cpu.max"))), functools.partial(_v2_usage, d))
                          for d in _levels(mount, path)]
        elif "cpu" in controllers.split(","):
            mount = _v1_mount(cgroup_root, "cpu", controllers)
            accounting = _v1_mount(cgroup_root, "cpuacct", controllers)
            if mount is not None:
                for d in _levels(mount, path):
                    usage = os.path.join(accounting, os.path.relpath(d, mount), "cpuacct.usage") \
                        if accounting is not None else None
                    levels.append((_v1_cpu_limit(_read(os.path.join(d, "cpu.cfs_quota_us")),
                                                 _read(os.path.join(d, "cpu.cfs_period_us"))),
                                   functools.partial(_v1_usage, usage)))
        for limit, reader in levels:
            if limit is not None and (best is None or limit < best[0]) and reader() is not None:
                best = (limit, reader)
    return best


class IdleCpus:
    """The CPUs of this process' affinity mask (lowered by a cgroup quota) left unused between
    two calls of :meth:`sample` (see the module doc).

    Example::

        idle = IdleCpus()
        time.sleep(0.5)
        idle.sample()                # CPUs unused over those 0.5 s (None: not readable here)
    """

    def __init__(self, affinity: Optional[Iterable[int]] = None, proc_stat: str = PROC_STAT,
                 cgroup_root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP,
                 clock: Callable[[], float] = time.monotonic):
        if affinity is None:
            affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
        self._cpus = sorted(affinity)
        self._proc_stat = proc_stat
        self._quota = cgroup_quota_usage(cgroup_root, proc_cgroup)
        self._clock = clock
        self._last = self._read()

    def _read(self) -> Tuple[float, Optional[float], Optional[float]]:
        quota_used = self._quota[1]() if self._quota is not None else None
        return self._clock(), busy_cpu_seconds(self._cpus, self._proc_stat), quota_used

    def sample(self) -> Optional[float]:
        """CPUs left unused since the last sample (or since it was made), between 0 and the
        CPUs it may use; None when unknown, also over a window shorter than the counters' ticks
        can measure (then nothing is read, and the next sample covers this window too)."""
        if self._clock() - self._last[0] < _SHORTEST_WINDOW_SECONDS:
            return None
        now = self._read()
        (t0, busy0, quota0), (t1, busy1, quota1) = self._last, now
        self._last = now
        seconds = t1 - t0
        if not seconds > 0:
            return None
        found: List[float] = []
        if busy0 is not None and busy1 is not None:
            found.append(len(self._cpus) - max(0.0, busy1 - busy0) / seconds)
        if self._quota is not None and quota0 is not None and quota1 is not None:
            found.append(self._quota[0] - max(0.0, quota1 - quota0) / seconds)
        return max(0.0, min(found)) if found else None
