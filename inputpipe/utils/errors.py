"""Errors shared by the parts of inputpipe that run code in other threads and processes.

A :class:`WorkerError` for an exception raised in a worker is also an instance of that
exception's class where that class can be derived from safely (:func:`worker_error_class`), so
code written for tensorpack that catches ``ValueError``, ``KeyError`` or its own exception class
around a parallel DataFlow keeps catching it, and gets the worker's traceback with it.

Example::

    try:
        for dp in MultiProcessRunnerZMQ(df, num_proc=2):
            ...
    except WorkerError as err:
        print(err.pid, err.signal_name, err.remote_traceback)
"""
import signal
import sys
import threading
import traceback
import weakref
from typing import NamedTuple, Optional, Sequence, Tuple, Type

__all__ = ["WorkerError", "worker_error_class", "exception_type_named", "FailureReport", "failure_report",
           "error_from_exception"]


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "signal {}".format(signum)


class WorkerError(RuntimeError):
    """A worker (process or thread) of a parallel DataFlow failed.

    The message names the component and the worker, and says what happened: the exception
    raised in the worker (with its traceback text, also in ``remote_traceback``), or how the
    worker process ended (``exitcode``; ``signal_number``/``signal_name`` when it was killed).

    When the worker raised an exception, ``original_type`` is its class, and the error is an
    instance of :func:`worker_error_class` ``(original_type)``: it matches ``except WorkerError``
    and ``except original_type`` both.

    Example::

        except WorkerError as err:
            if err.signal_name == "SIGKILL":
                print("worker", err.pid, "was killed, maybe by the OOM killer")
    """

    #: The class of the exception raised in the worker (None when the worker died another way).
    original_type: Optional[type] = None

    def __new__(cls, *args, **kwargs):
        # the original class' own __new__ (if any) would expect its own arguments; the state of
        # this error is set by WorkerError.__init__ alone
        return super().__new__(cls)

    def __init__(self, component: str, worker: str, pid: Optional[int] = None,
                 exitcode: Optional[int] = None, remote_traceback: Optional[str] = None,
                 reason: Optional[str] = None, nested: Sequence[str] = ()):
        self.component = component
        self.worker = worker
        self.pid = pid
        self.exitcode = exitcode
        self.remote_traceback = remote_traceback
        self.signal_number = -exitcode if exitcode is not None and exitcode < 0 else None
        self.signal_name = _signal_name(self.signal_number) if self.signal_number else None
        #: What happened to the worker where the failure began, e.g. ``"raised KeyError: 'x'"``.
        self.reason = reason or self._default_reason()
        #: The workers of nested parallel flows the failure came through, outermost first (empty
        #: when it began in this worker), e.g. ``("MultiProcessMapData: worker 1 (pid 4242)",)``.
        self.nested = tuple(nested)
        self.message = self._describe()
        super().__init__(self.message)

    @property
    def where(self) -> str:
        """``"component: worker (pid N)"``."""
        who = "{}: {}".format(self.component, self.worker)
        return who + (" (pid {})".format(self.pid) if self.pid is not None else "")

    def __str__(self) -> str:
        # not the original class' __str__ (KeyError's would quote the whole message)
        return self.message

    def __reduce__(self):
        return _rebuild, (self.original_type, self.component, self.worker, self.pid, self.exitcode,
                          self.remote_traceback, self.reason, self.nested)

    def _default_reason(self) -> str:
        if self.signal_name:
            return "was killed by {} (signal {}); the OOM killer sends SIGKILL when memory runs out".format(
                self.signal_name, self.signal_number)
        if self.exitcode is not None:
            return "exited unexpectedly with exit code {}".format(self.exitcode)
        return "failed"

    def _describe(self) -> str:
        message = "{} {}".format(self.where, self.reason)
        if self.nested:
            message += " in the nested worker {}".format(" > ".join(self.nested))
        if self.remote_traceback:
            message += "\n\nTraceback in the worker:\n" + self.remote_traceback.rstrip()
        return message


def _rebuild(original_type, component, worker, pid, exitcode, remote_traceback, reason, nested=()) -> WorkerError:
    return worker_error_class(original_type)(component, worker, pid, exitcode, remote_traceback, reason, nested)


class FailureReport(NamedTuple):
    """What a worker tells its parent about the exception that ended it (:func:`failure_report`)."""

    #: How the failure began, e.g. ``"raised KeyError: 'x'"`` or ``"was killed by SIGKILL ..."``.
    reason: str
    #: The traceback where it began, then the path it took through each nested worker.
    traceback: str
    #: The class of the exception where it began (None when a worker died without one).
    original_type: Optional[type]
    #: The nested workers it came through, outermost first.
    nested: Tuple[str, ...]


def failure_report(err: BaseException) -> FailureReport:
    """Describe ``err``, raised in a worker, for its parent.

    A :class:`WorkerError` from a parallel flow inside the worker is passed on as the failure it
    began as (its class, reason and traceback), with the nested worker added to the path, so the
    trainer sees the innermost exception's type and traceback once, whatever the depth.

    Example::

        report = failure_report(err)      # in the worker
        error = error_from_exception("MyFlow", "worker 0", err)    # or, in the same process
    """
    if isinstance(err, WorkerError):
        passed_on = "".join(traceback.format_tb(err.__traceback__))
        text = (err.remote_traceback or "").rstrip()
        text += "\n\nThe parent of {} received it here:\nTraceback (most recent call last):\n{}".format(err.where, passed_on)
        return FailureReport(err.reason, text, err.original_type, (err.where,) + err.nested)
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return FailureReport("raised {}: {}".format(type(err).__name__, err), text, type(err), ())


def error_from_exception(component: str, worker: str, err: BaseException, pid: Optional[int] = None) -> WorkerError:
    """The :class:`WorkerError` for ``err``, raised in worker ``worker`` (a thread, or a process
    whose exception object came back): the original class where it began (also through nested
    parallel flows), its reason and traceback."""
    report = failure_report(err)
    return worker_error_class(report.original_type)(component, worker, pid, remote_traceback=report.traceback,
                                                    reason=report.reason, nested=report.nested)


_derived: "weakref.WeakKeyDictionary[type, type]" = weakref.WeakKeyDictionary()
_derived_lock = threading.Lock()


def worker_error_class(original_type: Optional[type]) -> Type[WorkerError]:
    """The :class:`WorkerError` class to raise for an exception of ``original_type`` in a worker.

    For an ``Exception`` subclass that can be combined with ``WorkerError`` (no conflicting
    instance layout, no metaclass or ``__init_subclass__`` that refuses it, constructible), a
    class deriving from both, made once per type; otherwise ``WorkerError`` itself (e.g. for
    ``OSError``, whose instances have a layout of their own; for ``BaseException``-only
    types like ``SystemExit``, which a consumer should not mistake for its own; and for
    ``StopIteration``, which a generator may not raise).

    Example::

        cls = worker_error_class(ValueError)
        assert issubclass(cls, WorkerError) and issubclass(cls, ValueError)
        assert worker_error_class(OSError) is WorkerError
    """
    if (not isinstance(original_type, type) or not issubclass(original_type, Exception)
            or issubclass(original_type, (WorkerError, StopIteration, StopAsyncIteration))):
        return WorkerError
    with _derived_lock:
        cls = _derived.get(original_type)
        if cls is None:
            cls = _derive(original_type)
            _derived[original_type] = cls
    return cls


def _derive(original_type: type) -> Type[WorkerError]:
    name = "WorkerError[{}]".format(original_type.__name__)
    try:
        metaclass: type = type(WorkerError)
        cls: Type[WorkerError] = metaclass(name, (WorkerError, original_type), {
            "__module__": __name__, "__qualname__": name, "original_type": original_type})
        cls("probe", "worker", reason="probe")      # a class that cannot be made or raised is no use
    except Exception:
        return WorkerError
    return cls


def exception_type_named(module: Optional[str], qualname: Optional[str]) -> Optional[type]:
    """The exception class ``module.qualname`` if that module is already imported here, else None.

    Used by the parent to find the class of an exception raised in a worker process from its
    name; nothing is imported (the name comes over a pipe). A spawned worker runs the parent's
    main module as ``__mp_main__``, which is ``__main__`` here.

    Example::

        assert exception_type_named("builtins", "KeyError") is KeyError
    """
    if not module or not qualname:
        return None
    found = sys.modules.get("__main__" if module == "__mp_main__" else module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return found if isinstance(found, type) and issubclass(found, BaseException) else None
