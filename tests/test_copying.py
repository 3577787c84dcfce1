"""ParallelCopier: large copies shared by threads."""
import threading
import time

import numpy as np
import pytest

from inputpipe.utils import copying
from inputpipe.utils.copying import ParallelCopier


def _copier_threads():
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("test-copy"))


@pytest.mark.parametrize("shape,dtype", [((3, 1 << 20), np.uint8), ((1000, 1003), np.float32), ((5 << 20) // 8 + 3,
                                                                                               np.int64)])
def test_large_copies_are_exact_whatever_the_remainder(shape, dtype):
    source = np.arange(np.prod(shape), dtype=dtype).reshape(shape)
    destination = np.zeros_like(source)
    with ParallelCopier(threads=2, min_bytes=1 << 20, chunk_bytes=(1 << 20) + 5, name="test-copy") as copier:
        copier.copy(destination, source)
        assert _copier_threads() == ["test-copy-1"]           # one helper besides the caller
    np.testing.assert_array_equal(destination, source)
    assert _copier_threads() == []


def test_small_and_mismatched_copies_run_in_the_calling_thread():
    with ParallelCopier(threads=2, min_bytes=1 << 20, name="test-copy") as copier:
        small = np.arange(1000.0)
        out = np.empty_like(small)
        copier.copy(out, small)
        np.testing.assert_array_equal(out, small)
        big = np.arange(1 << 20, dtype=np.float32)
        as_float64 = np.empty(big.shape, np.float64)          # dtypes differ: numpy converts
        copier.copy(as_float64, big)
        np.testing.assert_array_equal(as_float64, big.astype(np.float64))
        strided = np.arange(2 << 20, dtype=np.float32)[::2]   # not contiguous
        out = np.empty_like(strided)
        copier.copy(out, strided)
        np.testing.assert_array_equal(out, strided)
        assert _copier_threads() == []                        # no helper was ever needed


def test_a_helper_that_does_not_run_delays_nothing():
    """The caller takes every chunk the helper does not take."""
    stalled = threading.Event()

    class Stall:
        def work(self):
            stalled.wait(10)

    copier = ParallelCopier(threads=2, min_bytes=0, chunk_bytes=1 << 16, name="test-copy")
    source = np.arange(4 << 20, dtype=np.uint8)
    out = np.zeros_like(source)
    copier.copy(out, source)                                  # starts the helper
    copier._helpers[0].jobs.put(Stall())                      # ... which is now busy elsewhere
    out[:] = 0
    start = time.monotonic()
    copier.copy(out, source)
    assert time.monotonic() - start < 1.0
    np.testing.assert_array_equal(out, source)
    stalled.set()
    copier.close()
    assert _copier_threads() == []


def test_an_error_in_any_chunk_reaches_the_caller():
    with ParallelCopier(threads=2, min_bytes=0, chunk_bytes=1 << 16, name="test-copy") as copier:
        source = np.ones(1 << 20, np.uint8)
        destination = np.zeros_like(source)
        destination.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            copier.copy(destination, source)


def test_close_is_idempotent_and_later_copies_use_the_calling_thread():
    copier = ParallelCopier(threads=3, min_bytes=0, name="test-copy")
    source = np.arange(1 << 20, dtype=np.uint8)
    copier.copy(np.empty_like(source), source)
    assert _copier_threads() == ["test-copy-1", "test-copy-2"]
    copier.close()
    copier.close()
    assert _copier_threads() == []
    out = np.empty_like(source)
    copier.copy(out, source)
    np.testing.assert_array_equal(out, source)
    assert _copier_threads() == []


def test_copier_rejects_zero_threads_and_defaults_to_at_most_two():
    with pytest.raises(ValueError, match="threads must be at least 1, got 0"):
        ParallelCopier(threads=0)
    assert 1 <= copying.default_copy_threads() <= 2
