"""ZMQInput: datapoints pushed by ``send_dataflow_zmq`` from other processes or hosts, through
the library's wire format (:class:`inputpipe.dataflow.remote.RemoteDataZMQ`), into a QueueInput.

Example::

    # producer process / host:  send_dataflow_zmq(BatchData(df, 64), "tcp://trainer:8877")
    source = ZMQInput("tcp://0.0.0.0:8877", hwm=50)
    source.setup(specs)
"""
from typing import Any, Callable, Iterator, List, Union

from ..dataflow.remote import RemoteDataZMQ
from ..utils.concurrency import POLL_INTERVAL
from .queue import QueueInput

__all__ = ["ZMQInput"]


class ZMQInput(QueueInput):
    """Receive datapoints on ``end_point`` (a ZeroMQ PULL socket; binds unless ``bind=False``)
    and enqueue them like :class:`QueueInput`. At most ``hwm`` datapoints wait in the socket.
    Pure Python, no custom op; messages are data (no pickle), size-limited, and an address
    without a host means 127.0.0.1, all as in :class:`RemoteDataZMQ`. The stream is endless;
    ``close()`` closes the socket.

    Example::

        source = ZMQInput("tcp://127.0.0.1:8877", hwm=20)
        source.setup(specs)
        x, y = source.get_input_tensors()
    """

    def __init__(self, end_point: Union[str, int], hwm: int, bind: bool = True):
        super().__init__(RemoteDataZMQ(end_point, hwm=hwm, bind=bind))
        self.end_point = end_point

    @property
    def endpoints(self) -> List[str]:
        """The addresses actually listened on or connected to (after the session started or
        ``reset_state()``), e.g. the port chosen for ``tcp://127.0.0.1:*``."""
        return self.ds.endpoints

    def _datapoints(self, should_stop: Callable[[], bool]) -> Iterator[Any]:
        while not should_stop():
            datapoint = self.ds.receive(POLL_INTERVAL)
            if datapoint is not None:
                yield datapoint

    def close(self) -> None:
        super().close()
        self.ds.close()
