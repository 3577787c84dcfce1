"""A stage whose numbers come from a model, on a virtual clock: the controller of "auto" stages
is checked on it without timing noise (test_autoscale.py, test_autoscale_cpu_share.py)."""
from inputpipe.dataflow._parallel.resizable import ResizableStage


class ModelStage(ResizableStage):
    """Each worker maps ``per_worker`` datapoints/s, at most ``ceiling``/s come out whatever the
    workers (e.g. the GIL), the consumer takes at most ``consumer``/s. A worker's working time is
    ``cpu_share`` on a CPU and the rest waiting (I/O); ``runqueue_share`` of its busy time it
    waits for a CPU held by other programs (counted as busy, as a real worker's is). ``kind``:
    ``"threads"`` or ``"processes"``. The numbers may be changed between runs (a phase change)."""

    def __init__(self, settings, per_worker, consumer, ceiling=float("inf"), clock=None, cpu_share=0.01,
                 runqueue_share=0.0, kind="threads"):
        self._worker_kind = kind
        self.workers = self._init_workers("ModelStage", "num_thread", settings)
        self.per_worker, self.consumer, self.ceiling = per_worker, consumer, ceiling
        self.cpu_share, self.runqueue_share = cpu_share, runqueue_share
        self.busy = self.items = self.cpu = self.runqueue = 0.0
        self.clock = clock
        clock.stages.append(self)
        self.changed_at = []
        self.workers = self._start_workers(self.workers)
        self._begin_scaling()

    def _active_workers(self):
        return self.workers

    def close(self):
        self._end_scaling()

    def _grow_one(self):
        self.workers += 1
        return True

    def _shrink_one(self):
        self.workers -= 1
        return True

    def _scaling_counters(self):
        return self.busy, self.items

    def _scaling_cpu(self):
        return self.cpu, self.runqueue

    def run_for(self, seconds, step=0.05):
        """Advance the virtual clock, running the controller whenever it is due."""
        run_together([self], seconds, step)

    def _work(self, step):
        delivered = min(self.workers * self.per_worker, self.ceiling, self.consumer)
        self.items += delivered * step
        busy = (self.workers if delivered == self.ceiling else delivered / self.per_worker) * step
        self.busy += busy
        self.runqueue += busy * self.runqueue_share
        # each result takes the same CPU however many workers contend (for the GIL, say)
        self.cpu += delivered * step * (1.0 - self.runqueue_share) * self.cpu_share / self.per_worker
        self._waited += step * (1.0 - delivered / self.consumer)

    def _decide_if_due(self):
        if self.clock.now >= self._scaling.due:
            changes = len(self.worker_count_history())
            self._scaling.run()
            if len(self.worker_count_history()) > changes:
                self.changed_at.append(self.clock.now)

    def counts(self):
        return [change.workers for change in self.worker_count_history()]


def run_together(stages, seconds, step=0.05):
    """Run ``stages`` side by side on their (shared) virtual clock for ``seconds``."""
    clock = stages[0].clock
    for _ in range(int(round(seconds / step))):
        for stage in stages:
            stage._work(step)
        clock.now += step
        for stage in stages:
            stage._decide_if_due()


class VirtualClock:
    """The time of the model, and its machine: ``machine_cpus`` (None: the idle CPUs are not
    known, as on a system without ``/proc/stat``) of which ``other_load`` CPUs are used by other
    programs; the model stages use their own CPU."""

    def __init__(self):
        self.now = 1000.0
        self.stages = []
        self.machine_cpus = None
        self.other_load = 0.0

    def monotonic(self):
        return self.now

    def cpu_seconds(self):
        return sum(stage.cpu for stage in self.stages) + self.other_load * self.now


class ModelIdle:
    """The controller's idle-CPU reader on the model's machine."""

    def __init__(self, clock):
        self.clock = clock
        self.last = (clock.now, clock.cpu_seconds())

    def sample(self):
        now = (self.clock.now, self.clock.cpu_seconds())
        (t0, cpu0), (t1, cpu1), self.last = self.last, now, now
        if self.clock.machine_cpus is None or not t1 > t0:
            return None
        return max(0.0, self.clock.machine_cpus - (cpu1 - cpu0) / (t1 - t0))


def virtual_clock(monkeypatch):
    """For a test module's ``clock`` fixture: the controller reads the virtual clock, and every
    model stage made on it is closed at the end."""
    from inputpipe.dataflow import autoscale
    from inputpipe.dataflow._parallel import autoscale_settings

    virtual = VirtualClock()
    monkeypatch.setattr(autoscale, "_monotonic", virtual.monotonic)
    monkeypatch.setattr(autoscale_settings, "_monotonic", virtual.monotonic)
    monkeypatch.setattr(autoscale, "IdleCpus", lambda: ModelIdle(virtual))
    yield virtual
    for stage in virtual.stages:
        stage.close()
