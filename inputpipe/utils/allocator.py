"""Worker processes keep freed memory for their next datapoint instead of returning it at once.

glibc's ``malloc`` serves every block of 128 KiB or more (an image, a batch) with a fresh ``mmap``
and returns it with ``munmap`` when freed, so a worker that makes one such array per datapoint
pays the kernel's page faults for every page of every datapoint: measured on tensorpack's ResNet
augmentation recipe, about half of a worker's time. Raising the threshold makes those blocks
come from the heap, where freed memory is reused by the next datapoint; memory stays bounded by
the largest working set (what is freed above ``TRIM_THRESHOLD`` still goes back to the system).

Only worker processes the library starts are tuned (the training process is the user's); nothing
changes where glibc is not the allocator, or when the user set ``MALLOC_MMAP_THRESHOLD_`` /
``MALLOC_TRIM_THRESHOLD_`` (glibc's own environment settings), or ``INPUTPIPE_WORKER_MALLOC=0``.

Example::

    from inputpipe.utils.allocator import tune_worker_allocator
    tune_worker_allocator()     # in a worker process, before it makes datapoints
"""
import ctypes
import os

__all__ = ["tune_worker_allocator", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Blocks below this come from the heap (glibc's largest allowed value on 64-bit: 32 MiB).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of the heap beyond this is returned to the system.
TRIM_THRESHOLD = 64 << 20


def tune_worker_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds in this process; True when they were set.

    Example::

        if not tune_worker_allocator():
            pass    # not glibc, or the user chose the allocator's settings
    """
    if os.environ.get("INPUTPIPE_WORKER_MALLOC", "1") == "0":
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):      # not glibc (musl, macOS, Windows)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
