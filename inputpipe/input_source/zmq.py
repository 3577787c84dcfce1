"""ZMQInput: datapoints pushed by ``send_dataflow_zmq`` from other processes or hosts, through
the library's wire format (:class:`inputpipe.dataflow.remote.RemoteDataZMQ`), into a QueueInput.

Remote senders are not the trainer's code: one sender's bad datapoint (wrong components, shape
or dtype, or None) is rejected, counted in ``source.rejected`` and logged (rate-limited), and
training goes on with the good ones. The local sources keep raising on a bad datapoint.

Example::

    # producer process / host:  send_dataflow_zmq(BatchData(df, 64), "tcp://trainer:8877")
    source = ZMQInput("tcp://0.0.0.0:8877", hwm=50)
    source.setup(specs)
"""
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from ..dataflow.remote import RemoteDataZMQ
from ..utils import serialize
from ..utils.compat import dataset_from_generator, without_injected_prefetch
from ..utils.concurrency import POLL_INTERVAL, stop_requested
from ..utils.logger import get_logger
from .continuing import StreamFeed
from .errors import InputSourceError
from .queue import QueueInput
from .signature import DatapointConverter, normalize_signature

logger = get_logger(__name__)

__all__ = ["ZMQInput", "ZMQStreamFeed"]

#: Seconds between two warnings about rejected datapoints (the first one is logged at once).
REJECT_LOG_INTERVAL = 10.0

_NOTHING = object()     # receive() got nothing within its timeout


class ZMQInput(QueueInput):
    """Receive datapoints on ``end_point`` (a ZeroMQ PULL socket; binds unless ``bind=False``)
    and enqueue them like :class:`QueueInput`. At most ``hwm`` datapoints wait in the socket.
    Pure Python, no custom op; messages are data (no pickle), size-limited (``max_bytes`` in all
    frames, ``max_frames`` array frames), and an address without a host means 127.0.0.1, all as in
    :class:`RemoteDataZMQ`: a message over the limits is dropped and counted in :attr:`rejected`
    while the connection stays up, and a lost sender connection is counted in
    :attr:`disconnects` and logged. The stream is endless; ``close()`` closes the socket.

    A datapoint that does not fit the input signature, or is None, is dropped and counted in
    :attr:`rejected` (with the malformed messages the socket dropped), with a warning at most
    every ``REJECT_LOG_INTERVAL`` seconds; training continues with the good datapoints.

    Producers are other processes or hosts, so their health cannot be checked directly; silence is
    the symptom. A warning is logged after every ``warn_after`` seconds without a datapoint, and
    with ``timeout`` set, that much silence fails the training step with an
    :class:`~inputpipe.input_source.InputSourceError` instead of waiting for producers that died.

    :meth:`to_dataset` gives the same stream as a ``tf.data.Dataset`` (tensorpack's API).

    Example::

        source = ZMQInput("tcp://127.0.0.1:8877", hwm=20, timeout=120)
        source.setup(specs)
        x, y = source.get_input_tensors()
    """

    def __init__(self, end_point: Union[str, int], hwm: int, bind: bool = True, *,
                 timeout: Optional[float] = None, warn_after: float = 60.0,
                 max_bytes: int = serialize.DEFAULT_MAX_MESSAGE_BYTES,
                 max_frames: int = serialize.DEFAULT_MAX_FRAMES):
        if timeout is not None and timeout <= 0:
            raise ValueError("ZMQInput: timeout must be a positive number of seconds or None, got {!r}".format(timeout))
        if warn_after <= 0:
            raise ValueError("ZMQInput: warn_after must be a positive number of seconds, got {!r}".format(warn_after))
        super().__init__(RemoteDataZMQ(end_point, hwm=hwm, bind=bind, max_bytes=max_bytes, max_frames=max_frames))
        self.end_point = end_point
        self.timeout = timeout
        self.warn_after = warn_after
        self._rejected = 0
        self._reject_lock = threading.Lock()
        self._last_reject_log = -float("inf")
        self._dataset_stop = threading.Event()

    @property
    def endpoints(self) -> List[str]:
        """The addresses actually listened on or connected to (after the session started or
        ``reset_state()``), e.g. the port chosen for ``tcp://127.0.0.1:*``."""
        return self.ds.endpoints

    @property
    def rejected(self) -> int:
        """Datapoints dropped so far: those not fitting the signature or None, and malformed messages."""
        return self._rejected + int(getattr(self.ds, "rejected", 0))

    @property
    def disconnects(self) -> int:
        """Sender connections lost so far (see :attr:`RemoteDataZMQ.disconnects`)."""
        return self.ds.disconnects

    def _receiver(self) -> Callable[[float], Any]:
        """``receive(timeout)`` returning ``_NOTHING`` when nothing came, so a None datapoint is
        seen as one (and rejected)."""
        return lambda timeout: self.ds.receive(timeout, empty=_NOTHING)

    def _reject(self, reason: str) -> None:
        with self._reject_lock:
            self._rejected += 1
            now = time.monotonic()
            if now - self._last_reject_log < REJECT_LOG_INTERVAL:
                return
            self._last_reject_log = now
        logger.warning("%s: dropped a datapoint from a sender on %s (%d dropped so far; training goes on): %s",
                       self.name, self.endpoints, self.rejected, reason)

    def _accept(self, datapoint: Any, convert: DatapointConverter) -> Optional[List[np.ndarray]]:
        """The datapoint's arrays if it fits the signature, else None (rejected and counted)."""
        if datapoint is None:
            self._reject("the datapoint is None")
            return None
        try:
            return convert(datapoint)
        except InputSourceError as err:
            self._reject(str(err))
            return None

    def _received(self, should_stop: Callable[[], bool], convert: DatapointConverter) -> Iterator[List[np.ndarray]]:
        """Datapoints that fit the signature, as arrays, until ``should_stop()``; watches silence."""
        receive = self._receiver()
        last_arrival = last_warning = time.monotonic()
        while not should_stop():
            datapoint = receive(POLL_INTERVAL)
            now = time.monotonic()
            if datapoint is not _NOTHING:
                arrays = self._accept(datapoint, convert)
                if arrays is not None:
                    last_arrival = last_warning = now
                    yield arrays
                    continue
            silent = now - last_arrival
            if self.timeout is not None and silent >= self.timeout:
                raise TimeoutError(
                    "{}: expected datapoints on {}, but none {}for {:.1f} s (timeout={}); are the producers "
                    "(send_dataflow_zmq) running?".format(
                        self.name, self.endpoints, "arrived " if not self.rejected else
                        "that fit the input signature arrived ({} dropped) ".format(self.rejected),
                        silent, self.timeout))
            if now - last_warning >= self.warn_after:
                last_warning = now
                logger.warning("%s: no datapoint arrived on %s for %.1f s; are the producers running?",
                               self.name, self.endpoints, silent)

    def _datapoints(self, should_stop: Callable[[], bool]) -> Iterator[Any]:
        return self._received(should_stop, self._convert)

    def to_dataset(self, input_signature: Sequence[tf.TensorSpec]) -> tf.data.Dataset:
        """The stream as an endless ``tf.data.Dataset`` of tuples matching ``input_signature``
        (named ``tf.TensorSpec``\\ s), read by ``tf.data.Dataset.from_generator`` from this
        source's socket, which opens on the first read. Use it instead of ``setup()`` (one reader
        per socket), e.g. with ``TFDatasetInput(source.to_dataset(specs))``; bad datapoints are
        rejected as above, ``timeout`` applies, and ``close()`` ends the dataset.

        Example::

            ds = ZMQInput("tcp://127.0.0.1:8877", hwm=20).to_dataset(specs).prefetch(4)
        """
        specs = normalize_signature(input_signature, "{}.to_dataset".format(self.name))
        convert = DatapointConverter(specs, self.name)
        stop = self._dataset_stop

        def generate():
            self.ds.reset_state()
            for arrays in self._received(stop.is_set, convert):
                yield tuple(arrays)

        dataset = dataset_from_generator(
            generate, tuple(tf.TensorSpec(s.shape, s.dtype) for s in specs))
        # no read-ahead tf.data adds by itself: a read waiting for a datapoint that never comes
        # would keep the session from closing (prefetch added by the user: close() this first)
        return without_injected_prefetch(dataset)

    def close(self) -> None:
        self._dataset_stop.set()
        super().close()
        self.ds.close()


class ZMQStreamFeed(StreamFeed):
    """A ``ZMQInput``'s socket read by a :class:`~inputpipe.input_source.continuing.ContinuingStream`
    (``EstimatorInput``): the datapoints that fit ``specs`` (set before the first read), as
    arrays, without passes; bad ones are rejected and counted on the ``ZMQInput`` as usual, and
    its ``timeout`` and silence warnings apply.

    Example::

        feed = ZMQStreamFeed(ZMQInput("tcp://127.0.0.1:8877", hwm=20), "EstimatorInput")
        feed.specs = specs
    """

    def __init__(self, source: ZMQInput, name: str):
        self.source = source
        self.name = name
        self.specs: Optional[List[tf.TensorSpec]] = None

    def reset_state(self) -> None:
        self.source.ds.reset_state()

    def passes(self) -> Iterator[Any]:
        if self.specs is None:
            raise InputSourceError("{}: the signature of the socket's datapoints is not known yet".format(self.name))
        return self.source._received(stop_requested, DatapointConverter(self.specs, self.source.name))

    def close(self) -> None:
        self.source.close()
