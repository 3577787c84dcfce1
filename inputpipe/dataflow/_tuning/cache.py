"""Whether the output of a part of the chain can be kept in memory (CacheData): the same every
epoch and small enough. Used by :mod:`inputpipe.dataflow.tuning`; private.

Two passes over the first datapoints of the all-serial chain (after one ``reset_state()``), with
a tap on the output of every level that records what it yields and whether a random number
generator was drawn from while it produced it (numpy's and ``random``'s global ones, and the
``rng`` of every flow at or below it). A level whose two passes are identical, with no draw, gives
the same datapoints every epoch (as far as a sample can tell).

Example::

    levels = check_levels(chain, top=2, seconds=0.5, stall_timeout=30)
    levels[1].same, levels[1].bytes_per_datapoint, levels[1].length
"""
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ...utils.concurrency import POLL_INTERVAL, StoppableThread
from .._core.helpers import close_iterators
from . import model
from .chain import CACHE, Chain, Form, build, nbytes, walk
from ..base import ProxyDataFlow, get_length

#: Datapoints a tap keeps per pass.
_KEPT = 256
_NO_LENGTH = "its length is unknown (an endless or generated source)"


def _global_rng_state() -> Tuple[Any, ...]:
    state: Any = np.random.get_state(legacy=True)
    words = random.getstate()[1]                # 624 words and the position in them
    return state[2], state[3], state[1][:8].tobytes(), words[-1], words[:8]


def _flow_rngs(flow: Any) -> List[Any]:
    found = []
    for node in walk(flow):
        rng = getattr(node, "rng", None)
        if isinstance(rng, np.random.RandomState):
            found.append(rng)
    return found


def _rng_states(rngs: List[Any]) -> List[Any]:
    states: List[Any] = [r.get_state(legacy=True) for r in rngs]
    return [(s[2], s[1][:8].tobytes()) for s in states]


class _Tap(ProxyDataFlow):
    """Passes its input on; records the datapoints of the current pass and notes any draw from a
    global RNG made while its input produced one."""

    def __init__(self, ds: Any):
        super().__init__(ds)
        self.passes: List[List[Any]] = []
        self.drew = False

    def __iter__(self) -> Iterator[Any]:
        kept: List[Any] = []
        self.passes.append(kept)
        before = _global_rng_state()
        itr = iter(self.ds)
        try:
            while True:
                try:
                    dp = next(itr)
                except StopIteration:
                    return
                finally:
                    after = _global_rng_state()
                    self.drew = self.drew or after != before
                if len(kept) < _KEPT:
                    kept.append(dp)
                yield dp
                before = _global_rng_state()
        finally:
            close_iterators([itr])


@dataclass
class Level:
    """What the check found for the output of one level (-1: the base)."""

    level: int
    same: bool = False
    drew: bool = False
    compared: int = 0
    length: Optional[int] = None
    bytes_per_datapoint: float = 0.0
    why_not: str = ""

    @property
    def cacheable(self) -> bool:
        return self.same and not self.drew and self.length is not None and self.compared > 0

    @property
    def total_bytes(self) -> Optional[float]:
        return None if self.length is None else self.length * self.bytes_per_datapoint


def equal(a: Any, b: Any) -> bool:
    """Datapoints equal component by component (arrays: same dtype, shape and values, NaN = NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        try:
            return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        except TypeError:
            return bool(np.array_equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - objects that cannot be compared are taken as different
        return False


@dataclass
class _Check:
    flow: Any
    taps: Dict[int, _Tap]
    levels_of_rngs: List[Tuple[int, List[Any]]]
    seconds: float
    taken: int = 0
    rng_before: List[Any] = field(default_factory=list)
    error: Optional[BaseException] = None


def _run_passes(check: _Check, thread: StoppableThread) -> None:
    try:
        check.flow.reset_state()
        check.rng_before = [_rng_states(rngs) for _, rngs in check.levels_of_rngs]
        deadline = time.perf_counter() + check.seconds
        itr = iter(check.flow)
        try:
            for _ in itr:
                check.taken += 1
                if check.taken >= _KEPT or time.perf_counter() >= deadline or thread.stopped():
                    break
        finally:
            close_iterators([itr])
        itr = iter(check.flow)
        try:
            for k, _ in enumerate(itr, 1):
                if k >= check.taken or thread.stopped():
                    break
        finally:
            close_iterators([itr])
    except BaseException as err:  # reported to the caller (the check then says nothing is cacheable)
        check.error = err


def check_levels(chain: Chain, top: int, seconds: float, stall_timeout: float) -> Tuple[Dict[int, Level], str]:
    """The :class:`Level` of the base (-1) and of units 0..``top`` of the all-serial chain; and
    a reason when the check could not run to its end (then no level is cacheable)."""
    taps: Dict[int, _Tap] = {}

    def tap(flow: Any, level: int) -> Any:
        taps[level] = _Tap(flow)
        return taps[level]

    flow, _ = build(chain, [Form()] * len(chain.units), top=top, tap=tap)
    lengths = {level: get_length(t.ds) for level, t in taps.items()}
    if all(length is None for length in lengths.values()):     # nothing can be cached: no need to look
        return {level: Level(level, why_not=_NO_LENGTH) for level in taps}, ""
    levels_of_rngs = [(level, _flow_rngs(t.ds)) for level, t in sorted(taps.items())]   # at or below each level
    check = _Check(flow, taps, levels_of_rngs, seconds)
    thread = StoppableThread(name="inputpipe-tune-cache-check")
    thread.run = lambda: _run_passes(check, thread)           # type: ignore[method-assign]
    thread.start()
    deadline = time.perf_counter() + 2 * seconds + stall_timeout
    while thread.is_alive() and time.perf_counter() < deadline:
        thread.join(POLL_INTERVAL)
    if thread.is_alive():
        thread.stop()
        return {}, "the two passes over a sample did not end within {:g} s".format(2 * seconds + stall_timeout)
    if check.error is not None:
        return {}, "the two passes over a sample failed ({}: {})".format(type(check.error).__name__, check.error)
    rng_after = [_rng_states(rngs) for _, rngs in levels_of_rngs]
    flow_drew = {level: before != after for (level, _), before, after in zip(levels_of_rngs, check.rng_before, rng_after)}
    found: Dict[int, Level] = {}
    drew_below = False
    for level, t in sorted(taps.items()):
        result = Level(level)
        drew_below = drew_below or flow_drew.get(level, False) or t.drew
        result.drew = drew_below
        if len(t.passes) >= 2:
            first, second = t.passes[0], t.passes[1]
            result.compared = min(len(first), len(second))
            result.same = result.compared > 0 and all(equal(a, b) for a, b in zip(first, second))
            sample = first[:result.compared] or first
            result.bytes_per_datapoint = sum(nbytes(dp) for dp in sample) / len(sample) if sample else 0.0
        result.length = lengths[level]
        if result.length is None:
            result.why_not = _NO_LENGTH
        elif result.drew:
            result.why_not = "it draws random numbers"
        elif not result.same:
            result.why_not = "two passes gave different datapoints"
        found[level] = result
    return found, ""


#: A cache is proposed when it makes the model's rate at least this much higher.
CACHE_GAIN_NEEDED = 1.1
#: The consumer's time per datapoint read from a CacheData (a list lookup and a generator step).
CACHE_READ_SECONDS = 1e-6
#: The name of the source once the chain below a cache is read from memory.
FROM_CACHE = "CacheData (in memory)"


def bytes_text(value: float) -> str:
    """``value`` bytes in words: ``"512 B"``, ``"7.8 KiB"``, ``"1.2 GiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return "{:.1f} {}".format(value, unit) if unit != "B" else "{:d} B".format(int(value))
        value /= 1024.0
    return str(value)  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# Choosing a level to cache
# ---------------------------------------------------------------------------------------------

def without_prefix(costs: model.Costs, level: int) -> model.Costs:
    """The costs once the output of ``level`` comes from a cache: nothing below it costs anything."""
    units = [model.UnitCost() if k <= level else u for k, u in enumerate(costs.units)]
    above = costs.units[level + 1].calls if level + 1 < len(costs.units) else 1.0
    read = CACHE_READ_SECONDS * above
    return model.Costs(read, read, units, costs.rate, costs.names, FROM_CACHE)


def choose_cache(chain: Chain, costs: model.Costs, forms: List[Form], estimate: model.Estimate, cpus: int,
                 consumer_rate: Optional[float], memory: Optional[int], seconds: float, stall_timeout: float) -> tuple:
    """``(level, steady estimate, detail)``: the highest level whose output is worth caching, the
    same every epoch and small enough (level None when there is none)."""
    if any(u.kind == CACHE for u in chain.units):
        return None, None, "the chain caches already"
    candidates = []
    for level in range(len(chain.units) - 1, -2, -1):
        if level >= 0 and forms[level].merge_batch:
            continue
        steady = model.estimate(chain, without_prefix(costs, level), forms, cpus, consumer_rate)
        if steady.rate >= estimate.rate * CACHE_GAIN_NEEDED:
            candidates.append((level, steady))
    if not candidates:
        return None, None, ""
    levels, problem = check_levels(chain, candidates[0][0], min(2.0, max(0.2, 0.15 * seconds)), stall_timeout)
    if problem:
        return None, None, problem
    why = ""
    for level, steady in candidates:
        found = levels[level]
        name = costs.source_name if level < 0 else costs.names[level]
        if not found.cacheable:
            why = why or "{}: {}".format(name, found.why_not or "nothing to compare")
            continue
        total = found.total_bytes or 0.0
        if memory is not None and total > memory:
            why = why or "{}: its output ({}) exceeds the memory budget ({})".format(
                name, bytes_text(total), bytes_text(memory))
            continue
        return level, steady, ("the output of {} ({} datapoints, about {}) was the same in two passes over {} "
                               "datapoints, with no random draw: CacheData keeps it after the first epoch".format(
                                   name, found.length, bytes_text(total), found.compared))
    return None, None, why
