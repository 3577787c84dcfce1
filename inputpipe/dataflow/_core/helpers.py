"""Small helpers shared by the DataFlow modules (batch, transforms, combine, debug, sources): lengths,
closing, argument checks, and the epoch/position bookkeeping of resumable flows."""
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ...utils.seeding import derive_seed
from .state import SEED, StatePlan, check_input_state
from ..base import (EMPTY_PASSES_ALLOWED, DataFlow, DataFlowLengthUnknown, RNGDataFlow, StateMismatchError, call_len,
                   check_state, empty_passes_mean_stuck, empty_passes_text, require_rng)

# A sentinel for "the iterator is exhausted", distinct from every datapoint.
END = object()


def int_at_least_one(component: str, name: str, value: Any) -> int:
    """``value``, or a ValueError ``"<component>: <name> must be an int >= 1, got <value>"``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("{}: {} must be an int >= 1, got {!r}".format(component, name, value))
    return value


def empty_epoch_error(ds: DataFlow) -> RuntimeError:
    """The error of a parallel runner whose copy of ``ds`` produced nothing in a whole pass."""
    # one empty pass was enough, unless the chain gathers across passes
    passes = empty_passes_text(1 if empty_passes_mean_stuck(ds, 1) else EMPTY_PASSES_ALLOWED, "a whole pass", "passes")
    return RuntimeError("{} produced no datapoints in {}; a parallel runner would loop forever on it".format(
        type(ds).__name__, passes))


def length_of(owner: DataFlow, ds: Any, what: str = "its input") -> int:
    """``len(ds)``, or DataFlowLengthUnknown saying that ``owner`` has no length because of ``ds``."""
    try:
        return call_len(ds)
    except (TypeError, NotImplementedError) as err:
        raise DataFlowLengthUnknown("{} has no length because {} has none ({})".format(
            type(owner).__name__, what, err)) from None


def close_iterators(iterators: Sequence[Iterator[Any]]) -> None:
    """Close unfinished generators now, so that their re-entrancy guards and resources are freed."""
    for itr in iterators:
        close = getattr(itr, "close", None)
        if close is not None:
            close()


def check_positive_int(owner: str, name: str, value: Any) -> int:
    """``value`` as an int, or a ValueError naming ``owner`` and ``name`` when it is not >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError("{}: {} must be a positive int, got {!r}".format(owner, name, value))
    return int(value)


def close_flows(flows: Sequence[Any]) -> None:
    """``close()`` every flow that has one (all of them, even if one fails; the first error is
    raised at the end), so that a composite flow stops every worker and socket under it."""
    first_error = None
    for df in flows:
        close = getattr(df, "close", None)
        if close is None:
            continue
        try:
            close()
        except Exception as err:  # noqa: BLE001 - the others must still be closed
            if first_error is None:
                first_error = err
    if first_error is not None:
        raise first_error


# ---------------------------------------------------------------------------------------------
# Resumable state (see docs/resuming.md and base.DataFlow.get_state)
# ---------------------------------------------------------------------------------------------

def epoch_rng(owner: Any, base_seed: Optional[int], *numbers: int) -> np.random.RandomState:
    """The RandomState of one epoch (or one shuffle, or one chunk) of ``owner``: a function of its
    base seed and the given numbers only, so a restored state repeats the same random choices."""
    if base_seed is None:
        raise RuntimeError("{} has no RNG yet: call reset_state() once before iterating it".format(
            type(owner).__name__))
    return np.random.RandomState(derive_seed(base_seed, *numbers))


class EpochCursor:
    """Counts the epochs and the datapoints yielded in the current epoch of one flow.

    ``begin()`` is called by ``__iter__``: it starts the next epoch, unless a restored state or a
    finished epoch says where to continue. ``track()`` wraps the epoch's iterator: it counts what
    was yielded and closes the epoch when the iterator ends or is closed early (a consumer that
    stops reading an input closes it; the next ``iter()`` is a new epoch, as it always was).
    """

    __slots__ = ("epoch", "position", "_open", "_generation")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.epoch, self.position, self._open, self._generation = 0, 0, False, 0

    def restore(self, epoch: int, position: int) -> None:
        self.epoch, self.position, self._open = epoch, position, False
        self._generation += 1

    def begin(self) -> Tuple[int, int, int]:
        """(epoch, first position, token for :meth:`track`) of the iteration that starts now."""
        if self._open:  # the previous iterator was dropped without being closed
            self.epoch, self.position = self.epoch + 1, 0
        self._generation += 1
        self._open = True
        return self.epoch, self.position, self._generation

    def track(self, items: Iterator[Any], token: int) -> Iterator[Any]:
        try:
            for item in items:
                self.position += 1
                yield item
        finally:
            close_iterators([items])
            if self._generation == token and self._open:
                self.epoch, self.position, self._open = self.epoch + 1, 0, False


def input_states(flows: Sequence[Any]) -> List[Dict[str, Any]]:
    """``get_state()`` of every input flow, in order."""
    return [df.get_state() for df in flows]


def check_inputs(owner: Any, flows: Sequence[Any], states: Any, plan: StatePlan) -> None:
    """Check a list of input states, one per input (``owner.set_state``'s ``"inputs"``), and
    register their changes in ``plan``."""
    if not isinstance(states, list) or len(states) != len(flows):
        raise StateMismatchError("{}.set_state: expected a list of {} input states (one per input), got {}"
                                 .format(type(owner).__name__, len(flows),
                                         "{} of them".format(len(states)) if isinstance(states, list)
                                         else type(states).__name__))
    for k, (df, state) in enumerate(zip(flows, states)):
        check_input_state(owner, df, state, plan, "[{}]".format(k))


def indexed_epoch(owner: Any, cursor: EpochCursor, size: int, shuffle: bool) -> Tuple[Sequence[int], int]:
    """Start an epoch of a flow that reads records ``0..size-1``: the record numbers still to read
    (a permutation drawn from (base seed, epoch) with ``shuffle``) and the token for ``track``."""
    epoch, start, token = cursor.begin()
    if not shuffle:
        return range(start, size), token
    return epoch_rng(owner, owner.base_seed, epoch).permutation(size)[start:].tolist(), token


def indexed_state(owner: Any, cursor: EpochCursor, size: int, shuffle: bool) -> Dict[str, Any]:
    """``{"type", "epoch", "position", "size", "seed"}`` of a flow using :func:`indexed_epoch`."""
    return {"type": type(owner).__name__, "epoch": cursor.epoch, "position": cursor.position, "size": size,
            "seed": owner.base_seed if shuffle else None}


def check_indexed(owner: Any, cursor: EpochCursor, state: Any, size: int, shuffle: bool, plan: StatePlan) -> None:
    """Check the state :func:`indexed_state` made and register its restore in ``plan``."""
    state = check_state(owner, state, {"epoch": int, "position": int, "size": int, "seed": (SEED, type(None))})
    name = type(owner).__name__
    if state["size"] != size or not 0 <= state["position"] <= size:
        raise StateMismatchError("{}.set_state: the state is of {} datapoints at position {}, but this flow has "
                                 "{}".format(name, state["size"], state["position"], size))
    if shuffle and state["seed"] is None:
        raise StateMismatchError("{}.set_state: shuffle=True needs a seed in the state, got None (the state "
                                 "of an unshuffled flow?)".format(name))

    def restore() -> None:
        if shuffle:
            owner.base_seed = state["seed"]
        cursor.restore(state["epoch"], state["position"])
    plan.then(restore)


class IndexedSource(RNGDataFlow):
    """Base of a source of ``len(self)`` records read by number (the dataset readers): each epoch
    visits ``0..len-1`` in order, or with ``self.shuffle`` in a permutation drawn from (base seed,
    epoch). Subclasses set ``self.shuffle`` and implement ``__len__`` and ``_datapoint(k)``; the
    state is ``{"type", "epoch", "position", "size", "seed"}``.

    Example::

        class Squares(IndexedSource):
            shuffle = False

            def __len__(self):
                return 4

            def _datapoint(self, k):
                return [k * k]
    """

    shuffle = False

    def reset_state(self) -> None:
        super().reset_state()
        self._epoch_cursor().reset()

    def _epoch_cursor(self) -> EpochCursor:
        cursor = self.__dict__.get("_cursor")
        if cursor is None:
            cursor = self._cursor = EpochCursor()
        return cursor

    def _datapoint(self, k: int) -> Any:
        raise NotImplementedError("{} does not implement _datapoint".format(type(self).__name__))

    def __iter__(self) -> Iterator[Any]:
        if self.shuffle:
            require_rng(self)
        cursor = self._epoch_cursor()
        order, token = indexed_epoch(self, cursor, len(self), self.shuffle)
        return cursor.track(map(self._datapoint, order), token)

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "epoch", "position", "size", "seed"}``."""
        return indexed_state(self, self._epoch_cursor(), len(self), self.shuffle)

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        check_indexed(self, self._epoch_cursor(), state, len(self), self.shuffle, plan)
