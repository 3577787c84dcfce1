"""The tuner's suggestion to split a map that both waits and computes: the waiting part (a read
from network storage or a remote service) in threads, which wait side by side in one process,
and the computing part (decoding in Python) in processes, one per CPU. In one map, processes must
outnumber the CPUs to keep them busy while they wait (each copy of the process costs memory) and
threads are held to one core's worth of Python by the GIL. Used by
:mod:`inputpipe.dataflow.tuning`; private.

The tuner cannot split a function; it models the two halves (the wait: the map's time off a CPU;
the compute: its CPU time, holding the GIL as measured), sizes both, and shows the code with
names for the two functions to write.

Example::

    splits = suggest(chain, costs, choice, cpus=2, consumer_rate=None)
    print(splits[0].code)
"""
import copy
from dataclasses import dataclass
from typing import List, Optional

from . import model
from .chain import PROCESSES, SERIAL, THREADS, WORK, Chain, Form

__all__ = ["Split", "suggest"]

#: A map is worth splitting when at least this share of its time waits and at least this share
#: computes holding the GIL.
MIN_WAIT_SHARE = 0.25
MIN_GIL_SHARE = 0.15


@dataclass
class Split:
    """A suggestion for the map of ``stage``: ``code`` (two lines in place of its own), the rate
    the model expects with it (``expected``) and with the map as chosen (``unsplit``), the
    ``threads`` and ``processes`` it takes against ``unsplit_workers`` processes or threads, and
    the names of the two functions to write (``wait_name``, ``compute_name``).

    Example::

        for split in result.splits:
            print(split.text())
    """

    stage: str
    code: str
    expected: float
    unsplit: float
    threads: int
    processes: int
    unsplit_workers: int
    unsplit_unit: str
    wait_ms: float
    compute_ms: float
    wait_name: str
    compute_name: str

    def text(self) -> str:
        """The suggestion in words, with its code."""
        return ("Split {}: it waits {:.1f} ms and computes {:.1f} ms per call, holding the GIL. As two functions, "
                "{} (the wait) in {} threads and {} (the computing) in {} processes, the model expects {:.1f}/s, "
                "against {:.1f}/s as one map in {} {}:\n{}".format(
                    self.stage, self.wait_ms, self.compute_ms, self.wait_name, self.threads, self.compute_name,
                    self.processes, self.expected, self.unsplit, self.unsplit_workers, self.unsplit_unit,
                    self.code.rstrip("\n")))


def _halves(cost: model.UnitCost) -> Optional[tuple]:
    """The costs of the waiting and the computing half of a map (None: not worth splitting)."""
    if cost.work <= 0 or not cost.calls or not cost.gil_measured:
        return None
    wait = max(0.0, cost.work - cost.cpu)
    if wait < MIN_WAIT_SHARE * cost.work or cost.gil < MIN_GIL_SHARE * cost.work:
        return None
    waiting = model.UnitCost(work=wait, cpu=0.0, gil=0.0, calls=cost.calls, in_bytes=cost.in_bytes,
                             out_bytes=cost.in_bytes, gil_measured=True)
    # the computing half takes what the wait fetched (its size is not known: taken as the map's input)
    computing = model.UnitCost(work=cost.cpu, cpu=cost.cpu, gil=cost.gil, calls=cost.calls, in_bytes=cost.in_bytes,
                               out_bytes=cost.out_bytes, move=cost.move, gil_measured=True)
    return waiting, computing


def _split_one(chain: Chain, costs: model.Costs, forms: List[Form], k: int, cpus: float,
               consumer_rate: Optional[float]) -> Optional[Split]:
    halves = _halves(costs.units[k])
    if halves is None:
        return None
    unit = chain.units[k]
    units = chain.units[:k] + [copy.copy(unit), copy.copy(unit)] + chain.units[k + 1:]
    units[k].form = units[k + 1].form = SERIAL           # (not the user's counts: sized here)
    split_chain = Chain(chain.base, units)
    names = costs.names[:k] + [costs.names[k] + " (wait)", costs.names[k] + " (compute)"] + costs.names[k + 1:]
    split_costs = model.Costs(costs.source, costs.source_cpu, costs.units[:k] + list(halves) + costs.units[k + 1:],
                              costs.rate, names, costs.source_name)
    split_forms = [Form(f.kind, None, f.merge_batch) for f in forms[:k]] + [Form(THREADS), Form(PROCESSES)] + \
        [Form(f.kind, None, f.merge_batch) for f in forms[k + 1:]]
    model.size_workers(split_chain, split_costs, split_forms, cpus, consumer_rate)
    expected = model.estimate(split_chain, split_costs, split_forms, cpus, consumer_rate).rate
    unsplit = model.estimate(chain, costs, forms, cpus, consumer_rate).rate
    threads, processes = split_forms[k].workers or 1, split_forms[k + 1].workers or 1
    worth = expected >= unsplit * model.GAIN_NEEDED or (
        expected * model.GAIN_NEEDED >= unsplit and processes < (forms[k].workers or 1)
        and forms[k].kind == PROCESSES)
    if not worth:
        return None
    func = getattr(unit.user_func, "__name__", "") or "func"
    func = func if func.isidentifier() else "func"
    wait_name, compute_name = func + "_wait", func + "_compute"
    code = ("df = MultiThreadMapData(df, {}, {}, strict=True, ordered=True)      # the wait: reads, requests\n"
            "df = MultiProcessMapData(df, {}, {}, strict=True, ordered=True)     # the computing: decode, augment\n"
            .format(threads, wait_name, processes, compute_name))
    calls = costs.units[k].calls
    return Split(costs.names[k], code, expected, unsplit, threads, processes, forms[k].workers or 1,
                 "processes" if forms[k].kind == PROCESSES else "threads",
                 halves[0].work / calls * 1e3, halves[1].work / calls * 1e3, wait_name, compute_name)


def suggest(chain: Chain, costs: model.Costs, forms: List[Form], cpus: float,
            consumer_rate: Optional[float]) -> List[Split]:
    """A :class:`Split` for each map in parallel (as ``forms`` has it) that both waits and
    computes holding the GIL, where two maps would be faster, or as fast with fewer processes."""
    found = []
    for k, unit in enumerate(chain.units):
        if unit.kind == WORK and forms[k].kind != SERIAL and not forms[k].merge_batch and unit.index is None:
            split = _split_one(chain, costs, forms, k, cpus, consumer_rate)
            if split is not None:
                found.append(split)
    return found
