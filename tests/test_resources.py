"""The budget readers: affinity, cgroup v1 and v2 CPU quotas and memory limits, /proc/meminfo,
statm and stat, each on files written here (the system's own files are not assumed)."""
import os

import pytest

from inputpipe.utils import resources
from inputpipe.utils.compat import native_thread_id


@pytest.fixture(autouse=True)
def no_override():
    resources.set_budget()
    yield
    resources.set_budget()


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def v2_tree(tmp_path, cpu_max=None, parent_cpu_max=None, memory=None):
    """A cgroup v2 mount with this process in /app/job (the parent /app may have limits too)."""
    root = tmp_path / "cgroup"
    write(root / "cgroup.controllers", "cpu memory")
    (root / "app" / "job").mkdir(parents=True)
    if cpu_max is not None:
        write(root / "app" / "job" / "cpu.max", cpu_max)
    if parent_cpu_max is not None:
        write(root / "app" / "cpu.max", parent_cpu_max)
    if memory is not None:
        write(root / "app" / "job" / "memory.max", memory[0])
        write(root / "app" / "job" / "memory.current", memory[1])
    return str(root), write(tmp_path / "self_cgroup", "0::/app/job\n")


def v1_tree(tmp_path, quota, period, memory=None, in_container=False):
    root = tmp_path / "cgroup"
    job = root / "cpu,cpuacct" / ("" if in_container else "docker/abc")
    write(job / "cpu.cfs_quota_us", quota)
    write(job / "cpu.cfs_period_us", period)
    if memory is not None:
        mem = root / "memory" / ("" if in_container else "docker/abc")
        write(mem / "memory.limit_in_bytes", memory[0])
        write(mem / "memory.usage_in_bytes", memory[1])
    own = write(tmp_path / "self_cgroup", "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/\n")
    return str(root), own


def test_affinity_counts_the_cpus_of_the_mask():
    assert resources.affinity_cpu_count({0, 3, 5}) == 3
    assert resources.affinity_cpu_count() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("cpu_max,parent,expected", [
    ("250000 100000", None, 2.5),
    ("max 100000", None, None),
    ("50000 100000", "max 100000", 0.5),
    ("max 100000", "300000 100000", 3.0),           # a parent's quota limits its children
    ("400000 100000", "150000 100000", 1.5),
])
def test_cgroup_v2_cpu_max_of_the_cgroup_and_its_parents(tmp_path, cpu_max, parent, expected):
    root, own = v2_tree(tmp_path, cpu_max, parent)
    assert resources.cgroup_cpu_limit(root, own) == expected


def test_cgroup_v1_quota_and_period(tmp_path):
    root, own = v1_tree(tmp_path, "150000", "100000")
    assert resources.cgroup_cpu_limit(root, own) == 1.5
    assert resources.cpu_budget(affinity=range(8), cgroup_root=root, proc_cgroup=own) == 1
    assert resources.available_cpus(affinity=range(8), cgroup_root=root, proc_cgroup=own) == 1.5


def test_cgroup_v1_no_quota_and_a_container_that_sees_its_cgroup_as_the_root(tmp_path):
    root, own = v1_tree(tmp_path, "-1", "100000")
    assert resources.cgroup_cpu_limit(root, own) is None
    root, own = v1_tree(tmp_path / "c", "200000", "100000", in_container=True)
    assert resources.cgroup_cpu_limit(root, own) == 2.0


def test_cpu_budget_is_the_lower_of_affinity_and_quota_rounded_down_and_at_least_one(tmp_path):
    root, own = v2_tree(tmp_path, "350000 100000")
    assert resources.cpu_budget(affinity=range(8), cgroup_root=root, proc_cgroup=own) == 3
    assert resources.cpu_budget(affinity=range(2), cgroup_root=root, proc_cgroup=own) == 2
    root, own = v2_tree(tmp_path / "small", "20000 100000")
    assert resources.cpu_budget(affinity=range(8), cgroup_root=root, proc_cgroup=own) == 1


def test_no_cgroup_files_at_all_means_no_quota(tmp_path):
    assert resources.cgroup_cpu_limit(str(tmp_path / "none"), str(tmp_path / "missing")) is None
    assert resources.cgroup_memory_room(str(tmp_path / "none"), str(tmp_path / "missing")) is None
    assert resources.cpu_budget(affinity=range(3), cgroup_root=str(tmp_path), proc_cgroup=str(tmp_path / "x")) == 3


def test_meminfo_available(tmp_path):
    meminfo = write(tmp_path / "meminfo", "MemTotal:       16000000 kB\nMemFree:  100 kB\n"
                                          "MemAvailable:    8000000 kB\n")
    assert resources.meminfo_available(meminfo) == 8000000 * 1024
    assert resources.meminfo_available(write(tmp_path / "old", "MemTotal: 5 kB\n")) is None


def test_memory_budget_is_half_of_the_lower_of_meminfo_and_the_cgroup_room(tmp_path):
    meminfo = write(tmp_path / "meminfo", "MemAvailable:    8000000 kB\n")
    root, own = v2_tree(tmp_path, memory=("1000000000", "400000000"))
    assert resources.cgroup_memory_room(root, own) == 600000000
    assert resources.memory_budget(meminfo=meminfo, cgroup_root=root, proc_cgroup=own) == 300000000
    root, own = v2_tree(tmp_path / "nolimit", memory=("max", "400000000"))
    assert resources.memory_budget(meminfo=meminfo, cgroup_root=root, proc_cgroup=own) == 4000000 * 1024
    root, own = v1_tree(tmp_path / "v1", "-1", "100000", memory=("2000000000", "500000000"))
    assert resources.memory_budget(0.25, meminfo=meminfo, cgroup_root=root, proc_cgroup=own) == 375000000
    root, own = v1_tree(tmp_path / "v1nolimit", "-1", "100000", memory=("9223372036854771712", "5"))
    assert resources.cgroup_memory_room(root, own) is None


def test_set_budget_overrides_and_resets(tmp_path):
    resources.set_budget(cpus=1, memory_bytes=1000)
    assert resources.budget() == resources.Budget(1, 1000)
    assert resources.cpu_budget(affinity=range(8)) == 1
    resources.set_budget()
    assert resources.cpu_budget(affinity=range(8), cgroup_root=str(tmp_path), proc_cgroup=str(tmp_path / "x")) == 8
    with pytest.raises(ValueError, match="set_budget: cpus must be an int >= 1 or None, got 0"):
        resources.set_budget(cpus=0)
    with pytest.raises(ValueError, match="set_budget: memory_bytes must be an int >= 1 or None, got 1.5"):
        resources.set_budget(memory_bytes=1.5)


def test_process_memory_and_cpu_from_statm_and_stat(tmp_path):
    write(tmp_path / "42" / "statm", "5000 3000 1000 10 0 200 0\n")
    write(tmp_path / "42" / "stat", "42 (a name (with) spaces) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 "
                                    "1 0 100 1000000 300 18446744073709551615\n")
    assert resources.process_memory(42, str(tmp_path)) == 2000 * os.sysconf("SC_PAGE_SIZE")
    assert resources.process_cpu_seconds(42, str(tmp_path)) == 300 / os.sysconf("SC_CLK_TCK")
    assert resources.process_memory(43, str(tmp_path)) is None
    assert resources.process_cpu_seconds(43, str(tmp_path)) is None
    write(tmp_path / "42" / "smaps_rollup", "55d-7ff ---p 00000000 00:00 0  [rollup]\nRss:  900 kB\n"
                                            "Private_Clean:   80 kB\nPrivate_Dirty:  112 kB\nShared_Clean: 700 kB\n")
    assert resources.process_private_memory(42, str(tmp_path)) == 192 * 1024
    assert resources.process_private_memory(43, str(tmp_path)) is None
    assert resources.process_memory(os.getpid()) > 0
    assert resources.process_private_memory(os.getpid()) > 0


def test_the_anonymous_share_reads_pss_anon_and_falls_back_to_the_private_pages(tmp_path):
    write(tmp_path / "7" / "smaps_rollup", "55d-7ff ---p 00000000 00:00 0  [rollup]\nRss:  900 kB\nPss:  700 kB\n"
          "Pss_Anon:  300 kB\nPss_File:  400 kB\nPrivate_Clean:  10 kB\nPrivate_Dirty:  20 kB\n")
    assert resources.process_anon_share(7, str(tmp_path)) == 300 * 1024
    write(tmp_path / "8" / "smaps_rollup", "Rss:  900 kB\nPrivate_Clean:  10 kB\nPrivate_Dirty:  20 kB\n")  # before 5.9
    assert resources.process_anon_share(8, str(tmp_path)) == 30 * 1024
    assert resources.process_anon_share(9, str(tmp_path)) is None
    assert resources.process_anon_share(os.getpid()) > 0
    assert resources.thread_cpu_seconds(native_thread_id()) >= 0.0
