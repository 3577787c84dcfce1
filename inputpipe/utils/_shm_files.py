"""The files behind the channels' shared-memory segments (:mod:`inputpipe.utils.channel`): made
without a name in ``/dev/shm``, so that none is ever visible there or left behind by a kill.

Example::

    fd, mapping, capacity = create_segment("MyRunner", 64 << 20)   # (None, None, 0) without shared memory
    size, free = shm_space()
"""
import errno
import mmap
import os
import tempfile
from typing import Optional, Tuple

from ._regions import table_bytes
from .logger import get_logger

__all__ = ["FD_LIMIT_ERRNOS", "create_segment", "nameless_file", "page_rounded", "shm_dir", "shm_space"]

logger = get_logger(__name__)

#: Running out of file descriptors: raised to the caller, never turned into "no shared memory".
FD_LIMIT_ERRNOS = (errno.EMFILE, errno.ENFILE)


def shm_dir() -> str:
    """``/dev/shm`` where it exists and is writable, else the temp directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def page_rounded(n: int) -> int:
    """``n`` bytes rounded up to whole pages."""
    return (n + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


def nameless_file(directory: str) -> int:
    """A descriptor of a new, empty file that has no name (so none can be left behind).

    ``O_TMPFILE`` in ``directory`` (its space is what ``df /dev/shm`` shows); ``memfd_create``
    where the file system cannot make one; a name removed at once on systems with neither."""
    if hasattr(os, "O_TMPFILE"):
        try:
            return os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError as err:
            if err.errno in FD_LIMIT_ERRNOS:
                raise
    if hasattr(os, "memfd_create"):
        return os.memfd_create("inputpipe-shm", os.MFD_CLOEXEC)
    fd, path = tempfile.mkstemp(prefix="inputpipe-", dir=directory)
    os.unlink(path)
    return fd


def shm_space(directory: Optional[str] = None) -> Tuple[int, int]:
    """``(size, free bytes)`` of the file system that holds shared memory (``/dev/shm``)."""
    stat = os.statvfs(directory or shm_dir())
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


def create_segment(component: str, capacity: int) -> Tuple[Optional[int], Optional[mmap.mmap], int]:
    """``(descriptor, parent's mapping, capacity)`` of a new segment; ``(None, None, 0)`` when
    shared memory is off or cannot be had (then everything goes through the pipe). Raises only
    for running out of file descriptors, which the caller reports."""
    if capacity <= 0:
        return None, None, 0
    capacity = page_rounded(capacity)
    fd = nameless_file(shm_dir())
    try:
        os.ftruncate(fd, table_bytes(capacity) + capacity)     # sparse: takes no memory yet
        os.posix_fallocate(fd, 0, table_bytes(capacity))        # the region table only
        mm = mmap.mmap(fd, table_bytes(capacity) + capacity)
    except OSError as err:
        os.close(fd)
        if err.errno in FD_LIMIT_ERRNOS:
            raise
        logger.warning("%s: cannot set up shared memory in %s (%s); large arrays will go through a "
                       "pipe, which is slower.", component, shm_dir(), err)
        return None, None, 0
    return fd, mm, capacity
