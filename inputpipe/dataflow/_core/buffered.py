"""Flows that buffer datapoints: LocallyShuffleData (a shuffling buffer) and CacheData (the first
epoch kept in memory). Their states hold positions, never data; a restore re-reads what was
buffered from the input (see each class).

Example::

    from inputpipe.dataflow import CacheData, DataFromList
    df = CacheData(DataFromList([[1], [2]], shuffle=False))
    df.reset_state()
    assert list(df) == [[1], [2]] and list(df) == [[1], [2]]
"""
from collections import deque
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from .helpers import END, EpochCursor, check_positive_int, close_iterators, epoch_rng, length_of
from .state import SEED, IntRange, ListOf, StatePlan, check_input_state
from ..base import (
    DataFlow, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow, StateMismatchError, check_state,
    empty_passes_mean_stuck, empty_passes_text, get_length, is_resumable, raise_if_stopping, require_rng,
)
from ..seeding import new_rng

__all__ = ["LocallyShuffleData", "CacheData"]

#: A LocallyShuffleData state may make a restore re-read at most this many buffers (see _check_state).
_REPLAY_BUFFERS = 64


class _EntryNumbers:
    """The entry numbers of the buffered datapoints, in buffer order: the list made at the last
    shuffle (never changed afterwards, so a state can share it instead of copying it), minus the
    ``dropped`` first ones, followed by the consecutive entries ``tail_from, tail_from + 1, ...``
    added since."""

    __slots__ = ("shuffled", "dropped", "tail_from")

    def __init__(self, shuffled: List[int], dropped: int, tail_from: int):
        self.shuffled, self.dropped, self.tail_from = shuffled, dropped, tail_from

    def popleft(self) -> int:
        if self.dropped < len(self.shuffled):
            self.dropped += 1
            return self.shuffled[self.dropped - 1]
        self.tail_from += 1
        return self.tail_from - 1

    def current(self, end: int) -> List[int]:
        """The numbers in buffer order, when ``end`` is the number of the next entry."""
        return self.shuffled[self.dropped:] + list(range(self.tail_from, end))

    def shuffle(self, order: List[int], end: int) -> None:
        numbers = self.current(end)
        self.shuffled, self.dropped, self.tail_from = [numbers[i] for i in order], 0, end


class LocallyShuffleData(ProxyDataFlow, RNGDataFlow):
    """Shuffle through a buffer of ``buffer_size`` datapoints, for inputs too big to shuffle whole.

    Each input datapoint enters the buffer ``num_reuse`` times; once the buffer is full, every
    new entry pushes out the oldest one, which is produced. The buffer is shuffled after every
    ``shuffle_interval`` input datapoints (default ``buffer_size // 3``). The input is iterated
    continuously and the buffer is kept from one epoch to the next (so the first epoch reads
    ahead by ``buffer_size``), hence this flow is not re-entrant.

    An epoch has ``len(ds) * num_reuse`` datapoints. Unlike tensorpack (whose iterator never
    ends although it has a length), iteration stops there; an input without a length makes an
    epoch end when the input's epoch ends.

    Resuming: the k-th shuffle draws from a RandomState seeded from (base seed, k). The state
    holds no data: the numbers of the entries in the buffer (in buffer order: the list made at
    the last shuffle, up to one int per buffered entry, and the run of entries added since), an
    input state from at most ``buffer_size // (8 * num_reuse)`` input datapoints before the
    oldest of them was read, and counters. A restore re-reads the input from there up to where
    the buffer was, keeps the entries that were in the buffer, and continues; the re-read
    datapoints are not yielded again. For that the flow keeps the input's state once every
    ``buffer_size // (8 * num_reuse)`` input datapoints (at least every one) since the oldest
    datapoint in the buffer: about 90 small dicts for any buffer size.

    Example::

        df = LocallyShuffleData(DataFromList(records, shuffle=False), buffer_size=1000)
    """

    def __init__(self, ds: DataFlow, buffer_size: int, num_reuse: int = 1, shuffle_interval: Optional[int] = None):
        ProxyDataFlow.__init__(self, ds)
        self.buffer_size = check_positive_int("LocallyShuffleData", "buffer_size", buffer_size)
        self.num_reuse = check_positive_int("LocallyShuffleData", "num_reuse", num_reuse)
        if shuffle_interval is None:
            shuffle_interval = max(1, self.buffer_size // 3)
        self.shuffle_interval = check_positive_int("LocallyShuffleData", "shuffle_interval", shuffle_interval)
        #: the input's state is kept before every this many input datapoints (a restore re-reads
        #: at most this many more than it needs)
        self._checkpoint_every = max(1, self.buffer_size // (8 * self.num_reuse))
        self._guard = DataFlowReentrantGuard("LocallyShuffleData")
        self._clear()

    def _clear(self) -> None:
        self._buffer: deque = deque()
        self._numbers = _EntryNumbers([], 0, 0)  # the entry number of each buffered datapoint
        self._held: Dict[int, int] = {}    # input datapoint number -> its entries in the buffer
        self._lowest = 0                   # no input datapoint before this one is still needed
        self._before: deque = deque()      # (input datapoint number, input state before it), sparse
        self._source: Optional[Iterator[Any]] = None
        self._entries = 0
        self._produced = 0
        self._since_epoch = 0
        self._record = False
        self._restore: Optional[Dict[str, Any]] = None

    def reset_state(self) -> None:
        ProxyDataFlow.reset_state(self)
        RNGDataFlow.reset_state(self)
        if self._source is not None:
            close_iterators([self._source])
        self._clear()

    def __len__(self) -> int:
        return length_of(self, self.ds) * self.num_reuse

    def _entries_from(self, first_entry: int) -> Iterator[Any]:
        """Input datapoints, each ``num_reuse`` times, epoch after epoch, as (entry number, dp);
        ``END`` between epochs. Records the input's state before the first datapoint it reads and
        before every ``_checkpoint_every``-th one."""
        ds, reuse, entry = self.ds, self.num_reuse, first_entry
        first, every = first_entry // reuse, self._checkpoint_every
        while True:
            itr = iter(ds)
            try:
                while True:
                    number = entry // reuse
                    recorded = self._record and (number % every == 0 or number == first)
                    if recorded:
                        self._before.append((number, ds.get_state()))
                    dp = next(itr, END)
                    if dp is END:
                        if recorded:
                            self._before.pop()
                        break
                    for _ in range(reuse):
                        yield entry, dp
                        entry += 1
            finally:
                close_iterators([itr])
            yield END

    def _replay(self, restore: Dict[str, Any]) -> None:
        """Re-read the input from the restored anchor up to the restored entry count and rebuild
        the buffer (the input is already at the anchor's state)."""
        numbers = _EntryNumbers(restore["shuffled"], restore["dropped"], restore["tail_from"])
        slots = numbers.current(restore["entries"])
        wanted = set(slots)
        found: Dict[int, Any] = {}
        entry = restore["anchor_entry"]
        self._source = self._entries_from(entry)
        empty, entry_before = 0, entry
        while entry < restore["entries"]:
            raise_if_stopping(self)
            item = next(self._source)
            if item is END:
                empty, entry_before = (0 if entry > entry_before else empty + 1), entry
                if empty_passes_mean_stuck(self.ds, empty):
                    raise RuntimeError("LocallyShuffleData: restoring a state, its input produced no datapoints in {}, "
                                       "so entries {}..{} cannot be read again".format(
                                           empty_passes_text(empty, "an epoch", "epochs"), entry, restore["entries"]))
                continue
            entry, dp = item
            if entry in wanted:
                found[entry] = dp
            entry += 1
        self._buffer = deque(found[e] for e in slots)
        self._numbers = numbers
        self._held = {}
        for e in slots:
            self._held[e // self.num_reuse] = self._held.get(e // self.num_reuse, 0) + 1
        self._lowest = min(self._held, default=restore["entries"] // self.num_reuse)
        self._entries = restore["entries"]

    def __iter__(self) -> Iterator[Any]:
        restore, self._restore = self._restore, None
        self._produced = restore["produced"] if restore else 0
        return self._epoch(restore)

    def _epoch(self, restore: Optional[Dict[str, Any]]) -> Iterator[Any]:
        with self._guard:
            require_rng(self)
            target = get_length(self)
            if restore is not None:
                self._since_epoch = restore["since_epoch"]
            if self._source is None:
                self._record = is_resumable(self.ds)
                if restore is not None and restore["entries"]:
                    self._replay(restore)
                else:
                    self._source = self._entries_from(self._entries)
            assert self._source is not None     # made just above, or by _replay()
            buffer, held, source = self._buffer, self._held, self._source
            interval, reuse = self.shuffle_interval * self.num_reuse, self.num_reuse
            empty = 0                       # input epochs in a row without a datapoint
            while target is None or self._produced < target:
                item = next(source)
                if item is END:
                    if target is None:
                        self._since_epoch = 0
                        return
                    empty = empty + 1 if self._since_epoch == 0 else 0
                    if empty_passes_mean_stuck(self.ds, empty):
                        raise RuntimeError("LocallyShuffleData: its input produced no datapoints in {}, so {} "
                                           "cannot be produced".format(empty_passes_text(empty, "an epoch", "epochs"),
                                                                       target))
                    self._since_epoch = 0
                    continue
                entry, dp = item
                self._since_epoch += 1
                self._entries = entry + 1
                if self._entries % interval == 0:
                    self._shuffle(self._entries // interval, entry)
                held[entry // reuse] = held.get(entry // reuse, 0) + 1
                if len(buffer) < self.buffer_size:
                    buffer.append(dp)
                    continue
                oldest = buffer.popleft()
                gone = self._numbers.popleft() // reuse
                if held[gone] == 1:
                    del held[gone]
                    if gone == self._lowest:
                        self._prune_before()
                else:
                    held[gone] -= 1
                buffer.append(dp)
                self._produced += 1
                yield oldest
            self._produced = 0

    def _shuffle(self, number: int, next_entry: int) -> None:
        """The ``number``-th shuffle of the buffer (its entry numbers move with it); ``next_entry``
        is the entry about to be added."""
        buffer = self._buffer
        order = epoch_rng(self, self.base_seed, number).permutation(len(buffer)).tolist()
        shuffled = [buffer[i] for i in order]
        buffer.clear()
        buffer.extend(shuffled)
        self._numbers.shuffle(order, next_entry)

    def _prune_before(self) -> Optional[int]:
        """Forget the input states no restore needs any more; returns the number of the oldest
        input datapoint a restore must read again (in the buffer, or whose reuses are not all in
        yet), None when there is none."""
        reuse, held = self.num_reuse, self._held
        newest = (self._entries - 1) // reuse if self._entries else -1
        partial = newest if self._entries % reuse else None
        low = self._lowest
        while low <= newest and low not in held and low != partial:
            low += 1
        self._lowest = low
        before = self._before
        if low > newest:
            before.clear()
            return None
        while len(before) > 1 and before[1][0] <= low:
            before.popleft()
        return low

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "seed", "entries", "shuffled", "dropped", "tail_from", "anchor", "anchor_entry",
        "produced", "since_epoch"}``: the buffer holds the entries ``shuffled[dropped:]`` followed by
        ``tail_from..entries-1``; ``shuffled`` is the list made at the last shuffle, shared, not copied;
        ``anchor`` is the input's state before entry ``anchor_entry``, at or shortly before the
        oldest buffered one. A restored state not iterated yet is that state."""
        if self._restore is not None:
            return dict(self._restore)
        numbers = self._numbers
        oldest = self._prune_before()
        if oldest is not None and self._before:
            anchor_dp, anchor = self._before[0]
            anchor_entry = anchor_dp * self.num_reuse
        else:
            anchor, anchor_entry = self.ds.get_state(), self._entries
        return {"type": "LocallyShuffleData", "seed": self.base_seed, "entries": self._entries,
                "shuffled": numbers.shuffled, "dropped": numbers.dropped, "tail_from": numbers.tail_from,
                "anchor": anchor, "anchor_entry": anchor_entry,
                "produced": self._produced, "since_epoch": self._since_epoch}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        name, size, reuse, every = "LocallyShuffleData", self.buffer_size, self.num_reuse, self._checkpoint_every
        target, input_size = get_length(self), get_length(self.ds)
        state = check_state(self, state, {
            "seed": SEED, "entries": int, "shuffled": list, "dropped": IntRange(0, size), "tail_from": int,
            "anchor": dict, "anchor_entry": int, "produced": IntRange(0, target),
            "since_epoch": IntRange(0, None if input_size is None else input_size * reuse)})
        entries, tail_from, dropped, shuffled = state["entries"], state["tail_from"], state["dropped"], state["shuffled"]
        anchor_entry = state["anchor_entry"]
        # Sizes first, from numbers only: nothing is built from them before they fit the buffer.
        if len(shuffled) > size:
            raise StateMismatchError("{}.set_state: field 'shuffled' must list at most buffer_size={} entry numbers, "
                                     "got a list of {} items".format(name, size, len(shuffled)))
        kept = len(shuffled) - dropped
        if not (0 <= kept and tail_from <= entries and kept + entries - tail_from == min(entries, size)):
            raise StateMismatchError("{}.set_state: the state's buffer ({} of {} shuffled entries kept, entries {}..{} "
                                     "added since) does not hold min(entries, buffer_size) = min({}, {}) entries".format(
                                         name, kept, len(shuffled), tail_from, entries, entries, size))
        problem = ListOf(IntRange(0, tail_from - 1), most=size, distinct=True).problem(shuffled)
        kept_from = min(shuffled[dropped:], default=tail_from) if problem is None else 0
        if problem is None and kept_from < anchor_entry:
            problem = "entry {} in the buffer comes before the anchor {}".format(kept_from, anchor_entry)
        if problem is not None:
            raise StateMismatchError("{}.set_state: field 'shuffled' must be distinct entry numbers below tail_from {}: "
                                     "{}".format(name, tail_from, problem))
        oldest = min(kept_from, tail_from) if entries else entries
        # the anchor is the input's state at a kept checkpoint: at most `every` input datapoints
        # before the oldest buffered one (at it, when the buffer is empty)
        if anchor_entry % reuse or not 0 <= oldest // reuse - anchor_entry // reuse < (every if entries else 1):
            raise StateMismatchError("{}.set_state: anchor_entry {} does not fit: expected the first entry of an input "
                                     "datapoint at most {} datapoints before the oldest buffered entry {}".format(
                                         name, anchor_entry, every, oldest))
        # A buffered entry leaves after about buffer_size more entries (e-fold): one older than
        # _REPLAY_BUFFERS buffers has a probability below 1e-20, and would be re-read in full.
        most = _REPLAY_BUFFERS * size + every * reuse
        if entries - anchor_entry > most:
            raise StateMismatchError("{}.set_state: the state would re-read entries {}..{}, more than {} (buffer_size={} "
                                     "x {} + {})".format(name, anchor_entry, entries, most, size, _REPLAY_BUFFERS,
                                                         every * reuse))
        check_input_state(self, self.ds, state["anchor"], plan)

        def restore() -> None:
            if self._source is not None:
                close_iterators([self._source])
            self._clear()
            self.base_seed = state["seed"]
            self._entries = entries
            self._restore = state
        plan.then(restore)


class CacheData(ProxyDataFlow):
    """Keep the first complete epoch of the input in memory and produce later epochs from it
    (shuffled every epoch when ``shuffle=True``).

    The cache is kept only once a first epoch ran to its end; an interrupted first epoch is
    discarded and the next one reads the input again (tensorpack would keep the partial cache
    and silently lose the rest of the data). ``reset_state()`` empties the cache.

    Resuming: the state holds the input's state from before the cache was filled, the epoch and
    position, and the base seed of the shuffles (epoch ``e`` is shuffled with a RandomState
    seeded from (base seed, ``e``); the fill is epoch 0). A restore re-reads the input from that
    state: during the fill, the datapoints already yielded (not yielded again); afterwards, the
    whole first epoch, to rebuild the cache.

    Example::

        df = CacheData(MapData(DataFromList(files, shuffle=False), expensive_decode), shuffle=True)
    """

    def __init__(self, ds: DataFlow, shuffle: bool = False):
        super().__init__(ds)
        self.shuffle = shuffle
        self.rng: Optional[np.random.RandomState] = None
        self.base_seed: Optional[int] = None
        self._cache: Optional[List[Any]] = None
        self._guard = DataFlowReentrantGuard("CacheData (while filling its cache)")
        self._cursor = EpochCursor()
        self._fill_start: Optional[Dict[str, Any]] = None
        self._filling = False
        self._fill_position = 0
        self._restore: Optional[Dict[str, Any]] = None

    def reset_state(self) -> None:
        super().reset_state()
        if self.shuffle:
            rng = new_rng(self)
            self.rng, self.base_seed = rng, int(rng.randint(0, 2 ** 32, dtype=np.int64))
        self._cache = None
        self._cursor.reset()
        self._fill_start, self._filling, self._fill_position, self._restore = None, False, 0, None

    def __len__(self) -> int:
        if self._cache is not None:
            return len(self._cache)
        return length_of(self, self.ds)

    def __iter__(self) -> Iterator[Any]:
        restore, self._restore = self._restore, None
        if restore is not None:
            if not restore["filled"]:
                return self._fill(restore["position"])
            self._fill_start = restore["input"]
            self._cache = list(self.ds)
            self._cursor.restore(restore["epoch"], restore["position"])
        cache = self._cache
        if cache is None:
            return self._fill(0)
        epoch, start, token = self._cursor.begin()
        if not self.shuffle:
            order: Sequence[int] = range(start, len(cache))
        else:
            order = epoch_rng(self, self.base_seed, epoch).permutation(len(cache))[start:].tolist()
        return self._cursor.track(map(cache.__getitem__, order), token)

    def _fill(self, skip: int) -> Iterator[Any]:
        with self._guard:
            self._fill_start = self.ds.get_state() if is_resumable(self.ds) else None
            self._filling, self._fill_position = True, 0
            try:
                cache = []
                for dp in self.ds:
                    cache.append(dp)
                    self._fill_position = len(cache)
                    if self._fill_position > skip:
                        yield dp
                    else:                       # re-read to restore a position: nothing to yield
                        raise_if_stopping(self)
                self._cache = cache
                self._cursor.restore(1, 0)
            finally:
                self._filling = False

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "filled", "input", "epoch", "position", "seed"}``; ``input`` is the input's
        state from before the cache was filled (its current state before any fill). A restored state
        not iterated yet is that state."""
        if self._restore is not None:
            return dict(self._restore)
        if self._cache is None and not self._filling:
            return {"type": "CacheData", "filled": False, "input": self.ds.get_state(), "epoch": 0,
                    "position": 0, "seed": self.base_seed}
        if self._fill_start is None:
            self.ds.check_resumable()
        if self._cache is None:
            return {"type": "CacheData", "filled": False, "input": self._fill_start, "epoch": 0,
                    "position": self._fill_position, "seed": self.base_seed}
        return {"type": "CacheData", "filled": True, "input": self._fill_start, "epoch": self._cursor.epoch,
                "position": self._cursor.position, "seed": self.base_seed}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        state = check_state(self, state, {"filled": bool, "input": dict, "epoch": int,
                                          "position": IntRange(0, get_length(self.ds)), "seed": (SEED, type(None))})
        if self.shuffle and state["seed"] is None:
            raise StateMismatchError("CacheData.set_state: shuffle=True needs a seed in the state, got None (a "
                                     "state of an unshuffled CacheData?)")
        if (state["epoch"] >= 1) != state["filled"]:
            raise StateMismatchError("CacheData.set_state: epoch {} with filled={}: the first epoch (0) fills the cache, "
                                     "later ones read it".format(state["epoch"], state["filled"]))
        check_input_state(self, self.ds, state["input"], plan)

        def restore() -> None:
            self.base_seed = state["seed"] if self.shuffle else None
            self._cache, self._restore = None, state
        plan.then(restore)
