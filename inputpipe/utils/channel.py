"""A channel between a parent and one worker process: pipes for messages, shared memory for arrays.

Datapoints travel in the wire format of :mod:`inputpipe.utils.serialize` (a msgpack header plus
raw array frames); nothing is pickled. A datapoint without array frames (arrays of at most
4 KiB travel inside the header) is one message through the pipe; one whose frames total less
than 64 KiB sends them through the pipe after its header. Larger array frames are written
once, by the worker, into a shared-memory segment owned by that worker's channel
(frames of 4 MiB or more by two threads, see :mod:`inputpipe.utils.copying`); the parent builds
its numpy arrays directly on that memory (zero copy).

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
import errno
import mmap
import multiprocessing as mp
import os
from multiprocessing import reduction
import queue
import time
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _shm_files as shm_files, fork_guard, serialize
from .concurrency import StoppableThread
from .buffers import aligned_empty
from .compat import madvise
from .copying import ParallelCopier
from ._regions import FREE as _FREE, RECEIVED as _RECEIVED, SHM_MIN_BYTES, Regions as _Regions
from ._regions import aligned as _aligned, table as _table, table_bytes as _table_bytes
from .errors import exception_type_named, failure_report
from .logger import get_logger

__all__ = ["open_channel", "ParentEnd", "WorkerSpec", "WorkerEnd", "ChannelClosed", "DEFAULT_SHM_BYTES"]

logger = get_logger(__name__)

#: Default size of each worker's shared-memory segment (bytes).
DEFAULT_SHM_BYTES = 96 << 20
_SHM_POLL_SECONDS = (0.0002, 0.002)   # a full segment is re-checked this often (backing off)
#: A segment full of datapoints the parent received is waited on this long for one to be freed.
_HELD_WAIT_SECONDS = 0.2
#: Internal channels carry trusted data of any size; the limit only guards against corruption.
_INTERNAL_MAX_BYTES = 1 << 40

# message kinds: a datapoint inside the message, a datapoint with array frames, an error
_INLINE, _DATA, _ERROR = "in", "dp", "err"
# why a large datapoint came through the pipe: the consumer holds the segment, the datapoint is
# larger than the segment, /dev/shm has no room to grow the segment
_HELD, _TOO_BIG, _NO_SPACE = "held", "big", "space"
#: The segment's memory is reserved in steps of at least this (then a quarter of what it has: the
#: memory budget of "auto" stages counts what the segments hold).
_MIN_COMMIT_BYTES = 1 << 20
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)    # Linux >= 5.14


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


def _uses_shared_memory(lengths: List[int]) -> bool:
    """Whether a datapoint with array frames of these sizes goes through shared memory."""
    return sum(_aligned(n) for n in lengths) >= SHM_MIN_BYTES


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
        self._capacity = spec.shm_bytes
        # The shared-memory segment: all three are set, or (no shared memory) all three are None.
        self._mm: Optional[mmap.mmap] = None
        self._regions: Optional[_Regions] = None
        self._fd = spec._take_fd()
        # a worker that forks (a nested parallel flow, a map_func) keeps its channel to itself
        fork_guard.keep_out_of_forks(self._conn.fileno(), self._commands.fileno(),
                                     *([] if self._fd is None else [self._fd]))
        self._committed = 0           # bytes at the start of the data area backed by memory
        self._held_gave_up = False    # a wait for a received region to be freed ended without one
        if self._fd is not None:
            self._mm = mmap.mmap(self._fd, _table_bytes(self._capacity) + self._capacity, flags=mmap.MAP_SHARED)
            self._regions = _Regions(_table(self._mm, self._capacity), self._capacity)
        self._reader: Optional[_CommandReader] = None
        self._copier = ParallelCopier(name="inputpipe-worker-copy")
        self._prepared: Dict[int, Tuple[int, int]] = {}    # offset in the mapping -> (region id, base)

    def count_work(self, seconds: float, items: int = 0, sending: bool = False) -> None:
        """Add to the work counts that the next message carries to the parent (for profilers:
        :meth:`ParentEnd.busy_seconds`); ``sending``: the seconds were spent sending results."""
        self.busy_seconds += seconds
        self.items += items
        if sending:
            self.send_seconds += seconds

    def _send_control(self, control: dict) -> None:
        self._conn.send_bytes(serialize.dumps(control))

    def _allocate_waiting(self, size: int) -> Optional[Tuple[int, int]]:
        """A region of ``size`` bytes as ``(region id, offset)``, or None: use the pipe.

        When the segment is full, wait (polling, backing off) as long as part of it is still on
        its way to the parent; the consumer then takes it and frees what it no longer holds.
        When the parent has received everything, wait up to :data:`_HELD_WAIT_SECONDS` for a
        region to be freed (what the parent received may still be queued on its way to the
        consumer); after such a wait that ended without one, return None at once until a region
        is free again (the consumer keeps what it got)."""
        regions = self._regions
        assert regions is not None          # only called on the shared-memory path
        regions.wait_for_warm_region(size)
        slot = regions.allocate(size)
        pause = _SHM_POLL_SECONDS[0]
        while slot is None and size <= regions.capacity and regions.awaiting_receipt():
            slot = self._poll(regions, size, pause)
            pause = min(2 * pause, _SHM_POLL_SECONDS[1])
        if slot is None and size <= regions.capacity and not self._held_gave_up:
            deadline = time.monotonic() + _HELD_WAIT_SECONDS
            while slot is None and time.monotonic() < deadline:
                slot = self._poll(regions, size, pause)
                pause = min(2 * pause, _SHM_POLL_SECONDS[1])
            self._held_gave_up = slot is None
        elif slot is not None:
            self._held_gave_up = False
        return slot

    def _poll(self, regions: "_Regions", size: int, pause: float) -> Optional[Tuple[int, int]]:
        if self._reader is not None and not self._reader.is_alive():
            raise ChannelClosed()
        time.sleep(pause)
        return regions.allocate(size)

    def _commit(self, end: int) -> bool:
        """Back the data area up to ``end`` with memory (reserved and pre-faulted), growing by a
        quarter at least. False when the file system has no room: the segment then stays at what
        it has, and what does not fit goes through the pipe."""
        if end <= self._committed:
            return True
        assert self._fd is not None and self._regions is not None     # only called on the shared-memory path
        table = _table_bytes(self._capacity)
        step = max(end, self._committed + self._committed // 4, _MIN_COMMIT_BYTES)
        wanted = min(self._capacity, shm_files.page_rounded(step))
        for target in sorted({wanted, min(self._capacity, shm_files.page_rounded(end))}, reverse=True):
            try:
                os.posix_fallocate(self._fd, table + self._committed, target - self._committed)
            except OSError as err:
                if err.errno not in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                    raise
                continue
            self._prefault(table + self._committed, target - self._committed)
            self._committed = target
            return True
        self._regions.limit(self._committed)
        return False

    def shared_bytes(self) -> int:
        """Bytes of memory the segment holds: its region table and the data area backed so far
        (it never gives memory back while the worker lives)."""
        return _table_bytes(self._capacity) + self._committed if self._fd is not None else 0

    def _prefault(self, offset: int, length: int) -> None:
        """Map the pages of a newly reserved range now, so copies into it never stop on a page
        fault (``MADV_POPULATE_WRITE``, else writing one byte per page; nothing lives there yet)."""
        assert self._mm is not None         # only called on the shared-memory path
        try:
            if madvise(self._mm, _MADV_POPULATE_WRITE, offset, length):
                return
        except (OSError, ValueError):
            pass
        np.frombuffer(self._mm, np.uint8, length, offset)[::mmap.PAGESIZE] = 0

    def _place(self, total: int) -> Tuple[Optional[Tuple[int, int]], Optional[str]]:
        """``(slot, None)`` for a datapoint of ``total`` array bytes in shared memory, or
        ``(None, why)`` when it goes through the pipe."""
        regions = self._regions
        assert regions is not None          # only called on the shared-memory path
        if total > self._capacity:
            return None, _TOO_BIG
        if total > regions.capacity:
            return None, _NO_SPACE
        slot = self._allocate_waiting(total)
        if slot is None:
            return None, (_NO_SPACE if total > regions.capacity else _HELD)
        if not self._commit(slot[1] + total):
            regions.cancel(slot[0])
            return None, _NO_SPACE
        return slot, None

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
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        slot = None
        if self._mm is not None and _uses_shared_memory([nbytes]):
            slot, _ = self._place(_aligned(nbytes))
        if slot is None:
            return aligned_empty(shape, dtype)
        assert self._mm is not None                     # a slot is only found in shared memory
        rid, base = slot
        pos = _table_bytes(self._capacity) + base
        self._prepared[pos] = (rid, base)
        return np.frombuffer(self._mm, dtype, nbytes // max(1, dtype.itemsize), pos).reshape(shape)

    def _prepared_slot(self, payload: List[memoryview]) -> Optional[Tuple[int, int]]:
        """The region of an array from :meth:`shared_empty` that is this datapoint's one frame."""
        if len(payload) != 1 or not self._prepared or self._mm is None:
            return None
        start = np.frombuffer(payload[0], np.uint8).ctypes.data - np.frombuffer(self._mm, np.uint8, 1).ctypes.data
        return self._prepared.pop(start, None)

    def _release_prepared(self) -> None:
        """Give back the regions of arrays from :meth:`shared_empty` that were not sent."""
        if self._prepared:
            assert self._regions is not None
            for rid, _ in self._prepared.values():
                self._regions.cancel(rid)
            self._prepared.clear()

    def send_datapoint(self, obj: Any) -> int:
        """Send one datapoint; returns the number of array bytes it carried in frames.
        :class:`ChannelClosed` when the parent closed the channel."""
        try:
            return self._send_datapoint(obj)
        except (BrokenPipeError, ConnectionResetError) as err:
            raise ChannelClosed() from err
        finally:
            self._release_prepared()

    def _send_datapoint(self, obj: Any) -> int:
        try:
            whole = serialize.dumps_frames({"k": _INLINE, "v": obj, "b": self.busy_seconds, "n": self.items,
                                            "s": self.send_seconds})
        except TypeError:
            serialize.dumps_frames(obj)     # raises the same error, located in the datapoint itself
            raise
        if len(whole) == 1:           # no array frames: the datapoint travels inside one message
            self._conn.send_bytes(whole[0])
            return 0
        frames = serialize.dumps_frames(obj)
        payload = [memoryview(f).cast("B") for f in frames[1:]]
        lengths = [p.nbytes for p in payload]
        mm = self._mm
        use_shm = mm is not None and _uses_shared_memory(lengths)
        control = {"k": _DATA, "h": bytes(frames[0]), "len": lengths, "r": -1, "o": 0,
                   "b": self.busy_seconds, "n": self.items, "s": self.send_seconds, "c": self.shared_bytes()}
        built_in_place = self._prepared_slot(payload) if use_shm else None
        if built_in_place is not None:               # already where the parent reads it: no copy
            control["r"], control["o"] = built_in_place
            self._send_control(control)
            return lengths[0]
        slot, why = self._place(sum(_aligned(n) for n in lengths)) if use_shm else (None, None)
        if slot is None:
            if why is not None:
                control["why"] = why
            self._send_control(control)
            for part in payload:
                self._conn.send_bytes(part)
        else:
            assert mm is not None           # a slot is only found in shared memory
            rid, base = slot
            pos = _table_bytes(self._capacity) + base
            for part in payload:
                self._copier.copy(np.frombuffer(mm, np.uint8, part.nbytes, pos), np.frombuffer(part, np.uint8))
                pos += _aligned(part.nbytes)
            control["r"], control["o"] = rid, base
            self._send_control(control)
        return sum(lengths)

    def send_error(self, exc: BaseException) -> None:
        """Report ``exc`` (with its traceback text; see :func:`~inputpipe.utils.errors.failure_report`)
        to the parent; ignores a closed pipe."""
        report = failure_report(exc)
        kind = report.original_type
        try:
            self._send_control({"k": _ERROR, "tb": report.traceback, "what": report.reason, "via": list(report.nested),
                                "mod": str(getattr(kind, "__module__", "")) if kind else "",
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
        try:
            command = self._reader.commands.get(timeout=timeout) if timeout > 0 else \
                self._reader.commands.get_nowait()
        except queue.Empty:
            return None
        if command is _EOF:
            self._reader.commands.put(_EOF)
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
        if kind in (_INLINE, _DATA):
            self.busy_seconds, self.items = control["b"], control["n"]
            self.send_seconds = control.get("s", 0.0)
        if kind == _INLINE:
            return "data", control["v"]
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


def _release_region(states: np.ndarray, rid: int) -> None:
    states[rid] = _FREE
