"""Per-datapoint transforms and epoch shaping: map, filter, select, fixed size and repeat (the
buffering flows, local shuffle and cache, are in :mod:`._core.buffered`).

Example::

    from inputpipe.dataflow import DataFromList, MapData, RepeatedData
    df = RepeatedData(MapData(DataFromList([[1], [2]], shuffle=False), lambda dp: [dp[0] * 10]), 2)
    df.reset_state()
    assert list(df) == [[10], [20], [10], [20]]
"""
import copy
from typing import Any, Callable, Dict, Hashable, Iterator, List, Optional, Sequence

import numpy as np

from ._core.helpers import END, check_positive_int, close_iterators, length_of
from ._core.state import StatePlan, check_input_state
from .base import (
    DataFlow, DataFlowLengthUnknown, DataFlowReentrantGuard, ProxyDataFlow, StateMismatchError,
    check_state, empty_passes_mean_stuck, empty_passes_text, is_resumable,
)

__all__ = [
    "MapData", "MapDataComponent", "FilterData", "SelectComponent", "FixedSizeData", "RepeatedData",
    "RepeatedDataPoint",
]

# ---------------------------------------------------------------------------------------------
# Mapping and filtering
# ---------------------------------------------------------------------------------------------

def input_state(flow: ProxyDataFlow) -> Dict[str, Any]:
    """The state of a flow that reads its input one datapoint per output (or drops some): the
    input's state after what it read last, which is exactly after the last datapoint yielded."""
    return {"type": type(flow).__name__, "input": flow.ds.get_state()}


def check_input(flow: ProxyDataFlow, state: Any, plan: StatePlan) -> None:
    """Check the state :func:`input_state` made (the restore is the input's)."""
    check_input_state(flow, flow.ds, check_state(flow, state, {"input": dict})["input"], plan)


def _shallow_copy(dp: Any) -> Any:
    cls = type(dp)
    if cls is list:
        return dp[:]
    if cls is tuple:
        return dp
    if cls is dict:
        return dp.copy()
    return copy.copy(dp)


class MapData(ProxyDataFlow):
    """Apply ``func`` to every datapoint; a datapoint for which ``func`` returns None is dropped.

    ``func`` receives a shallow copy of the datapoint (a new list or dict holding the same
    components), so replacing a component in place does not change the input flow's data; it
    must still not modify the component objects (e.g. arrays) in place. The length is the
    input's length, which is too large when datapoints are dropped (use :class:`FilterData` for
    a flow that says its length is unknown).

    Example::

        df = MapData(DataFromList([[1], [2], [3]], shuffle=False),
                     lambda dp: None if dp[0] == 2 else [dp[0] * 10])
        df.reset_state()
        assert list(df) == [[10], [30]]
    """

    def __init__(self, ds: DataFlow, func: Callable[[Any], Any]):
        super().__init__(ds)
        self.func = func

    def __iter__(self) -> Iterator[Any]:
        func = self.func
        for dp in self.ds:
            # The copy is inlined for lists, the common case: this loop is the hot path.
            dp = func(dp[:] if dp.__class__ is list else _shallow_copy(dp))
            if dp is not None:
                yield dp

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "input"}``: the input's state (nothing is read ahead). Random work in ``func``
        resumes exactly only when it draws from a per-datapoint RNG (see docs/resuming.md)."""
        return input_state(self)

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        check_input(self, state, plan)


class MapDataComponent(MapData):
    """Apply ``func`` to one component (``index``: a list index or a dict key) of every datapoint.

    The datapoint is copied (a tuple becomes a list) before the component is replaced, so the
    input flow's data is not changed. Returning None drops the datapoint.

    Example::

        df = MapDataComponent(DataFromList([[1, "a"], [2, "b"]], shuffle=False), lambda x: x * 10)
        df.reset_state()
        assert list(df) == [[10, "a"], [20, "b"]]
    """

    def __init__(self, ds: DataFlow, func: Callable[[Any], Any], index: Hashable = 0):
        self._func = func
        self._index = index
        super().__init__(ds, self._map_component)

    def _map_component(self, dp: Any) -> Any:
        value = self._func(dp[self._index])
        if value is None:
            return None
        dp = list(dp) if isinstance(dp, tuple) else _shallow_copy(dp)
        dp[self._index] = value
        return dp

    def __iter__(self) -> Iterator[Any]:
        map_one = self._map_component
        for dp in self.ds:
            dp = map_one(dp)
            if dp is not None:
                yield dp

    get_state = MapData.get_state
    _check_state = MapData._check_state


class FilterData(ProxyDataFlow):
    """Keep only the datapoints for which ``predicate(dp)`` is true.

    Not in tensorpack (where one returns None from a :class:`MapData`); unlike that, it says
    that its length is unknown instead of reporting the input's.

    Example::

        df = FilterData(DataFromList([[i] for i in range(6)], shuffle=False), lambda dp: dp[0] % 2)
        df.reset_state()
        assert list(df) == [[1], [3], [5]]
    """

    def __init__(self, ds: DataFlow, predicate: Callable[[Any], Any]):
        super().__init__(ds)
        self.predicate = predicate

    def __len__(self) -> int:
        raise DataFlowLengthUnknown("FilterData has no length: it depends on the predicate")

    def __iter__(self) -> Iterator[Any]:
        return filter(self.predicate, self.ds)

    get_state = MapData.get_state
    _check_state = MapData._check_state


class SelectComponent(MapData):
    """Keep the components ``idxs`` (list indices or dict keys), in that order, as a list.

    Example::

        df = SelectComponent(DataFromList([[1, 2, 3]], shuffle=False), [2, 0])
        df.reset_state()
        assert list(df) == [[3, 1]]
    """

    def __init__(self, ds: DataFlow, idxs: Sequence[Hashable]):
        self.idxs = list(idxs)
        super().__init__(ds, self._select)

    def _select(self, dp: Any) -> List[Any]:
        return [dp[i] for i in self.idxs]

    def __iter__(self) -> Iterator[Any]:
        return map(self._select, self.ds)

    get_state = MapData.get_state
    _check_state = MapData._check_state


# ---------------------------------------------------------------------------------------------
# Sizes and repetition
# ---------------------------------------------------------------------------------------------

class FixedSizeData(ProxyDataFlow):
    """Exactly ``size`` datapoints per epoch, restarting the input when it runs out.

    With ``keep_state=True`` the next epoch continues the input where the last one stopped
    (so this flow is not re-entrant); otherwise every epoch starts the input afresh. The state
    is the input's state and the position in this flow's epoch.

    Example::

        df = FixedSizeData(DataFromList([[0], [1], [2]], shuffle=False), 2)
        df.reset_state()
        assert list(df) == [[0], [1]] and list(df) == [[2], [0]]
    """

    def __init__(self, ds: DataFlow, size: int, keep_state: bool = True):
        super().__init__(ds)
        self._size = int(size)
        if self._size < 0:
            raise ValueError("FixedSizeData: size must be >= 0, got {!r}".format(size))
        self._keep_state = keep_state
        self._itr: Optional[Iterator[Any]] = None
        self._guard = DataFlowReentrantGuard("FixedSizeData")
        self._position = 0
        self._resume_at = 0

    def reset_state(self) -> None:
        super().reset_state()
        if self._itr is not None:
            close_iterators([self._itr])
        self._itr = None
        self._position = self._resume_at = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        start, self._resume_at = self._resume_at, 0
        self._position = start
        return self._epoch(start)

    def _epoch(self, start: int) -> Iterator[Any]:
        with self._guard:
            if self._itr is None or not self._keep_state:
                self._itr = iter(self.ds)
            try:
                for _ in range(start, self._size):
                    dp, empty = next(self._itr, END), 0
                    while dp is END:                  # the input's pass ended: start the next one
                        if empty_passes_mean_stuck(self.ds, empty):
                            raise RuntimeError("FixedSizeData: its input produced no datapoints{}, so "
                                               "{} cannot be produced".format(
                                                   "" if empty == 1 else " in " + empty_passes_text(empty, "", "passes"),
                                                   self._size))
                        self._itr = iter(self.ds)
                        dp, empty = next(self._itr, END), empty + 1
                    self._position += 1
                    yield dp
            finally:
                self._position = 0
                if not self._keep_state:
                    close_iterators([self._itr])
                    self._itr = None

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "input", "position"}``."""
        return {"type": "FixedSizeData", "input": self.ds.get_state(), "position": self._position}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        state = check_state(self, state, {"input": dict, "position": int})
        if not 0 <= state["position"] <= self._size:
            raise StateMismatchError("FixedSizeData.set_state: position {} is outside an epoch of {}".format(
                state["position"], self._size))
        check_input_state(self, self.ds, state["input"], plan)

        def restore() -> None:
            if self._itr is not None:
                close_iterators([self._itr])
            self._itr = None
            self._position = self._resume_at = state["position"]
        plan.then(restore)


class RepeatedData(ProxyDataFlow):
    """The input flow ``num`` times in a row (``num=-1``: forever, and then no length).

    Repeating forever an input that produces no datapoints raises a RuntimeError instead of
    spinning. The state is the input's state and how many repetitions were completed.

    Example::

        df = RepeatedData(DataFromList([[0], [1]], shuffle=False), 2)
        df.reset_state()
        assert list(df) == [[0], [1], [0], [1]]
    """

    def __init__(self, ds: DataFlow, num: int):
        super().__init__(ds)
        if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < -1:
            raise ValueError("RepeatedData: num must be an int >= 0, or -1 for forever, got {!r}".format(num))
        self.num = int(num)
        self._count = 0
        self._resume_at: Optional[int] = None

    def __len__(self) -> int:
        if self.num == -1:
            raise DataFlowLengthUnknown("RepeatedData(num=-1) has no length: it repeats forever")
        return length_of(self, self.ds) * self.num

    def reset_state(self) -> None:
        super().reset_state()
        self._count, self._resume_at = 0, None

    def __iter__(self) -> Iterator[Any]:
        resumed, self._resume_at = self._resume_at, None
        self._count = resumed or 0
        return self._repeat(resumed is not None)

    def _repeat(self, resumed: bool) -> Iterator[Any]:
        try:
            empty = 0                                 # repetitions in a row without a datapoint
            while self.num == -1 or self._count < self.num:
                produced = False
                for dp in self.ds:
                    produced = True
                    yield dp
                # A restored state taken after the last datapoint of a repetition continues with
                # that repetition's (empty) end.
                empty = 0 if produced or resumed else empty + 1
                if self.num == -1 and empty_passes_mean_stuck(self.ds, empty):
                    raise RuntimeError("RepeatedData(num=-1): its input produced no datapoints in {}, so "
                                       "repeating it forever would never produce any".format(
                                           empty_passes_text(empty, "an epoch", "epochs")))
                resumed = False
                self._count += 1
        finally:
            self._count = 0

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "input", "count"}``: ``count`` repetitions of the input are complete."""
        return {"type": "RepeatedData", "input": self.ds.get_state(), "count": self._count}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        state = check_state(self, state, {"input": dict, "count": int})
        if state["count"] < 0 or (self.num != -1 and state["count"] > self.num):
            raise StateMismatchError("RepeatedData.set_state: count {} is outside 0..{}".format(
                state["count"], self.num))
        check_input_state(self, self.ds, state["input"], plan)

        def restore() -> None:
            self._count = self._resume_at = state["count"]
        plan.then(restore)


class RepeatedDataPoint(ProxyDataFlow):
    """Every datapoint ``num`` times in a row (the same object each time).

    Its state is the input's state and how many copies of the current datapoint were yielded; a
    restore between copies re-reads that one datapoint (the state then holds the input's state
    from before it).

    Example::

        df = RepeatedDataPoint(DataFromList([[0], [1]], shuffle=False), 2)
        df.reset_state()
        assert list(df) == [[0], [0], [1], [1]]
    """

    def __init__(self, ds: DataFlow, num: int):
        super().__init__(ds)
        self.num = check_positive_int("RepeatedDataPoint", "num", num)
        self._copies = 0
        self._before: Optional[Dict[str, Any]] = None
        self._resume_copies = 0

    def __len__(self) -> int:
        return length_of(self, self.ds) * self.num

    def reset_state(self) -> None:
        super().reset_state()
        self._copies, self._before, self._resume_copies = 0, None, 0

    def __iter__(self) -> Iterator[Any]:
        if self.num == 1:
            return iter(self.ds)
        resume, self._resume_copies = self._resume_copies, 0
        self._copies = 0
        return self._repeat(resume, is_resumable(self.ds))

    def _repeat(self, resume: int, record: bool) -> Iterator[Any]:
        ds, num = self.ds, self.num
        itr = iter(ds)
        try:
            while True:
                before = ds.get_state() if record else None
                dp = next(itr, END)
                if dp is END:
                    return
                self._before = before
                for copy_number in range(resume + 1, num + 1):
                    self._copies = copy_number
                    yield dp
                resume = 0
        finally:
            self._copies = 0
            close_iterators([itr])

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "input", "copies"}``: with ``0 < copies < num``, ``input`` is the state from
        before the current datapoint, which a restore reads again."""
        if 0 < self._copies < self.num:
            return {"type": "RepeatedDataPoint", "input": self._before, "copies": self._copies}
        if self._resume_copies:             # restored between copies, not iterated yet
            return {"type": "RepeatedDataPoint", "input": self.ds.get_state(), "copies": self._resume_copies}
        return {"type": "RepeatedDataPoint", "input": self.ds.get_state(), "copies": 0}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        state = check_state(self, state, {"input": dict, "copies": int})
        if not 0 <= state["copies"] < self.num:
            raise StateMismatchError("RepeatedDataPoint.set_state: copies {} is outside 0..{}".format(
                state["copies"], self.num - 1))
        check_input_state(self, self.ds, state["input"], plan)
        plan.then(lambda: setattr(self, "_resume_copies", state["copies"]))
