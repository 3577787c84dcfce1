"""tensorpack's ``dump_dataflow_to_process_queue``: one process iterates a DataFlow into a queue that
other threads or processes read.

The producer is an inputpipe worker process (SIGINT ignored, killed with its parent, the parent's
global seed): it resets the DataFlow, then puts ``(index, datapoint)`` for each datapoint and
finally ``(DIE, None)`` once per consumer. Datapoints cross the process boundary in the wire
format (:mod:`inputpipe.utils.serialize`), not pickled; at most ``size`` of them wait in the queue.

Unlike tensorpack's ``multiprocessing.Queue``, nothing is lost silently and nothing hangs: when
the DataFlow raises, every consumer's ``get()`` raises a
:class:`~inputpipe.utils.errors.WorkerError` (also of the exception's class) with the producer's
traceback, instead of reading a ``DIE`` as if the data had ended; and a ``get()`` that waits
checks that the producer still runs: one that died, or ended with nothing left to read, is an
error naming its pid.

Example::

    q, proc = dump_dataflow_to_process_queue(df, size=50, nr_consumer=1)
    proc.start()
    while True:
        index, dp = q.get()
        if index is DIE:
            break
    proc.join()
"""
import multiprocessing as mp
import os
import queue
import sys
import time
from typing import Any, Optional, Tuple

from ..utils.concurrency import POLL_INTERVAL
from ..utils.errors import WorkerError, exception_type_named, failure_report, worker_error_class
from ..utils.seeding import get_global_seed
from ..utils.serialize import _loads_wire, dumps
from ..utils.processes import _worker_main
from .base import DataFlow
from .tensorpack_helpers import DIE

__all__ = ["dump_dataflow_to_process_queue", "DataFlowQueue", "DataFlowProcess"]

_COMPONENT = "dump_dataflow_to_process_queue"
# the messages: [kind, index, datapoint] or [_ERROR, reason, traceback, module, qualname]
_DATAPOINT, _END, _ERROR = 0, 1, 2


def _produce(rank: int, df: DataFlow, writer: Any, slots: Any, nr_consumer: int) -> None:
    """The producer (in the worker): every datapoint, then the end (or the error) once per consumer."""
    def put(message: list) -> None:
        data = dumps(message)
        while not slots.acquire(timeout=POLL_INTERVAL):     # the queue is full; the watchdog ends us
            pass                                            # if the parent dies meanwhile
        writer.send_bytes(data)

    try:
        df.reset_state()
        for index, dp in enumerate(df):
            put([_DATAPOINT, index, dp])
    except Exception as err:
        report = failure_report(err)
        kind = report.original_type
        failure = [_ERROR, report.reason, report.traceback, getattr(kind, "__module__", "") if kind else "",
                   kind.__qualname__ if kind else ""]
        for _ in range(nr_consumer):
            put(failure)
        sys.exit(1)
    for _ in range(nr_consumer):
        put([_END, None, None])


def _running(pid: int) -> bool:
    """Whether the process ``pid`` (not a child of this process) still runs: exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/{}/stat".format(pid)) as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class DataFlowProcess(mp.Process):
    """The producer process of :func:`dump_dataflow_to_process_queue`: a ``multiprocessing.Process``
    (daemonic: it ends with the program) that runs as inputpipe's workers do and fills the queue
    once started.

    Example::

        q, proc = dump_dataflow_to_process_queue(df, 50, 1)
        proc.start()
    """

    def __init__(self, df: DataFlow, data_queue: "DataFlowQueue", nr_consumer: int):
        super().__init__(name="{}-producer".format(_COMPONENT), daemon=True)
        self.df = df
        self.queue = data_queue
        self.nr_consumer = nr_consumer
        self._owner_pid: Optional[int] = None
        self._global_seed: Optional[int] = None

    def start(self) -> None:
        self._owner_pid = os.getpid()
        self._global_seed = get_global_seed()
        super().start()
        self.queue._producer_started(self)

    def run(self) -> None:
        parent = None if mp.get_start_method() == "forkserver" else self._owner_pid
        _worker_main(_produce, 0, (self.df, self.queue._writer, self.queue._slots, self.nr_consumer), parent,
                     True, self._global_seed)


class DataFlowQueue:
    """The queue of :func:`dump_dataflow_to_process_queue`: ``get()`` returns ``(index, datapoint)``,
    and ``(DIE, None)`` once per consumer at the end. It can be passed to other processes (as an
    argument of ``multiprocessing.Process``) and read from several at once.

    Example::

        index, dp = q.get(timeout=5.0)
    """

    def __init__(self, size: int):
        self._reader, self._writer = mp.Pipe(duplex=False)
        self._slots = mp.BoundedSemaphore(size)
        self._read_lock = mp.Lock()
        self._producer_pid = mp.Value("q", 0, lock=False)
        self._producer: Optional[DataFlowProcess] = None     # in the process that started it

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_producer"] = None
        return state

    def _producer_started(self, producer: DataFlowProcess) -> None:
        self._producer = producer
        self._producer_pid.value = producer.pid

    def _producer_gone(self) -> Optional[WorkerError]:
        """The error to raise when the producer no longer runs (None while it does)."""
        pid = self._producer_pid.value
        if pid == 0:
            return WorkerError(_COMPONENT, "producer", reason="was not started: call start() on the process that "
                                                              "dump_dataflow_to_process_queue returned before get()")
        producer = self._producer
        if producer is not None and producer._owner_pid == os.getpid():
            exitcode = producer.exitcode
            if exitcode is None:
                return None
            if exitcode != 0:
                return WorkerError(_COMPONENT, "producer", pid, exitcode)
        elif _running(pid):
            return None
        return WorkerError(_COMPONENT, "producer", pid, reason="has ended, and nothing more is in the queue (each "
                                                               "consumer's (DIE, None) was read already, or it died)")

    def _receive(self, deadline: Optional[float]) -> bytes:
        while True:
            if self._reader.poll(POLL_INTERVAL if deadline is None else
                                 max(0.0, min(POLL_INTERVAL, deadline - time.monotonic()))):
                return self._reader.recv_bytes()
            error = self._producer_gone()
            if error is not None and not self._reader.poll(0):
                raise error
            if deadline is not None and time.monotonic() >= deadline:
                raise queue.Empty

    def get(self, block: bool = True, timeout: Optional[float] = None) -> Tuple[Any, Any]:
        """The next ``(index, datapoint)`` (``(DIE, None)`` at the end); waits at most ``timeout``
        seconds (forever when None, ``block=False``: not at all), then raises ``queue.Empty``.
        Raises :class:`~inputpipe.utils.errors.WorkerError` when the DataFlow raised (with its
        traceback) or the producer is gone."""
        if not block:
            deadline: Optional[float] = time.monotonic()
        else:
            deadline = None if timeout is None else time.monotonic() + timeout
        while not self._read_lock.acquire(timeout=POLL_INTERVAL):
            if deadline is not None and time.monotonic() >= deadline:
                raise queue.Empty
        try:
            data = self._receive(deadline)
        finally:
            self._read_lock.release()
        self._slots.release()
        message = _loads_wire(data)
        if message[0] == _DATAPOINT:
            return message[1], message[2]
        if message[0] == _END:
            return DIE, None
        _, reason, remote_traceback, module, qualname = message
        raise worker_error_class(exception_type_named(module, qualname))(
            _COMPONENT, "producer", self._producer_pid.value or None, remote_traceback=remote_traceback, reason=reason)

    def get_nowait(self) -> Tuple[Any, Any]:
        """``get(block=False)``."""
        return self.get(block=False)

    def empty(self) -> bool:
        """Whether nothing is waiting in the queue now."""
        return not self._reader.poll(0)


def dump_dataflow_to_process_queue(df: DataFlow, size: int, nr_consumer: int) -> Tuple[DataFlowQueue, DataFlowProcess]:
    """Make a queue of at most ``size`` datapoints and a process that fills it from ``df`` once
    started (``df`` is reset in that process only); returns ``(queue, process)``. Each queue item
    is ``(index, datapoint)``; at the end ``(DIE, None)`` comes ``nr_consumer`` times, one for each
    consumer. See the module docstring for errors.

    Example::

        q, proc = dump_dataflow_to_process_queue(DataFromList([[1], [2]], shuffle=False), 10, 1)
        proc.start()
        assert q.get(timeout=10) == (0, [1])
    """
    if not isinstance(df, DataFlow):
        raise TypeError("{}: expected a DataFlow, got {!r}".format(_COMPONENT, df))
    for name, value in (("size", size), ("nr_consumer", nr_consumer)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("{}: {} must be a positive int, got {!r}".format(_COMPONENT, name, value))
    data_queue = DataFlowQueue(size)
    return data_queue, DataFlowProcess(df, data_queue, nr_consumer)
