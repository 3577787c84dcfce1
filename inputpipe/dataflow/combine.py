"""Combining several DataFlows: concatenate, join side by side, mix or choose at random.

Example::

    from inputpipe.dataflow import ConcatData, DataFromList
    df = ConcatData([DataFromList([[0]], shuffle=False), DataFromList([[1]], shuffle=False)])
    df.reset_state()
    assert list(df) == [[0], [1]]
"""
import itertools
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from ..utils.logger import get_logger
from ._core.helpers import END, EpochCursor, close_flows, close_iterators, epoch_rng, input_states, length_of, check_inputs
from ._core.state import SEED, IntRange, StatePlan
from .base import DataFlow, DataFlowLengthUnknown, RNGDataFlow, StateMismatchError, check_state, get_length, require_rng

__all__ = ["RandomChooseData", "RandomMixData", "ConcatData", "JoinData"]

logger = get_logger(__name__)

#: RandomChooseData draws its choices in chunks of this many, each from its own seed.
_CHOICES_PER_CHUNK = 256


def _total_length(flows: Sequence[Any]) -> Optional[int]:
    """The sum of the flows' lengths, or None when one has none."""
    sizes = [get_length(df) for df in flows]
    return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


def _check_flows(owner: str, df_lists: Sequence[Any]) -> List[Any]:
    flows = list(df_lists)
    if not flows:
        raise ValueError("{}: needs at least one DataFlow, got none".format(owner))
    return flows


class RandomChooseData(RNGDataFlow):
    """Each datapoint comes from one of several flows, chosen at random; stops when the chosen
    flow is exhausted.

    ``df_lists`` is a list of DataFlows (chosen with equal probability) or of
    ``(DataFlow, probability)`` pairs whose probabilities sum to 1. No length.

    The choices of epoch ``e`` are drawn 256 at a time, chunk ``c`` from a RandomState seeded from
    (base seed, ``e``, ``c``); the state is (epoch, datapoints yielded, base seed, the inputs'
    states), and a restore draws only the chunk its position falls in.

    Example::

        df = RandomChooseData([(DataFromList(a), 0.8), (DataFromList(b), 0.2)])
    """

    def __init__(self, df_lists: Sequence[Any]):
        super().__init__()
        entries = _check_flows("RandomChooseData", df_lists)
        pairs = [isinstance(e, (list, tuple)) for e in entries]
        if any(pairs) and not all(pairs):
            raise ValueError("RandomChooseData: give either DataFlows or (DataFlow, probability) "
                             "pairs, not a mix of both")
        if all(pairs):
            self.df_lists = [(df, float(prob)) for df, prob in entries]
            total = sum(prob for _, prob in self.df_lists)
            if abs(total - 1.0) > 1e-6 or any(prob < 0 for _, prob in self.df_lists):
                raise ValueError("RandomChooseData: probabilities must be >= 0 and sum to 1, got {}"
                                 .format([prob for _, prob in self.df_lists]))
        else:
            self.df_lists = [(df, 1.0 / len(entries)) for df in entries]

        self._cursor = EpochCursor()

    def reset_state(self) -> None:
        super().reset_state()
        self._cursor.reset()
        for df, _ in self.df_lists:
            df.reset_state()

    def close(self) -> None:
        """Close every input (those that have a ``close()``)."""
        close_flows([df for df, _ in self.df_lists])

    def __len__(self) -> int:
        raise DataFlowLengthUnknown("RandomChooseData has no length: it stops at a random point")

    def __iter__(self) -> Iterator[Any]:
        require_rng(self)
        epoch, start, token = self._cursor.begin()
        return self._cursor.track(self._choose(epoch, start), token)

    def _choose(self, epoch: int, skip: int) -> Iterator[Any]:
        iterators = [iter(df) for df, _ in self.df_lists]
        probs = np.array([prob for _, prob in self.df_lists])
        probs /= probs.sum()  # accepted within 1e-6 of 1; numpy's choice() needs ~1e-8
        # Chunk c of the epoch's choices is drawn from (base seed, epoch, c): a restore at any
        # position draws only the chunk it falls in.
        chunk, skip = divmod(skip, _CHOICES_PER_CHUNK)
        try:
            while True:
                rng = epoch_rng(self, self.base_seed, epoch, chunk)
                choices = rng.choice(len(iterators), size=_CHOICES_PER_CHUNK, p=probs).tolist()
                chunk += 1
                for k in choices[skip:]:
                    dp = next(iterators[k], END)
                    if dp is END:
                        return
                    yield dp
                skip = 0
        finally:
            close_iterators(iterators)

    def _state_inputs(self) -> List[DataFlow]:
        return [df for df, _ in self.df_lists]

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "seed", "inputs"}``."""
        return {"type": "RandomChooseData", "epoch": self._cursor.epoch, "position": self._cursor.position,
                "seed": self.base_seed, "inputs": input_states(self._state_inputs())}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        most = _total_length(self._state_inputs())
        state = check_state(self, state, {"epoch": int, "position": IntRange(0, most), "seed": SEED, "inputs": list})
        check_inputs(self, self._state_inputs(), state["inputs"], plan)
        plan.then(lambda: self._restore(state))

    def _restore(self, state: Dict[str, Any]) -> None:
        self.base_seed = state["seed"]
        self._cursor.restore(state["epoch"], state["position"])


class RandomMixData(RNGDataFlow):
    """All datapoints of several flows, interleaved in a random order (each flow keeps its own
    order); the length is the sum of the inputs' lengths, which every input must have.

    An input that produces fewer or more datapoints than its length is an error. Epoch ``e`` is
    interleaved by a RandomState seeded from (base seed, ``e``); the state is (epoch, position,
    base seed, the inputs' states).

    Example::

        df = RandomMixData([DataFromList(a), DataFromList(b)])   # len(a) + len(b) datapoints
    """

    def __init__(self, df_lists: Sequence[DataFlow]):
        super().__init__()
        self.df_lists = _check_flows("RandomMixData", df_lists)
        self._sizes()
        self._cursor = EpochCursor()

    def _sizes(self) -> List[int]:
        return [length_of(self, df, "its input {} ({})".format(k, type(df).__name__))
                for k, df in enumerate(self.df_lists)]

    def reset_state(self) -> None:
        super().reset_state()
        self._cursor.reset()
        for df in self.df_lists:
            df.reset_state()

    def close(self) -> None:
        """Close every input (those that have a ``close()``)."""
        close_flows(self.df_lists)

    def __len__(self) -> int:
        return sum(self._sizes())

    def __iter__(self) -> Iterator[Any]:
        require_rng(self)
        epoch, start, token = self._cursor.begin()
        sizes = self._sizes()
        order = np.repeat(np.arange(len(sizes)), sizes)
        epoch_rng(self, self.base_seed, epoch).shuffle(order)
        produced = np.bincount(order[:start], minlength=len(sizes)).tolist()
        return self._cursor.track(self._mix(order[start:].tolist(), sizes, produced), token)

    def _mix(self, order: List[int], sizes: List[int], produced: List[int]) -> Iterator[Any]:
        iterators = [iter(df) for df in self.df_lists]
        try:
            for k in order:
                dp = next(iterators[k], END)
                if dp is END:
                    raise RuntimeError("RandomMixData: input {} ({}) produced {} datapoints but its "
                                       "length is {}".format(k, type(self.df_lists[k]).__name__,
                                                             produced[k], sizes[k]))
                produced[k] += 1
                yield dp
            for k, itr in enumerate(iterators):
                if next(itr, END) is not END:
                    raise RuntimeError("RandomMixData: input {} ({}) produced more datapoints than "
                                       "its length {}".format(k, type(self.df_lists[k]).__name__, sizes[k]))
        finally:
            close_iterators(iterators)

    def _state_inputs(self) -> List[DataFlow]:
        return list(self.df_lists)

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "seed", "inputs"}``."""
        return {"type": "RandomMixData", "epoch": self._cursor.epoch, "position": self._cursor.position,
                "seed": self.base_seed, "inputs": input_states(self.df_lists)}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        state = check_state(self, state, {"epoch": int, "position": int, "seed": SEED, "inputs": list})
        if not 0 <= state["position"] <= len(self):
            raise StateMismatchError("RandomMixData.set_state: position {} is outside an epoch of {}".format(
                state["position"], len(self)))
        check_inputs(self, self.df_lists, state["inputs"], plan)

        def restore() -> None:
            self.base_seed = state["seed"]
            self._cursor.restore(state["epoch"], state["position"])
        plan.then(restore)


class ConcatData(DataFlow):
    """All datapoints of the first flow, then of the second, and so on.

    Example::

        df = ConcatData([DataFromList([[0]], shuffle=False), DataFromList([[1]], shuffle=False)])
        df.reset_state()
        assert list(df) == [[0], [1]]
    """

    def __init__(self, df_lists: Sequence[DataFlow]):
        self.df_lists = _check_flows("ConcatData", df_lists)
        self._index = 0
        self._resume_at = 0

    def reset_state(self) -> None:
        self._index = self._resume_at = 0
        for df in self.df_lists:
            df.reset_state()

    def close(self) -> None:
        """Close every input (those that have a ``close()``)."""
        close_flows(self.df_lists)

    def __len__(self) -> int:
        return sum(length_of(self, df, "its input {} ({})".format(k, type(df).__name__))
                   for k, df in enumerate(self.df_lists))

    def __iter__(self) -> Iterator[Any]:
        start, self._resume_at = self._resume_at, 0
        self._index = start
        return self._concat(start)

    def _concat(self, start: int) -> Iterator[Any]:
        try:
            for index in range(start, len(self.df_lists)):
                self._index = index
                yield from self.df_lists[index]
        finally:
            self._index = 0

    def _state_inputs(self) -> List[DataFlow]:
        return list(self.df_lists)

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "index", "inputs"}``: the input being read and every input's state."""
        return {"type": "ConcatData", "index": self._index, "inputs": input_states(self.df_lists)}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        state = check_state(self, state, {"index": int, "inputs": list})
        if not 0 <= state["index"] < len(self.df_lists):
            raise StateMismatchError("ConcatData.set_state: index {} is outside its {} inputs".format(
                state["index"], len(self.df_lists)))
        check_inputs(self, self.df_lists, state["inputs"], plan)

        def restore() -> None:
            self._index = self._resume_at = state["index"]
        plan.then(restore)


class JoinData(DataFlow):
    """Iterate several flows together and join their datapoints into one: lists/tuples are
    concatenated, dicts are merged (a key in two inputs is an error). Stops when the shortest
    input is exhausted; the length is the smallest input length.

    Example::

        df = JoinData([DataFromList([[1, 2]], shuffle=False), DataFromList([[3]], shuffle=False)])
        df.reset_state()
        assert list(df) == [[1, 2, 3]]
    """

    def __init__(self, df_lists: Sequence[DataFlow]):
        self.df_lists = _check_flows("JoinData", df_lists)
        sizes = [get_length(df) for df in self.df_lists]
        if len({s for s in sizes if s is not None}) > 1:
            logger.warning("JoinData: the inputs have different lengths %s; it stops at the shortest", sizes)

    def reset_state(self) -> None:
        for df in self.df_lists:
            df.reset_state()

    def close(self) -> None:
        """Close every input (those that have a ``close()``)."""
        close_flows(self.df_lists)

    def __len__(self) -> int:
        return min(length_of(self, df, "its input {} ({})".format(k, type(df).__name__))
                   for k, df in enumerate(self.df_lists))

    def __iter__(self) -> Iterator[Any]:
        iterators = [iter(df) for df in self.df_lists]
        try:
            for parts in zip(*iterators):
                yield self._join(parts)
        finally:
            close_iterators(iterators)

    def _state_inputs(self) -> List[DataFlow]:
        return list(self.df_lists)

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "inputs"}``: every input's state (each has given one datapoint per output)."""
        return {"type": "JoinData", "inputs": input_states(self.df_lists)}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        check_inputs(self, self.df_lists, check_state(self, state, {"inputs": list})["inputs"], plan)

    @staticmethod
    def _join(parts: Sequence[Any]) -> Any:
        if all(isinstance(p, dict) for p in parts):
            joined = {}
            for k, part in enumerate(parts):
                for key in part:
                    if key in joined:
                        raise ValueError("JoinData: key {!r} of input {} is also produced by an earlier "
                                         "input".format(key, k))
                joined.update(part)
            return joined
        first_is_dict = isinstance(parts[0], dict)
        for k, part in enumerate(parts):
            if isinstance(part, dict) != first_is_dict or not isinstance(part, (dict, list, tuple)):
                raise ValueError("JoinData: input {} produced a {} but input 0 produced a {}; all inputs "
                                 "must produce lists/tuples, or all dicts".format(
                                     k, type(part).__name__, type(parts[0]).__name__))
        return list(itertools.chain.from_iterable(parts))
