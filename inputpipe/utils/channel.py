"""A channel between a parent and one worker process: pipes for messages, shared memory for arrays.

Datapoints travel in the wire format of :mod:`inputpipe.utils.serialize` (a msgpack header plus
raw array frames); nothing is pickled. Small datapoints go through the pipe. Large array frames
are written once, by the worker, into a shared-memory segment owned by that worker's channel;
the parent builds its numpy arrays directly on that memory (zero copy) and the region is handed
back to the worker when the last of those arrays is garbage-collected. When the segment is full
the worker waits briefly for the consumer to drop old arrays; if it keeps them (e.g.
``list(df)``), frames go through the pipe instead, so a consumer that holds on to data slows
the channel down but never blocks it.

The segment is a file in ``/dev/shm`` that the worker unlinks as soon as it has mapped it (the
parent also removes it on close, in case the worker never started), so no file is left behind,
even when the parent is killed.

Example::

    parent_end, worker_spec = open_channel("MyRunner", shm_bytes=64 << 20)
    # in the worker:  end = worker_spec.open(); end.send_datapoint([np.zeros(10)])
    # in the parent:  kind, value = parent_end.receive()
"""
import mmap
import multiprocessing as mp
import multiprocessing.connection
import os
import queue
import tempfile
import time
import traceback
import weakref
from typing import Any, List, Optional, Tuple

import numpy as np

from . import serialize
from .concurrency import POLL_INTERVAL, StoppableThread
from .logger import get_logger

__all__ = ["open_channel", "ParentEnd", "WorkerSpec", "WorkerEnd", "DEFAULT_SHM_BYTES"]

logger = get_logger(__name__)

#: Default size of each worker's shared-memory segment (bytes).
DEFAULT_SHM_BYTES = 96 << 20
#: Datapoints whose array frames total less than this go through the pipe.
SHM_MIN_BYTES = 64 << 10
#: How long a worker waits for the consumer to free shared memory before using the pipe.
SHM_WAIT_SECONDS = 0.1
_SHM_POLL_SECONDS = 0.0005
_MAX_REGIONS = 64
_ALIGN = 64
_FLAGS_BYTES = _MAX_REGIONS
#: Internal channels carry trusted data of any size; the limit only guards against corruption.
_INTERNAL_MAX_BYTES = 1 << 40

_DATA, _ERROR = "dp", "err"


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def _create_segment(component: str, size: int) -> Tuple[Optional[str], Optional[mmap.mmap]]:
    if size <= 0:
        return None, None
    fd, path = tempfile.mkstemp(prefix="inputpipe-", dir=_shm_dir())
    try:
        os.posix_fallocate(fd, 0, _FLAGS_BYTES + size)
        mm = mmap.mmap(fd, _FLAGS_BYTES + size)
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
    spec = WorkerSpec(result_writer, command_reader, path, shm_bytes if mm is not None else 0)
    return ParentEnd(component, result_reader, command_writer, path, mm), spec


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
        self._flags = None
        if spec.shm_path is not None:
            with open(spec.shm_path, "r+b") as f:
                self._mm = mmap.mmap(f.fileno(), _FLAGS_BYTES + self._capacity)
            _unlink(spec.shm_path)      # mapped on both sides: no name needed, none left behind
            self._flags = np.frombuffer(self._mm, np.uint8, count=_MAX_REGIONS)
        self._regions = {}          # region id -> (offset, size), as far as this side knows
        self._consumer_keeps_arrays = False
        self._reader = None

    def _send_control(self, control: dict) -> None:
        self._conn.send_bytes(serialize.dumps(control))

    def _allocate(self, size: int) -> Optional[Tuple[int, int]]:
        """A free (region id, offset) of ``size`` bytes, or None when the segment is full."""
        for rid in [r for r in self._regions if self._flags[r] == 0]:
            del self._regions[rid]
        if len(self._regions) >= _MAX_REGIONS or size > self._capacity:
            return None
        # first fit from the start: recently freed memory is reused first, while still in cache
        pos = 0
        for off, n in sorted(self._regions.values()):
            if off >= pos + size:
                break
            pos = max(pos, off + n)
        if pos + size <= self._capacity:
            rid = next(r for r in range(_MAX_REGIONS) if r not in self._regions)
            self._regions[rid] = (pos, size)
            return rid, pos
        return None

    def _allocate_waiting(self, size: int) -> Optional[Tuple[int, int]]:
        """Like :meth:`_allocate`, but when the segment is full wait up to ``SHM_WAIT_SECONDS``
        for the consumer to drop old arrays. If it does not (it keeps them), stop waiting until
        a region is free again: the pipe is used meanwhile."""
        slot = self._allocate(size)
        if slot is None and not self._consumer_keeps_arrays and size <= self._capacity:
            deadline = time.monotonic() + SHM_WAIT_SECONDS
            while slot is None and time.monotonic() < deadline:
                time.sleep(_SHM_POLL_SECONDS)
                slot = self._allocate(size)
        self._consumer_keeps_arrays = slot is None
        return slot

    def send_datapoint(self, obj: Any) -> int:
        """Send one datapoint; returns the number of array bytes it carried."""
        frames = serialize.dumps_frames(obj)
        payload = [memoryview(f).cast("B") for f in frames[1:]]
        lengths = [p.nbytes for p in payload]
        total = sum(_aligned(n) for n in lengths)
        slot = self._allocate_waiting(total) if self._mm is not None and total >= SHM_MIN_BYTES else None
        control = {"k": _DATA, "h": bytes(frames[0]), "len": lengths, "r": -1, "o": 0}
        if slot is None:
            self._send_control(control)
            for part in payload:
                self._conn.send_bytes(part)
        else:
            rid, base = slot
            pos = _FLAGS_BYTES + base
            for part in payload:          # np.copyto releases the GIL while it copies
                np.copyto(np.frombuffer(self._mm, np.uint8, part.nbytes, pos), np.frombuffer(part, np.uint8))
                pos += _aligned(part.nbytes)
            self._flags[rid] = 1
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


_EOF = object()


class _CommandReader(StoppableThread):
    """In a worker: move commands from the parent's pipe into a queue as soon as they come."""

    def __init__(self, connection):
        super().__init__(name="inputpipe-command-reader")
        self._connection = connection
        self.commands = queue.Queue()

    def run(self):
        try:
            while not self.stopped():
                if self._connection.poll(POLL_INTERVAL):
                    self.commands.put(serialize.loads(self._connection.recv_bytes(), max_bytes=_INTERNAL_MAX_BYTES))
        except (EOFError, OSError):
            pass
        finally:
            self.commands.put(_EOF)


class ParentEnd:
    """The parent's end of one worker's channel.

    Example::

        kind, value = end.receive()   # ("data", datapoint) or ("error", (summary, traceback))
    """

    def __init__(self, component: str, result_reader, command_writer, shm_path, mm):
        self.component = component
        self.connection = result_reader
        self._commands = command_writer
        self._shm_path = shm_path
        self._mm = mm
        self._flags = np.frombuffer(mm, np.uint8, count=_MAX_REGIONS) if mm is not None else None

    def receive(self) -> Tuple[str, Any]:
        """Read one message: ``("data", datapoint)`` or ``("error", (summary, traceback))``.
        Raises EOFError/OSError when the worker's end is gone."""
        control = serialize.loads(self.connection.recv_bytes(), max_bytes=_INTERNAL_MAX_BYTES)
        kind = control.get("k") if isinstance(control, dict) else None
        if kind == _ERROR:
            return "error", (control["what"], control["tb"])
        if kind != _DATA:
            raise serialize.WireFormatError("{}: expected a message from a worker, got {!r}".format(
                self.component, control))
        if control["r"] < 0:
            frames = [control["h"]] + [self.connection.recv_bytes() for _ in control["len"]]
            return "data", serialize.loads_frames(frames, max_bytes=_INTERNAL_MAX_BYTES, copy=True)
        return "data", self._load_shared(control)

    def _load_shared(self, control: dict) -> Any:
        rid, pos = control["r"], _FLAGS_BYTES + control["o"]
        size = sum(_aligned(n) for n in control["len"])
        region = np.frombuffer(self._mm, np.uint8, count=size, offset=pos)
        weakref.finalize(region, _release_region, self._flags, rid)
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
        self._flags = None
        self._mm = None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _release_region(flags: np.ndarray, rid: int) -> None:
    flags[rid] = 0


def wait_ready(ends: List[ParentEnd], sentinels: List[int], timeout: float) -> List[Any]:
    """Which of the ends' connections and the sentinels are ready, waiting up to ``timeout``."""
    return mp.connection.wait([e.connection for e in ends] + list(sentinels), timeout=timeout)
