"""Helpers of the resume tests: run a flow epoch after epoch, cut it, restore a fresh copy."""
import json
from typing import Any, Callable, List

import numpy as np

from inputpipe.dataflow import seeding

SEED = 1234
OTHER_SEED = 99  # the restored copy runs under another global seed: its randomness must come from the state


def epochs(df: Any) -> Any:
    """The flow's datapoints, epoch after epoch (at most two empty epochs in a row)."""
    empty = 0
    while empty < 2:
        got = False
        for dp in df:
            got = True
            yield dp
        empty = 0 if got else empty + 1


def canon(value: Any) -> Any:
    """A comparable form of a datapoint: arrays become (dtype, shape, values)."""
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.shape, value.tolist())
    if isinstance(value, np.generic):
        return ("scalar", str(value.dtype), value.item())
    if isinstance(value, dict):
        return {key: canon(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canon(v) for v in value]
    return value


def take(itr: Any, count: int) -> List[Any]:
    out = []
    for _ in range(count):
        try:
            out.append(next(itr))
        except StopIteration:
            break
    return out


def check_resume(make: Callable[[], Any], cuts: List[int], after: int, max_bytes: int = 4096) -> None:
    """For every cut k: a run cut after k datapoints, its state through JSON, restored into a fresh
    flow made under another global seed, continues exactly as the uninterrupted run for ``after``
    datapoints (across epochs)."""
    seeding.set_global_seed(SEED)
    try:
        reference = make()
        reference.reset_state()
        full = [canon(dp) for dp in take(epochs(reference), max(cuts) + after)]
        assert len(full) == max(cuts) + after, "the flow ended before the test's horizon"
        for cut in cuts:
            seeding.set_global_seed(SEED)
            first = make()
            first.reset_state()
            itr = epochs(first)
            head = [canon(dp) for dp in take(itr, cut)]
            assert head == full[:cut]
            text = json.dumps(first.get_state())
            assert len(text) < max_bytes, "state of {} bytes at cut {}".format(len(text), cut)
            seeding.set_global_seed(OTHER_SEED)
            second = make()
            second.reset_state()
            second.set_state(json.loads(text))
            rest = [canon(dp) for dp in take(epochs(second), after)]
            assert rest == full[cut:cut + after], "continuation differs after cut {}".format(cut)
            itr.close()
    finally:
        seeding.set_global_seed(None)
