"""Producers in other processes or on other hosts: push a DataFlow over ZeroMQ, receive it as one.

``send_dataflow_zmq`` pushes datapoints from anywhere; :class:`RemoteDataZMQ` receives them as a
DataFlow. Messages are :mod:`inputpipe.utils.serialize` frames sent and received without copying
(``copy=False``); they are data, never code (nothing is unpickled). A message is bounded as a
whole, by the reader itself: one over ``max_bytes`` bytes in all its frames, with more array
frames than its header declares or than ``max_frames``, or malformed or truncated, is dropped,
counted (``rejected``) and logged (rate-limited), and the messages behind it keep flowing. Only a
frame above ``SOCKET_LIMIT_FACTOR`` times ``max_bytes`` (ZeroMQ's own limit, ``zmq.MAXMSGSIZE``,
which keeps a hostile frame from exhausting memory) makes ZeroMQ drop the sender's connection;
every lost connection is counted (``disconnects``), and one the sender opens again at once (what
ZeroMQ's drop looks like) is warned about, as what the sender had queued on it may be lost. Addresses without a host (``8877``, ``"tcp://:8877"``) mean 127.0.0.1;
listening on other interfaces must be asked for explicitly (e.g. ``"tcp://0.0.0.0:8877"``).

Example::

    # on the data host:   send_dataflow_zmq(BatchData(images, 64), "tcp://trainer:8877")
    # on the trainer:
    df = RemoteDataZMQ("tcp://0.0.0.0:8877")
    df.reset_state()
    for images, labels in df:
        ...
"""
import collections
import os
import threading
import time
import weakref
from typing import Any, Deque, Iterator, List, Optional, Tuple, Union

import zmq
from zmq.utils.monitor import recv_monitor_message

from ..utils import serialize
from ..utils._wire_decode import _as_bytes_view, _read_preamble
from ..utils._wire_layout import _LAYOUT_FRAMES
from ..utils.concurrency import POLL_INTERVAL
from ..utils.logger import get_logger
from .base import DataFlow, DataFlowReentrantGuard, raise_if_stopping
# tensorpack's dataflow.remote also has these (outside __all__): scripts import them from here
from ..utils.serialize import dumps, loads  # noqa: F401
from .process_queue import dump_dataflow_to_process_queue  # noqa: F401
from .tensorpack_helpers import DIE, get_tqdm_kwargs  # noqa: F401

__all__ = ["send_dataflow_zmq", "RemoteDataZMQ"]

logger = get_logger(__name__)

#: Bad messages a receiver warns about one by one in each ``REJECTION_LOG_INTERVAL``; beyond that,
#: one summary per interval.
REJECTION_LOG_BURST = 10
REJECTION_LOG_INTERVAL = 10.0

#: ZeroMQ's own limit on one frame (``zmq.MAXMSGSIZE``) is this many times a receiver's
#: ``max_bytes``: a message over ``max_bytes`` but under this is read, dropped and counted by the
#: receiver while the connection stays up; a frame above it makes ZeroMQ drop the connection
#: (counted in ``disconnects``), so that no frame, however large it claims to be, is allocated.
SOCKET_LIMIT_FACTOR = 4

#: Seconds within which a sender whose connection was lost connects again for the loss to count
#: as dropped (a warning); a sender that does not come back closed it (logged at INFO). ZeroMQ
#: reconnects after 0.1 s, and it does not say why a connection ended.
RECONNECT_WINDOW = 2.0

#: Seconds ``send_dataflow_zmq`` keeps trying to deliver queued datapoints after its last epoch.
SEND_LINGER_SECONDS = 10.0


def normalize_address(addr: Union[str, int]) -> str:
    """A ZeroMQ endpoint for ``addr``: a bare port or a host-less ``tcp://:port`` means 127.0.0.1.

    Example::

        normalize_address(8877)            # "tcp://127.0.0.1:8877"
        normalize_address("ipc:///tmp/s")  # unchanged
    """
    if isinstance(addr, int) and not isinstance(addr, bool):
        return "tcp://127.0.0.1:{}".format(addr)
    if not isinstance(addr, str) or "://" not in addr and not addr.startswith(":"):
        raise ValueError("expected a ZeroMQ address like 'tcp://127.0.0.1:8877', 'ipc:///tmp/sock' or "
                         "a port number, got {!r}".format(addr))
    if addr.startswith(":"):
        addr = "tcp://" + addr
    if addr.startswith("tcp://:"):
        addr = "tcp://127.0.0.1" + addr[len("tcp://"):]
    return addr


#: tensorpack's ``format=`` values of ``send_dataflow_zmq``. inputpipe has one wire format, which
#: every inputpipe receiver (``RemoteDataZMQ``, ``ZMQInput``) reads, so each means the same here.
TENSORPACK_FORMATS = (None, "zmq_op", "zmq_ops")


def send_dataflow_zmq(df: DataFlow, addr: Union[str, int], hwm: int = 50, format: Optional[str] = None,
                      bind: bool = False, *, num_epochs: Optional[int] = None, timeout: Optional[float] = None,
                      warn_after: float = 60.0) -> None:
    """Push every datapoint of ``df`` to ``addr`` (a ZeroMQ PUSH socket); forever by default.

    Calls ``df.reset_state()``. Connects to ``addr`` (where a :class:`RemoteDataZMQ` listens)
    unless ``bind=True``. At most ``hwm`` datapoints wait in the send queue; when the receiver is
    slower, or not there, this waits: it logs a warning once a datapoint has waited
    ``warn_after`` seconds, and with ``timeout`` raises a ``TimeoutError`` naming the address
    once a datapoint has waited that long (by default it waits for the receiver indefinitely, as
    a producer for a trainer that may restart should). With ``num_epochs``, returns after that
    many passes, once the queued datapoints are delivered (giving up after
    ``SEND_LINGER_SECONDS``).

    The parameters are tensorpack's, in its order. Messages are always inputpipe's wire format
    (:mod:`inputpipe.utils.serialize`), which :class:`RemoteDataZMQ` and
    :class:`~inputpipe.input_source.ZMQInput` read, so tensorpack's ``format=None``,
    ``"zmq_op"`` and ``"zmq_ops"`` change nothing; any other format raises a ``ValueError``
    (a ``TypeError`` for ``True``/``False`` in its place: ``bind`` is the 5th parameter).

    Example::

        send_dataflow_zmq(BatchData(MyImages(), 64), "tcp://trainer-host:8877")
    """
    if isinstance(format, bool):
        raise TypeError("send_dataflow_zmq: the 4th parameter is format, as in tensorpack, got {!r}; pass "
                        "bind={!r} as a keyword".format(format, format))
    if format not in TENSORPACK_FORMATS:
        raise ValueError("send_dataflow_zmq: format must be one of {} (all mean inputpipe's wire format, "
                         "which RemoteDataZMQ and ZMQInput read), got {!r}".format(TENSORPACK_FORMATS, format))
    endpoint = normalize_address(addr)
    df.reset_state()
    context = zmq.Context()
    socket = context.socket(zmq.PUSH)
    try:
        socket.set_hwm(hwm)
        if bind:
            socket.bind(endpoint)
        else:
            socket.connect(endpoint)
        socket.setsockopt(zmq.SNDTIMEO, int(POLL_INTERVAL * 1000))
        epoch = 0
        while num_epochs is None or epoch < num_epochs:
            for dp in df:
                _send_waiting(socket, serialize.dumps_frames(dp), endpoint, timeout, warn_after)
            epoch += 1
        linger = SEND_LINGER_SECONDS          # finished: deliver what is still queued
    except BaseException:
        linger = 0.0                          # failed or gave up: nothing more will be delivered
        raise
    finally:
        socket.close(linger=int(linger * 1000))
        context.term()


def _send_waiting(socket: zmq.Socket, frames: List[Any], endpoint: str, timeout: Optional[float],
                  warn_after: float) -> None:
    """Send one message, waiting while the send queue is full (see :func:`send_dataflow_zmq`)."""
    start, warned = time.monotonic(), False
    while True:
        try:
            socket.send_multipart(frames, copy=False)
            return
        except zmq.Again:
            waited = time.monotonic() - start
            if timeout is not None and waited >= timeout:
                raise TimeoutError("send_dataflow_zmq: no receiver took a datapoint at {} for {:.1f} s (the send "
                                   "queue of {} datapoints is full); is the trainer's RemoteDataZMQ or ZMQInput "
                                   "running there?".format(endpoint, waited, socket.get_hwm())) from None
            if not warned and waited >= warn_after:
                logger.warning("send_dataflow_zmq: no receiver has taken a datapoint at %s for %.0f s; still "
                               "waiting (pass timeout= to give up)", endpoint, waited)
                warned = True


class MessageRejected(serialize.WireFormatError):
    """A message refused by a socket reader for its size or number of frames (before decoding).

    Example::

        try:
            frames = receive_bounded(socket, max_frames=16, max_bytes=1 << 20)
        except MessageRejected as err:
            logger.warning("%s", err)
    """


def receive_bounded(socket: zmq.Socket, max_frames: int, max_bytes: int) -> List[zmq.Frame]:
    """The frames of the next message on ``socket`` (which must have one ready), without copying.

    The header frame is read first: the number of array frames it declares (at most
    ``max_frames``) bounds how many more frames are taken, one by one, counting their bytes. A
    message whose header is malformed, with more frames than declared, or of more than
    ``max_bytes`` bytes in all is refused (:class:`MessageRejected`, or the header's
    :class:`~inputpipe.utils.serialize.WireFormatError`) and the rest of it is received into an
    empty buffer and discarded, so a message of millions of tiny frames never becomes millions of
    Python objects (and costs about a microsecond of CPU per frame).

    Example::

        if socket.poll(100):
            frames = receive_bounded(socket, max_frames=64, max_bytes=1 << 26)
    """
    frame = socket.recv(copy=False)
    try:
        expected = _frames_declared(frame, max_frames)
    except serialize.WireFormatError:
        if frame.more:
            _discard_rest(socket)
        raise
    frames, total = [frame], len(frame)
    while frame.more and len(frames) < expected and total <= max_bytes:
        frame = socket.recv(copy=False)
        frames.append(frame)
        total += len(frame)
    if not frame.more and total <= max_bytes:
        return frames
    counted = len(frames)
    received = counted + (_discard_rest(socket) if frame.more else 0)
    if total <= max_bytes:
        raise MessageRejected("message of {} frames, but its header declares {} array frames after it; it was "
                              "discarded unread".format(received, expected - 1))
    raise MessageRejected("message of {} frames exceeds the limit of {} bytes ({} bytes in its first {} frames); it "
                          "was discarded unread (raise max_bytes if such messages are expected)".format(
                              received, max_bytes, total, counted))


def _frames_declared(header: zmq.Frame, max_frames: int) -> int:
    """How many frames the message that starts with ``header`` has, by its header (which is
    checked as ``loads_frames`` checks it; a bad one raises the same WireFormatError)."""
    layout, sizes, _, _ = _read_preamble(_as_bytes_view(header, "loads_frames frame 0"), "loads_frames",
                                         max_frames)
    return 1 + len(sizes) if layout == _LAYOUT_FRAMES else 1


def _discard_rest(socket: zmq.Socket) -> int:
    """Receive and drop the remaining frames of the current message; returns how many.

    Each frame is received into an empty buffer (``recv_into``, pyzmq >= 26.4): nothing is
    allocated or copied for it, whatever its size."""
    count = 0
    discard = getattr(socket, "recv_into", None)
    empty = bytearray()
    while socket.get(zmq.RCVMORE):
        if discard is None:
            socket.recv(copy=False)
        else:
            discard(empty)
        count += 1
    return count


class RejectionLog:
    """Counts what a receiver drops (bad messages, or lost connections) and warns about it without
    flooding the log: each of the first ``REJECTION_LOG_BURST`` in a ``REJECTION_LOG_INTERVAL`` is
    logged, later ones are summed up in one warning per interval.

    Example::

        rejections = RejectionLog("MyReceiver")
        rejections.record(err)          # rejections.count == 1
    """

    def __init__(self, owner: str, one: str = "dropped a bad message", more: str = "dropped {} more bad messages"):
        self.owner = owner
        self.one = one
        self.more = more
        self.count = 0
        self._window_start = time.monotonic()
        self._shown = 0
        self._hidden = 0
        self._latest: object = None

    def record(self, err: object) -> None:
        """Count one dropped message (or lost connection) and maybe warn about it (``err`` says why)."""
        self.count += 1
        now = time.monotonic()
        if now - self._window_start >= REJECTION_LOG_INTERVAL:
            self.flush()
            self._window_start, self._shown = now, 0
        if self._shown < REJECTION_LOG_BURST:
            self._shown += 1
            logger.warning("%s %s (%d so far): %s", self.owner, self.one, self.count, err)
        else:
            self._hidden += 1
            self._latest = err

    def flush(self) -> None:
        """Warn about what was dropped since the last warning, if anything."""
        if self._hidden:
            logger.warning("%s %s (%d so far; not logged one by one); the latest: %s",
                           self.owner, self.more.format(self._hidden), self.count, self._latest)
            self._hidden, self._latest = 0, None


def _close_socket(socket: zmq.Socket, monitor: zmq.Socket, context: zmq.Context, ipc_paths: List[str]) -> None:
    monitor.close(linger=0)
    socket.close(linger=0)
    context.term()
    for path in ipc_paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


class RemoteDataZMQ(DataFlow):
    """Receive datapoints pushed by :func:`send_dataflow_zmq` (or any sender of
    :func:`inputpipe.utils.serialize.dumps_frames` messages) as an endless DataFlow.

    Listens (``bind=True``) on ``addr1`` and, if given, ``addr2``; a bare port or ``tcp://:port``
    means 127.0.0.1. Arrays are built on the received ZeroMQ frames without a copy.

    Every message is bounded as a whole, here: one of more than ``max_bytes`` bytes in all its
    frames, or with more array frames than its header declares or than ``max_frames``, is
    discarded while its frames are counted, before any object is built (see
    :func:`receive_bounded`). Such messages, and malformed or truncated ones, are dropped, counted
    in :attr:`rejected` and logged (one by one up to ``REJECTION_LOG_BURST`` per
    ``REJECTION_LOG_INTERVAL`` seconds, then summed up); the connection stays up and the messages
    queued behind them arrive. ZeroMQ's own limit (``zmq.MAXMSGSIZE``) is ``SOCKET_LIMIT_FACTOR``
    times ``max_bytes`` per frame, so that a hostile frame cannot exhaust memory: a frame above it
    makes ZeroMQ drop the sender's connection (the sender reconnects). ZeroMQ does not say why a
    connection ended: every lost connection is counted in :attr:`disconnects`; one whose sender
    connects again within ``RECONNECT_WINDOW`` seconds (a dropped sender does, after 0.1 s) is
    logged as a warning, rate-limited like the rejections, since what the sender had queued on
    it may be lost; one whose sender does not come back (it closed) is logged at INFO.

    :meth:`receive` waits for one datapoint with a timeout, for callers that must stay responsive
    (e.g. a TF InputSource thread). ``close()`` (also on garbage collection) closes the socket
    and removes an ipc:// socket file.

    Example::

        df = RemoteDataZMQ("tcp://0.0.0.0:8877", hwm=20)
        df.reset_state()
        with df:
            for dp in df:
                ...

    Not resumable: what arrived on the socket is gone once taken, the producers run in other
    processes with their own positions, and how their datapoints interleave is not repeatable.
    Make the producers' flows resumable and save their states on their side instead.
    """

    _not_resumable_reason = (
        "RemoteDataZMQ is not resumable: datapoints taken from the socket are gone, its producers run "
        "elsewhere with their own positions, and how their datapoints interleave is not repeatable; "
        "save and restore the producers' flow states on their side instead")

    def __init__(self, addr1: Union[str, int], addr2: Union[str, int, None] = None, hwm: int = 50,
                 bind: bool = True, *, max_bytes: int = serialize.DEFAULT_MAX_MESSAGE_BYTES,
                 max_frames: int = serialize.DEFAULT_MAX_FRAMES):
        self.addresses = [normalize_address(a) for a in (addr1, addr2) if a is not None]
        self.hwm = hwm
        self.bind = bind
        for name, value in (("max_bytes", max_bytes), ("max_frames", max_frames)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (name == "max_bytes"):
                raise ValueError("{}: {} must be an int >= {}, got {!r}".format(
                    type(self).__name__, name, int(name == "max_bytes"), value))
        self.max_bytes = max_bytes
        self.max_frames = max_frames
        self._rejections = RejectionLog(type(self).__name__)
        self._drops = RejectionLog(type(self).__name__, "lost a sender's connection",
                                   "lost {} more senders' connections")
        self._disconnects = 0
        self._lost: Deque[Tuple[float, str]] = collections.deque()   # (when, endpoint), sender not back yet
        self._socket: Optional[zmq.Socket] = None
        self._monitor: Optional[zmq.Socket] = None
        self._poller = zmq.Poller()
        self._endpoints: List[str] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._finalizer: Optional[weakref.finalize] = None
        self._guard = DataFlowReentrantGuard(type(self).__name__)

    @property
    def rejected(self) -> int:
        """How many messages were dropped as too large, too many frames, malformed or truncated."""
        return self._rejections.count

    @property
    def disconnects(self) -> int:
        """How many times a sender's connection was lost: the sender closed it, or ZeroMQ dropped it
        for a frame above :attr:`socket_limit` (ZeroMQ does not say which)."""
        return self._disconnects

    @property
    def socket_limit(self) -> int:
        """The largest frame ZeroMQ accepts before dropping the connection (``zmq.MAXMSGSIZE``)."""
        return min(SOCKET_LIMIT_FACTOR * self.max_bytes, (1 << 63) - 1)

    @property
    def endpoints(self) -> List[str]:
        """The addresses actually listened on (e.g. the port chosen for ``tcp://127.0.0.1:*``)."""
        return list(self._endpoints)

    def reset_state(self) -> None:
        """Open the socket (once) and bind or connect it."""
        if self._socket is not None:
            return
        if self._closed.is_set():
            raise RuntimeError("{} is closed".format(type(self).__name__))
        context = zmq.Context()
        socket = context.socket(zmq.PULL)
        socket.set_hwm(self.hwm)
        socket.setsockopt(zmq.MAXMSGSIZE, self.socket_limit)
        monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_ACCEPTED | zmq.EVENT_CONNECTED)
        ipc_paths: List[str] = []
        self._finalizer = weakref.finalize(self, _close_socket, socket, monitor, context, ipc_paths)
        for endpoint in self.addresses:
            if self.bind:
                socket.bind(endpoint)
                endpoint = socket.getsockopt_string(zmq.LAST_ENDPOINT)
                if endpoint.startswith("ipc://"):
                    ipc_paths.append(endpoint[len("ipc://"):])
            else:
                socket.connect(endpoint)
            self._endpoints.append(endpoint)
        self._socket, self._monitor = socket, monitor
        self._poller.register(socket, zmq.POLLIN)
        self._poller.register(monitor, zmq.POLLIN)
        logger.info("%s %s %s", type(self).__name__, "listening on" if self.bind else "connected to",
                    ", ".join(self._endpoints))

    def receive(self, timeout: float, empty: Any = None) -> Any:
        """One datapoint, or ``empty`` if none came within ``timeout`` seconds, the receiver is
        closed, or the message was rejected (counted in :attr:`rejected`). Pass a sentinel as
        ``empty`` to tell a sender's ``None`` datapoint from silence. Lost connections are
        counted (:attr:`disconnects`) and logged while it waits.

        Example::

            nothing = object()
            datapoint = receiver.receive(0.5, empty=nothing)
            if datapoint is nothing:
                ...   # no datapoint this time
        """
        if self._socket is None:
            raise RuntimeError("{}: call reset_state() before receiving".format(type(self).__name__))
        with self._lock:
            if self._closed.is_set() or not self._wait_for_message(timeout):
                return empty
            try:
                frames = receive_bounded(self._socket, self.max_frames, self.max_bytes)
            except serialize.WireFormatError as err:
                self._rejections.record(err)
                return empty
        try:
            return serialize.loads_frames(frames, max_bytes=self.max_bytes, max_frames=self.max_frames)
        except serialize.WireFormatError as err:
            self._rejections.record(err)
            return empty

    def _wait_for_message(self, timeout: float) -> bool:
        """Whether a message is ready within ``timeout`` seconds; notes lost connections meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            ready = dict(self._poller.poll(max(0, int((deadline - time.monotonic()) * 1000))))
            if self._monitor in ready or self._lost:
                self._note_connection_events()
            if self._socket in ready:
                return True
            if time.monotonic() >= deadline:
                return False

    def _note_connection_events(self) -> None:
        """Count lost connections; a sender that connects again soon after was dropped (warned about)."""
        assert self._monitor is not None
        while self._monitor.poll(0):
            event = recv_monitor_message(self._monitor)
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self._disconnects += 1
                self._lost.append((time.monotonic(), event["endpoint"].decode(errors="replace")))
            elif self._lost:          # a sender connected (again)
                _, endpoint = self._lost.popleft()
                self._drops.record(
                    "on {}, and the sender connected again: ZeroMQ drops the connection of a sender that sends a "
                    "frame above the socket limit of {} bytes ({} x max_bytes); datapoints the sender had queued "
                    "on it may be lost".format(endpoint, self.socket_limit, SOCKET_LIMIT_FACTOR))
        while self._lost and time.monotonic() - self._lost[0][0] >= RECONNECT_WINDOW:
            _, endpoint = self._lost.popleft()
            logger.info("%s: a sender on %s closed its connection (%d connections lost so far)",
                        type(self).__name__, endpoint, self._disconnects)

    def __iter__(self) -> Iterator[Any]:
        nothing = object()
        with self._guard:
            while not self._closed.is_set():
                dp = self.receive(POLL_INTERVAL, empty=nothing)
                if dp is nothing:
                    raise_if_stopping(self)
                    continue
                if dp is None:  # a sender's None is no datapoint: dropped and counted like a bad message
                    self._rejections.record(ValueError("a datapoint that is None"))
                    continue
                yield dp

    def close(self) -> None:
        """Close the socket (safe from another thread) and remove ipc:// socket files."""
        self._closed.set()
        self._rejections.flush()
        self._drops.flush()
        if self._finalizer is not None:
            with self._lock:
                self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
