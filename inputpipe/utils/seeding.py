"""The core of inputpipe's seeding: the global seed, the worker rank, and new RNGs from them.

It lives in ``utils`` so that worker supervision (:mod:`inputpipe.utils.workers`) can give each
worker its rank without reaching up into ``dataflow``; users import it as
:mod:`inputpipe.dataflow.seeding`, which re-exports every public name.

By default every ``RNGDataFlow.reset_state()`` draws fresh OS entropy, so copies of a flow in
different worker processes never repeat each other's randomness. To make a whole pipeline
reproducible, set one global seed before calling ``reset_state()`` (or export
``INPUTPIPE_SEED``): every RNG is then derived from (seed, worker rank, order of
``reset_state()`` calls in that process), and parallel runners give each worker its rank.

Example::

    from inputpipe.utils import seeding
    seeding.set_global_seed(1234)
    rng = seeding.new_rng()       # the same numbers on every run
    seeding.set_global_seed(None)
"""
import hashlib
import itertools
import os
import threading
from typing import Optional

import numpy as np

__all__ = ["set_global_seed", "get_global_seed", "enter_worker", "worker_rank", "new_rng", "derive_seed"]

_lock = threading.Lock()
_global_seed: Optional[int] = None
_worker_rank = 0
_counter = itertools.count()


def _seed_from_env() -> Optional[int]:
    value = os.environ.get("INPUTPIPE_SEED")
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError("INPUTPIPE_SEED must be an integer, got {!r}".format(value)) from None


def set_global_seed(seed: Optional[int]) -> None:
    """Derive every later ``RNGDataFlow`` RNG from ``seed`` (None: fresh entropy again).

    Also restarts the per-process ``reset_state()`` counter, so calling it before building and
    resetting a pipeline makes that pipeline give the same datapoints on every run.
    """
    global _global_seed, _counter
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError("set_global_seed expects a non-negative int or None, got {!r}".format(seed))
    with _lock:
        _global_seed = None if seed is None else int(seed)
        _counter = itertools.count()


def get_global_seed() -> Optional[int]:
    """The seed set by :func:`set_global_seed` (or ``INPUTPIPE_SEED``), or None."""
    return _global_seed


def enter_worker(rank: int, global_seed: Optional[int]) -> None:
    """Called by parallel runners at the start of each worker (process or thread-free copy).

    Gives the worker its rank and the parent's global seed, and restarts the counter, so a
    worker's RNGs do not depend on the start method (fork, forkserver or spawn).
    """
    global _worker_rank, _global_seed, _counter
    with _lock:
        _worker_rank = int(rank)
        _global_seed = global_seed
        _counter = itertools.count()


def worker_rank() -> int:
    """The rank given by :func:`enter_worker` in this process (0 in the main process)."""
    return _worker_rank


def new_rng(owner: object = None) -> np.random.RandomState:
    """A new ``RandomState``: seeded from entropy, or from the global seed when one is set."""
    with _lock:
        if _global_seed is None:
            sequence = np.random.SeedSequence()
        else:
            sequence = np.random.SeedSequence(_global_seed, spawn_key=(_worker_rank, next(_counter)))
    return np.random.RandomState(sequence.generate_state(4, dtype=np.uint32))


def derive_seed(*numbers: int) -> int:
    """A seed in ``[0, 2**32)`` that is a stable function of the given ints (e.g. a flow's base
    seed and an epoch number): the same on every run, machine and Python version.

    Resumable flows derive each epoch's (or datapoint's) random stream from it, so a restored
    state repeats the same random choices.

    Example::

        order = np.random.RandomState(derive_seed(base_seed, epoch)).permutation(n)
    """
    payload = b"".join(int(n).to_bytes(16, "little", signed=True) for n in numbers)
    return int.from_bytes(hashlib.blake2b(payload, digest_size=4).digest(), "little")


_global_seed = _seed_from_env()
