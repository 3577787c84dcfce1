"""tensorpack's older argument names, accepted with a DeprecationWarning.

Before 0.9 tensorpack named counts ``nr_proc``, ``nr_thread``, ``nr_prefetch`` and took some
options positionally that are keyword-only now. Constructors that had those names take them in
``**old_names`` and map each one with :func:`renamed_argument`; :func:`no_other_arguments`
then rejects anything else the way Python would.

The warning points at the user's line (the first caller outside inputpipe), so Python's default
filters show it in scripts and pytest shows it in tests.

Example::

    def __init__(self, ds, num_proc=1, **old_names):
        num_proc = renamed_argument("MyFlow", old_names, "nr_proc", "num_proc", num_proc, 1)
        no_other_arguments("MyFlow", old_names)
"""
import sys
import warnings
from types import FrameType
from typing import Any, Dict, Optional

__all__ = ["renamed_argument", "no_other_arguments", "warn_deprecated"]


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
