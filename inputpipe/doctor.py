"""``python -m inputpipe.doctor``: name the slow stage of a script's DataFlow.

The target is ``path/to/script.py:NAME`` (the script is imported as a module, not run as
``__main__``, so its training code under ``if __name__ == "__main__":`` does not start) or
``package.module:NAME``. NAME is a function that returns the DataFlow (called with the arguments
given after the target, each a Python literal or else a string; ``name=value`` for a keyword) or
a DataFlow made when the module is imported. Without ``:NAME`` the doctor takes the module's one
DataFlow object, or else its function with a usual name (``get_dataflow``, ``get_data``, ...).
The doctor profiles the flow (:func:`inputpipe.dataflow.profiling.profile`), prints the table,
the limiting stage and a suggestion, optionally writes them as JSON, and closes the flow. With
``--tune`` it chooses a configuration for the whole chain instead
(:func:`inputpipe.dataflow.tuning.tune`) and prints it as code, with the rate to expect and its
limit.

Example::

    python -m inputpipe.doctor train.py:get_dataflow --seconds 20 --json doctor.json
    python -m inputpipe.doctor mypkg.data:make_train_flow
    python -m inputpipe.doctor cifar.py:get_data train batch_size=64
    python -m inputpipe.doctor --tune train.py:get_dataflow --consumer-rate 50
"""
# ruff: noqa: T201 - printing the report is this command's job (the library itself never prints)
import argparse
import ast
import importlib
import importlib.util
import inspect
import json
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from .utils.arguments import is_dataflow

__all__ = ["load_factory", "parse_arguments", "main"]

_PROG = "python -m inputpipe.doctor"
#: Functions the doctor looks for when the target names none (first found wins).
USUAL_FACTORY_NAMES = ("get_dataflow", "get_data", "get_train_dataflow", "get_train_data", "get_dataset",
                       "make_dataflow", "build_dataflow", "dataflow")
#: Seconds the doctor waits for ``df.close()`` before exiting without it.
CLOSE_TIMEOUT = 10.0
#: Threads of the doctor that may still be blocked in the user's flow when it is done.
_OWN_THREADS = ("inputpipe-profile", "inputpipe-doctor-close", "inputpipe-tune-cache-check")


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


def _public(module: Any) -> Dict[str, Any]:
    return {n: v for n, v in vars(module).items() if not n.startswith("_")}


def _own_functions(module: Any) -> List[str]:
    return sorted(n for n, v in _public(module).items() if callable(v) and not isinstance(v, type)
                  and getattr(v, "__module__", None) == module.__name__)


class _ExistingFlow:
    """A DataFlow that the module made when imported, standing in for a factory that returns it."""

    def __init__(self, flow: Any, name: str):
        self.flow = flow
        self.__name__ = name

    def __call__(self) -> Any:
        return self.flow


def _discover(module: Any, module_text: str) -> Callable[..., Any]:
    """The module's one DataFlow object, or else its function with a usual name."""
    flows = sorted(n for n, v in _public(module).items() if is_dataflow(v))
    if len(flows) == 1:
        return _ExistingFlow(getattr(module, flows[0]), flows[0])
    for name in USUAL_FACTORY_NAMES:
        candidate = getattr(module, name, None)
        if callable(candidate) and not isinstance(candidate, type):
            return candidate
    found = "DataFlows: {}; ".format(", ".join(flows)) if flows else ""
    raise TargetError("name the DataFlow or the function that makes it: {}:NAME (no :NAME given, and {} {}"
                      "functions: {})".format(module_text, module_text, "has several " + found if flows else "has ",
                                              ", ".join(_own_functions(module)) or "none"))


def load_factory(target: str) -> Callable[..., Any]:
    """The function that makes the DataFlow named by ``target`` (``script.py:NAME``,
    ``module:NAME``, or without ``:NAME`` the module's one DataFlow or its function with a usual
    name; a NAME that is a DataFlow gives a function returning it). :class:`TargetError` with a
    one-line reason when it cannot be found.

    Example::

        factory = load_factory("my_pipeline.py:get_dataflow")
        df = factory()
    """
    module_text, sep, name = target.rpartition(":")
    if not sep:
        module_text, name = target, ""
    if not module_text or (sep and not name.isidentifier()):
        raise TargetError("expected SCRIPT.py:NAME, MODULE:NAME, SCRIPT.py or MODULE, got {!r}".format(target))
    module = _load_module(module_text)
    if not name:
        return _discover(module, module_text)
    factory = getattr(module, name, None)
    if factory is None:
        raise TargetError("{} has no function or DataFlow {!r} (it defines: {})".format(
            module_text, name, ", ".join(_own_functions(module)) or "no public functions"))
    if is_dataflow(factory):
        return _ExistingFlow(factory, name)
    if not callable(factory):
        raise TargetError("{}:{} is neither a DataFlow nor callable (it is of type {}); expected a function that "
                          "returns a DataFlow".format(module_text, name, type(factory).__name__))
    return factory


def parse_arguments(texts: List[str]) -> Tuple[List[Any], Dict[str, Any]]:
    """The factory's arguments from the command line: ``value`` (positional) or ``name=value``
    (keyword); each value is read as a Python literal (``64``, ``0.5``, ``True``, ``None``,
    ``'x'``, ``[1, 2]``) or, failing that, kept as the string. Literals only: nothing is executed.

    Example::

        assert parse_arguments(["train", "batch_size=64"]) == (["train"], {"batch_size": 64})
    """
    args: List[Any] = []
    kwargs: Dict[str, Any] = {}
    for text in texts:
        key, eq, value = text.partition("=")
        if eq and key.isidentifier():
            if key in kwargs:
                raise TargetError("the argument {}= is given twice".format(key))
            kwargs[key] = _literal(value)
        elif kwargs:
            raise TargetError("the positional argument {!r} comes after keyword arguments".format(text))
        else:
            args.append(_literal(text))
    return args, kwargs


def _shown(args: List[Any], kwargs: Dict[str, Any]) -> str:
    parts = [repr(a) for a in args] + ["{}={!r}".format(k, v) for k, v in kwargs.items()]
    return "({})".format(", ".join(parts)) if parts else "no arguments"


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _call_problem(func: Callable[..., Any], args: List[Any], kwargs: Dict[str, Any]) -> Optional[str]:
    """Why ``func(*args, **kwargs)`` does not fit its signature (None when it does or is unknown)."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):       # no signature to read (some builtins): just call it
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError as err:
        return str(err)
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG, description="Run a DataFlow once and name the stage that limits its throughput "
        "(with --tune: choose a configuration for the whole chain).")
    parser.add_argument("target", help="SCRIPT.py:NAME or MODULE:NAME, NAME a function that returns the DataFlow "
                        "or a DataFlow; without :NAME the module's one DataFlow or its get_dataflow/get_data/...")
    parser.add_argument("arguments", nargs="*", metavar="ARG",
                        help="arguments for the function: VALUE or NAME=VALUE, each a Python literal (64, 0.5, "
                        "True, 'x', [1, 2]) or else a string; put -- before values that start with -")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds to measure (default 20)")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds run before measuring (default 2)")
    parser.add_argument("--max-datapoints", type=int, default=None, help="stop after this many output datapoints")
    parser.add_argument("--stall-timeout", type=float, default=30.0,
                        help="report the stage the chain is stuck in after this many seconds without output")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the report as JSON to PATH")
    parser.add_argument("--tune", action="store_true",
                        help="choose a configuration for the whole chain (processes or threads and how many per "
                        "stage, where to batch, what to cache) and print it as code, with the rate to expect")
    parser.add_argument("--consumer-rate", type=float, default=None, metavar="R",
                        help="with --tune: the datapoints per second the trainer takes (default: as many as come)")
    parser.add_argument("--cpu-budget", type=int, default=None, metavar="N",
                        help="with --tune: CPUs the pipeline may use (default: the process's affinity and cgroup "
                        "quota)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``python -m inputpipe.doctor``; returns the exit code (0: profiled or tuned,
    1: the DataFlow failed or its ``reset_state()`` did not return within the stall timeout (with
    ``--tune``: or no datapoint came within it), 2: bad arguments or target)."""
    from .dataflow.profiling import profile

    parser = _parser()
    args = parser.parse_intermixed_args(argv)
    for name in ("seconds", "stall_timeout"):
        if not getattr(args, name) > 0:
            parser.error("--{} must be > 0, got {}".format(name.replace("_", "-"), getattr(args, name)))
    _check_tune_options(parser, args)
    try:
        factory = load_factory(args.target)
        call_args, call_kwargs = parse_arguments(args.arguments)
    except TargetError as err:
        parser.error(str(err))
    if isinstance(factory, _ExistingFlow) and (call_args or call_kwargs):
        parser.error("{} is a DataFlow, not a function: it takes no arguments".format(args.target))
    problem = _call_problem(factory, call_args, call_kwargs)
    if problem:
        parser.error("{} cannot be called with {} ({}): give the function's arguments after the target, "
                     "each VALUE or NAME=VALUE".format(args.target, _shown(call_args, call_kwargs), problem))
    df = factory(*call_args, **call_kwargs)
    if not is_dataflow(df):
        parser.error("{} returned a {}, not a DataFlow".format(args.target, type(df).__name__))
    if args.tune:
        return _tune(df, args)
    try:
        report = profile(df, args.seconds, warmup=args.warmup, max_datapoints=args.max_datapoints,
                         stall_timeout=args.stall_timeout)
    finally:
        _close(df)
    _show(report, "{}: {}".format(_PROG, args.target), args.json)
    if report.stalled_in is not None:
        if report.thread_left_running:
            print("The doctor exits without waiting for it.")
        return 1
    return 0


def _check_tune_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.tune:
        for name in ("consumer_rate", "cpu_budget"):
            if getattr(args, name) is not None:
                parser.error("--{} applies to --tune only".format(name.replace("_", "-")))
        return
    if args.max_datapoints is not None:
        parser.error("--max-datapoints does not apply to --tune (it measures for --seconds)")
    if args.consumer_rate is not None and not args.consumer_rate > 0:
        parser.error("--consumer-rate must be > 0, got {}".format(args.consumer_rate))
    if args.cpu_budget is not None and args.cpu_budget < 1:
        parser.error("--cpu-budget must be >= 1, got {}".format(args.cpu_budget))


def _tune(df: Any, args: argparse.Namespace) -> int:
    """``--tune``: the tuner's configuration of ``df``, printed (and written as JSON)."""
    from .dataflow.tuning import tune

    try:
        result = tune(df, args.seconds, warmup=args.warmup, consumer_rate=args.consumer_rate,
                      cpu_budget=args.cpu_budget, stall_timeout=args.stall_timeout)
    finally:
        _close(df)
    _show(result, "{} --tune: {}".format(_PROG, args.target), args.json)
    return 1 if result.stalled else 0


def _show(report: Any, title: str, json_path: Optional[str]) -> None:
    """Print ``title`` and ``report``; write ``report.to_dict()`` to ``json_path`` when given."""
    print(title)
    print(report)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as fh:
            json.dump(report.to_dict(), fh, indent=2)
        print("JSON written to {}".format(json_path))


def _close(df: Any) -> None:
    """``df.close()`` in a daemon thread, waited for up to :data:`CLOSE_TIMEOUT` seconds (a flow
    stuck in ``reset_state()`` may be stuck in ``close()`` too)."""
    close = getattr(df, "close", None)
    if not callable(close):
        return
    closer = threading.Thread(target=close, name=_OWN_THREADS[1], daemon=True)
    closer.start()
    closer.join(CLOSE_TIMEOUT)
    if closer.is_alive():
        print("{}: {}.close() did not return within {:g} s; exiting without waiting for it".format(
            _PROG, type(df).__name__, CLOSE_TIMEOUT), file=sys.stderr)


def _exit(code: int) -> None:
    """Exit with ``code``; without waiting (``os._exit``, after flushing the output) when a thread
    of the doctor is still blocked in the flow, which Python cannot stop."""
    if any(t.is_alive() and t.name in _OWN_THREADS for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())
