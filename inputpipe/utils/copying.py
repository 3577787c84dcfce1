"""Copy large arrays with more than one thread.

A copy of tens of megabytes from memory that is not in the CPU's caches is limited by how many
cache misses one core keeps in flight, not by the memory itself; a second core copying part of
it finishes the copy sooner. ``np.copyto`` releases the GIL, so Python threads copy in parallel.

:class:`ParallelCopier` cuts a copy of at least ``min_bytes`` into chunks of ``chunk_bytes``.
The calling thread and ``threads - 1`` helper threads (started on first use, stopped by
:meth:`~ParallelCopier.close`) take chunks one at a time until none are left, so a helper that
the operating system does not run for a while delays the copy by one chunk at most: the calling
thread copies whatever the helper did not take. Smaller copies, copies between arrays of
different dtypes or layouts, and any copy after ``close()`` run in the calling thread alone.

Example::

    with ParallelCopier(threads=2) as copier:
        copier.copy(destination, batch)      # same shape and dtype, both C-contiguous
"""
import os
import queue
import threading
from typing import List, Optional, Tuple

import numpy as np

from .concurrency import POLL_INTERVAL, StoppableThread

__all__ = ["ParallelCopier", "default_copy_threads", "PARALLEL_COPY_MIN_BYTES"]

#: Copies smaller than this run in one thread: handing work to a helper costs tens of microseconds.
PARALLEL_COPY_MIN_BYTES = 4 << 20
#: The unit of work the threads take in turn.
CHUNK_BYTES = 1 << 20


def default_copy_threads() -> int:
    """Two threads where the process may use two or more CPUs, else one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:          # not Linux
        cpus = os.cpu_count() or 1
    return min(2, cpus)


class _CopyJob:
    """The chunks of one copy, taken one at a time by every thread that works on it."""

    def __init__(self, chunks: List[Tuple[np.ndarray, np.ndarray]]):
        self._chunks = chunks
        self._next = 0
        self._in_progress = 0
        self._error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def _take(self) -> Optional[int]:
        with self._lock:
            if self._next >= len(self._chunks) or self._error is not None:
                return None
            self._next += 1
            self._in_progress += 1
            return self._next - 1

    def work(self) -> None:
        """Copy chunks until none are left (or one failed)."""
        index = self._take()
        while index is not None:
            error = None
            try:
                np.copyto(*self._chunks[index])
            except BaseException as err:      # re-raised in the calling thread by wait()
                error = err
            with self._lock:
                self._in_progress -= 1
                self._error = self._error or error
                if not self._in_progress:
                    self._idle.notify_all()
            index = self._take()

    def wait(self, helpers: List["_CopyHelper"]) -> None:
        """After the caller's own :meth:`work`: wait for chunks still being copied by helpers."""
        with self._lock:
            while self._in_progress:
                if not self._idle.wait(POLL_INTERVAL) and not all(h.is_alive() for h in helpers):
                    raise RuntimeError("ParallelCopier: a helper thread ended in the middle of a copy")
            if self._error is not None:
                raise self._error


class _CopyHelper(StoppableThread):
    """One helper thread: works on each copy job it is given."""

    def __init__(self, name: str):
        super().__init__(name=name)
        self.jobs: "queue.Queue[_CopyJob]" = queue.Queue()

    def run(self) -> None:
        while True:
            try:
                job = self.queue_get_stoppable(self.jobs)
            except queue.Empty:
                return
            job.work()


class ParallelCopier:
    """Copy large C-contiguous arrays with ``threads`` threads (see the module docstring).

    One thread at a time may call :meth:`copy`. ``close()`` (or leaving a ``with`` block) stops
    the helper threads within about ``POLL_INTERVAL``; it is idempotent.

    Example::

        copier = ParallelCopier()
        out = np.empty_like(batch)
        copier.copy(out, batch)
        copier.close()
    """

    def __init__(self, threads: Optional[int] = None, min_bytes: int = PARALLEL_COPY_MIN_BYTES,
                 chunk_bytes: int = CHUNK_BYTES, name: str = "inputpipe-copy"):
        self.threads = default_copy_threads() if threads is None else int(threads)
        if self.threads < 1:
            raise ValueError("ParallelCopier: threads must be at least 1, got {}".format(threads))
        self.min_bytes = int(min_bytes)
        self.chunk_bytes = max(1, int(chunk_bytes))
        self.name = name
        self._helpers: List[_CopyHelper] = []
        self._closed = False

    def _splittable(self, destination: np.ndarray, source: np.ndarray) -> bool:
        return (self.threads > 1 and not self._closed and source.nbytes >= self.min_bytes
                and destination.shape == source.shape and destination.dtype == source.dtype
                and destination.flags.c_contiguous and source.flags.c_contiguous)

    def _start_helpers(self) -> None:
        while len(self._helpers) < self.threads - 1:
            helper = _CopyHelper("{}-{}".format(self.name, len(self._helpers) + 1))
            helper.start()
            self._helpers.append(helper)

    def copy(self, destination: np.ndarray, source: np.ndarray) -> None:
        """``np.copyto(destination, source)``; a large copy is shared with the helper threads."""
        if not self._splittable(destination, source):
            np.copyto(destination, source)
            return
        self._start_helpers()
        flat_out = destination.reshape(-1).view(np.uint8)
        flat_in = source.reshape(-1).view(np.uint8)
        step = self.chunk_bytes
        job = _CopyJob([(flat_out[i:i + step], flat_in[i:i + step]) for i in range(0, flat_in.size, step)])
        for helper in self._helpers:
            helper.jobs.put(job)
        job.work()
        job.wait(self._helpers)

    def close(self) -> None:
        """Stop and join the helper threads."""
        self._closed = True
        helpers, self._helpers = self._helpers, []
        for helper in helpers:
            helper.stop()
        for helper in helpers:
            helper.join(2 * POLL_INTERVAL + 1)

    def __enter__(self) -> "ParallelCopier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
