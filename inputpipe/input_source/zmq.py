"""ZMQInput: datapoints pushed by ``send_dataflow_zmq`` from other processes or hosts, through
the library's wire format (:class:`inputpipe.dataflow.remote.RemoteDataZMQ`), into a QueueInput.

Example::

    # producer process / host:  send_dataflow_zmq(BatchData(df, 64), "tcp://trainer:8877")
    source = ZMQInput("tcp://0.0.0.0:8877", hwm=50)
    source.setup(specs)
"""
import time
from typing import Any, Callable, Iterator, List, Optional, Union

from ..dataflow.remote import RemoteDataZMQ
from ..utils.concurrency import POLL_INTERVAL
from ..utils.logger import get_logger
from .queue import QueueInput

logger = get_logger(__name__)

__all__ = ["ZMQInput"]


class ZMQInput(QueueInput):
    """Receive datapoints on ``end_point`` (a ZeroMQ PULL socket; binds unless ``bind=False``)
    and enqueue them like :class:`QueueInput`. At most ``hwm`` datapoints wait in the socket.
    Pure Python, no custom op; messages are data (no pickle), size-limited, and an address
    without a host means 127.0.0.1, all as in :class:`RemoteDataZMQ`. The stream is endless;
    ``close()`` closes the socket.

    Producers are other processes or hosts, so their health cannot be checked directly; silence is
    the symptom. A warning is logged after every ``warn_after`` seconds without a datapoint, and
    with ``timeout`` set, that much silence fails the training step with an
    :class:`~inputpipe.input_source.InputSourceError` instead of waiting for producers that died.

    Example::

        source = ZMQInput("tcp://127.0.0.1:8877", hwm=20, timeout=120)
        source.setup(specs)
        x, y = source.get_input_tensors()
    """

    def __init__(self, end_point: Union[str, int], hwm: int, bind: bool = True, *,
                 timeout: Optional[float] = None, warn_after: float = 60.0):
        if timeout is not None and timeout <= 0:
            raise ValueError("ZMQInput: timeout must be a positive number of seconds or None, got {!r}".format(timeout))
        if warn_after <= 0:
            raise ValueError("ZMQInput: warn_after must be a positive number of seconds, got {!r}".format(warn_after))
        super().__init__(RemoteDataZMQ(end_point, hwm=hwm, bind=bind))
        self.end_point = end_point
        self.timeout = timeout
        self.warn_after = warn_after

    @property
    def endpoints(self) -> List[str]:
        """The addresses actually listened on or connected to (after the session started or
        ``reset_state()``), e.g. the port chosen for ``tcp://127.0.0.1:*``."""
        return self.ds.endpoints

    def _datapoints(self, should_stop: Callable[[], bool]) -> Iterator[Any]:
        last_arrival = last_warning = time.monotonic()
        while not should_stop():
            datapoint = self.ds.receive(POLL_INTERVAL)
            now = time.monotonic()
            if datapoint is not None:
                last_arrival = last_warning = now
                yield datapoint
                continue
            silent = now - last_arrival
            if self.timeout is not None and silent >= self.timeout:
                raise TimeoutError(
                    "{}: expected datapoints on {}, but none arrived for {:.1f} s (timeout={}); are the "
                    "producers (send_dataflow_zmq) running?".format(self.name, self.endpoints, silent, self.timeout))
            if now - last_warning >= self.warn_after:
                last_warning = now
                logger.warning("%s: no datapoint arrived on %s for %.1f s; are the producers running?",
                               self.name, self.endpoints, silent)

    def close(self) -> None:
        super().close()
        self.ds.close()
