"""Iterating a DataFlow for an InputSource: epochs, the empty-epoch guard, end of data, closing."""
from typing import Any, Generator

from ..dataflow.base import DataFlowTerminated, empty_passes_mean_stuck, empty_passes_text
from ..utils.logger import get_logger
from .errors import InputSourceError

__all__ = ["iterate_datapoints", "EndOfData", "close_dataflow", "empty_epochs_error"]

logger = get_logger(__name__)


class EndOfData(Exception):
    """A finite DataFlow has no more datapoints (turned into ``OutOfRangeError`` for training)."""


def iterate_datapoints(ds: Any, infinite: bool, owner: str, resumed: bool = False) -> Generator[Any, None, None]:
    """Yield datapoints of ``ds``; with ``infinite``, start a new epoch whenever one ends.

    Raises :class:`InputSourceError` if an epoch yields nothing (it would spin forever; for a
    chain that gathers datapoints across epochs, such as ``BatchDataByShape``, only after
    ``EMPTY_PASSES_ALLOWED`` such epochs in a row), except
    the first one after ``ds.set_state()`` (``resumed``): a state saved after the last datapoint
    of an epoch resumes with the rest of that epoch, which is empty (a finite source then ends).
    Returns (ends the iteration) when a finite DataFlow ends or it raises ``DataFlowTerminated``.
    """
    empty = 0                   # epochs in a row without a datapoint
    while True:
        count = 0
        try:
            for datapoint in ds:
                count += 1
                yield datapoint
        except DataFlowTerminated:
            return
        if not infinite:
            return
        empty = 0 if count or resumed else empty + 1
        if empty_passes_mean_stuck(ds, empty):
            raise empty_epochs_error(owner, ds, empty)
        resumed = False


def empty_epochs_error(owner: str, ds: Any, empty: int) -> InputSourceError:
    """The error for an infinite source whose DataFlow produced nothing in ``empty`` epochs in a row."""
    return InputSourceError("{}: the DataFlow {} produced no datapoint in {}, so it cannot be repeated; is it an "
                            "exhausted generator?".format(owner, type(ds).__name__,
                                                          empty_passes_text(empty, "an epoch", "epochs")))


def close_dataflow(ds: Any, owner: str) -> None:
    """Close ``ds`` and every DataFlow it wraps (the ``.ds`` chain), so worker processes and
    threads anywhere in the chain stop now rather than at garbage collection. ``close()`` is
    idempotent, so a flow that forwards it down the chain itself is simply closed twice; a flow
    without ``close()`` is passed over. Errors are logged, not raised (this runs at shutdown)."""
    seen = set()
    while ds is not None and id(ds) not in seen:
        seen.add(id(ds))
        closer = getattr(ds, "close", None)
        if callable(closer):
            try:
                closer()
            except Exception:
                logger.warning("%s: closing %s failed", owner, type(ds).__name__, exc_info=True)
        ds = getattr(ds, "ds", None)
