"""``python -m inputpipe.doctor``: name the slow stage of a script's DataFlow.

The target is ``path/to/script.py:factory`` (the script is imported as a module, not run as
``__main__``, so its training code under ``if __name__ == "__main__":`` does not start) or
``package.module:factory``. The factory is called without arguments and must return the
DataFlow; the doctor profiles it (:func:`inputpipe.dataflow.profiling.profile`), prints the
table, the limiting stage and a suggestion, optionally writes them as JSON, and closes the flow.

Example::

    python -m inputpipe.doctor train.py:get_dataflow --seconds 20 --json doctor.json
    python -m inputpipe.doctor mypkg.data:make_train_flow
"""
# ruff: noqa: T201 - printing the report is this command's job (the library itself never prints)
import argparse
import importlib
import importlib.util
import inspect
import json
import os
import sys
from typing import Any, Callable, List, Optional

__all__ = ["load_factory", "main"]

_PROG = "python -m inputpipe.doctor"


class TargetError(ValueError):
    """The ``script:function`` target cannot be loaded; the message says why.

    Example::

        try:
            load_factory("train.py:get_df")
        except TargetError as err:
            print(err)
    """


def _load_module(spec_text: str) -> Any:
    if spec_text.endswith(".py") or os.sep in spec_text or "/" in spec_text:
        path = os.path.abspath(spec_text)
        if not os.path.isfile(path):
            raise TargetError("the script {!r} does not exist".format(spec_text))
        name = "_inputpipe_doctor_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TargetError("cannot import {!r} as a Python module".format(spec_text))
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(path))      # the script's own imports of its neighbours
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(spec_text)
    except ModuleNotFoundError as err:
        if err.name and spec_text.startswith(err.name):
            raise TargetError("no module named {!r} (give a module importable from here, or a path to a "
                              ".py file)".format(spec_text)) from None
        raise


def load_factory(target: str) -> Callable[[], Any]:
    """The function named by ``target`` (``script.py:function`` or ``module:function``);
    :class:`TargetError` with a one-line reason when it cannot be found.

    Example::

        factory = load_factory("my_pipeline.py:get_dataflow")
        df = factory()
    """
    module_text, sep, func_name = target.rpartition(":")
    if not sep or not module_text or not func_name or not func_name.isidentifier():
        raise TargetError("expected SCRIPT.py:FUNCTION or MODULE:FUNCTION, got {!r}".format(target))
    module = _load_module(module_text)
    factory = getattr(module, func_name, None)
    if factory is None:
        functions = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                           and getattr(v, "__module__", None) == module.__name__)
        raise TargetError("{} has no function {!r} (it defines: {})".format(
            module_text, func_name, ", ".join(functions) or "no public functions"))
    if not callable(factory):
        raise TargetError("{}:{} is not callable (it is of type {}); expected a function that returns a DataFlow".format(
            module_text, func_name, type(factory).__name__))
    return factory


def _required_parameters(func: Callable[..., Any]) -> List[str]:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):       # no signature to read (some builtins): just call it
        return []
    return [p.name for p in parameters if p.default is p.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG, description="Run a DataFlow once and name the stage that limits its throughput.")
    parser.add_argument("target", help="SCRIPT.py:FUNCTION or MODULE:FUNCTION; the function returns the DataFlow")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds to measure (default 20)")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds run before measuring (default 2)")
    parser.add_argument("--max-datapoints", type=int, default=None, help="stop after this many output datapoints")
    parser.add_argument("--stall-timeout", type=float, default=30.0,
                        help="report the stage the chain is stuck in after this many seconds without output")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the report as JSON to PATH")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``python -m inputpipe.doctor``; returns the exit code (0: profiled,
    1: the DataFlow failed, 2: bad arguments or target)."""
    from .dataflow.profiling import profile

    parser = _parser()
    args = parser.parse_args(argv)
    for name in ("seconds", "stall_timeout"):
        if not getattr(args, name) > 0:
            parser.error("--{} must be > 0, got {}".format(name.replace("_", "-"), getattr(args, name)))
    try:
        factory = load_factory(args.target)
    except TargetError as err:
        parser.error(str(err))
    required = _required_parameters(factory)
    if required:
        parser.error("{} must be callable without arguments, but it requires {}".format(
            args.target, ", ".join(required)))
    df = factory()
    if not (hasattr(df, "__iter__") and callable(getattr(df, "reset_state", None))):
        parser.error("{} returned a {}, not a DataFlow".format(args.target, type(df).__name__))
    try:
        report = profile(df, args.seconds, warmup=args.warmup, max_datapoints=args.max_datapoints,
                         stall_timeout=args.stall_timeout)
    finally:
        close = getattr(df, "close", None)
        if callable(close):
            close()
    print("{}: {}".format(_PROG, args.target))
    print(report)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report.to_dict(), fh, indent=2)
        print("JSON written to {}".format(args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
