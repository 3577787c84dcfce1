"""Small helpers shared by the DataFlow transform modules (batch, transforms, combine, debug)."""
from typing import Any, Iterator, Sequence

import numpy as np

from .base import DataFlow, DataFlowLengthUnknown

# A sentinel for "the iterator is exhausted", distinct from every datapoint.
END = object()


def length_of(owner: DataFlow, ds: Any, what: str = "its input") -> int:
    """``len(ds)``, or DataFlowLengthUnknown saying that ``owner`` has no length because of ``ds``."""
    try:
        return len(ds)
    except (TypeError, NotImplementedError) as err:
        raise DataFlowLengthUnknown("{} has no length because {} has none ({})".format(
            type(owner).__name__, what, err)) from None


def close_iterators(iterators: Sequence[Iterator[Any]]) -> None:
    """Close unfinished generators now, so that their re-entrancy guards and resources are freed."""
    for itr in iterators:
        close = getattr(itr, "close", None)
        if close is not None:
            close()


def check_positive_int(owner: str, name: str, value: Any) -> int:
    """``value`` as an int, or a ValueError naming ``owner`` and ``name`` when it is not >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError("{}: {} must be a positive int, got {!r}".format(owner, name, value))
    return int(value)


def close_flows(flows: Sequence[Any]) -> None:
    """``close()`` every flow that has one (all of them, even if one fails; the first error is
    raised at the end), so that a composite flow stops every worker and socket under it."""
    first_error = None
    for df in flows:
        close = getattr(df, "close", None)
        if close is None:
            continue
        try:
            close()
        except Exception as err:  # noqa: BLE001 - the others must still be closed
            if first_error is None:
                first_error = err
    if first_error is not None:
        raise first_error
