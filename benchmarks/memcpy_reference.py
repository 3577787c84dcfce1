"""The memcpy reference that bandwidth benchmarks compare against: single-thread ``np.copyto``.

``copy_seconds`` copies ``sources[i % len(sources)]`` into ``destinations[i % len(destinations)]``
for ``repeats`` copies after ``warmup`` untimed ones and returns the mean seconds per copy. One
source into one warm destination is the reference; several destinations show the cache
footprint of a consumer that holds one batch while the next is written, several sources that of
a DataFlow cycling over distinct batches.

Example::

    batch = np.zeros((128, 224, 224, 3), np.uint8)
    seconds = copy_seconds([batch], [np.empty_like(batch)], repeats=32)
    print(batch.nbytes / seconds / 1e9, "GB/s")
"""
import time
from typing import Sequence

import numpy as np


def copy_seconds(sources: Sequence[np.ndarray], destinations: Sequence[np.ndarray], repeats: int,
                 warmup: int = 1) -> float:
    """Mean seconds of one single-thread copy (see the module docstring)."""
    for i in range(warmup):
        np.copyto(destinations[i % len(destinations)], sources[i % len(sources)])
    start = time.perf_counter()
    for i in range(repeats):
        np.copyto(destinations[i % len(destinations)], sources[i % len(sources)])
    return (time.perf_counter() - start) / repeats
