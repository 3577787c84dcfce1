"""Keep worker channels out of processes forked for other purposes.

A forked child inherits every open file descriptor of its parent. When a process that owns
worker channels forks for another purpose (a ``map_func`` that forks, a nested parallel DataFlow
starting its own workers, another thread of the trainer starting a process), the child holds
the channels' pipes: a dead worker's pipe then stays open as long as that child lives, and a
parent blocked reading or writing it would wait for the child instead of the worker.

Every descriptor registered here (:func:`keep_out_of_forks`) is replaced by ``/dev/null`` in
every child made by ``os.fork()`` (Python's at-fork hook), except the descriptors the forking
thread is handing over to the worker it is starting (:func:`handing_over`). The number stays
occupied, so an object in the child that still believes it owns the descriptor closes only
``/dev/null``, never a file the child opened later. A descriptor is remembered with its file's
identity (device and inode), so a number closed without :func:`forget` and reused for another
file is left alone. Children made by ``fork()`` in C code bypass
Python's hook; the supervisor watches each worker's pid (:mod:`inputpipe.utils.workers`), so a
death is still reported at once, and those children hold a pipe only for their own lifetime.

Example::

    keep_out_of_forks(reader.fileno(), writer.fileno())
    with handing_over([writer.fileno()]):
        process.start()               # the worker keeps ``writer``; other forks get /dev/null
    forget(reader.fileno(), writer.fileno())    # before closing them
"""
import contextlib
import os
import threading
from typing import Dict, FrozenSet, Iterable, Iterator, Tuple

__all__ = ["keep_out_of_forks", "forget", "handing_over"]

_lock = threading.Lock()
#: guarded descriptor -> (device, inode) of its file when it was registered
_registered: Dict[int, Tuple[int, int]] = {}
#: forking thread's ident -> descriptors the child it is making keeps
_handover: Dict[int, FrozenSet[int]] = {}


def keep_out_of_forks(*fds: int) -> None:
    """Replace these descriptors by ``/dev/null`` in every child this process forks from now on
    (unless handed over to it)."""
    identities = {fd: _identity(fd) for fd in fds}
    with _lock:
        _registered.update(identities)


def forget(*fds: int) -> None:
    """Stop guarding these descriptors (call it before closing them: the number may be reused)."""
    with _lock:
        for fd in fds:
            _registered.pop(fd, None)


@contextlib.contextmanager
def handing_over(fds: Iterable[int]) -> Iterator[None]:
    """While in this block, a child forked by this thread keeps ``fds`` (its worker channel)."""
    ident = threading.get_ident()
    with _lock:
        _handover[ident] = frozenset(fds)
    try:
        yield
    finally:
        with _lock:
            _handover.pop(ident, None)


def _identity(fd: int) -> Tuple[int, int]:
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


def _still_ours(fd: int, identity: Tuple[int, int]) -> bool:
    try:
        return _identity(fd) == identity
    except OSError:
        return False                # closed in the parent without forget()


def _in_child_after_fork() -> None:
    """In the new child: blank every guarded descriptor but the handed-over ones, which become
    the guarded set of this process (they are its own channel now)."""
    global _lock
    _lock = threading.Lock()        # another thread of the parent may have held it at the fork
    keep = _handover.get(threading.get_ident(), frozenset())   # the forking thread lives on here
    blank = [fd for fd, identity in _registered.items() if fd not in keep and _still_ours(fd, identity)]
    if blank:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            for fd in blank:
                os.dup2(null, fd, inheritable=False)
        finally:
            os.close(null)
    kept = {fd: identity for fd, identity in _registered.items() if fd in keep}
    _registered.clear()
    _registered.update(kept)
    _handover.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child_after_fork)
