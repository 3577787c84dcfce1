"""Iterating a DataFlow for an InputSource: epochs, the empty-epoch guard, end of data."""
from typing import Any, Iterator

from ..dataflow.base import DataFlowTerminated
from .errors import InputSourceError

__all__ = ["iterate_datapoints", "EndOfData"]


class EndOfData(Exception):
    """A finite DataFlow has no more datapoints (turned into ``OutOfRangeError`` for training)."""


def iterate_datapoints(ds: Any, infinite: bool, owner: str) -> Iterator[Any]:
    """Yield datapoints of ``ds``; with ``infinite``, start a new epoch whenever one ends.

    Raises :class:`InputSourceError` if an epoch yields nothing (it would spin forever).
    Returns (ends the iteration) when a finite DataFlow ends or it raises ``DataFlowTerminated``.
    """
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
        if count == 0:
            raise InputSourceError("{}: the DataFlow {} produced no datapoint in an epoch, so it cannot be "
                                   "repeated; is it an exhausted generator?".format(owner, type(ds).__name__))
