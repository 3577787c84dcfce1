"""tensorpack's ``MultiProcessMapDataComponentSharedArray``: map one component in worker processes
into an array of a fixed shape and dtype.

tensorpack built it on a ``multiprocessing.Pool`` writing each result into a shared ``RawArray``
of five possible dtypes, and its iteration never ended (it repeated the source forever). Here it
is :class:`~inputpipe.dataflow.parallel_map.MultiProcessMapData` in strict, ordered mode: each
epoch yields every source datapoint once, in source order, with the component replaced by
``map_func``'s array (large arrays come through shared memory without a copy); a ``None`` result
drops the datapoint, as in tensorpack; a result of another shape or dtype is an error naming both.

Example::

    df = MultiProcessMapDataComponentSharedArray(DataFromList(files), 4, decode, (224, 224, 3), "uint8")
    df.reset_state()
    with df:
        for image, label in df:
            ...
"""
import copy
from typing import Any, Callable, Hashable, Optional, Sequence, Tuple

import numpy as np

from .base import DataFlow
from .parallel_map import MultiProcessMapData

__all__ = ["MultiProcessMapDataComponentSharedArray"]

_OWNER = "MultiProcessMapDataComponentSharedArray"


def _checked_shape(output_shape: Any) -> Tuple[int, ...]:
    dims = (output_shape,) if isinstance(output_shape, (int, np.integer)) else output_shape
    try:
        dims = tuple(dims)
    except TypeError:
        dims = None
    if dims is None or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0
                               for n in dims):
        raise ValueError("{}: output_shape must be a tuple of non-negative ints, got {!r}".format(_OWNER, output_shape))
    return tuple(int(n) for n in dims)


def _checked_dtype(output_dtype: Any) -> np.dtype:
    try:
        return np.dtype(output_dtype)
    except TypeError as err:
        raise TypeError("{}: output_dtype must be a numpy dtype (e.g. 'uint8', np.float32), got {!r}: {}".format(
            _OWNER, output_dtype, err)) from None


class _MapComponent:
    """The function the workers run: ``dp`` with component ``index`` replaced by
    ``map_func(dp[index])``, checked to be an array of ``shape`` and ``dtype``; None when
    ``map_func`` returns None. Module-level, so it pickles for ``spawn``."""

    def __init__(self, map_func: Callable[[Any], Any], index: Hashable, shape: Tuple[int, ...], dtype: np.dtype):
        self.map_func = map_func
        self.index = index
        self.shape = shape
        self.dtype = dtype

    def _expected(self) -> str:
        return "a numpy array of shape {} and dtype {} (or None to drop the datapoint)".format(self.shape, self.dtype)

    def __call__(self, dp: Any) -> Any:
        result = self.map_func(dp[self.index])
        if result is None:
            return None
        if not isinstance(result, np.ndarray):
            raise TypeError("{}: map_func returned a {} for component {!r}; expected {}".format(
                _OWNER, type(result).__name__, self.index, self._expected()))
        if result.shape != self.shape or result.dtype != self.dtype:
            raise ValueError("{}: map_func returned an array of shape {} and dtype {} for component {!r}; expected "
                             "{}".format(_OWNER, result.shape, result.dtype, self.index, self._expected()))
        mapped: Any
        if isinstance(dp, tuple):
            mapped = list(dp)
            mapped[self.index] = result
            return tuple(mapped)
        mapped = copy.copy(dp)
        mapped[self.index] = result
        return mapped


class MultiProcessMapDataComponentSharedArray(MultiProcessMapData):
    """Replace component ``index`` of each datapoint of ``ds`` by ``map_func(component)``, an array
    of shape ``output_shape`` and dtype ``output_dtype``, in ``nr_proc`` worker processes.

    Every epoch yields each datapoint of one epoch of ``ds`` once, in source order, except those
    for which ``map_func`` returns None (dropped, as in tensorpack). A result that is not an array
    of ``output_shape`` and ``output_dtype`` raises a
    :class:`~inputpipe.utils.errors.WorkerError` that is also a ``TypeError``/``ValueError``,
    naming the expected and the returned shape and dtype. tensorpack's version never ended an
    epoch (see docs/migrating.md); any numeric dtype works here, not only tensorpack's five.

    The keyword arguments are :class:`~inputpipe.dataflow.MultiProcessMapData`'s.

    Example::

        df = MultiProcessMapDataComponentSharedArray(DataFromList(paths), 4, load_mask, (64, 64), np.float32)
        df.reset_state()
        with df:
            masks = [dp[0] for dp in df]
    """

    def __init__(self, ds: DataFlow, nr_proc: int, map_func: Callable[[Any], Optional[np.ndarray]],
                 output_shape: Sequence[int], output_dtype: Any, index: Hashable = 0, *,
                 buffer_size: int = 200, start_method: Optional[str] = None, shm_bytes: Optional[int] = None,
                 map_timeout: Optional[float] = None):
        if not callable(map_func):
            raise TypeError("{}: map_func must be callable, got {!r}".format(_OWNER, map_func))
        shape, dtype = _checked_shape(output_shape), _checked_dtype(output_dtype)
        super().__init__(ds, nr_proc, _MapComponent(map_func, index, shape, dtype), buffer_size=buffer_size,
                         strict=True, ordered=True, start_method=start_method, shm_bytes=shm_bytes,
                         map_timeout=map_timeout)
        self.nr_proc = nr_proc
        self.component_map_func = map_func
        self.output_shape = shape
        self.output_dtype = dtype.type
        self.index = index
