"""Rejecting a constructor argument of the wrong kind with one error that old code still catches.

tensorpack raised ``ValueError`` for "this is not a DataFlow / not callable / not a dataset";
Python code usually raises ``TypeError`` for that. :class:`ArgumentKindError` is both, so code
written against either keeps catching it. :func:`require_dataflow` and :func:`require_callable`
are the common checks.

Example::

    from inputpipe.utils.arguments import ArgumentKindError, require_dataflow

    def __init__(self, ds):
        self.ds = require_dataflow(ds, "QueueInput")
"""
from typing import Any

__all__ = ["ArgumentKindError", "require_dataflow", "require_callable", "is_dataflow"]


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
