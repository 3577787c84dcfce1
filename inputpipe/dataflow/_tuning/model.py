"""The tuner's model of a chain: what each unit costs per output datapoint (measured with every
map in the consumer's thread), the throughput of a configuration (the lowest of the bounds set
by the consumer's thread, the CPUs, the workers of each parallel stage and the trainer), and the
choice of a configuration. Used by :mod:`inputpipe.dataflow.tuning`; private.

Both forms of a parallel map are modelled and rated, and the faster is chosen:

- **threads** share the process' GIL: the part of the map's work that holds it (measured by
  :mod:`.gil`) runs one call at a time, with the consumer's own Python work, so it counts
  in the consumer thread's bound; the rest (waits, code that releases the GIL) runs side by side,
  and each wait ends with taking the GIL back (:func:`regain_seconds`);
- **processes** are as many as reach the rate on the CPUs the rest of the chain leaves them, by
  a queue model of workers that wait and compute in turn (:func:`closed_loop_rate`: processes
  that wait outnumber the CPUs their shares fill), and pay for moving each datapoint and
  its result through the transport, measured (:mod:`.transport`): the consumer's CPU per
  datapoint in its thread, the worker's in the worker.

Example::

    costs = measure(report, chain, borrowed, timed, names, source_name, moves, problems)
    forms, estimate = choose(chain, costs, cpus=2, consumer_rate=None)
"""
import itertools
import math
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ...utils.compat import prod
from ...utils.resources import closed_loop_rate, workers_for_rate
from .._parallel.autoscale_settings import WORKERS_PER_CPU
from .chain import BATCH, PROCESSES, SERIAL, THREADS, WORK, Borrowed, Chain, Form, TimedFunc, Unit
from .transport import Transport

#: The consumer's time per datapoint that goes through a thread map (queues; ~8 us measured).
THREAD_MESSAGE_SECONDS = 10e-6
#: Where moving datapoints through a worker process was not measured: the consumer's time per
#: message to and from a worker process (~40 us measured for small ones), and per byte of the
#: datapoint sent and of the result received (~0.65 ns measured through a pipe); the worker's
#: side is taken as the same.
PROCESS_MESSAGE_SECONDS = 40e-6
PROCESS_SECONDS_PER_BYTE = 0.7e-9
#: The consumer's time per datapoint of a serial map beyond its function (a copy and a call).
MAP_STEP_SECONDS = 1e-6
#: Threads of one map at most (more thrash on the GIL for little gain).
MAX_THREADS = 32
MAX_PROCESSES = 64
#: Workers chosen for about this much more than the target rate (a margin for jitter).
HEADROOM = 1.1
#: Processes are sized for this share of the rate the CPUs allow them when the CPUs are what
#: limits (the queue model reaches all of it only with endless workers).
QUEUE_GOAL = 0.98
#: Worker processes of a CPU share at least this are sized as CPU-bound work (one per CPU): a busy
#: machine leaves a few percent of a CPU-bound map off a CPU (GIL hand-overs, timer reads), which
#: read as waiting would add a process that only contends for the CPUs.
CPU_BOUND_SHARE = 0.9
#: Configurations rated at most (the cheapest maps keep their form beyond that).
MAX_COMBINATIONS = 4096
#: A change must make the model's rate this much higher to be proposed.
GAIN_NEEDED = 1.05
#: When the CPUs' bound is within this factor of the lowest bound, the CPUs are named as the limit.
CPU_BOUND_NEAR = 1.15
#: Datapoints from this many bytes up are batched in the workers when a BatchData follows.
LARGE_DATAPOINT_BYTES = 64 << 10
# Limits
LIMIT_CPUS, LIMIT_SOURCE, LIMIT_STAGE, LIMIT_CONSUMER, LIMIT_WORKERS = "cpus", "source", "stage", "consumer", "workers"


@dataclass
class UnitCost:
    """What one unit costs per OUTPUT datapoint of the chain, measured with every map serial."""

    own: float = 0.0          # the consumer thread's time in the stage (as measured, serial)
    own_cpu: float = 0.0      # of which CPU (estimated: the function's CPU plus the stage's overhead)
    work: float = 0.0         # the map function's time without waits for a CPU (work units)
    cpu: float = 0.0          # the map function's CPU time (work units)
    gil: float = 0.0          # of its time, the part that held the GIL (work units)
    calls: float = 0.0        # calls of the function (datapoints into the unit)
    in_bytes: float = 0.0     # per call
    out_bytes: float = 0.0    # per call
    move: Optional[Transport] = None        # per call: moving it through a worker process (measured)
    gil_measured: bool = False              # the GIL part was measured (else taken as all the CPU)
    no_processes: Optional[str] = None      # why the map cannot run in processes


@dataclass
class Costs:
    """The measured chain: the base's (source's) time and CPU per output datapoint, the units'
    costs, and the measured rate of the serial chain (output datapoints per second)."""

    source: float
    source_cpu: float
    units: List[UnitCost]
    rate: float
    names: List[str] = field(default_factory=list)
    source_name: str = "the source"


@dataclass
class Estimate:
    """The model's throughput of one configuration and every bound that sets it (datapoints/s)."""

    rate: float
    bounds: Dict[str, float]
    limit: str
    limit_key: str
    consumer_parts: Dict[str, float]
    cpu_per_datapoint: float


def _paths(count: int) -> List[str]:
    return ["df" + ".ds" * (count - 1 - k) for k in range(count)]


def measure(report: object, chain: Chain, borrowed: Borrowed, timed: Sequence[Optional[TimedFunc]],
            names: List[str], source_name: str, moves: Optional[Sequence[Optional[Transport]]] = None,
            problems: Optional[Sequence[Optional[str]]] = None) -> Optional[Costs]:
    """The costs from the profile of the all-serial chain (None when no datapoint came out), with
    the measured costs of moving each map's datapoints through a worker process (``moves``) and
    why a map cannot run in processes (``problems``), one per unit."""
    stages = {s.path: s for s in report.stages}            # type: ignore[attr-defined]
    out = report.datapoints                                 # type: ignore[attr-defined]
    if not out:
        return None
    paths = _paths(len(chain.units))
    base_path = "df" + ".ds" * len(chain.units)
    # The measuring thread's times without its waits for a CPU (other programs' load), as the maps' work
    running = 1.0 - borrowed.clock.runqueue_share
    if borrowed.clock.calls:
        # the base's next() as timed around it, as the maps' calls are: its time in the profile also
        # holds the timing's own bookkeeping (reading every thread's schedstat now and then, a
        # file read that lets other threads take the GIL), hundreds of us a datapoint under load
        _, cpu, work = borrowed.clock.per_call()
        calls = stages[base_path].datapoints / out
        source, source_cpu = work * calls, cpu * calls
    else:
        source = sum(s.own_seconds for p, s in stages.items() if p == base_path or p.startswith(base_path + ".")) / out
        source_cpu = source
        source = max(source_cpu, source * running)
    costs = []
    for k in range(len(chain.units)):
        stage = stages[paths[k]]
        below = stages[paths[k - 1] if k else base_path]
        cost = UnitCost(own=stage.own_seconds * running / out, calls=below.datapoints / out)
        cost.own_cpu = cost.own
        func = timed[k]
        if func is not None and func.clock.calls:
            call_wall, call_cpu, call_work = func.clock.per_call()
            cost.work, cost.cpu = call_work * cost.calls, call_cpu * cost.calls
            share = func.gil_share()
            cost.gil_measured = share is not None
            # held GIL time is CPU time (a thread waiting for a CPU while it holds the GIL is not working)
            cost.gil = cost.cpu if share is None else min(call_cpu, share * call_wall) * cost.calls
            cost.in_bytes, cost.out_bytes = func.bytes_per_call()
            cost.move = moves[k] if moves is not None else None
            cost.no_processes = problems[k] if problems is not None else None
            # the stage's time: its function's, measured per call as the work in workers is (so the two
            # compare alike on a busy machine), and the map's own step per call
            cost.own = cost.work + MAP_STEP_SECONDS * cost.calls
            cost.own_cpu = cost.cpu + MAP_STEP_SECONDS * cost.calls
        costs.append(cost)
    return Costs(source, source_cpu, costs, report.datapoints_per_sec, names, source_name)  # type: ignore


# ---------------------------------------------------------------------------------------------
# The rate of a configuration
# ---------------------------------------------------------------------------------------------

def _moving(cost: UnitCost, messages: float) -> Tuple[float, float]:
    """``(consumer, worker)`` seconds per output datapoint to move a unit's datapoints through
    worker processes in ``messages`` messages (fewer than its calls when batched in the workers:
    a message's fixed cost is paid once per batch)."""
    move = cost.move
    if move is None:
        consumer = messages * PROCESS_MESSAGE_SECONDS + cost.calls * (cost.in_bytes + cost.out_bytes) \
            * PROCESS_SECONDS_PER_BYTE
        return consumer, consumer
    return (messages * move.fixed_consumer + cost.calls * (move.consumer - move.fixed_consumer),
            messages * move.fixed_worker + cost.calls * (move.worker - move.fixed_worker))


def regain_seconds(cost: UnitCost) -> float:
    """A thread's time per output datapoint to take the GIL back after its map's waits: while the
    consumer or another thread runs Python, a thread whose wait (I/O, a sleep, a call that
    releases the GIL) ended waits up to the interpreter's switch interval for it (5 ms unless
    changed: ``sys.getswitchinterval()``). Charged once per call, in the share of the call
    that waits (the serial measurement saw none of it: nothing else held the GIL)."""
    if cost.work <= 0:
        return 0.0
    return cost.calls * sys.getswitchinterval() * max(0.0, cost.work - cost.cpu) / cost.work


def worker_side(chain: Chain, costs: Costs, forms: Sequence[Form], k: int) -> Tuple[float, float, float]:
    """``(work, worker CPU, consumer)`` per output datapoint of a parallel unit ``k``: its workers'
    time and CPU, and the consumer thread's time for it (threads: the messages and the part of the
    work that holds the GIL; processes: sending and receiving its datapoints)."""
    cost, form = costs.units[k], forms[k]
    work, cpu = cost.work, cost.cpu
    if form.kind == THREADS:
        # the GIL-held part runs one at a time; each call's wait ends by taking the GIL back
        return work + regain_seconds(cost), cpu, cost.calls * THREAD_MESSAGE_SECONDS + cost.gil
    messages = cost.calls
    if form.merge_batch:
        batch = costs.units[k + 1]
        work, cpu = work + batch.own, cpu + batch.own_cpu
        messages = cost.calls / max(1, chain.units[k + 1].batch_size)
    consumer, worker = _moving(cost, messages)
    return work + worker, cpu + worker, consumer


def estimate(chain: Chain, costs: Costs, forms: Sequence[Form], cpus: float,
             consumer_rate: Optional[float]) -> Estimate:
    """The model's rate of ``forms`` (worker counts filled in) and its bounds."""
    parts = {costs.source_name: costs.source}
    cpu_total = costs.source_cpu
    stage_bounds: Dict[str, float] = {}
    merged = False
    for k, (unit, cost, form) in enumerate(zip(chain.units, costs.units, forms)):
        name = costs.names[k]
        if merged:                                  # the batch done in the previous unit's workers
            merged = False
            continue
        if unit.kind == WORK and form.kind != SERIAL:
            work, cpu, consumer = worker_side(chain, costs, forms, k)
            parts[name] = consumer
            # the consumer's part in CPU: for threads the GIL-held part is the workers' CPU already
            cpu_total += cpu + (consumer - cost.gil if form.kind == THREADS else consumer)
            stage_bounds[name] = (form.workers or 1) / work if work > 0 else math.inf
            merged = form.merge_batch
        else:
            parts[name] = cost.own
            cpu_total += cost.own_cpu
    load = sum(parts.values())
    bounds = {"consumer thread": 1.0 / load if load > 0 else math.inf,
              LIMIT_CPUS: cpus / cpu_total if cpu_total > 0 else math.inf}
    if consumer_rate is not None:
        bounds[LIMIT_CONSUMER] = consumer_rate
    for name, bound in stage_bounds.items():
        bounds["workers of " + name] = bound
    key = min(bounds, key=lambda b: bounds[b])
    if key != LIMIT_CONSUMER and bounds[LIMIT_CPUS] <= bounds[key] * CPU_BOUND_NEAR:
        key = LIMIT_CPUS                # the CPUs are (nearly) all busy: they are what limits
    if key == "consumer thread":
        heaviest = max(parts, key=lambda p: parts[p])
        limit = LIMIT_SOURCE if heaviest == costs.source_name else LIMIT_STAGE
    elif key.startswith("workers of "):
        limit = LIMIT_WORKERS
    else:
        limit = key
    return Estimate(min(bounds.values()), bounds, limit, key, parts, cpu_total)


def _target(chain: Chain, costs: Costs, forms: Sequence[Form], cpus: float, consumer_rate: Optional[float]) -> float:
    """The rate the workers are sized for: every bound but the workers'."""
    probe = [Form(f.kind, MAX_PROCESSES if f.kind != SERIAL else None, f.merge_batch) for f in forms]
    bounds = estimate(chain, costs, probe, cpus, consumer_rate).bounds
    return min(v for key, v in bounds.items() if not key.startswith("workers of "))


def most_processes(cpus: float) -> int:
    """The most worker processes the tuner gives one stage on ``cpus`` CPUs (the machine's or the
    budget's, not the share the rest of the chain leaves): ``WORKERS_PER_CPU`` (8) per CPU, at most
    :data:`MAX_PROCESSES`, as many as "auto" may grow to (``Autoscale.limit``)."""
    return min(MAX_PROCESSES, int(WORKERS_PER_CPU * max(1.0, cpus)))


def _processes_for(rate: float, work: float, worker_cpu: float, cpus: float, most: int) -> int:
    """The fewest worker processes (at most ``most``) that deliver ``rate`` results/s with
    :data:`HEADROOM` (:data:`QUEUE_GOAL` of the most they can when the CPUs cannot do that) by
    :func:`closed_loop_rate` on ``cpus`` CPUs (a CPU share of :data:`CPU_BOUND_SHARE` or more: as
    CPU-bound work)."""
    if worker_cpu >= CPU_BOUND_SHARE * work:
        worker_cpu = work
    goal = min(rate * HEADROOM, QUEUE_GOAL * closed_loop_rate(most, work - worker_cpu, worker_cpu, cpus))
    return workers_for_rate(goal, work - worker_cpu, worker_cpu, cpus, most)


def size_workers(chain: Chain, costs: Costs, forms: List[Form], cpus: float, consumer_rate: Optional[float]) -> None:
    """Fill in the worker counts of the parallel units of ``forms``: enough to reach the rate the
    rest of the chain, the CPUs and the trainer allow (with a margin); processes as many as
    reach that rate on the CPUs the rest of the chain leaves them (:func:`closed_loop_rate`:
    processes that wait outnumber the CPUs their shares fill, since their waits do not line up),
    threads at most :data:`MAX_THREADS`."""
    target = _target(chain, costs, forms, cpus, consumer_rate)
    cpu_total = estimate(chain, costs, forms, cpus, consumer_rate).cpu_per_datapoint
    for k, form in enumerate(forms):
        if chain.units[k].kind != WORK or form.kind == SERIAL:
            continue
        work, worker_cpu, _ = worker_side(chain, costs, forms, k)
        wanted = math.ceil(min(target, 1e9) * work * HEADROOM - 0.15)
        if form.kind == THREADS:
            form.workers = max(1, min(MAX_THREADS, wanted))
        elif work > 0:
            # the CPUs left to this stage when the chain runs at the target
            mine = max(cpus - min(target, 1e9) * max(0.0, cpu_total - worker_cpu), 0.5 * cpus * worker_cpu / max(
                cpu_total, 1e-12))
            form.workers = _processes_for(min(target, 1e9), work, worker_cpu, mine, most_processes(cpus))
        else:
            form.workers = 1


def user_forms(chain: Chain) -> List[Form]:
    """The configuration as the user wrote it."""
    forms = []
    for k, unit in enumerate(chain.units):
        merge = unit.kind == WORK and k + 1 < len(chain.units) and chain.units[k + 1].in_workers
        forms.append(Form(unit.form if unit.kind == WORK else SERIAL, unit.workers, merge))
    return forms


def _can_merge(chain: Chain, k: int, kind: str) -> bool:
    if kind != PROCESSES or k + 1 >= len(chain.units):
        return False
    batch = chain.units[k + 1]
    return batch.kind == BATCH and (batch.in_workers or (not batch.remainder and not batch.use_list))


def _options(chain: Chain, costs: Costs, k: int, unit: Unit) -> List[Tuple[str, bool]]:
    """The ``(kind, merge_batch)`` a unit may take: a map serial (when the user wrote it so), in
    threads or in processes (unless its datapoints cannot cross to a worker process), batching in
    the workers where a BatchData follows."""
    if unit.kind != WORK:
        return [(SERIAL, False)]
    kinds = [THREADS] if costs.units[k].no_processes else [THREADS, PROCESSES]
    if unit.form == SERIAL:
        kinds.insert(0, SERIAL)
    found = []
    for option in kinds:
        found.append((option, False))
        if _can_merge(chain, k, option):
            found.append((option, True))
    return found


def _changes(chain: Chain, forms: Sequence[Form], mine: Sequence[Form]) -> int:
    return sum(f.kind != m.kind or f.merge_batch != m.merge_batch for f, m in zip(forms, mine))


@dataclass
class Choice:
    """What :func:`choose` found: the ``forms`` to propose and their ``estimate``, and every
    configuration it rated (``rated``: (rate, forms), for the runner-up and the rates by kind)."""

    forms: List[Form]
    estimate: Estimate
    rated: List[Tuple[float, List[Form]]]

    def runner_up(self) -> Optional[Tuple[float, List[Form]]]:
        """The best-rated configuration whose maps run in other kinds (threads where the choice
        has processes, or the other way round), or None."""
        kinds = [f.kind for f in self.forms]
        others = [item for item in self.rated if [f.kind for f in item[1]] != kinds
                  and all((f.kind == SERIAL) == (c == SERIAL) for f, c in zip(item[1], kinds))]
        return max(others, key=lambda item: item[0]) if others else None

    def kind_rates(self, k: int) -> Dict[str, float]:
        """The model's best rate with unit ``k`` in each kind it may take, the other units as chosen
        (kinds and batching; their counts sized for it)."""
        rates: Dict[str, float] = {}
        for rate, forms in self.rated:
            if all((f.kind, f.merge_batch) == (c.kind, c.merge_batch)
                   for j, (f, c) in enumerate(zip(forms, self.forms)) if j != k):
                rates[forms[k].kind] = max(rate, rates.get(forms[k].kind, 0.0))
        return rates


    def batch_rates(self, k: int) -> Dict[str, float]:
        """The model's best rate with map ``k`` (in processes) batching ``"in the workers"`` and
        ``"in the consumer"``, the other units in the kinds chosen."""
        rates: Dict[str, float] = {}
        for rate, forms in self.rated:
            if forms[k].kind == self.forms[k].kind and all(
                    f.kind == c.kind for j, (f, c) in enumerate(zip(forms, self.forms)) if j != k):
                where = "in the workers" if forms[k].merge_batch else "in the consumer"
                rates[where] = max(rate, rates.get(where, 0.0))
        return rates


def choose(chain: Chain, costs: Costs, cpus: float, consumer_rate: Optional[float]) -> Choice:
    """The configuration to propose: of all the forms the units may take (serial, threads or
    processes, batching in the workers where a BatchData follows), each sized and rated, the one
    with the fewest changes among those within :data:`GAIN_NEEDED` of the best rate, then the one
    with the fewest maps whose work is mostly Python in threads (the GIL's hand-overs cost more
    than the model counts), the fewest units in processes (threads cost no copy of the process)
    and workers; large
    datapoints are batched in the workers. Then each parallel map the user configured keeps its
    kind and count where that is as fast (within the margin) and uses few more workers."""
    mine = user_forms(chain)
    options = [_options(chain, costs, k, unit) for k, unit in enumerate(chain.units)]
    by_cost = sorted(range(len(options)), key=lambda k: costs.units[k].own + costs.units[k].work)
    while prod(len(o) for o in options) > MAX_COMBINATIONS:     # the cheapest units stay as they are
        k = next(k for k in by_cost if len(options[k]) > 1)
        kind = mine[k].kind if mine[k].kind != PROCESSES or not costs.units[k].no_processes else THREADS
        options[k] = [(kind, mine[k].merge_batch and _can_merge(chain, k, kind))]
    rated = []
    for combo in itertools.product(*options):
        forms = [Form(kind, None, merge) for kind, merge in combo]
        if any(f.merge_batch and forms[k + 1].merge_batch for k, f in enumerate(forms[:-1])):
            continue
        size_workers(chain, costs, forms, cpus, consumer_rate)
        rated.append((estimate(chain, costs, forms, cpus, consumer_rate).rate, forms))
    best_rate = max(rate for rate, _ in rated)

    def preference(item: tuple) -> tuple:
        rate, forms = item
        against_size = sum(f.merge_batch != (costs.units[k].out_bytes >= LARGE_DATAPOINT_BYTES or mine[k].merge_batch)
                           for k, f in enumerate(forms) if _can_merge(chain, k, f.kind))
        in_processes = sum(f.kind == PROCESSES for f in forms)
        python_in_threads = sum(f.kind == THREADS and costs.units[k].gil >= 0.5 * costs.units[k].work > 0
                                for k, f in enumerate(forms))
        return (against_size, _changes(chain, forms, mine), python_in_threads, in_processes,
                sum(f.workers or 0 for f in forms), -rate)

    near = [item for item in rated if item[0] * GAIN_NEEDED >= best_rate]
    forms = min(near, key=preference)[1]
    for k, unit in enumerate(chain.units):
        if unit.kind == WORK and unit.form != SERIAL and unit.workers is not None:     # (not "auto")
            kept = [Form(f.kind, f.workers, f.merge_batch) for f in forms]
            kept[k] = Form(unit.form, unit.workers, mine[k].merge_batch)
            wanted = forms[k].workers or 1
            rate = estimate(chain, costs, kept, cpus, consumer_rate).rate
            if rate * GAIN_NEEDED >= estimate(chain, costs, forms, cpus, consumer_rate).rate \
                    and unit.workers <= math.ceil(1.25 * wanted) and unit.form == forms[k].kind:
                forms = kept
    return Choice(forms, estimate(chain, costs, forms, cpus, consumer_rate), rated)
