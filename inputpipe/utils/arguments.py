"""Constructor arguments: one error for an argument of the wrong kind, and tensorpack's older names.

tensorpack raised ``ValueError`` for "this is not a DataFlow / not callable / not a dataset";
Python code usually raises ``TypeError`` for that. :class:`ArgumentKindError` is both, so code
written against either keeps catching it. :func:`require_dataflow` and :func:`require_callable`
are the common checks.

Before 0.9 tensorpack named counts ``nr_proc``, ``nr_thread``, ``nr_prefetch`` and took some
options positionally that are keyword-only now. Constructors that had those names take them in
``**old_names`` and map each one with :func:`renamed_argument` (a ``DeprecationWarning`` pointing
at the user's line: the first caller outside inputpipe); :func:`no_other_arguments` then rejects
anything else the way Python would.

Example::

    from inputpipe.utils.arguments import no_other_arguments, renamed_argument, require_dataflow

    def __init__(self, ds, num_proc=1, **old_names):
        self.ds = require_dataflow(ds, "MyFlow")
        num_proc = renamed_argument("MyFlow", old_names, "nr_proc", "num_proc", num_proc, 1)
        no_other_arguments("MyFlow", old_names)
"""
import sys
import warnings
from types import FrameType
from typing import Any, Dict, Optional

__all__ = ["ArgumentKindError", "require_dataflow", "require_callable", "is_dataflow", "renamed_argument",
           "no_other_arguments", "warn_deprecated"]


class ArgumentKindError(TypeError, ValueError):
    """An argument is not of the kind a component takes (matches ``TypeError`` and ``ValueError``).

    Example::

        try:
            QueueInput([1, 2, 3])
        except ValueError as err:          # tensorpack's type; TypeError matches too
            print(err)
    """


def _describe(value: Any) -> str:
    if isinstance(value, type):
        return "the class {} (make an instance)".format(value.__name__)
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return "{} {}".format(type(value).__name__, text)


def is_dataflow(value: Any) -> bool:
    """True for anything used like a DataFlow: iterable, with a callable ``reset_state`` (an
    instance: a DataFlow class has both too, but is not a flow)."""
    return (not isinstance(value, type) and callable(getattr(value, "reset_state", None))
            and callable(getattr(value, "__iter__", None)))


def require_dataflow(value: Any, component: str) -> Any:
    """``value`` if it is a DataFlow (see :func:`is_dataflow`), else :class:`ArgumentKindError`."""
    if not is_dataflow(value):
        raise ArgumentKindError("{} takes a DataFlow (an iterable with reset_state()), got {}".format(
            component, _describe(value)))
    return value


def require_callable(value: Any, component: str, argument: str) -> Any:
    """``value`` if it is callable, else :class:`ArgumentKindError` naming ``argument``."""
    if not callable(value):
        raise ArgumentKindError("{}: {} must be callable, got {}".format(component, argument, _describe(value)))
    return value


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside inputpipe, as seen from ``warnings.warn``
    called in :func:`warn_deprecated`."""
    level = 1
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "inputpipe":
        frame = frame.f_back
        level += 1
    return level


def warn_deprecated(message: str) -> None:
    """A ``DeprecationWarning`` attributed to the user's code."""
    warnings.warn(message, DeprecationWarning, stacklevel=_user_stacklevel())


def renamed_argument(component: str, old_names: Dict[str, Any], old: str, new: str, value: Any,
                     default: Any) -> Any:
    """``value``, or the value passed under the old name ``old`` (removed from ``old_names``,
    with a DeprecationWarning). Passing both names is a ``TypeError``.

    Example::

        num_proc = renamed_argument("PrefetchDataZMQ", {"nr_proc": 4}, "nr_proc", "num_proc", 1, 1)  # 4
    """
    if old not in old_names:
        return value
    old_value = old_names.pop(old)
    if value is not default and value != default:
        raise TypeError("{}: got both {}={!r} and its old name {}={!r}; pass only {}=".format(
            component, new, value, old, old_value, new))
    warn_deprecated("{}: the argument {}= is tensorpack's old name for {}=; it still works but is "
                    "deprecated".format(component, old, new))
    return old_value


def no_other_arguments(component: str, old_names: Dict[str, Any]) -> None:
    """Raise the ``TypeError`` Python raises for an unexpected keyword argument."""
    if old_names:
        raise TypeError("{}() got an unexpected keyword argument {!r}".format(component, sorted(old_names)[0]))
