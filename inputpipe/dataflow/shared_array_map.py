"""tensorpack's ``MultiProcessMapDataComponentSharedArray``: map one component in worker processes
into an array of a fixed shape and dtype. Defined in :mod:`inputpipe.dataflow.parallel_map`, as in
tensorpack; this module is its face.

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
from .parallel_map import MultiProcessMapDataComponentSharedArray

__all__ = ["MultiProcessMapDataComponentSharedArray"]
