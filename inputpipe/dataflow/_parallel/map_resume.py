"""Saving and restoring a strict parallel map's position (:class:`ResumableMap`, a part of the
scheduler of :mod:`.map_scheduler`; the bookkeeping is :class:`~.map_position.MapPosition`).

Example::

    state = df.get_state()          # after the last datapoint yielded
    df.set_state(state)             # in a new map of the same arguments, after reset_state()
"""
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from .._core.state import StatePlan, check_input_state
from ..base import NotResumableError, get_length
from .map_position import MapPosition, checked_map_state


class ResumableMap:
    """``get_state`` / ``set_state`` of :class:`~.map_scheduler._ParallelMapBase` (whose
    attributes it reads: ``strict``, ``ordered``, ``ds``, ``base_seed``, ``_position``, ...).

    Example::

        class MyMap(ResumableMap, ResizableStage, ProxyDataFlow):
            ...
    """

    # (set by the scheduler)
    strict: bool
    ordered: bool
    ds: Any
    base_seed: Optional[int]
    _task_size: int
    _position: MapPosition
    _in_epoch: bool
    _resume_pending: bool
    _started: bool
    _closed: bool
    _not_resumable: Optional[List[Optional[NotResumableError]]]

    if TYPE_CHECKING:
        def check_resumable(self) -> None: ...     # (the scheduler's)

    def _resumability(self) -> Optional[NotResumableError]:
        if self._not_resumable is None:
            try:
                self.check_resumable()
                self._not_resumable = [None]
            except NotResumableError as err:
                # Kept without its traceback: the traceback's frames (and their callers') would keep
                # the datapoints they held alive, and with them the workers' shared memory.
                self._not_resumable = [err.with_traceback(None)]
        return self._not_resumable[0]

    def get_state(self) -> Dict[str, Any]:
        """The position after the last datapoint yielded: ``seed`` (of the datapoints'
        randomness), ``epoch``, ``index`` (every task before it yielded or dropped), ``done``
        (tasks after it already yielded: unordered maps only) and ``input`` (the source's state
        right after task ``index - 1`` was read). A restore re-reads the source from ``input``,
        maps again the work that was in flight and skips ``done``.

        Only ``strict=True`` maps are resumable (NotResumableError otherwise)."""
        why = self._resumability()
        if why is not None:
            raise NotResumableError(str(why))
        if self.base_seed is None:
            raise RuntimeError("{}: call reset_state() before get_state()".format(type(self).__name__))
        if self._in_epoch:
            fields = self._position.fields()
        else:
            fields = {"epoch": self._position.epoch, "index": 0, "done": [], "input": self.ds.get_state()}
        state = {"type": type(self).__name__, "seed": self.base_seed}
        state.update(fields)
        return state

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        """Continue after the datapoint ``state`` was taken at (from :meth:`get_state` of a map with
        the same arguments; any number of workers). Call ``set_state`` after ``reset_state()``."""
        name = type(self).__name__
        why = self._resumability()
        if why is not None:
            raise NotResumableError(str(why))
        if not self._started or self._closed:
            raise RuntimeError("{}: call reset_state() before set_state(){}".format(
                name, " (it is closed)" if self._closed else ""))
        size = get_length(self.ds)
        state = checked_map_state(self, state, self.ordered, None if size is None else -(-size // self._task_size))
        check_input_state(self, self.ds, state["input"], plan)

        def restore() -> None:
            self.base_seed = state["seed"]
            self._position.start(state["epoch"], state["index"], state["done"], state["input"])
            self._in_epoch = self._resume_pending = True
        plan.then(restore)
