"""The ``repr()`` of augmentors and transforms: ``imgaug.ClassName(arg=value, ...)``, shared by
:mod:`.base` and :mod:`.transform` (private)."""
import inspect
import pprint
from typing import Any, Dict


def _same(value: Any, default: Any) -> bool:
    if value is default:
        return True
    try:
        return type(value) is type(default) and bool(value == default)
    except (TypeError, ValueError):     # e.g. arrays
        return False


def default_repr(obj: Any) -> str:
    """``imgaug.ClassName(arg=value, ...)``: the constructor arguments that differ from their defaults.

    Reads the attributes named like the constructor's parameters (what ``_init(locals())``
    stores); falls back to ``object.__repr__`` when one is missing or the constructor takes
    ``*args``/``**kwargs``.
    """
    name = type(obj).__name__
    try:
        spec = inspect.getfullargspec(type(obj).__init__)
    except TypeError:
        return object.__repr__(obj)
    if spec.varargs is not None or spec.varkw is not None:
        return object.__repr__(obj)
    fields = list(spec.args[1:]) + list(spec.kwonlyargs)
    defaults: Dict[str, Any] = {}
    if spec.defaults:
        defaults.update(zip(spec.args[len(spec.args) - len(spec.defaults):], spec.defaults))
    if spec.kwonlydefaults:
        defaults.update(spec.kwonlydefaults)
    parts = []
    for field in fields:
        if field not in obj.__dict__ and not hasattr(type(obj), field):
            return object.__repr__(obj)
        value = getattr(obj, field)
        if field in defaults and _same(value, defaults[field]):
            continue
        parts.append("{}={}".format(field, pprint.pformat(value)))
    return "imgaug.{}({})".format(name, ", ".join(parts))
