"""Where a strict parallel map is in its epoch, in a form that can be saved and restored.

A parallel map reads its source ahead (up to ``buffer_size`` tasks in flight) and yields results
in another order (unordered) or later (ordered), so its position is not the source's position.
:class:`MapPosition` keeps, for every task read and not yet passed, the source's state right
after that task's datapoints were read; the map's position is a *watermark* (every task before
it has been yielded or dropped) plus the tasks beyond it already yielded. Restored, the map
re-reads the source from the state at the watermark, skips the tasks already yielded and maps
the others again: nothing is lost, nothing comes twice.

Example::

    position = MapPosition()
    position.start(epoch=0, watermark=0, done=(), input_state={"type": "DataFromList", ...})
    position.read(0, source.get_state())
    position.passed(0)                    # task 0 was yielded
    position.fields()                     # {"epoch": 0, "index": 1, "done": [], "input": ...}
"""
from typing import Any, Dict, Iterable, Optional, Set

from .._core.state import MAX_STATE_COUNT, SEED, IntRange, ListOf, StateMismatchError, check_state


class MapPosition:
    """The watermark bookkeeping of one strict parallel map (see the module doc).

    Example::

        position = MapPosition()
        position.start(0, 0, (), {"type": "FakeData"})
    """

    def __init__(self) -> None:
        self.epoch = 0                      # completed epochs (the number of the current one)
        self.watermark = 0                  # tasks [0, watermark) of the epoch are yielded or dropped
        self.done: Set[int] = set()         # tasks beyond the watermark already yielded or dropped
        self.input_at_watermark: Optional[Dict[str, Any]] = None
        self._read: Dict[int, Optional[Dict[str, Any]]] = {}    # task -> source state after reading it

    def start(self, epoch: int, watermark: int, done: Iterable[int], input_state: Optional[Dict[str, Any]]) -> None:
        """Begin (or continue, after a restore) epoch ``epoch`` at ``watermark``."""
        self.epoch = epoch
        self.watermark = watermark
        self.done = set(done)
        self.input_at_watermark = input_state
        self._read.clear()

    def read(self, task: int, input_state: Optional[Dict[str, Any]]) -> None:
        """Task ``task``'s datapoints were read; the source's state is now ``input_state``."""
        self._read[task] = input_state

    def skip(self, task: int) -> bool:
        """Whether ``task`` was yielded before the state this epoch was restored from."""
        return task in self.done

    def passed(self, task: int) -> None:
        """Task ``task``'s result was yielded or dropped: advance the watermark over it."""
        if task != self.watermark:
            self.done.add(task)
            return
        watermark = task + 1
        while watermark in self.done:
            self.done.discard(watermark)
            watermark += 1
        for passed in range(self.watermark, watermark):
            state = self._read.pop(passed, None)
            if passed == watermark - 1:
                self.input_at_watermark = state
        self.watermark = watermark

    def fields(self) -> Dict[str, Any]:
        """``epoch``, ``index`` (the watermark), ``done`` (ascending) and ``input`` of the state."""
        return {"epoch": self.epoch, "index": self.watermark, "done": sorted(self.done),
                "input": self.input_at_watermark}


def checked_map_state(flow: Any, state: Any, ordered: bool, tasks: Optional[int]) -> Dict[str, Any]:
    """``state`` checked for ``flow.set_state()`` (a strict map, ``ordered`` or not, whose epoch has
    ``tasks`` tasks, None when unknown); raises :class:`StateMismatchError` naming the flow, what it
    expected and what came. The ``input`` state is left to the caller."""
    name = type(flow).__name__
    state = check_state(flow, state, {"seed": SEED, "epoch": int, "index": IntRange(0, tasks), "done": list,
                                      "input": dict})
    index, done = state["index"], state["done"]
    problem = ListOf(IntRange(index + 1, tasks), most=MAX_STATE_COUNT if tasks is None else tasks,
                     ascending=True).problem(done)
    if problem is not None:
        raise StateMismatchError("{}.set_state: expected done a list of ints greater than index {} (ascending task "
                                 "numbers{}), got {}".format(name, index, "" if tasks is None else " up to {}".format(tasks),
                                                             problem))
    if done and ordered:
        raise StateMismatchError("{}.set_state: the state is of an unordered map (done={!r}), this map is ordered; "
                                 "restore with the arguments it was saved with".format(name, done[:10]))
    return state
