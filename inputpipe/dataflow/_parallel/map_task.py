"""What a parallel map does with one task, outside the scheduler: tensorpack's old-style
arguments, the bytes of a result, and applying ``map_func`` with each datapoint's seed.

Example::

    result = _apply(map_func, None, datapoint, [key, base_seed, epoch, index], reseed_global=True)
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ...utils.arguments import no_other_arguments, renamed_argument, warn_deprecated
from ...utils.seeding import call_seeded, task_seed
from ..autoscale import worker_count
from ..batch import BatchBuilder

_DEFAULT_BUFFER_SIZE = 200


def _old_style_arguments(name: str, count_name: str, count: Any, map_func: Optional[Callable],
                         positional: Tuple[Any, ...], buffer_size: Any, strict: bool,
                         old_names: Dict[str, Any]) -> Tuple[Any, Callable, Any, bool]:
    """tensorpack before 0.9: ``nr_proc=``/``nr_thread=``, and ``buffer_size``, ``strict`` passed
    positionally after ``map_func``. Returns ``(count, map_func, buffer_size, strict)``; the
    count is an int or an :class:`~.autoscale.Autoscale` (``"auto"``)."""
    count = renamed_argument(name, old_names, "nr_" + count_name.split("_")[1], count_name, count, None)
    no_other_arguments(name, old_names)
    if len(positional) > 2:
        raise TypeError("{}() takes at most 5 positional arguments ({} given)".format(name, 3 + len(positional)))
    if positional:
        if buffer_size != _DEFAULT_BUFFER_SIZE or strict is not False:
            raise TypeError("{}: buffer_size/strict passed both by position and by keyword".format(name))
        warn_deprecated("{}: buffer_size and strict passed by position is tensorpack's old style; it still "
                        "works but is deprecated: pass buffer_size= and strict= as keywords".format(name))
        buffer_size = positional[0]
        strict = positional[1] if len(positional) > 1 else strict
    if not callable(map_func):
        raise TypeError("{}: map_func must be callable, got {!r}".format(name, map_func))
    return worker_count(name, count_name, count), map_func, buffer_size, strict


def nbytes(value: Any) -> int:
    """Bytes of the arrays and byte strings in a datapoint (its components, one level down)."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes_leaf(v) for v in value)
    return _nbytes_leaf(value)


def _nbytes_leaf(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    return int(getattr(value, "nbytes", 0) or 0)


def _apply(map_func: Callable, batch_size: Optional[int], task: Any, ticket: List[int],
           reseed_global: bool, allocate: Optional[Callable[..., np.ndarray]] = None) -> Any:
    """Map one task, each datapoint in its own :func:`~inputpipe.utils.seeding.datapoint_context`
    seeded from ``ticket = [key, base_seed, epoch, index of the task's first datapoint]``;
    ``reseed_global`` (process workers) also reseeds numpy's and Python's global RNGs. A batch is
    built as the results come, in arrays from ``allocate`` (a worker's shared memory)."""
    _, base_seed, epoch, index = ticket
    if batch_size is None:
        return call_seeded(map_func, task, task_seed(base_seed, epoch, index), reseed_global)
    builder = BatchBuilder(len(task)) if allocate is None else BatchBuilder(len(task), allocate)
    for offset, dp in enumerate(task):
        result = call_seeded(map_func, dp, task_seed(base_seed, epoch, index + offset), reseed_global)
        if result is not None:
            builder.add(result)
    return builder.batch()


