"""The tuner's configuration as Python code to paste: the chain rebuilt with the chosen classes
and counts, with the user's own names for their functions. Used by
:mod:`inputpipe.dataflow.tuning`; private.

A stage the tuner only copies is written from its constructor's signature, each argument read
from the attribute of the same name (or with a leading underscore). A value that cannot be
written as a literal or a name (a list of datapoints, a lambda) gets a name of its own, listed
in a comment at the top and in ``names`` (the name -> the object), so ``exec(code, names)``
builds the same chain.

Example::

    code = render(chain, forms, cache_at=None)
    namespace = dict(code.names)
    exec(code.text, namespace)
    df = namespace["df"]
"""
import inspect
import keyword
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set

from .chain import BATCH, CACHE, FILTER, SERIAL, THREADS, WORK, Chain, Form, Unit, _inputs, new_work_options

_LITERALS = (bool, int, float, str, bytes, type(None))
_MAX_LITERAL_CHARS = 120
# Defaults of the parallel maps' options: not written when equal.
_OPTION_DEFAULTS = (("buffer_size", 200), ("strict", False), ("ordered", False), ("map_timeout", None))
_UNSET = object()


@dataclass
class Code:
    """The code, the objects its names stand for, and the names the user must define."""

    text: str
    names: Dict[str, Any] = field(default_factory=dict)
    fill_in: Dict[str, str] = field(default_factory=dict)


def _snake(name: str) -> str:
    text = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower().strip("_")
    return text if text.isidentifier() and not keyword.iskeyword(text) else "value"


class _Writer:
    def __init__(self) -> None:
        self.names: Dict[str, Any] = {}
        self.fill_in: Dict[str, str] = {}
        self.imports: Dict[str, Set[str]] = {}
        self.reserved: Set[str] = {"df"}
        self.defs: List[str] = []
        self.lines: List[str] = []

    def _free(self, preferred: str) -> str:
        base = preferred if preferred.isidentifier() and not keyword.iskeyword(preferred) else "value"
        name, k = base, 2
        while name in self.names or name in self.reserved:
            name, k = "{}_{}".format(base, k), k + 1
        return name

    def bind(self, preferred: str, obj: Any, describe: Optional[str] = None) -> str:
        """A name in the code for ``obj`` (the same one for the same object)."""
        for name, value in self.names.items():
            if value is obj:
                return name
        name = self._free(preferred)
        self.names[name] = obj
        if describe is not None or name != preferred:
            self.fill_in[name] = describe or "your {} (another object is named {} here)".format(preferred, preferred)
        return name

    def cls(self, cls: type) -> str:
        """The class's name, imported when it is inputpipe's."""
        module = cls.__module__
        if module.startswith("inputpipe."):
            import inputpipe.dataflow as package

            home = "inputpipe.dataflow" if getattr(package, cls.__name__, None) is cls else module
            self.imports.setdefault(home, set()).add(cls.__name__)
            self.reserved.add(cls.__name__)
            return cls.__name__
        return self.bind(cls.__name__, cls)

    def value(self, value: Any, role: str, owner: str) -> str:
        """``value`` as an expression: a literal, the user's name for a function, or a name bound to it."""
        if isinstance(value, _LITERALS) and len(repr(value)) <= _MAX_LITERAL_CHARS:
            return repr(value)
        if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
            return repr(value.item())
        if isinstance(value, (tuple, list)) and len(value) <= 16 \
                and all(isinstance(v, _LITERALS) for v in value) and len(repr(value)) <= _MAX_LITERAL_CHARS:
            return repr(value)
        if isinstance(value, type):
            return self.cls(value)
        if inspect.ismethod(value):
            holder = self.bind(_snake(type(value.__self__).__name__), value.__self__,
                               "your {} whose method {} is used".format(type(value.__self__).__name__, value.__name__))
            return "{}.{}".format(holder, value.__name__)
        name = getattr(value, "__name__", None)
        if (inspect.isfunction(value) or inspect.isbuiltin(value)) and isinstance(name, str):
            if name == "<lambda>" and inspect.isfunction(value):
                code = value.__code__
                return self.bind(role, value, "the lambda at {}:{} ({} of {})".format(
                    code.co_filename, code.co_firstlineno, role, owner))
            module = getattr(value, "__module__", "") or ""
            if module.startswith("inputpipe."):
                self.imports.setdefault(module, set()).add(name)
                self.reserved.add(name)
                return name
            return self.bind(name, value)
        size = " ({} items)".format(len(value)) if hasattr(value, "__len__") else ""
        return self.bind(role, value, "the {} given as {} to {}{}".format(type(value).__name__, role, owner, size))

    def call(self, flow: Any, input_expr: Optional[str]) -> str:
        """``Class(input, arguments...)`` for a stage, its arguments read from its attributes."""
        cls = type(flow)
        try:
            parameters = list(inspect.signature(cls).parameters.values())
        except (TypeError, ValueError):
            return self.bind(_snake(cls.__name__), flow, "your {} (its arguments could not be read)".format(cls.__name__))
        args = []
        for p in parameters:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if input_expr is not None and p.name in ("ds", "df"):
                args.append(input_expr)
                continue
            value = _attribute(flow, p.name)
            if value is _UNSET:
                if p.default is p.empty:
                    name = self._free(p.name)
                    self.reserved.add(name)
                    self.fill_in[name] = "the {} argument of your {} (not kept under that name)".format(
                        p.name, cls.__name__)
                    args.append(name if p.kind != p.KEYWORD_ONLY else "{}={}".format(p.name, name))
                continue
            if p.default is not p.empty and _same(value, p.default):
                continue
            expr = self.value(value, p.name, cls.__name__)
            args.append(expr if p.default is p.empty and p.kind != p.KEYWORD_ONLY else "{}={}".format(p.name, expr))
        return "{}({})".format(self.cls(cls), ", ".join(args))

    def text(self) -> str:
        out = []
        for module in sorted(self.imports, key=lambda m: (m != "inputpipe.dataflow", m)):
            out.append("from {} import {}".format(module, ", ".join(sorted(self.imports[module]))))
        if self.fill_in:
            out.append("")
            out.append("# Names tune could not write out (define them as in your code):")
            out.extend("#   {}: {}".format(name, what) for name, what in self.fill_in.items())
        for block in self.defs:
            out += ["", block.rstrip("\n"), ""]
        if not self.defs:
            out.append("")
        out.extend(self.lines)
        return "\n".join(out) + "\n"


def _attribute(flow: Any, name: str) -> Any:
    attrs = vars(flow)
    for key in (name, "_" + name):
        if key in attrs:
            return attrs[key]
    return _UNSET


def _same(value: Any, default: Any) -> bool:
    if value is default:
        return True
    return isinstance(value, _LITERALS) and isinstance(default, _LITERALS) and type(value) is type(default) \
        and value == default


def _render_base(writer: _Writer, flow: Any) -> None:
    inputs = _inputs(flow)
    if not inputs:
        writer.lines.append("df = {}".format(writer.call(flow, None)))
    elif len(inputs) == 1 and inputs[0] is getattr(flow, "ds", None):
        _render_base(writer, flow.ds)
        writer.lines.append("df = {}".format(writer.call(flow, "df")))
    else:
        name = writer.bind("source", flow, "your {} with its inputs (the part of the chain tune ran as it is)".format(
            type(flow).__name__))
        writer.lines.append("df = {}".format(name))


def _work_func(writer: _Writer, unit: Unit) -> str:
    """The map function of a work unit as a name; for a MapDataComponent, a function of the whole
    datapoint written out (a parallel map applies its function to whole datapoints)."""
    owner = type(unit.origin).__name__
    func = writer.value(unit.user_func, "map_func", owner)
    if unit.index is None:
        return func
    index = writer.value(unit.index, "index", owner)
    name = writer._free("{}_at_{}".format(func.split(".")[-1], re.sub(r"\W", "_", str(unit.index))))
    writer.reserved.add(name)
    writer.defs.append(
        "def {name}(dp):\n"
        "    \"\"\"MapDataComponent(df, {func}, {index}) as a function of the whole datapoint.\"\"\"\n"
        "    value = {func}(dp[{index}])\n"
        "    if value is None:\n"
        "        return None\n"
        "    dp = dict(dp) if isinstance(dp, dict) else list(dp)\n"
        "    dp[{index}] = value\n"
        "    return dp\n".format(name=name, func=func, index=index))
    return name


def _auto_text(writer: _Writer, unit: Unit) -> str:
    """The worker count of an ``"auto"`` stage: ``'auto'``, or the user's Autoscale settings."""
    defaults = vars(type(unit.auto)())
    mine = vars(unit.auto)
    if all(mine.get(key) == value for key, value in defaults.items() if not key.startswith("_")):
        return repr("auto")
    return writer.value(unit.auto, "autoscale", type(unit.origin).__name__)


def _options_text(unit: Unit, cached: bool) -> str:
    options = new_work_options(unit, cached)
    parts = ["{}={!r}".format(key, options[key]) for key, default in _OPTION_DEFAULTS
             if key in options and options[key] != default]
    return "".join(", " + p for p in parts)


def _render_unit(writer: _Writer, units: Sequence[Unit], forms: Sequence[Form], k: int, cached: bool) -> int:
    """Write unit ``k`` (``cached``: a CacheData will be on its output or above it); returns how
    many units it took (2 when it batches in its workers)."""
    from .._core.buffered import CacheData
    from ..batch import BatchData
    from ..parallel_map import MultiProcessMapAndBatchData, MultiProcessMapData, MultiThreadMapData
    from ..transforms import FilterData, MapData, MapDataComponent

    unit, form = units[k], forms[k]
    taken = 1
    if unit.kind == WORK and form.kind == SERIAL:
        if unit.index is not None:
            index = "" if unit.index == 0 else ", " + writer.value(unit.index, "index", "MapDataComponent")
            line = "{}(df, {}{})".format(writer.cls(MapDataComponent),
                                         writer.value(unit.user_func, "func", "MapDataComponent"), index)
        else:
            line = "{}(df, {})".format(writer.cls(MapData), writer.value(unit.user_func, "func", "MapData"))
    elif unit.kind == WORK:
        func = _work_func(writer, unit)
        count = str(form.workers) if unit.auto is None else _auto_text(writer, unit)
        if form.kind == THREADS:
            line = "{}(df, {}, {}{})".format(writer.cls(MultiThreadMapData), count, func, _options_text(unit, cached))
        elif form.merge_batch:
            line = "{}(df, {}, {}, batch_size={}{})".format(
                writer.cls(MultiProcessMapAndBatchData), count, func, units[k + 1].batch_size, _options_text(unit, cached))
            taken = 2
        else:
            line = "{}(df, {}, {}{})".format(writer.cls(MultiProcessMapData), count, func, _options_text(unit, cached))
    elif unit.kind == BATCH:
        extra = (", remainder=True" if unit.remainder else "") + (", use_list=True" if unit.use_list else "")
        line = "{}(df, {}{})".format(writer.cls(BatchData), unit.batch_size, extra)
    elif unit.kind == FILTER:
        line = "{}(df, {})".format(writer.cls(FilterData), writer.value(unit.user_func, "predicate", "FilterData"))
    elif unit.kind == CACHE:
        line = "{}(df{})".format(writer.cls(CacheData), ", shuffle=True" if unit.shuffle else "")
    else:
        line = writer.call(unit.origin, "df")
    writer.lines.append("df = " + line)
    return taken


def render(chain: Chain, forms: Sequence[Form], cache_at: Optional[int] = None) -> Code:
    """The chain in ``forms`` as code (the base as the user built it, when it can be written),
    with a CacheData on the output of unit ``cache_at`` (-1: of the base)."""
    from .._core.buffered import CacheData

    writer = _Writer()
    _render_base(writer, chain.base)
    if cache_at == -1:
        writer.lines.append("df = {}(df)".format(writer.cls(CacheData)))
    k = 0
    while k < len(chain.units):
        k += _render_unit(writer, chain.units, forms, k, cached=cache_at is not None and k <= cache_at)
        if cache_at == k - 1:
            writer.lines.append("df = {}(df)".format(writer.cls(CacheData)))
    return Code(writer.text(), dict(writer.names), dict(writer.fill_in))
