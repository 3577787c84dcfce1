"""Checking a resumable state completely before anything changes (see docs/resuming.md).

``set_state()`` of every library flow runs in two phases. The check phase reads the whole state
(the flow's own fields and, through :func:`check_input_state`, its inputs' states) and refuses it
with :class:`StateMismatchError` at the first thing that does not fit; it changes nothing and
allocates nothing in proportion to a number the state claims: every count is bounded by the
flow's own configuration (buffer size, length, number of inputs) before it is used. Only when the
whole state was accepted does :meth:`StatePlan.apply` make the changes, which cannot fail. So a
refused state leaves the flow, and every flow it reads from, exactly as it was.

A flow takes part by implementing ``_check_state(state, plan)``: check with :func:`check_state`,
check each input's state with :func:`check_input_state`, and register the changes with
``plan.then(...)``. A flow of the user's own that implements ``set_state()`` directly is called
in the first part of the apply phase, before any library flow changes (its own checks are its
own; its state only has to be plain JSON-like data).

Example::

    def _check_state(self, state, plan):
        state = check_state(self, state, {"input": dict, "position": IntRange(0, self._size)})
        check_input_state(self, self.ds, state["input"], plan)
        plan.then(lambda: setattr(self, "_resume_at", state["position"]))
"""
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = ["StateMismatchError", "IntRange", "ListOf", "StatePlan", "check_state", "check_input_state",
           "check_plain_state", "MAX_STATE_COUNT", "MAX_STATE_DEPTH", "SEED"]

#: The largest counter a state may hold (epochs, datapoints read, ...): 2**53, the largest integer
#: every JSON reader keeps exactly. Counters with a bound from the flow's configuration have that.
MAX_STATE_COUNT = 2 ** 53
#: How deeply a state may nest (dicts and lists): far more than any chain of flows needs, far less
#: than what would exhaust Python's recursion in ``json`` or a copy.
MAX_STATE_DEPTH = 200
_INT64 = 2 ** 63


class StateMismatchError(ValueError):
    """Raised by ``set_state()`` when the state does not belong to this flow: another flow type,
    another pipeline shape, missing, unknown or mistyped fields, numbers outside what the flow's
    configuration allows. The message names the flow (with the flows above it, ``ConcatData[1] >
    DataFromList.set_state: ...``), what it expected and what came. Nothing was changed.

    Example::

        try:
            df.set_state(saved)
        except StateMismatchError as err:
            print("checkpoint from another pipeline:", err)    # df continues as before
    """


class IntRange:
    """A state field holding an int in ``low..high`` (both included; ``high`` None:
    :data:`MAX_STATE_COUNT`).

    Example::

        check_state(self, state, {"position": IntRange(0, len(self))})
    """

    __slots__ = ("low", "high")

    def __init__(self, low: int = 0, high: Optional[int] = None):
        self.low = int(low)
        self.high = MAX_STATE_COUNT if high is None else int(high)

    def describe(self) -> str:
        if self.high == MAX_STATE_COUNT:
            return "int" if self.low == 0 else "int >= {}".format(self.low)
        return "int in {}..{}".format(self.low, self.high)

    def fits(self, value: Any) -> bool:
        return type(value) is int and self.low <= value <= self.high


#: A base seed: every random flow draws it in ``0..2**32-1``.
SEED = IntRange(0, 2 ** 32 - 1)


class ListOf:
    """A state field holding a list of at most ``most`` items, each one fitting ``item`` (an
    :class:`IntRange`); ``distinct``: no item twice, ``ascending``: each greater than the one
    before. The length is checked before any item is looked at.

    Example::

        check_state(self, state, {"held": ListOf(IntRange(0, read), most=read, ascending=True)})
    """

    __slots__ = ("item", "most", "distinct", "ascending")

    def __init__(self, item: IntRange, most: int, distinct: bool = False, ascending: bool = False):
        self.item, self.most, self.distinct, self.ascending = item, int(most), distinct, ascending

    def describe(self) -> str:
        return "list of at most {} {}{}{}".format(self.most, "ascending " if self.ascending else "",
                                                 "distinct " if self.distinct else "", self.item.describe() + "s")

    def problem(self, value: Any) -> Optional[str]:
        """Why ``value`` does not fit (None when it does)."""
        if type(value) is not list:
            return "a {}".format(type(value).__name__)
        if len(value) > self.most:
            return "a list of {} items".format(len(value))
        item = self.item
        for k, element in enumerate(value):
            if not item.fits(element):
                return "item {} is {}".format(k, _short(element))
            if self.ascending and k and element <= value[k - 1]:
                return "item {} ({}) is not greater than the one before ({})".format(k, element, value[k - 1])
        if self.distinct and not self.ascending and len(set(value)) != len(value):
            return "a list with repeated items"
        return None


# What a state field may be: a type, a tuple of types, an IntRange, a ListOf, or a tuple of an
# IntRange and NoneType (an int or None).
FieldType = Union[type, Tuple[Any, ...], IntRange, ListOf]


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, (int, float, str, bool, type(None))) else "a " + type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(kind: FieldType) -> str:
    if isinstance(kind, (IntRange, ListOf)):
        return kind.describe()
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("None" if k is type(None) else k.describe() if isinstance(k, IntRange)
                       else k.__name__ for k in kinds)


def _field_problem(value: Any, kind: FieldType) -> Optional[str]:
    """Why ``value`` does not fit ``kind`` (None when it does). A plain ``int`` is an
    ``IntRange(0, MAX_STATE_COUNT)``; ``int`` never accepts a bool."""
    if isinstance(kind, ListOf):
        return kind.problem(value)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if k is int:
            k = IntRange()
        if isinstance(k, IntRange):
            if k.fits(value):
                return None
        elif k is type(None):
            if value is None:
                return None
        elif isinstance(value, k) and not (isinstance(value, bool) and k is not bool):
            return None
    return _short(value)


def check_state(flow: Any, state: Any, fields: Mapping[str, FieldType],
                optional: Sequence[str] = ()) -> Dict[str, Any]:
    """Check a state given to ``flow.set_state()``: a dict whose ``"type"`` is the flow's class name,
    which has every field of ``fields`` (name -> what it may hold: a type, a tuple of types, an
    :class:`IntRange` or a :class:`ListOf`; a plain ``int`` is a count in ``0..2**53``) and no
    other field (those in ``optional`` may be missing).

    Returns a shallow copy of the state; raises :class:`StateMismatchError` naming the flow, the
    expected fields and what came. Every library flow checks its fields with this one function.
    Fields typed ``dict`` (the inputs' states) are checked by :func:`check_input_state`.

    Example::

        def _check_state(self, state, plan):
            state = check_state(self, state, {"epoch": int, "position": IntRange(0, len(self))})
    """
    name = type(flow).__name__
    expected = ", ".join("{} ({})".format(key, _describe(kind)) for key, kind in fields.items())
    if not isinstance(state, Mapping):
        raise StateMismatchError("{}.set_state: expected a state dict of {} with fields {}, got {}".format(
            name, name, expected, type(state).__name__))
    came = state.get("type")
    if came != name:
        raise StateMismatchError(
            "{}.set_state: expected a state of {} (fields {}), got a state of {} (keys {}); was it saved "
            "from a different pipeline?".format(name, name, expected, _name(came), _keys(state)))
    for key, kind in fields.items():
        if key not in state:
            if key in optional:
                continue
            raise StateMismatchError("{}.set_state: the state has no field {!r} (expected fields {}; "
                                     "got keys {})".format(name, key, expected, _keys(state)))
        problem = _field_problem(state[key], kind)
        if problem is not None:
            raise StateMismatchError("{}.set_state: field {!r} must be {}, got {}".format(
                name, key, _describe(kind), problem))
    if len(state) > len(fields) + 1 or any(key != "type" and key not in fields for key in state):
        unknown = [key for key in state if key != "type" and key not in fields]
        raise StateMismatchError("{}.set_state: the state has fields this flow does not have: {} (expected "
                                 "fields {}); was it saved by another version or pipeline?".format(
                                     name, _keys(unknown), expected))
    return dict(state)


def _name(value: Any) -> str:
    return value if isinstance(value, str) and len(value) <= 60 else _short(value)


def _keys(keys: Any) -> str:
    shown = [repr(key) if isinstance(key, str) and len(key) <= 60 else _short(key) for key in list(keys)[:20]]
    return "[" + ", ".join(shown) + (", ..." if len(keys) > 20 else "") + "]"


class StatePlan:
    """The changes a checked state makes, applied only once every part of it was checked.

    Example::

        plan = StatePlan()
        flow._check_state(state, plan)       # raises StateMismatchError, changes nothing
        plan.apply()                         # changes everything (cannot fail)
    """

    __slots__ = ("_first", "_then")

    def __init__(self) -> None:
        self._first: List[Callable[[], None]] = []     # set_state() of flows that check their own states
        self._then: List[Callable[[], None]] = []

    def then(self, change: Callable[[], None]) -> None:
        """Register a change made by :meth:`apply` (after every check passed)."""
        self._then.append(change)

    def first(self, change: Callable[[], None]) -> None:
        """Register a change that may still raise (a user flow's own ``set_state``): run before
        every :meth:`then` change, so its refusal leaves the library flows unchanged."""
        self._first.append(change)

    def apply(self) -> None:
        for change in self._first:
            change()
        for change in self._then:
            change()


def two_phase(flow: Any) -> Optional[Callable[[Any, StatePlan], None]]:
    """``flow._check_state`` when ``flow`` restores in two phases (its ``set_state`` is the
    library's), else None."""
    cls = type(flow)
    if not getattr(getattr(cls, "set_state", None), "_inputpipe_two_phase", False):
        return None
    if not getattr(getattr(cls, "get_state", None), "_inputpipe_resumable", True):
        return None
    return getattr(flow, "_check_state", None)


def check_input_state(owner: Any, flow: Any, state: Any, plan: StatePlan, where: str = "") -> None:
    """Check ``state`` for ``flow``, an input of ``owner``, registering its changes in ``plan``.
    A refusal names the path: ``"Owner{where} > Input.set_state: ..."`` (``where``: e.g. ``[1]``
    for the second of several inputs).

    Example::

        for k, (df, s) in enumerate(zip(self.df_lists, state["inputs"])):
            check_input_state(self, df, s, plan, "[{}]".format(k))
    """
    try:
        check = two_phase(flow)
        if check is not None:
            check(state, plan)
        else:
            check_plain_state(flow, state)
            plan.first(lambda: flow.set_state(state))
    except StateMismatchError as err:
        raise StateMismatchError("{}{} > {}".format(type(owner).__name__, where, err)) from None


def check_plain_state(flow: Any, state: Any) -> None:
    """Check that ``state`` is plain JSON-like data a checkpoint can hold: dicts with str keys,
    lists, tuples, str, finite floats, None, bools and ints of at most 64 bits, nested at most
    :data:`MAX_STATE_DEPTH` deep. Walks without recursion, so any depth is refused quickly.

    Example::

        check_plain_state(df, {"type": "MyFlow", "position": 3})
    """
    name = type(flow).__name__
    todo: List[Tuple[Any, int, Tuple[str, ...]]] = [(state, 1, ())]
    while todo:
        value, depth, trail = todo.pop()
        if isinstance(value, (dict, list, tuple)):
            if isinstance(value, dict) and isinstance(value.get("type"), str) and len(trail) < _TRAIL:
                trail = trail + (_name(value["type"]),)
            if depth > MAX_STATE_DEPTH:
                raise StateMismatchError("{}.set_state: the state nests deeper than {} levels (in {} ...); a state is "
                                         "a small dict of numbers".format(name, MAX_STATE_DEPTH, " > ".join(trail)))
            if isinstance(value, dict):
                for key in value:
                    if type(key) is not str:
                        raise StateMismatchError("{}.set_state: the state{} has a key {} that is not a str".format(
                            name, _inside(trail), _short(key)))
                todo.extend((item, depth + 1, trail) for item in value.values())
            else:
                todo.extend((item, depth + 1, trail) for item in value)
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        elif type(value) is int:
            if not -_INT64 <= value < _INT64:
                raise StateMismatchError("{}.set_state: the state{} holds an int of more than 64 bits ({} bits)".format(
                    name, _inside(trail), value.bit_length()))
        elif type(value) is float:
            if not math.isfinite(value):
                raise StateMismatchError("{}.set_state: the state{} holds {!r}, not a JSON number".format(
                    name, _inside(trail), value))
        else:
            raise StateMismatchError("{}.set_state: the state{} holds a {}; a state holds only dicts, lists, str, "
                                     "numbers, bools and None".format(name, _inside(trail), type(value).__name__))


# How many flow names an error about a nested value lists.
_TRAIL = 6


def _inside(trail: Tuple[str, ...]) -> str:
    return " (in {})".format(" > ".join(trail)) if len(trail) > 1 else ""
