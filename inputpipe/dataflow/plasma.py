"""tensorpack's ``PlasmaPutData`` and ``PlasmaGetData``: the names import, the backend is gone.

tensorpack 0.11 (experimentally) moved datapoints between processes through Apache Arrow's Plasma
object store. pyarrow deprecated Plasma and removed it in pyarrow 12.0, so these flows cannot
work anywhere now; creating one raises ``NotImplementedError`` naming what replaces it:
:class:`~inputpipe.dataflow.MultiProcessRunnerZMQ` and
:class:`~inputpipe.dataflow.MultiProcessMapData` pass the large arrays of worker processes'
datapoints through shared memory, without a copy into the consumer.

Example::

    from inputpipe.dataflow import MultiProcessRunnerZMQ
    df = MultiProcessRunnerZMQ(df, num_proc=4)       # instead of PlasmaPutData / PlasmaGetData
"""
from typing import NoReturn

from .base import DataFlow, ProxyDataFlow

__all__ = ["PlasmaPutData", "PlasmaGetData"]

_REPLACEMENT = (
    "{}: tensorpack's Plasma flows need pyarrow.plasma, which pyarrow removed in version 12.0. inputpipe moves "
    "large datapoints between processes through shared memory without a copy instead: run the DataFlow in "
    "worker processes with MultiProcessRunnerZMQ(ds, num_proc) or map it with MultiProcessMapData(ds, num_proc, "
    "map_func) (inputpipe.dataflow), and drop the PlasmaPutData/PlasmaGetData pair")


def _refuse(name: str) -> NoReturn:
    raise NotImplementedError(_REPLACEMENT.format(name))


class PlasmaPutData(ProxyDataFlow):
    """A stand-in for tensorpack's flow that put each datapoint into a Plasma store and yielded its
    object id: creating it raises ``NotImplementedError`` naming the replacement (see the module
    docstring).

    Example::

        df = MultiProcessRunnerZMQ(df, num_proc=4)     # what replaces PlasmaPutData(df)
    """

    def __init__(self, ds: DataFlow, socket: str = "/tmp/plasma"):
        _refuse(type(self).__name__)


class PlasmaGetData(ProxyDataFlow):
    """A stand-in for tensorpack's flow that read datapoints back from a Plasma store by object id:
    creating it raises ``NotImplementedError`` naming the replacement (see the module docstring).

    Example::

        df = MultiProcessRunnerZMQ(df, num_proc=4)     # what replaces PlasmaGetData(...)
    """

    def __init__(self, ds: DataFlow, socket: str = "/tmp/plasma"):
        _refuse(type(self).__name__)
