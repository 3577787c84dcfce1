"""Run a queue source's DataFlow in one worker process, so its Python never holds the GIL of
the training process.

``QueueInput(df, in_worker=True)`` iterates ``df`` in a single supervised worker process
(:class:`~inputpipe.dataflow.parallel.MultiProcessRunnerZMQ` with ``num_proc=1``: the same
supervision, wire format and zero-copy shared memory as every parallel DataFlow). The training
process only receives each datapoint and enqueues it. One worker runs the whole flow, so the
datapoints come in the same order as when the flow runs in the training process.

Epochs are kept exact: in the worker, :class:`EpochMarked` follows every pass over ``df`` with
an end-of-epoch marker (a datapoint no DataFlow can make: it carries a random token of the
source), so a finite source ends after exactly one pass, even when ``df`` has no length, and an
empty epoch is detected as it is in the training process.

Example::

    feed = WorkerFeed(df, "QueueInput")
    feed.reset_state()                    # starts the worker
    for datapoint in feed.datapoints(infinite=False):
        ...
    feed.close()
"""
import os
from typing import Any, Dict, Iterator, List, Optional

from ..dataflow._core.state import StatePlan, check_input_state
from ..dataflow.base import DataFlow, DataFlowTerminated, ProxyDataFlow, check_state, empty_passes_mean_stuck
from ..dataflow.parallel import MultiProcessRunnerZMQ
from ._iteration import empty_epochs_error
from .errors import InputSourceError

__all__ = ["WorkerFeed", "EpochMarked"]

_MARK = b"\x00inputpipe:end-of-epoch"
_ENDED, _TERMINATED = "ended", "terminated"


class EpochMarked(ProxyDataFlow):
    """``ds``'s datapoints, pass after pass, each pass followed by ``[mark, token, how]``
    (``how``: ``"ended"``, or ``"terminated"`` when ``ds`` raised ``DataFlowTerminated``).
    It has no length, so the runner that iterates it never cuts an epoch itself.

    Example::

        marked = EpochMarked(df, token=b"12345678")
        runner = MultiProcessRunnerZMQ(marked, num_proc=1)
    """

    def __init__(self, ds: DataFlow, token: bytes):
        super().__init__(ds)
        self.token = token

    def __len__(self) -> int:
        raise NotImplementedError("EpochMarked: the stream of passes has no length")

    def get_state(self) -> Dict[str, Any]:
        """The state of ``ds`` after its last datapoint (a marker changes nothing in it)."""
        return {"type": "EpochMarked", "input": self.ds.get_state()}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        check_input_state(self, self.ds, check_state(self, state, {"input": dict})["input"], plan)

    def _state_inputs(self) -> List[DataFlow]:
        return [self.ds]

    def __iter__(self) -> Iterator[Any]:
        how = _ENDED
        try:
            for datapoint in self.ds:
                yield datapoint
        except DataFlowTerminated:
            how = _TERMINATED
        yield [_MARK, self.token, how]


class WorkerFeed:
    """The worker process that runs ``ds`` for the queue source ``owner``.

    ``reset_state()`` starts it (a new worker after ``close()``); ``datapoints(infinite)``
    yields what it sends, one pass (``infinite=False``) or pass after pass; ``close()`` stops it
    and closes ``ds``. A worker that raises or dies makes iteration raise the runner's
    :class:`~inputpipe.utils.errors.WorkerError` (with the worker's traceback).

    Example::

        feed = WorkerFeed(df, "QueueInput", hwm=50)
    """

    def __init__(self, ds: DataFlow, owner: str, hwm: int = 50):
        self.ds = ds
        self.owner = owner
        self.hwm = hwm
        self._token = os.urandom(16)
        self._runner: Optional[MultiProcessRunnerZMQ] = None

    def reset_state(self) -> None:
        if self._runner is None:
            self._runner = MultiProcessRunnerZMQ(EpochMarked(self.ds, self._token), num_proc=1, hwm=self.hwm)
        self._runner.reset_state()

    @property
    def worker_pids(self):
        return [] if self._runner is None else self._runner.worker_pids

    def _marker(self, datapoint: Any) -> Optional[str]:
        """``"ended"``/``"terminated"`` if ``datapoint`` is this feed's end-of-epoch marker, else None."""
        if (type(datapoint) is list and len(datapoint) == 3 and type(datapoint[0]) is bytes
                and datapoint[0] == _MARK and datapoint[1] == self._token):
            return datapoint[2]
        return None

    def datapoints(self, infinite: bool, resumed: bool = False) -> Iterator[Any]:
        """The worker's datapoints in order: one pass, or (``infinite``) pass after pass.
        An infinite pass that yields nothing raises :class:`InputSourceError` (it would spin),
        except the first one after :meth:`set_state` (``resumed``: the rest of a finished epoch)."""
        runner = self._runner
        if runner is None:
            raise InputSourceError("{}: the DataFlow's worker is not running (call reset_state())".format(self.owner))
        count = empty = 0
        for datapoint in runner:
            how = self._marker(datapoint)
            if how is None:
                count += 1
                yield datapoint
                continue
            if how == _TERMINATED or not infinite:
                return
            empty = 0 if count or resumed else empty + 1
            if empty_passes_mean_stuck(self.ds, empty):
                raise empty_epochs_error(self.owner, self.ds, empty)
            count, resumed = 0, False

    def not_resumable_reason(self) -> Optional[str]:
        """Why the position of ``ds`` cannot be tracked through the worker, or None when it can
        (the runner forwards its worker's DataFlow state with each datapoint)."""
        if MultiProcessRunnerZMQ.get_state is DataFlow.get_state:
            return ("{}(in_worker=True): the worker runner (MultiProcessRunnerZMQ) does not forward its "
                    "DataFlow's state yet".format(self.owner))
        return None

    def get_state(self) -> Dict[str, Any]:
        """The state of ``ds`` in the worker after the last datapoint :meth:`datapoints` yielded."""
        if self._runner is None:
            raise InputSourceError("{}: the DataFlow's worker is not running (call reset_state())".format(self.owner))
        return self._runner.get_state()["input"]["input"]

    def set_state(self, state: Dict[str, Any]) -> None:
        """Continue ``ds`` in the worker from ``state`` (after :meth:`reset_state`)."""
        if self._runner is None:
            raise InputSourceError("{}: the DataFlow's worker is not running (call reset_state())".format(self.owner))
        self._runner.set_state({"type": type(self._runner).__name__,
                                "input": {"type": "EpochMarked", "input": state}})

    def close(self) -> None:
        """Stop the worker (within about a second) and close ``ds``; idempotent."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.close()
