"""Errors shared by the parts of inputpipe that run code in other threads and processes.

Example::

    try:
        for dp in MultiProcessRunnerZMQ(df, num_proc=2):
            ...
    except WorkerError as err:
        print(err.pid, err.signal_name, err.remote_traceback)
"""
import signal
from typing import Optional

__all__ = ["WorkerError"]


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

    Example::

        except WorkerError as err:
            if err.signal_name == "SIGKILL":
                print("worker", err.pid, "was killed, maybe by the OOM killer")
    """

    def __init__(self, component: str, worker: str, pid: Optional[int] = None,
                 exitcode: Optional[int] = None, remote_traceback: Optional[str] = None,
                 reason: Optional[str] = None):
        self.component = component
        self.worker = worker
        self.pid = pid
        self.exitcode = exitcode
        self.remote_traceback = remote_traceback
        self.signal_number = -exitcode if exitcode is not None and exitcode < 0 else None
        self.signal_name = _signal_name(self.signal_number) if self.signal_number else None
        super().__init__(self._describe(reason))

    def _describe(self, reason: Optional[str]) -> str:
        who = "{}: {}".format(self.component, self.worker)
        if self.pid is not None:
            who += " (pid {})".format(self.pid)
        if reason is None:
            if self.signal_name:
                reason = "was killed by {} (signal {}); the OOM killer sends SIGKILL when memory runs out".format(
                    self.signal_name, self.signal_number)
            elif self.exitcode is not None:
                reason = "exited unexpectedly with exit code {}".format(self.exitcode)
            else:
                reason = "failed"
        message = "{} {}".format(who, reason)
        if self.remote_traceback:
            message += "\n\nTraceback in the worker:\n" + self.remote_traceback.rstrip()
        return message
