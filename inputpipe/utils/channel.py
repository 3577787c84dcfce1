"""A channel between a parent and one worker process: pipes for messages, shared memory for arrays.

Datapoints travel in the wire format of :mod:`inputpipe.utils.serialize` (a msgpack header plus
raw array frames); nothing is pickled. A datapoint without array frames (arrays of at most
4 KiB travel inside the header) is one message through the pipe; one whose frames total less
than 64 KiB sends them through the pipe after its header. Larger array frames are written
once, by the worker, into a shared-memory segment owned by that worker's channel
(frames of 4 MiB or more by two threads, see :mod:`inputpipe.utils.copying`); the parent builds
its numpy arrays directly on that memory (zero copy).

Small datapoints can travel several to a message (:meth:`WorkerEnd.hold_datapoint`): a worker
that makes them faster than a pipe write and the parent's wake-up cost holds them a few
milliseconds and sends them together, each encoded on its own inside one message; the parent's
:meth:`ParentEnd.receive` returns them as ``("many", [dp, ...])``. Nothing is held while the worker
waits for a command, and a thread sends what waited too long while the worker is busy.

Each large datapoint occupies one region of the segment, and a small table at the start of the
segment holds each region's state: *sent* (written by the worker, message on its way), *received*
(the parent has read the message; the consumer holds the arrays) or *free* (the last of those
arrays was garbage-collected, which in CPython happens as soon as the consumer drops it). The
worker places new regions first-fit into the gaps between live ones, so memory freed anywhere
(e.g. behind a batch that ``BatchData`` is still assembling) is reused at once. The table has a
slot for every region the segment can hold, so only the bytes of the segment ever limit it.

New regions go where the consumer released memory most recently, since that memory is still
in the CPU's caches, which makes the copy into it up to twice as fast as a copy into memory that
was written long ago (falling back to the lowest gap that fits). Before it allocates, the worker
also waits a moment (0.5 ms for a 20 MB datapoint, 1 ms at most) for the consumer to release the
datapoint before the one it sent last, which a consumer that is keeping up does as soon as it
takes the one sent last; so a fast pipeline cycles through two warm regions instead of the whole
segment. A wait that ends without the release makes the next few allocations skip waiting (the
consumer is keeping its datapoints, e.g. to batch them).

When the segment is full, the worker waits while some of it is still *sent*: the consumer is
about to take those datapoints (this is ordinary back-pressure). When all of it is *received*,
the worker waits up to 0.2 s for a region to be freed (the parent may have read datapoints that
are still queued on their way to the consumer); if none is, the consumer keeps everything it got
(e.g. ``list(df)``), and waiting might never end: frames then go through the pipe, slower but
never stuck, at once until a region is freed again, and :attr:`ParentEnd.pipe_fallbacks` counts
them.

The segment is a file in ``/dev/shm`` that never has a name: the parent creates it with
``O_TMPFILE`` (or ``memfd_create`` where ``/dev/shm`` cannot make one) and hands the open file
descriptor to the worker (inherited with ``fork``; passed by multiprocessing's descriptor passing
with ``spawn``/``forkserver``). So no file is ever visible in ``/dev/shm``, and none can be left
behind whenever the parent or a worker is killed: the memory is freed when the last process
holding the descriptor or a mapping ends.

The segment takes memory as it is used, not up front: its file is ``shm_bytes`` long but sparse,
and the worker reserves (``posix_fallocate``) and pre-faults its pages in growing steps just
before it first writes to them, so a pipeline of small datapoints takes little of ``/dev/shm``.
When ``/dev/shm`` is full (Docker gives containers 64 MiB by default), the reservation fails
cleanly instead of the worker dying of SIGBUS: the datapoint goes through the pipe, the worker
keeps to the memory it has, and the parent logs one warning naming ``/dev/shm``'s size and free
space. A datapoint larger than the whole segment also goes through the pipe, with one warning.

Example::

    parent_end, worker_spec = open_channel("MyRunner", shm_bytes=64 << 20)
    # in the worker:  end = worker_spec.open(); end.send_datapoint([np.zeros(10)])
    # in the parent:  kind, value = parent_end.receive()
"""
import multiprocessing as mp
import os
from multiprocessing import reduction
import queue
import threading
import time
import weakref
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _shm_files as shm_files, fork_guard, serialize
from .concurrency import POLL_INTERVAL, StoppableThread
from .buffers import aligned_empty
from ._regions import FREE as _FREE, RECEIVED as _RECEIVED, aligned as _aligned, table as _table, \
    table_bytes as _table_bytes
from ._worker_segment import NO_SPACE as _NO_SPACE, TOO_BIG as _TOO_BIG, WorkerSegment, \
    uses_shared_memory
from .errors import exception_type_named, failure_report
from .logger import get_logger

__all__ = ["open_channel", "ParentEnd", "WorkerSpec", "WorkerEnd", "ChannelClosed", "DEFAULT_SHM_BYTES"]

logger = get_logger(__name__)

#: Default size of each worker's shared-memory segment (bytes).
DEFAULT_SHM_BYTES = 96 << 20
#: Internal channels carry trusted data of any size; the limit only guards against corruption.
_INTERNAL_MAX_BYTES = 1 << 40

# message kinds: a datapoint inside the message, a datapoint with array frames, an error, several
# datapoints without array frames (each encoded on its own)
_INLINE, _DATA, _ERROR, _MANY = "in", "dp", "err", "many"
#: A worker sends the small datapoints it holds (:meth:`WorkerEnd.hold_datapoint`) once this many
#: are held, or once their encodings take this many bytes; and at the latest this many seconds
#: after the oldest was given (unless told otherwise).
HOLD_MOST = 64
HOLD_BYTES = 1 << 20
HOLD_SECONDS = 0.004


class ChannelClosed(EOFError):
    """In a worker: the parent closed the channel (the worker was retired, or its flow closed).

    Its own class, so that a worker's loop tells the parent's normal stop apart from an
    ``EOFError`` or ``BrokenPipeError`` of the user's code (a truncated file, a closed socket),
    which is reported to the parent like any other exception.

    Example::

        try:
            command = end.receive_command(timeout=0.05)
        except ChannelClosed:
            return                          # a normal stop
    """

    def __init__(self) -> None:
        super().__init__("the parent closed the channel")


def open_channel(component: str, shm_bytes: int = DEFAULT_SHM_BYTES,
                 notices: Optional[set] = None) -> Tuple["ParentEnd", "WorkerSpec"]:
    """Make the pipes and the shared-memory segment for one worker; returns both ends.

    ``notices`` (a set shared by the channels of one pool) makes each kind of warning about
    shared memory appear once per pool. On an error nothing stays open."""
    made = []
    try:
        result_reader, result_writer = mp.Pipe(duplex=False)
        made += [result_reader, result_writer]
        command_reader, command_writer = mp.Pipe(duplex=False)
        made += [command_reader, command_writer]
        fd, mm, capacity = shm_files.create_segment(component, shm_bytes)
    except BaseException:
        for connection in made:
            connection.close()
        raise
    spec = WorkerSpec(result_writer, command_reader, fd, capacity)
    # other processes forked here (nested workers, a map_func that forks) must not hold these
    fork_guard.keep_out_of_forks(*[c.fileno() for c in made], *([] if fd is None else [fd]))
    notices = set() if notices is None else notices
    return ParentEnd(component, result_reader, command_writer, mm, capacity, notices), spec


class WorkerSpec:
    """The picklable worker half of a channel; call :meth:`open` in the worker.

    It carries the segment's file descriptor: a forked worker inherits it; pickled for
    ``spawn``/``forkserver``, it goes through multiprocessing's descriptor passing.

    Example::

        parent_end, spec = open_channel("MyRunner")
        # start the worker with ``spec``, then: spec.close_in_parent()
    """

    def __init__(self, result_writer, command_reader, shm_fd: Optional[int], shm_bytes: int):
        self.result_writer = result_writer
        self.command_reader = command_reader
        self.shm_fd = shm_fd
        self.shm_bytes = shm_bytes

    def __getstate__(self):
        state = dict(self.__dict__)
        if isinstance(self.shm_fd, int):
            state["shm_fd"] = reduction.DupFd(self.shm_fd)
        return state

    def handed_over(self) -> List[int]:
        """The descriptors the worker keeps (see :func:`~inputpipe.utils.fork_guard.handing_over`)."""
        return [self.result_writer.fileno(), self.command_reader.fileno()] + (
            [self.shm_fd] if isinstance(self.shm_fd, int) else [])

    def close_in_parent(self) -> None:
        """After the worker started: drop the parent's copies of the worker's pipe ends and of the
        segment's descriptor (the worker has its own)."""
        fork_guard.forget(*self.handed_over())
        self.result_writer.close()
        self.command_reader.close()
        if isinstance(self.shm_fd, int):
            os.close(self.shm_fd)
        self.shm_fd = None

    def _take_fd(self) -> Optional[int]:
        fd = self.shm_fd
        return fd if fd is None or isinstance(fd, int) else fd.detach()

    def open(self) -> "WorkerEnd":
        return WorkerEnd(self)


class WorkerEnd:
    """The worker's end: send datapoints and errors, receive commands.

    Example::

        end = spec.open()
        end.send_datapoint({"image": img})
        command = end.receive_command(timeout=0.05)   # None if nothing came
    """

    def __init__(self, spec: WorkerSpec):
        #: Seconds of work (of them, sending results) and items done so far, as counted by the
        #: worker's loop (see :meth:`count_work`); each message to the parent carries them.
        self.busy_seconds = 0.0
        self.send_seconds = 0.0
        self.items = 0
        self._conn = spec.result_writer
        self._commands = spec.command_reader
        fd = spec._take_fd()
        # a worker that forks (a nested parallel flow, a map_func) keeps its channel to itself
        fork_guard.keep_out_of_forks(self._conn.fileno(), self._commands.fileno(), *([] if fd is None else [fd]))
        self._segment = None if fd is None else WorkerSegment(fd, spec.shm_bytes, self._check_open)
        self._reader: Optional[_CommandReader] = None
        self._sending = threading.Condition()     # one message at a time (the held sender's too)
        self._held: List[bytes] = []      # encoded datapoints held to be sent together
        self._held_bytes = 0
        self._held_since = 0.0
        self._hold_within = 0.0
        self._held_sender: Optional[_HeldSender] = None

    def count_work(self, seconds: float, items: int = 0, sending: bool = False) -> None:
        """Add to the work counts that the next message carries to the parent (for profilers:
        :meth:`ParentEnd.busy_seconds`); ``sending``: the seconds were spent sending results."""
        self.busy_seconds += seconds
        self.items += items
        if sending:
            self.send_seconds += seconds

    def _send_control(self, control: dict) -> None:
        self._conn.send_bytes(serialize.dumps(control))

    def _check_open(self) -> None:
        """Raise :class:`ChannelClosed` once the parent has closed the command pipe."""
        if self._reader is not None and not self._reader.is_alive():
            raise ChannelClosed()

    def shared_bytes(self) -> int:
        """Bytes of memory the segment holds: its region table and the data area backed so far
        (it never gives memory back while the worker lives); 0 without shared memory."""
        return 0 if self._segment is None else self._segment.shared_bytes()

    def shared_empty(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """A new, uninitialised C-contiguous array in this worker's shared memory: when it (or a
        leading part of it, such as ``array[:n]``) is the one array frame of the next datapoint
        sent, :meth:`send_datapoint` sends it without copying it (e.g. a batch built in place).
        An ordinary 64-byte aligned array when shared memory is off, has no room, or the array is
        small. One not sent that way gives its memory back at the next send.

        Example::

            batch = end.shared_empty((64, 224, 224, 3), np.uint8)
            ...                                   # fill batch[i] as the images come
            end.send_datapoint([batch, labels])   # the parent maps the same memory
        """
        dtype = np.dtype(dtype)
        array = self._segment.empty(shape, dtype) if self._segment is not None else None
        return aligned_empty(shape, dtype) if array is None else array

    def send_datapoint(self, obj: Any) -> int:
        """Send one datapoint (after the ones held, see :meth:`hold_datapoint`); returns the
        number of array bytes it carried in frames. :class:`ChannelClosed` when the parent
        closed the channel."""
        try:
            whole = _encoded({"k": _INLINE, "v": obj, "b": self.busy_seconds, "n": self.items,
                              "s": self.send_seconds}, obj)
            with self._sending:
                self._send_held()
                if len(whole) == 1:       # no array frames: the datapoint travels inside one message
                    self._conn.send_bytes(whole[0])
                    return 0
                return self._send_frames(serialize.dumps_frames(obj))
        except (BrokenPipeError, ConnectionResetError) as err:
            raise ChannelClosed() from err
        finally:
            if self._segment is not None:
                self._segment.release_prepared()

    def hold_datapoint(self, obj: Any, within: float = HOLD_SECONDS) -> int:
        """Send ``obj`` together with other small datapoints, at most ``within`` seconds after the
        oldest of them was given: one message (one write, one wake-up of the parent) for several.
        Those held go when :data:`HOLD_MOST` are held or :data:`HOLD_BYTES` reached, by
        :meth:`send_held`, before any datapoint sent otherwise, before this end waits for a command
        (nothing is held while the worker is idle), and by a thread once the oldest has waited
        ``within`` (whatever the worker does meanwhile, e.g. a task that never ends). A datapoint
        with array frames is sent at once, after those held. Returns the array bytes sent in
        frames (0 when ``obj`` is held), as :meth:`send_datapoint` does.

        Example::

            end.hold_datapoint(result)
            if end.held_seconds() + expected_seconds_of_the_next > HOLD_SECONDS:
                end.send_held()
        """
        try:
            frames = _encoded(obj, obj)
            with self._sending:
                if len(frames) > 1:
                    self._send_held()
                    return self._send_frames(frames)
                self._held.append(frames[0])
                self._held_bytes += len(frames[0])
                self._hold_within = within
                if len(self._held) == 1:
                    self._held_since = time.perf_counter()
                    if self._held_sender is None:
                        self._held_sender = _HeldSender(self)
                        self._held_sender.start()
                    self._sending.notify()
                if len(self._held) >= HOLD_MOST or self._held_bytes >= HOLD_BYTES:
                    self._send_held()
                return 0
        except (BrokenPipeError, ConnectionResetError) as err:
            raise ChannelClosed() from err
        finally:
            if self._segment is not None:
                self._segment.release_prepared()

    def held_seconds(self) -> float:
        """Seconds since the oldest datapoint held was given to :meth:`hold_datapoint` (0 when none is)."""
        return time.perf_counter() - self._held_since if self._held else 0.0

    def send_held(self) -> None:
        """Send the datapoints held (:meth:`hold_datapoint`), if any, in one message."""
        try:
            with self._sending:
                self._send_held()
        except (BrokenPipeError, ConnectionResetError) as err:
            raise ChannelClosed() from err

    def _send_held(self) -> None:
        if self._held:
            held, self._held, self._held_bytes = self._held, [], 0
            self._send_control({"k": _MANY, "v": held, "b": self.busy_seconds, "n": self.items,
                                "s": self.send_seconds})

    def _send_frames(self, frames: List[Any]) -> int:
        """Send a datapoint encoded with array frames: the frames in shared memory, else through the pipe."""
        payload = [memoryview(f).cast("B") for f in frames[1:]]
        lengths = [p.nbytes for p in payload]
        segment = self._segment
        use_shm = segment is not None and uses_shared_memory(lengths)
        control = {"k": _DATA, "h": bytes(frames[0]), "len": lengths, "r": -1, "o": 0,
                   "b": self.busy_seconds, "n": self.items, "s": self.send_seconds, "c": self.shared_bytes()}
        slot, why = None, None
        if segment is not None and use_shm:
            slot = segment.prepared_slot(payload)          # built where the parent reads it: no copy
            if slot is None:
                slot, why = segment.place(sum(_aligned(n) for n in lengths))
                if slot is not None:
                    segment.write(payload, slot)
        if slot is None:
            if why is not None:
                control["why"] = why
            self._send_control(control)
            for part in payload:
                self._conn.send_bytes(part)
        else:
            control["r"], control["o"] = slot
            self._send_control(control)
        return sum(lengths)

    def send_error(self, exc: BaseException) -> None:
        """Report ``exc`` (with its traceback text; see :func:`~inputpipe.utils.errors.failure_report`)
        to the parent; ignores a closed pipe."""
        report = failure_report(exc)
        kind = report.original_type
        try:
            with self._sending:
                self._send_held()             # what was mapped before the failure arrives first
                self._send_control({"k": _ERROR, "tb": report.traceback, "what": report.reason,
                                    "via": list(report.nested), "mod": str(getattr(kind, "__module__", "")) if kind else "",
                                    "qn": kind.__qualname__ if kind else ""})
        except OSError:
            pass

    def receive_command(self, timeout: float) -> Optional[Any]:
        """The next command from the parent, or None after ``timeout``; :class:`ChannelClosed`
        (an EOFError) when it closed the channel.

        A reader thread keeps the command pipe drained, so the parent never blocks sending."""
        if self._reader is None:
            self._reader = _CommandReader(self._commands)
            self._reader.start()
        if self._held and timeout > 0 and self._reader.commands.empty():
            self.send_held()                  # nothing is held while the worker waits
        try:
            command = self._reader.commands.get(timeout=timeout) if timeout > 0 else \
                self._reader.commands.get_nowait()
        except queue.Empty:
            return None
        if command is _EOF:
            self._reader.commands.put(_EOF)
            self.send_held()                  # the parent still reads what the worker sends
            raise ChannelClosed()
        return command


_EOF = object()


class _CommandReader(StoppableThread):
    """In a worker: move commands from the parent's pipe into a queue as soon as they come.

    It waits inside ``recv_bytes`` (no polling: one system call per command) and ends when the
    parent closes the pipe; it is a daemon, so it also ends with the worker, which the parent
    and the worker's watchdog stop."""

    def __init__(self, connection):
        super().__init__(name="inputpipe-command-reader")
        self._connection = connection
        self.commands: "queue.Queue[Any]" = queue.Queue()

    def run(self):
        try:
            while True:
                self.commands.put(serialize._loads_wire(self._connection.recv_bytes(), max_bytes=_INTERNAL_MAX_BYTES))
        except (EOFError, OSError):
            pass
        finally:
            self.commands.put(_EOF)


class _HeldSender(StoppableThread):
    """In a worker: send the datapoints held (:meth:`WorkerEnd.hold_datapoint`) once the oldest
    has waited its ``within``, whatever the worker's loop is doing meanwhile. A daemon: it ends
    with the worker, or once the parent has closed the channel and nothing is held."""

    def __init__(self, end: WorkerEnd):
        super().__init__(name="inputpipe-held-sender")
        self._end = end

    def run(self):
        end = self._end
        try:
            with end._sending:
                while not end._conn.closed and (end._held or end._reader is None or end._reader.is_alive()):
                    left = end._held_since + end._hold_within - time.perf_counter() if end._held else POLL_INTERVAL
                    if left > 0:
                        end._sending.wait(min(left, POLL_INTERVAL))
                    else:
                        end._send_held()
        except OSError:
            pass                              # the channel is closed: the worker's loop stops too


class ParentEnd:
    """The parent's end of one worker's channel.

    ``pipe_fallbacks`` counts the large datapoints that came through the pipe because the
    shared-memory segment was full of arrays the consumer still held (or did not fit at all).
    ``busy_seconds`` (of it ``send_seconds``, sending results) and ``items`` are the worker's
    work counts as of its latest message.

    Example::

        kind, value = end.receive()   # ("data", dp) or ("error", (reason, traceback, type or None, nested))
    """

    def __init__(self, component: str, result_reader, command_writer, mm, capacity: int, notices: set):
        self.component = component
        self.connection = result_reader
        self._commands = command_writer
        self._capacity = capacity
        self._notices = notices
        self._mm = mm
        self._data_offset = _table_bytes(capacity)
        self._states: Optional[np.ndarray] = _table(mm, capacity) if mm is not None else None
        self.pipe_fallbacks = 0
        self.busy_seconds = 0.0
        self.send_seconds = 0.0
        self.items = 0
        #: Bytes of memory the worker's segment holds, as of its latest datapoint through it.
        self.shared_bytes = 0

    def receive(self) -> Tuple[str, Any]:
        """Read one message: ``("data", datapoint)`` or ``("error", (reason, traceback, type,
        nested))`` (see :class:`~inputpipe.utils.errors.FailureReport`), where ``type`` is the class
        of the worker's exception if it is importable here (else None). Raises EOFError/OSError
        when the worker's end is gone."""
        control = serialize._loads_wire(self.connection.recv_bytes(), max_bytes=_INTERNAL_MAX_BYTES, copy=True)
        kind = control.get("k") if isinstance(control, dict) else None
        if kind in (_INLINE, _DATA, _MANY):
            self.busy_seconds, self.items = control["b"], control["n"]
            self.send_seconds = control.get("s", 0.0)
        if kind == _INLINE:
            return "data", control["v"]
        if kind == _MANY:
            return "many", self._unpack_many(control.get("v"))
        if kind == _ERROR:
            return "error", (control["what"], control["tb"],
                             exception_type_named(control.get("mod"), control.get("qn")), control.get("via", []))
        if kind != _DATA:
            raise serialize.WireFormatError("{}: expected a message from a worker, got {!r}".format(
                self.component, control))
        self.shared_bytes = int(control.get("c", self.shared_bytes))
        if control["r"] < 0:
            if "why" in control:
                self._note_fallback(control["len"], control["why"])
            frames = [control["h"]] + [self.connection.recv_bytes() for _ in control["len"]]
            return "data", serialize.loads_frames(frames, max_bytes=_INTERNAL_MAX_BYTES, copy=True)
        return "data", self._load_shared(control)

    def _unpack_many(self, held: Any) -> List[Any]:
        if not isinstance(held, list) or not all(isinstance(item, bytes) for item in held):
            raise serialize.WireFormatError("{}: expected a list of encoded datapoints from a worker, got {}".format(
                self.component, type(held).__name__))
        return [serialize._loads_wire(item, max_bytes=_INTERNAL_MAX_BYTES, copy=True) for item in held]

    def _note_fallback(self, lengths: List[int], why: str) -> None:
        self.pipe_fallbacks += 1
        if why in self._notices:
            return
        self._notices.add(why)
        nbytes = sum(lengths)
        if why == _TOO_BIG:
            logger.warning("%s: a datapoint of %d bytes is larger than a worker's shared memory "
                           "(shm_bytes=%d); datapoints that large come through a pipe (slower). Pass "
                           "a shm_bytes larger than the datapoints.", self.component, nbytes, self._capacity)
        elif why == _NO_SPACE:
            size, free = shm_files.shm_space()
            logger.warning("%s: %s (%.1f MiB, %.1f MiB free) has no room for a worker to grow its shared "
                           "memory for a datapoint of %d bytes; it came through a pipe (slower), as will "
                           "what does not fit in the shared memory the workers have. Enlarge %s (e.g. "
                           "docker run --shm-size=1g) or pass a smaller shm_bytes.", self.component,
                           shm_files.shm_dir(), size / 2 ** 20, free / 2 ** 20, nbytes, shm_files.shm_dir())
        else:
            logger.info("%s: a worker's shared memory is full of arrays the consumer still holds; a "
                        "datapoint of %d bytes came through a pipe (slower). Keep fewer datapoints "
                        "alive or pass a larger shm_bytes.", self.component, nbytes)

    def _load_shared(self, control: dict) -> Any:
        states = self._states
        assert states is not None           # a worker only uses the segment this end has mapped
        rid, pos = control["r"], self._data_offset + control["o"]
        states[rid] = _RECEIVED
        size = sum(_aligned(n) for n in control["len"])
        region = np.frombuffer(self._mm, np.uint8, count=size, offset=pos)
        weakref.finalize(region, _release_region, states, rid)
        frames, pos = [control["h"]], 0
        for n in control["len"]:
            frames.append(region[pos:pos + n].data)
            pos += _aligned(n)
        return serialize.loads_frames(frames, max_bytes=_INTERNAL_MAX_BYTES, copy=False)

    def send_command(self, obj: Any) -> None:
        self._commands.send_bytes(serialize.dumps(obj))

    @property
    def commands_closed(self) -> bool:
        return self._commands.closed

    def close_commands(self) -> None:
        """Close the command pipe only: the worker's :meth:`WorkerEnd.receive_command` raises
        :class:`ChannelClosed` once it has taken the commands sent before, while what it sends still arrives."""
        if not self._commands.closed:
            fork_guard.forget(self._commands.fileno())
            self._commands.close()

    def close(self) -> None:
        """Close the pipes and drop the segment (its memory lives while arrays still use it)."""
        self.close_commands()
        if not self.connection.closed:
            fork_guard.forget(self.connection.fileno())
        self.connection.close()
        self._states = None
        self._mm = None


def _encoded(message: Any, obj: Any) -> List[Any]:
    """``message`` (which carries the datapoint ``obj``) in frames; a ``TypeError`` names where
    in ``obj`` the part the wire format refuses is."""
    try:
        return serialize.dumps_frames(message)
    except TypeError:
        if message is not obj:
            serialize.dumps_frames(obj)       # raises the same error, located in the datapoint itself
        raise


def _release_region(states: np.ndarray, rid: int) -> None:
    states[rid] = _FREE
