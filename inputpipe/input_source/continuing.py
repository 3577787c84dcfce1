"""A stream of datapoints that outlives the graphs and sessions reading it.

``tf.estimator`` builds a new graph, and so a new InputSource, for every ``train()``,
``evaluate()`` and ``predict()`` call. :class:`ContinuingStream` is the part that lives on: one
reader thread iterates the data (an in-process DataFlow, a ``QueueInput(in_worker=True)``'s worker,
or a ``ZMQInput``'s socket) into a bounded buffer, and the source of each session iterates the
stream as its DataFlow. The DataFlow, its worker processes, caches and shuffle buffers are made
once; a session starts with the datapoints the reader already holds.

Two modes:

- ``"continue"`` (training): one endless stream, pass after pass. The datapoints a session took but
  its steps did not consume (queued, staged, in the feeding thread's hand when it stopped) are
  handed out again, first and in order, to the next session (:meth:`ContinuingStream.session_ended`
  says how many the steps consumed). The stream is its sources' state owner: :meth:`get_state` is
  the data's state after the datapoint just handed out, so checkpoints hold the consumed position,
  and :meth:`set_state` with the position a restored checkpoint holds continues in place when it is
  where the stream already is, or restarts the data there when it is not (another checkpoint, or a
  new process after a kill).
- ``"passes"`` (evaluation, prediction): each session reads exactly one whole pass. After a pass the
  reader reads ahead into the next one, so the next session starts at once; a session that stopped
  early leaves the rest of its pass unread and the next one starts a new pass.

Example::

    stream = ContinuingStream(FlowFeed(df, "train"), mode="continue")
    source = QueueInput(stream)          # one per graph; the stream goes on across them
    ...
    stream.session_ended(consumed=40, state=position.state_at(39))
    stream.shutdown()                    # stops the reader and closes the DataFlow
"""
import functools
import json
import threading
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterator, Optional, Tuple

from ..dataflow.base import (
    DataFlowTerminated, NotResumableError, empty_passes_mean_stuck, get_length, raise_if_stopping,
)
from ..utils.concurrency import POLL_INTERVAL, StoppableThread
from ..utils.logger import get_logger
from ..utils.switch_interval import shortened_switch_interval
from ._iteration import close_dataflow, empty_epochs_error
from .errors import InputSourceError
from .position import not_resumable_reason

__all__ = ["ContinuingStream", "StreamFeed", "FlowFeed", "WorkerStreamFeed", "MODES"]

logger = get_logger(__name__)

#: ``"continue"``: one endless stream whose unconsumed part carries over; ``"passes"``: one pass per session.
MODES = ("continue", "passes")
#: Seconds :meth:`ContinuingStream.shutdown` waits for the reader thread to leave the data.
_STOP_TIMEOUT = 5.0


class _PassEnd:
    """The end of a pass in the reader's output (``passes`` mode keeps it in the buffer)."""

    def __repr__(self) -> str:
        return "<end of pass>"


PASS_END = _PassEnd()


class _Entry:
    """A datapoint read, with the data's state right after it (None when not taken)."""

    __slots__ = ("datapoint", "state")

    def __init__(self, datapoint: Any, state: Optional[Dict[str, Any]]):
        self.datapoint = datapoint
        self.state = state


class StreamFeed:
    """What a :class:`ContinuingStream` reads. ``passes()`` yields datapoints and :data:`PASS_END`
    after each pass, pass after pass; ``restartable``: a new pass can start at any moment (else
    the reader reads the rest of an abandoned pass and drops it); ``switch_interval``: the GIL
    switch interval while the reader runs the data in this process (None: leave it).

    Example::

        class Numbers(StreamFeed):
            def passes(self):
                while True:
                    yield from range(3)
                    yield PASS_END
    """

    name = "stream"
    restartable = True
    switch_interval: Optional[float] = None

    def reset_state(self) -> None:
        pass

    def passes(self) -> Iterator[Any]:
        raise NotImplementedError

    def length(self) -> Optional[int]:
        """Datapoints in one pass, None when unknown."""
        return None

    def flow(self) -> Any:
        """The DataFlow whose passes are read (for the empty-pass guard), or None."""
        return None

    def check_resumable(self) -> None:
        raise NotResumableError("{}: the data cannot save its position".format(self.name))

    def get_state(self) -> Dict[str, Any]:
        raise NotImplementedError

    def set_state(self, state: Dict[str, Any]) -> None:
        raise NotImplementedError

    def restart(self) -> None:
        """Make the next ``passes()`` start afresh (a feed that is not ``restartable``)."""

    def close(self) -> None:
        pass


class FlowFeed(StreamFeed):
    """A DataFlow iterated in this process, one ``iter()`` per pass.

    Example::

        feed = FlowFeed(BatchData(df, 32), "EstimatorInput")
    """

    def __init__(self, ds: Any, name: str, switch_interval: Optional[float] = None):
        self.ds = ds
        self.name = name
        self.switch_interval = switch_interval

    def reset_state(self) -> None:
        self.ds.reset_state()

    def passes(self) -> Iterator[Any]:
        while True:
            try:
                for datapoint in self.ds:
                    yield datapoint
            except DataFlowTerminated:
                return
            yield PASS_END

    def length(self) -> Optional[int]:
        return get_length(self.ds)

    def flow(self) -> Any:
        return self.ds

    def check_resumable(self) -> None:
        reason = not_resumable_reason(self.ds)
        if reason is not None:
            raise NotResumableError(reason)

    def get_state(self) -> Dict[str, Any]:
        return self.ds.get_state()

    def set_state(self, state: Dict[str, Any]) -> None:
        self.ds.set_state(state)

    def close(self) -> None:
        close_dataflow(self.ds, self.name)


class WorkerStreamFeed(StreamFeed):
    """The DataFlow of a ``QueueInput(df, in_worker=True)``, run by its worker process (a
    :class:`~inputpipe.input_source.worker_feed.WorkerFeed`). A pass cannot be cut short: the
    worker streams passes one after the other.

    Example::

        feed = WorkerStreamFeed(WorkerFeed(df, "QueueInput"), "EstimatorInput")
    """

    restartable = False

    def __init__(self, worker_feed: Any, name: str):
        self.worker_feed = worker_feed
        self.name = name

    def reset_state(self) -> None:
        self.worker_feed.reset_state()

    def passes(self) -> Iterator[Any]:
        while True:
            for datapoint in self.worker_feed.datapoints(infinite=False):
                yield datapoint
            yield PASS_END

    def length(self) -> Optional[int]:
        return get_length(self.worker_feed.ds)

    def flow(self) -> Any:
        return self.worker_feed.ds

    def check_resumable(self) -> None:
        reason = self.worker_feed.not_resumable_reason() or not_resumable_reason(self.worker_feed.ds)
        if reason is not None:
            raise NotResumableError(reason)

    def get_state(self) -> Dict[str, Any]:
        return self.worker_feed.get_state()

    def set_state(self, state: Dict[str, Any]) -> None:
        self.worker_feed.set_state(state)

    def restart(self) -> None:
        self.worker_feed.close()
        self.worker_feed.reset_state()

    def close(self) -> None:
        self.worker_feed.close()


def _resumable(feed: StreamFeed) -> bool:
    try:
        feed.check_resumable()
    except NotResumableError:
        return False
    return True


def _same_state(a: Any, b: Any) -> bool:
    """Whether two DataFlow states are the same position (compared as canonical JSON)."""
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError):
        return False


_NO_STATE = object()


class _ReaderThread(StoppableThread):
    def __init__(self, stream: "ContinuingStream"):
        super().__init__(name="{}-reader".format(stream.name))
        self.stream = stream

    def run(self) -> None:
        stream = self.stream
        try:
            with shortened_switch_interval(stream.feed.switch_interval):
                stream._read(self)
        except BaseException as err:          # recorded for the consumers, in order
            if not self.stopped():
                stream._fail(err)
        finally:
            with stream._cond:
                stream._cond.notify_all()


class ContinuingStream:
    """Datapoints of ``feed`` that continue across sessions (see the module docstring).

    ``capacity``: datapoints the reader holds ahead of the consumers. ``unit``: the sources take
    datapoints ``unit`` at a time (``BatchQueueInput``'s batch size), so the state is taken after
    every ``unit``-th datapoint only (``track``: at all, when the data is resumable; otherwise
    :meth:`get_state` raises).
    ``window``: in ``continue`` mode, how many datapoints handed out in a session can be unconsumed
    at most (its queue and staging hold no more); older ones are known consumed and forgotten.

    It is used like a DataFlow by the per-session source (``reset_state()``, ``iter()``, ``len()``,
    ``get_state()``, ``set_state()``); ``close()`` does nothing (a session ending must not end the
    stream): :meth:`shutdown` ends it.

    Example::

        stream = ContinuingStream(FlowFeed(df, "EstimatorInput"), mode="passes")
        stream.reset_state()
        first_pass = list(stream)
        stream.shutdown()
    """

    def __init__(self, feed: StreamFeed, mode: str, capacity: int = 16, unit: int = 1, track: bool = True,
                 window: int = 10000):
        if mode not in MODES:
            raise ValueError("ContinuingStream: mode must be one of {}, got {!r}".format(MODES, mode))
        self.feed = feed
        self.name = feed.name
        self.mode = mode
        self.capacity = max(1, int(capacity))
        self.unit = max(1, int(unit))
        self.track = bool(track) and _resumable(feed)
        self.window = max(1, int(window))
        self._cond = threading.Condition()
        self._buffer: Deque[Any] = deque()     # entries read ahead (and PASS_END in passes mode)
        self._pending: Deque[_Entry] = deque()   # continue: handed out, not known consumed
        self._pending_base = 0                   # absolute number of pending[0]
        self._generation = 0                     # sessions that iterated the stream
        self._generation_start = 0               # absolute number of the current session's first datapoint
        self._reported = 0                       # absolute number of the first datapoint not known consumed
        self._current: Optional[_Entry] = None   # the datapoint handed out last
        self._consumed_state: Any = None         # continue: the state after the last consumed datapoint
        self._token = 0                          # bumped to make the reader start again
        self._apply: Any = _NO_STATE             # a state the reader sets before it reads on
        self._mid_pass = False                   # passes: a session took part of a pass and did not finish it
        self._error: Optional[BaseException] = None
        self._reset = False
        self._closed = False
        self._reader: Optional[_ReaderThread] = None

    # -- what the per-session source calls (a DataFlow's protocol) ---------------------------
    def reset_state(self) -> None:
        """Reset the data once; later calls (one per session) do nothing."""
        with self._cond:
            if self._closed:
                raise InputSourceError("{}: the stream was shut down".format(self.name))
            if self._reset:
                return
            self._reset = True
        self.feed.reset_state()

    def __len__(self) -> int:
        length = self.feed.length()
        if length is None:
            raise NotImplementedError("{}: the data has no length".format(self.name))
        return length

    def __iter__(self) -> Iterator[Any]:
        with self._cond:
            if not self._reset:
                raise InputSourceError("{}: call reset_state() before iterating the stream".format(self.name))
            self._generation += 1
            generation = self._generation
            if self.mode == "passes":
                self._start_pass()
            else:
                self._start_continuing()
            self._start_reader()
        if self.mode == "passes":
            return self._one_pass(generation)
        return self._continued(generation)

    def check_resumable(self) -> None:
        """Raise ``NotResumableError`` unless the data can save and restore its position."""
        self.feed.check_resumable()
        if not self.track:
            raise NotResumableError("{}: the stream does not track its position".format(self.name))

    def get_state(self) -> Dict[str, Any]:
        """The data's state right after the datapoint handed out last (``continue`` mode)."""
        entry = self._current
        if entry is None or entry.state is None:
            raise InputSourceError(
                "{}: no state was taken after the datapoint handed out last (states are taken every {} "
                "datapoints, the size of what a step takes)".format(self.name, self.unit))
        return entry.state

    def set_state(self, state: Dict[str, Any]) -> None:
        """Continue from ``state`` (restored from a checkpoint): nothing changes when the stream
        is there already (the last session consumed up to it); otherwise the data restarts at it,
        and what was read ahead or left unconsumed is dropped."""
        with self._cond:
            if self._consumed_state is not None and _same_state(state, self._consumed_state):
                logger.debug("%s: the restored position is where the stream is; it continues", self.name)
                return
            if self._generation or self._reader is not None:
                logger.info("%s: the restored input position is not where the stream is; the data restarts "
                            "there", self.name)
            self._restart_at(state)

    def _restart_at(self, state: Any) -> None:
        """Drop what was read and handed out; the reader sets the data to ``state`` and reads on."""
        self._pending.clear()
        self._buffer.clear()
        self._pending_base = self._generation_start = self._reported = 0
        self._consumed_state = state
        self._apply = state
        self._token += 1
        self._cond.notify_all()

    def close(self) -> None:
        """Nothing: a session ending leaves the stream running (see :meth:`shutdown`)."""

    # -- what the owner calls ----------------------------------------------------------------
    def session_ended(self, consumed: Optional[int], state: Any = None) -> None:
        """The session that iterated the stream last ended after its steps consumed the first
        ``consumed`` datapoints it was handed (None: not known, everything handed out is handed
        out again), ``state`` being the data's state after the last of them. The rest is
        handed out again, first, to the next session."""
        if self.mode != "continue" or consumed is None:
            return
        with self._cond:
            end = self._generation_start + int(consumed)
            while self._pending and self._pending_base < end:
                self._pending.popleft()
                self._pending_base += 1
            self._reported = self._generation_start = end
            if consumed > 0 and state is not None:
                self._consumed_state = state

    @property
    def carried(self) -> int:
        """Datapoints handed out and not consumed, to be handed out again first (``continue``)."""
        with self._cond:
            return len(self._pending)

    @property
    def buffered(self) -> int:
        """Datapoints read ahead by the reader thread."""
        with self._cond:
            return sum(1 for entry in self._buffer if entry is not PASS_END)

    def shutdown(self) -> None:
        """Stop the reader and close the data (its worker processes, threads, sockets). Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            reader, self._reader = self._reader, None
            self._buffer.clear()
            self._pending.clear()
            self._cond.notify_all()
        if reader is not None:
            reader.stop()
            reader.join(POLL_INTERVAL * 4)
        try:
            self.feed.close()             # a reader inside the data gets out when the data closes
        finally:
            if reader is not None:
                reader.join(_STOP_TIMEOUT)
                if reader.is_alive():
                    logger.warning("%s: the reader thread did not leave the DataFlow within %.0f s of its close(); "
                                   "it is a daemon thread and ends with the process", self.name, _STOP_TIMEOUT)

    # -- consumers ------------------------------------------------------------------------------
    def _start_reader(self) -> None:
        if self._reader is None and not self._closed:
            self._reader = _ReaderThread(self)
            self._reader.start()

    def _start_continuing(self) -> None:
        """``continue``: a session hands out everything not known consumed again, first. If a
        session that ended without saying what it consumed (it failed) let its oldest datapoints
        go (more than its window: consumed then, but the model restored since may not have seen
        them), the data restarts at the last consumed position known, or, without one, goes on
        with a warning."""
        if self._pending_base > self._reported:
            if self.track and self._consumed_state is not None:
                logger.info("%s: a session failed after its steps consumed more than the stream keeps; the "
                            "data restarts at the last position a session reported", self.name)
                self._restart_at(self._consumed_state)
            else:
                logger.warning("%s: a session failed after its steps consumed %d datapoints the stream no longer "
                               "holds; they are not handed out again", self.name, self._pending_base - self._reported)
                self._reported = self._pending_base
        self._generation_start = self._reported

    def _start_pass(self) -> None:
        """``passes``: before a session reads, drop what is left of a pass an earlier session
        left unfinished (up to its end in the buffer, or by starting the reader again)."""
        if not self._mid_pass:
            self._mid_pass = True
            return
        while self._buffer and self._buffer[0] is not PASS_END:
            self._buffer.popleft()
        if self._buffer:
            self._buffer.popleft()           # the unfinished pass's end: the buffer holds the next pass
        else:
            self._token += 1                 # the reader is still inside that pass
            self._cond.notify_all()

    def _wait(self, generation: int, ready: Callable[[], bool]) -> None:
        """Wait (holding the condition) until ``ready()``; raise the reader's failure once nothing
        read before it is left, ``DataFlowTerminated`` when the stream or the consuming thread
        stops or a newer session took over the stream."""
        while True:
            if self._closed or generation != self._generation:
                raise DataFlowTerminated("{}: the stream was shut down or a newer session reads it".format(self.name))
            if ready():
                return
            if self._error is not None:
                raise self._error
            reader = self._reader
            if reader is None or not reader.is_alive():
                raise InputSourceError("{}: the reader thread ended without a reason".format(self.name))
            raise_if_stopping(self)
            self._cond.wait(POLL_INTERVAL)

    def _continued(self, generation: int) -> Iterator[Any]:
        """``continue``: the carried-over datapoints, then new ones, without end."""
        handed = 0
        while True:
            with self._cond:
                self._wait(generation, functools.partial(self._has_next, handed))
                position = self._generation_start + handed - self._pending_base
                if position < len(self._pending):
                    entry = self._pending[position]
                else:
                    entry = self._buffer.popleft()
                    self._pending.append(entry)
                    self._cond.notify_all()
                    if len(self._pending) > self.window:    # surely consumed: nothing holds that many
                        self._pending.popleft()
                        self._pending_base += 1
                handed += 1
                self._current = entry
            yield entry.datapoint

    def _has_next(self, handed: int) -> bool:
        return self._generation_start + handed - self._pending_base < len(self._pending) or bool(self._buffer)

    def _one_pass(self, generation: int) -> Iterator[Any]:
        """``passes``: the datapoints of one pass."""
        while True:
            with self._cond:
                self._wait(generation, lambda: bool(self._buffer))
                entry = self._buffer.popleft()
                self._cond.notify_all()
                if entry is PASS_END:
                    self._mid_pass = False
                    return
                self._current = entry
            yield entry.datapoint

    # -- the reader thread ----------------------------------------------------------------------
    def _fail(self, err: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = err
            self._cond.notify_all()

    def _read(self, thread: _ReaderThread) -> None:
        """Read the feed into the buffer until stopped (run by the reader thread only, the one
        thread that touches the data)."""
        passes: Optional[Iterator[Any]] = None
        token: Optional[int] = None
        count = in_pass = empty = 0          # datapoints since the data (re)started at a state; in this pass; empty passes
        resumed = skipping = False
        while not thread.stopped():
            with self._cond:
                changed, state, self._apply = self._token != token, self._apply, _NO_STATE
                token = self._token
            if changed:
                passes, skipping = self._restart(passes, state, in_pass)
                if state is not _NO_STATE:
                    resumed, count = True, 0
                if passes is None:
                    passes, in_pass = self.feed.passes(), 0
            assert passes is not None           # made above at the first pass
            try:
                item = next(passes)
            except StopIteration:
                raise DataFlowTerminated("{}: the data ended for good".format(self.name)) from None
            if item is PASS_END:
                empty = 0 if in_pass or resumed else empty + 1
                resumed, in_pass = False, 0
                flow = self.feed.flow()
                if self.mode == "continue" and flow is not None and empty_passes_mean_stuck(flow, empty):
                    raise empty_epochs_error(self.name, flow, empty)
                if skipping:
                    skipping = False
                    continue
                if self.mode == "continue":
                    continue
                entry: Any = PASS_END
            else:
                in_pass += 1
                if skipping:
                    continue
                count += 1
                wanted = self.mode == "continue" and self.track and count % self.unit == 0
                entry = _Entry(item, self.feed.get_state() if wanted else None)
            with self._cond:
                while len(self._buffer) >= self.capacity and self._token == token and not thread.stopped():
                    self._cond.wait(POLL_INTERVAL)
                if self._token == token and not thread.stopped():
                    self._buffer.append(entry)
                    self._cond.notify_all()

    def _restart(self, passes: Optional[Iterator[Any]], state: Any, in_pass: int) -> Tuple[Optional[Iterator[Any]], bool]:
        """The reader's iterator after a restart request: None (make a new one) or ``passes`` (a
        feed that cannot restart, which skips to the end of the pass it is in), and whether to skip."""
        if state is not _NO_STATE:
            _close_iterator(passes)
            if passes is not None and not self.feed.restartable:
                self.feed.restart()
            self.feed.set_state(state)
            return None, False
        if passes is None:
            return None, False
        if self.feed.restartable:
            _close_iterator(passes)
            return None, False
        return passes, in_pass > 0


def _close_iterator(iterator: Optional[Iterator[Any]]) -> None:
    closer = getattr(iterator, "close", None)
    if closer is not None:
        try:
            closer()
        except Exception:
            logger.debug("closing an abandoned pass failed", exc_info=True)
