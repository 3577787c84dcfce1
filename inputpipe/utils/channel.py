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
the consumer keeps everything it got (e.g. ``list(df)``), and waiting might never end: frames
then go through the pipe, slower but never stuck, and :attr:`ParentEnd.pipe_fallbacks` counts
them.

The segment is a file in ``/dev/shm`` that the worker maps with its pages populated up front
(no page faults while copying) and unlinks as soon as it has mapped it (the parent also removes
it on close, in case the worker never started), so no file is left behind, even when the parent
is killed.

Example::

    parent_end, worker_spec = open_channel("MyRunner", shm_bytes=64 << 20)
    # in the worker:  end = worker_spec.open(); end.send_datapoint([np.zeros(10)])
    # in the parent:  kind, value = parent_end.receive()
"""
import bisect
import mmap
import multiprocessing as mp
import os
import queue
import tempfile
import time
import traceback
import weakref
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import serialize
from .concurrency import StoppableThread
from .copying import ParallelCopier
from .logger import get_logger

__all__ = ["open_channel", "ParentEnd", "WorkerSpec", "WorkerEnd", "DEFAULT_SHM_BYTES"]

logger = get_logger(__name__)

#: Default size of each worker's shared-memory segment (bytes).
DEFAULT_SHM_BYTES = 96 << 20
#: Datapoints whose array frames total less than this go through the pipe.
SHM_MIN_BYTES = 64 << 10
_SHM_POLL_SECONDS = (0.0002, 0.002)   # a full segment is re-checked this often (backing off)
# waiting for a warm region: seconds per byte of the new region, the most, and how many
# allocations skip waiting after a wait in which the consumer kept the region
_WARM_WAIT_PER_BYTE = 25e-12
_WARM_WAIT_MAX_SECONDS = 0.001
_WARM_WAIT_BACKOFF = 8
_RECENTLY_RELEASED = 8                # offsets of released regions remembered for warm placement
_ALIGN = 64
# the state of each region, in the segment's table
_FREE, _SENT, _RECEIVED = 0, 1, 2
#: Internal channels carry trusted data of any size; the limit only guards against corruption.
_INTERNAL_MAX_BYTES = 1 << 40

# message kinds: a datapoint inside the message, a datapoint with array frames, an error
_INLINE, _DATA, _ERROR = "in", "dp", "err"


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _uses_shared_memory(lengths: List[int]) -> bool:
    """Whether a datapoint with array frames of these sizes goes through shared memory."""
    return sum(_aligned(n) for n in lengths) >= SHM_MIN_BYTES


def _table_bytes(capacity: int) -> int:
    """Bytes of the region table in front of the data: one state byte per region the segment
    can hold (every region is at least ``SHM_MIN_BYTES``), rounded up to whole pages."""
    slots = capacity // SHM_MIN_BYTES + 1
    return (slots + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


def _table(mm: mmap.mmap, capacity: int) -> np.ndarray:
    return np.frombuffer(mm, np.uint8, count=capacity // SHM_MIN_BYTES + 1)


def _shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def _create_segment(component: str, size: int) -> Tuple[Optional[str], Optional[mmap.mmap]]:
    if size <= 0:
        return None, None
    fd, path = tempfile.mkstemp(prefix="inputpipe-", dir=_shm_dir())
    try:
        os.posix_fallocate(fd, 0, _table_bytes(size) + size)
        mm = mmap.mmap(fd, _table_bytes(size) + size)
    except OSError as err:
        os.unlink(path)
        logger.warning("%s: cannot reserve %d bytes of shared memory in %s (%s); large arrays will "
                       "go through a pipe, which is slower. Pass a smaller shm_bytes or enlarge /dev/shm.",
                       component, size, _shm_dir(), err)
        return None, None
    finally:
        os.close(fd)
    return path, mm


def open_channel(component: str, shm_bytes: int = DEFAULT_SHM_BYTES) -> Tuple["ParentEnd", "WorkerSpec"]:
    """Make the pipes and the shared-memory segment for one worker; returns both ends."""
    result_reader, result_writer = mp.Pipe(duplex=False)
    command_reader, command_writer = mp.Pipe(duplex=False)
    path, mm = _create_segment(component, shm_bytes)
    capacity = shm_bytes if mm is not None else 0
    spec = WorkerSpec(result_writer, command_reader, path, capacity)
    return ParentEnd(component, result_reader, command_writer, path, mm, capacity), spec


class WorkerSpec:
    """The picklable worker half of a channel; call :meth:`open` in the worker."""

    def __init__(self, result_writer, command_reader, shm_path: Optional[str], shm_bytes: int):
        self.result_writer = result_writer
        self.command_reader = command_reader
        self.shm_path = shm_path
        self.shm_bytes = shm_bytes

    def close_in_parent(self) -> None:
        """After the worker started: drop the parent's copies of the worker's pipe ends."""
        self.result_writer.close()
        self.command_reader.close()

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
        self._conn = spec.result_writer
        self._commands = spec.command_reader
        self._capacity = spec.shm_bytes
        self._mm = None
        self._regions = None
        if spec.shm_path is not None:
            size = _table_bytes(self._capacity) + self._capacity
            # MAP_POPULATE maps every page now: copies into the segment never stop on a page fault
            with open(spec.shm_path, "r+b") as f:
                self._mm = mmap.mmap(f.fileno(), size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
            _unlink(spec.shm_path)      # mapped on both sides: no name needed, none left behind
            self._regions = _Regions(_table(self._mm, self._capacity), self._capacity)
        self._reader = None
        self._copier = ParallelCopier(name="inputpipe-worker-copy")

    def _send_control(self, control: dict) -> None:
        self._conn.send_bytes(serialize.dumps(control))

    def _allocate_waiting(self, size: int) -> Optional[Tuple[int, int]]:
        """A region of ``size`` bytes as ``(region id, offset)``, or None: use the pipe.

        When the segment is full, wait (polling, backing off) as long as part of it is still on
        its way to the parent; the consumer then takes it and frees what it no longer holds.
        When the consumer has received everything and holds it, return None at once."""
        self._regions.wait_for_warm_region(size)
        slot = self._regions.allocate(size)
        pause = _SHM_POLL_SECONDS[0]
        while slot is None and size <= self._capacity and self._regions.awaiting_receipt():
            if self._reader is not None and not self._reader.is_alive():
                raise EOFError("the parent closed the channel")
            time.sleep(pause)
            pause = min(2 * pause, _SHM_POLL_SECONDS[1])
            slot = self._regions.allocate(size)
        return slot

    def send_datapoint(self, obj: Any) -> int:
        """Send one datapoint; returns the number of array bytes it carried in frames."""
        try:
            whole = serialize.dumps_frames({"k": _INLINE, "v": obj})
        except TypeError:
            serialize.dumps_frames(obj)     # raises the same error, located in the datapoint itself
            raise
        if len(whole) == 1:           # no array frames: the datapoint travels inside one message
            self._conn.send_bytes(whole[0])
            return 0
        frames = serialize.dumps_frames(obj)
        payload = [memoryview(f).cast("B") for f in frames[1:]]
        lengths = [p.nbytes for p in payload]
        use_shm = self._mm is not None and _uses_shared_memory(lengths)
        slot = self._allocate_waiting(sum(_aligned(n) for n in lengths)) if use_shm else None
        control = {"k": _DATA, "h": bytes(frames[0]), "len": lengths, "r": -1, "o": 0}
        if slot is None:
            self._send_control(control)
            for part in payload:
                self._conn.send_bytes(part)
        else:
            rid, base = slot
            pos = _table_bytes(self._capacity) + base
            for part in payload:
                self._copier.copy(np.frombuffer(self._mm, np.uint8, part.nbytes, pos), np.frombuffer(part, np.uint8))
                pos += _aligned(part.nbytes)
            control["r"], control["o"] = rid, base
            self._send_control(control)
        return sum(lengths)

    def send_error(self, exc: BaseException) -> None:
        """Report ``exc`` (with its traceback text) to the parent; ignores a closed pipe."""
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        summary = "{}: {}".format(type(exc).__name__, exc)
        try:
            self._send_control({"k": _ERROR, "tb": text, "what": summary})
        except OSError:
            pass

    def receive_command(self, timeout: float) -> Optional[Any]:
        """The next command from the parent, or None after ``timeout``; EOFError when it closed.

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
            raise EOFError("the parent closed the channel")
        return command


class _Regions:
    """The worker's view of its segment: which regions are live, where, and where a new one fits.

    The parent only ever changes a region's state from *sent* to *received* to *free*; the worker
    reclaims free regions lazily, when it next allocates. A new region goes to the offset of the
    most recently released region whose gap still fits it (warm memory), else to the lowest gap
    that fits.

    Example::

        regions = _Regions(table, capacity)
        rid, offset = regions.allocate(4 << 20) or (None, None)
    """

    def __init__(self, states: np.ndarray, capacity: int):
        self._states = states
        self._capacity = capacity
        self._live = np.zeros(len(states), bool)
        self._spare_ids = list(range(len(states) - 1, -1, -1))
        self._starts: List[int] = []            # offsets of the live regions, sorted
        self._ends: List[int] = []              # their ends, in the same order
        self._start_of: Dict[int, int] = {}     # region id -> offset
        self._serial_of: Dict[int, int] = {}    # region id -> allocation number
        self._allocations = 0
        self._last_two: List[Tuple[int, int]] = []    # (region id, allocation number), newest last
        self._released: List[int] = []          # offsets of reclaimed regions, newest last
        self._warm_wait_skips = 0

    def _reclaim(self) -> None:
        freed = np.flatnonzero(self._live & (self._states == _FREE)).tolist()
        for rid in sorted(freed, key=self._serial_of.__getitem__):     # oldest first
            start = self._start_of.pop(rid)
            index = bisect.bisect_left(self._starts, start)
            del self._starts[index], self._ends[index], self._serial_of[rid]
            self._live[rid] = False
            self._spare_ids.append(rid)
            if start in self._released:
                self._released.remove(start)
            self._released.append(start)
        del self._released[:-_RECENTLY_RELEASED]

    def _warm_position(self, size: int) -> Optional[Tuple[int, int]]:
        """``(offset, index in the sorted starts)`` at the most recently released offset whose
        gap has room for ``size`` bytes, or None."""
        for start in reversed(self._released):
            index = bisect.bisect_right(self._starts, start)
            gap_start = self._ends[index - 1] if index else 0
            gap_end = self._starts[index] if index < len(self._starts) else self._capacity
            if gap_start <= start and start + size <= gap_end:
                return start, index
        return None

    def _first_fit(self, size: int) -> Optional[Tuple[int, int]]:
        """``(offset, index in the sorted starts)`` of the lowest gap with room for ``size``."""
        pos = 0
        for i, start in enumerate(self._starts):
            if start - pos >= size:
                return pos, i
            pos = self._ends[i]
        return (pos, len(self._starts)) if pos + size <= self._capacity else None

    def allocate(self, size: int) -> Optional[Tuple[int, int]]:
        """``(region id, offset)`` of ``size`` free bytes, marked *sent*; None if none fit."""
        self._reclaim()
        if not self._spare_ids or size > self._capacity:
            return None
        place = self._warm_position(size) or self._first_fit(size)
        if place is None:
            return None
        pos, index = place
        if pos in self._released:
            self._released.remove(pos)
        rid = self._spare_ids.pop()
        self._starts.insert(index, pos)
        self._ends.insert(index, pos + size)
        self._start_of[rid] = pos
        self._allocations += 1
        self._serial_of[rid] = self._allocations
        self._last_two = (self._last_two + [(rid, self._allocations)])[-2:]
        self._live[rid] = True
        self._states[rid] = _SENT
        return rid, pos

    def held_before_last(self) -> Optional[int]:
        """The id of the region allocated before the newest one, if the consumer holds it
        (*received*), else None."""
        if len(self._last_two) < 2:
            return None
        rid, serial = self._last_two[0]
        if self._serial_of.get(rid) != serial or self._states[rid] != _RECEIVED:
            return None
        return rid

    def wait_for_warm_region(self, size: int) -> bool:
        """Before allocating ``size`` bytes: give the consumer a moment to release the region
        allocated before the newest one (see the module docstring). Returns whether it did."""
        if self._warm_wait_skips:
            self._warm_wait_skips -= 1
            return False
        rid = self.held_before_last()
        if rid is None:
            return False
        deadline = time.perf_counter() + min(_WARM_WAIT_MAX_SECONDS, size * _WARM_WAIT_PER_BYTE)
        while self._states[rid] != _FREE:
            if time.perf_counter() >= deadline:
                self._warm_wait_skips = _WARM_WAIT_BACKOFF
                return False
            time.sleep(0)
        return True

    def awaiting_receipt(self) -> bool:
        """Whether some region was sent and the parent has not read its message yet."""
        return bool(np.any(self._states[self._live] == _SENT))


_EOF = object()


class _CommandReader(StoppableThread):
    """In a worker: move commands from the parent's pipe into a queue as soon as they come.

    It waits inside ``recv_bytes`` (no polling: one system call per command) and ends when the
    parent closes the pipe; it is a daemon, so it also ends with the worker, which the parent
    and the worker's watchdog stop."""

    def __init__(self, connection):
        super().__init__(name="inputpipe-command-reader")
        self._connection = connection
        self.commands = queue.Queue()

    def run(self):
        try:
            while True:
                self.commands.put(serialize.loads(self._connection.recv_bytes(), max_bytes=_INTERNAL_MAX_BYTES))
        except (EOFError, OSError):
            pass
        finally:
            self.commands.put(_EOF)


class ParentEnd:
    """The parent's end of one worker's channel.

    ``pipe_fallbacks`` counts the large datapoints that came through the pipe because the
    shared-memory segment was full of arrays the consumer still held.

    Example::

        kind, value = end.receive()   # ("data", datapoint) or ("error", (summary, traceback))
    """

    def __init__(self, component: str, result_reader, command_writer, shm_path, mm, capacity: int):
        self.component = component
        self.connection = result_reader
        self._commands = command_writer
        self._shm_path = shm_path
        self._mm = mm
        self._data_offset = _table_bytes(capacity)
        self._states = _table(mm, capacity) if mm is not None else None
        self.pipe_fallbacks = 0

    def receive(self) -> Tuple[str, Any]:
        """Read one message: ``("data", datapoint)`` or ``("error", (summary, traceback))``.
        Raises EOFError/OSError when the worker's end is gone."""
        control = serialize.loads(self.connection.recv_bytes(), max_bytes=_INTERNAL_MAX_BYTES, copy=True)
        kind = control.get("k") if isinstance(control, dict) else None
        if kind == _INLINE:
            return "data", control["v"]
        if kind == _ERROR:
            return "error", (control["what"], control["tb"])
        if kind != _DATA:
            raise serialize.WireFormatError("{}: expected a message from a worker, got {!r}".format(
                self.component, control))
        if control["r"] < 0:
            if self._states is not None and _uses_shared_memory(control["len"]):
                self._note_fallback(control["len"])
            frames = [control["h"]] + [self.connection.recv_bytes() for _ in control["len"]]
            return "data", serialize.loads_frames(frames, max_bytes=_INTERNAL_MAX_BYTES, copy=True)
        return "data", self._load_shared(control)

    def _note_fallback(self, lengths: List[int]) -> None:
        if not self.pipe_fallbacks:
            logger.info("%s: a worker's shared memory is full of arrays the consumer still holds; a "
                        "datapoint of %d bytes came through a pipe (slower). Keep fewer datapoints "
                        "alive or pass a larger shm_bytes.", self.component, sum(lengths))
        self.pipe_fallbacks += 1

    def _load_shared(self, control: dict) -> Any:
        rid, pos = control["r"], self._data_offset + control["o"]
        self._states[rid] = _RECEIVED
        size = sum(_aligned(n) for n in control["len"])
        region = np.frombuffer(self._mm, np.uint8, count=size, offset=pos)
        weakref.finalize(region, _release_region, self._states, rid)
        frames, pos = [control["h"]], 0
        for n in control["len"]:
            frames.append(memoryview(region[pos:pos + n]))
            pos += _aligned(n)
        return serialize.loads_frames(frames, max_bytes=_INTERNAL_MAX_BYTES, copy=False)

    def send_command(self, obj: Any) -> None:
        self._commands.send_bytes(serialize.dumps(obj))

    def _unlink(self) -> None:
        if self._shm_path is not None:
            _unlink(self._shm_path)
            self._shm_path = None

    def close(self) -> None:
        """Close the pipes and remove the segment's file (the memory lives while arrays use it)."""
        self._unlink()
        self.connection.close()
        self._commands.close()
        self._states = None
        self._mm = None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _release_region(states: np.ndarray, rid: int) -> None:
    states[rid] = _FREE
