"""The idle-CPU reader of the controller: /proc/stat over the CPUs of the affinity mask, and the
usage of the cgroup that sets a CPU quota (v2 and v1), each on files written here."""
import os

from inputpipe.utils.cpu_idle import IdleCpus, busy_cpu_seconds, cgroup_quota_usage

from test_resources import v1_tree, v2_tree, write

TICKS = os.sysconf("SC_CLK_TCK")


def proc_stat(path, per_cpu):
    """``per_cpu``: {cpu: (user, system, idle, iowait, steal)} in seconds."""
    lines = ["cpu  1 2 3 4 5 6 7 8 0 0"]
    for cpu, (user, system, idle, iowait, steal) in sorted(per_cpu.items()):
        ticks = [int(round(v * TICKS)) for v in (user, 0, system, idle, iowait, 0, 0, steal)]
        lines.append("cpu{} {} 0 0".format(cpu, " ".join(map(str, ticks))))
    write(path, "\n".join(lines + ["intr 12345", "ctxt 999"]) + "\n")
    return str(path)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_busy_seconds_count_steal_and_leave_out_idle_and_iowait(tmp_path):
    path = proc_stat(tmp_path / "stat", {0: (3.0, 1.0, 50.0, 2.0, 0.5), 1: (1.0, 1.0, 9.0, 0.0, 0.0), 2: (7, 0, 0, 0, 0)})
    assert busy_cpu_seconds([0, 1], path) == 6.5
    assert busy_cpu_seconds([0, 5], path) is None          # a CPU of the mask is not listed
    assert busy_cpu_seconds([0], str(tmp_path / "missing")) is None


def test_idle_cpus_over_an_interval_on_the_cpus_of_the_mask(tmp_path):
    path, clock = tmp_path / "stat", Clock()
    proc_stat(path, {0: (10, 0, 10, 0, 0), 1: (10, 0, 10, 0, 0), 2: (0, 0, 0, 0, 0)})
    idle = IdleCpus(affinity=[0, 1], proc_stat=str(path), cgroup_root=str(tmp_path / "none"),
                    proc_cgroup=str(tmp_path / "none"), clock=clock)
    clock.now += 2.0
    # over 2 s: CPU 0 busy 2 s (user 1.5 + steal 0.5), CPU 1 busy 0.5 s; CPU 2 (outside the mask) busy
    proc_stat(path, {0: (11.5, 0, 10, 0, 0.5), 1: (10, 0.5, 11.5, 0, 0), 2: (2, 0, 0, 0, 0)})
    assert abs(idle.sample() - 0.75) < 1e-9
    clock.now += 1.0                                           # nothing ran since
    proc_stat(path, {0: (11.5, 0, 11, 0, 0.5), 1: (10, 0.5, 12.5, 0, 0), 2: (3, 0, 0, 0, 0)})
    assert abs(idle.sample() - 2.0) < 1e-9
    assert idle.sample() is None                               # no time passed


def test_a_window_shorter_than_two_ticks_is_unknown_and_counts_into_the_next(tmp_path):
    path, clock = tmp_path / "stat", Clock()
    proc_stat(path, {0: (10, 0, 10, 0, 0), 1: (10, 0, 10, 0, 0)})
    idle = IdleCpus(affinity=[0, 1], proc_stat=str(path), cgroup_root=str(tmp_path / "none"),
                    proc_cgroup=str(tmp_path / "none"), clock=clock)
    clock.now += 1.5 / TICKS
    proc_stat(path, {0: (10 + 1.0 / TICKS, 0, 10, 0, 0), 1: (10, 0, 10, 0, 0)})   # one tick more: noise
    assert idle.sample() is None
    clock.now = 101.0                       # 1 s after the start: the next sample covers all of it
    proc_stat(path, {0: (10.5, 0, 10.5, 0, 0), 1: (10, 0, 11, 0, 0)})
    assert abs(idle.sample() - 1.5) < 1e-9


def test_a_cgroup_quota_lowers_the_idle_cpus_to_what_it_leaves_v2(tmp_path):
    root, own = v2_tree(tmp_path, "max 100000", "150000 100000")         # the parent sets 1.5 CPUs
    write(tmp_path / "cgroup" / "app" / "cpu.stat", "usage_usec 1000000\nuser_usec 1\n")
    quota, reader = cgroup_quota_usage(root, own)
    assert quota == 1.5 and reader() == 1.0
    path, clock = tmp_path / "stat", Clock()
    proc_stat(path, {0: (0, 0, 0, 0, 0), 1: (0, 0, 0, 0, 0)})
    idle = IdleCpus(affinity=[0, 1], proc_stat=str(path), cgroup_root=root, proc_cgroup=own, clock=clock)
    clock.now += 1.0
    proc_stat(path, {0: (0.4, 0, 0.6, 0, 0), 1: (0.4, 0, 0.6, 0, 0)})    # the machine: 1.2 CPUs idle
    write(tmp_path / "cgroup" / "app" / "cpu.stat", "usage_usec 1800000\n")   # the cgroup used 0.8 of 1.5
    assert abs(idle.sample() - 0.7) < 1e-9


def test_a_v1_quota_reads_cpuacct_usage_and_no_quota_means_the_machine_alone(tmp_path):
    root, own = v1_tree(tmp_path, "200000", "100000")
    write(tmp_path / "cgroup" / "cpu,cpuacct" / "docker" / "abc" / "cpuacct.usage", "3000000000")
    quota, reader = cgroup_quota_usage(root, own)
    assert quota == 2.0 and reader() == 3.0
    root, own = v1_tree(tmp_path / "none", "-1", "100000")
    assert cgroup_quota_usage(root, own) is None


def test_the_system_files_read_between_zero_and_the_cpus_of_the_mask():
    idle = IdleCpus()
    sum(range(200000))
    found = idle.sample()
    assert found is None or 0.0 <= found <= len(os.sched_getaffinity(0))
