"""The core of inputpipe's seeding: the global seed, the worker rank, and new RNGs from them.

It lives in ``utils`` so that worker supervision (:mod:`inputpipe.utils.workers`) can give each
worker its rank without reaching up into ``dataflow``; users import it as
:mod:`inputpipe.dataflow.seeding`, which re-exports every public name.

By default every ``RNGDataFlow.reset_state()`` draws fresh OS entropy, so copies of a flow in
different worker processes never repeat each other's randomness. To make a whole pipeline
reproducible, set one global seed before calling ``reset_state()`` (or export
``INPUTPIPE_SEED``): every RNG is then derived from (seed, worker rank, order of
``reset_state()`` calls in that process), and parallel runners give each worker its rank.

Parallel maps also seed each datapoint ("determinism by construction"): around every call of
the map function they enter a :func:`datapoint_context` whose seed is derived from (the map's base
seed, the epoch, the datapoint's index). Inside it :func:`datapoint_rng` and the image augmentors'
``rng`` draw from streams of that seed, so a seeded pipeline gives the same datapoints whichever
worker maps them, with any number of workers, and after a restore.

Example::

    from inputpipe.utils import seeding
    seeding.set_global_seed(1234)
    rng = seeding.new_rng()       # the same numbers on every run
    seeding.set_global_seed(None)
    with seeding.datapoint_context(seeding.derive_seed(7, 0, 3)):
        first = seeding.datapoint_rng().randint(100)
    with seeding.datapoint_context(seeding.derive_seed(7, 0, 3)):
        assert seeding.datapoint_rng().randint(100) == first
"""
import _random
import contextlib
import hashlib
import itertools
import os
import random
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

# (task_seed and call_seeded, the parallel maps' fast forms of derive_seed and datapoint_context, are
# not exported)
__all__ = ["set_global_seed", "get_global_seed", "enter_worker", "worker_rank", "new_rng", "derive_seed",
           "datapoint_context", "datapoint_seed", "datapoint_rng", "augmentor_rng"]

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
    return _seed_of(b"".join([_number_bytes(n) for n in numbers]))


def _number_bytes(number: int) -> bytes:
    """A number's 16 bytes in :func:`derive_seed`'s payload."""
    return int(number).to_bytes(16, "little", signed=True)


def _seed_of(payload: bytes) -> int:
    """The seed of :func:`derive_seed`'s ``payload`` (the numbers' bytes, one after the other)."""
    return int.from_bytes(hashlib.blake2b(payload, digest_size=4).digest(), "little")


def _salted_seed(seed: int, salt_bytes: bytes) -> int:
    """``derive_seed(seed, salt)`` for an int ``seed``, with the salt's 16 bytes made once (a
    parallel map derives two such seeds for every datapoint)."""
    return _seed_of(_number_bytes(seed) + salt_bytes)


#: ``(base_seed, epoch, their 32 bytes in derive_seed's payload)`` of the latest task_seed call,
#: replaced as one tuple (threads of a map call it at once).
_task_prefix: List[Tuple[int, int, bytes]] = [(0, 0, bytes(32))]


def task_seed(base_seed: int, epoch: int, index: int) -> int:
    """``derive_seed(base_seed, epoch, index)``, the first two numbers' bytes made once while
    they stay the same (a parallel map derives one such seed for every datapoint).

    Example::

        assert task_seed(7, 0, 3) == derive_seed(7, 0, 3)
    """
    base, at_epoch, prefix = _task_prefix[0]
    if base != base_seed or at_epoch != epoch:
        prefix = _number_bytes(base_seed) + _number_bytes(epoch)
        _task_prefix[0] = (base_seed, epoch, prefix)
    return _seed_of(prefix + _number_bytes(index))


# ------------------------------------------------------------------------ per-datapoint seeding

# Streams of a datapoint seed, kept apart by their first salt.
_USER, _AUGMENTOR, _NUMPY_GLOBAL, _PYTHON_GLOBAL = 0, 1, 2, 3
_NUMPY_SALT, _PYTHON_SALT = (salt.to_bytes(16, "little", signed=True) for salt in (_NUMPY_GLOBAL, _PYTHON_GLOBAL))

_local = threading.local()       # per thread: the stack of open datapoint contexts, spare RNGs


class _DatapointContext:
    """The seed of the datapoint being mapped in this thread and the RNGs handed out for it."""

    __slots__ = ("seed", "rngs", "spares", "used", "owners")

    def __init__(self, seed: int, spares: List[np.random.RandomState]):
        self.seed = seed
        self.rngs: Dict[Any, np.random.RandomState] = {}
        self.spares = spares      # RandomState objects of this nesting depth, reseeded on demand
        self.used = 0
        self.owners: List[Any] = []     # augmentors that drew, in order (kept alive: ids stay unique)

    def rng(self, key: Any, *salt: int) -> np.random.RandomState:
        rng = self.rngs.get(key)
        if rng is None:
            if self.used == len(self.spares):
                self.spares.append(np.random.RandomState())     # made once per thread and depth
            rng = self.spares[self.used]
            self.used += 1
            rng.seed(derive_seed(self.seed, *salt))            # ~2 us, a new RandomState ~90 us
            self.rngs[key] = rng
        return rng


def _stack() -> List[_DatapointContext]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
        _local.spares = []
    return stack


class datapoint_context(contextlib.ContextDecorator):
    """Seed everything random done for one datapoint, in this thread, from ``seed``.

    Parallel maps enter it around each call of their map function, with
    ``derive_seed(map's base seed, epoch, index of the datapoint)``. Inside it:

    - :func:`datapoint_rng` gives RNGs seeded from ``seed`` (and a salt);
    - each image augmentor's ``rng`` is a stream of ``seed`` too, told apart from the other
      augmentors by the order in which they first draw for this datapoint (the same in every
      worker, since the map function runs the same code on the same datapoint);
    - with ``reseed_global`` (process workers only: the global RNGs are shared by all threads of
      a process) ``numpy.random``'s and ``random``'s global RNGs are reseeded from ``seed``, so map
      functions written with ``np.random.rand()`` are deterministic too.

    The RNGs handed out are reused (reseeded) for later datapoints: do not keep them after the
    datapoint. Outside any context nothing changes (per-process RNGs, as before). It also works
    as a decorator (each call of the function in its own entry of the context).

    Entering it costs about 2 us (about 15 us with ``reseed_global``: two more seeds derived and
    the global generators reseeded).

    Example::

        with datapoint_context(derive_seed(base_seed, epoch, index)):
            image = augment(image)         # the same crop in every worker and every run
    """

    __slots__ = ("_seed", "_reseed_global")

    def __init__(self, seed: int, reseed_global: bool = False):
        self._seed = int(seed)
        self._reseed_global = reseed_global

    def __enter__(self) -> int:
        _open_context(self._seed, self._reseed_global)
        return self._seed

    def __exit__(self, *exc: Any) -> None:
        _local.stack.pop()


def _open_context(seed: int, reseed_global: bool) -> List[_DatapointContext]:
    """Push the context of a datapoint seeded with ``seed`` on this thread's stack; returns the
    stack."""
    try:
        stack, spares_by_depth = _local.stack, _local.spares
    except AttributeError:
        stack, spares_by_depth = _stack(), _local.spares
    depth = len(stack)
    if len(spares_by_depth) == depth:
        spares_by_depth.append([])
    context = _DatapointContext(seed, spares_by_depth[depth])
    if reseed_global:
        np.random.seed(_salted_seed(seed, _NUMPY_SALT))
        _reseed_python_global(_salted_seed(seed, _PYTHON_SALT))
    stack.append(context)
    return stack


def call_seeded(func: Callable[[Any], Any], arg: Any, seed: int, reseed_global: bool = False) -> Any:
    """``func(arg)`` inside ``datapoint_context(seed, reseed_global)``, for a parallel map's
    every call (a function call instead of a context manager's three).

    Example::

        result = call_seeded(map_func, datapoint, task_seed(base_seed, epoch, index))
    """
    stack = _open_context(seed, reseed_global)
    try:
        return func(arg)
    finally:
        stack.pop()


def _reseed_python_global(seed: int) -> None:
    """``random.seed(seed)`` for an int: where ``random``'s generator is a plain ``random.Random``,
    its C seeding called directly and the cached Gaussian dropped, as its Python ``seed`` does
    for an int (2 us of the 8 that call takes)."""
    generator = getattr(random.seed, "__self__", None)
    if type(generator) is random.Random:
        _random.Random.seed(generator, seed)
        generator.gauss_next = None       # type: ignore[attr-defined]
    else:
        random.seed(seed)


def datapoint_seed() -> Optional[int]:
    """The seed of the datapoint being mapped in this thread (see :func:`datapoint_context`), or
    None outside a parallel map's call.

    Example::

        def map_func(dp):
            seed = datapoint_seed()     # e.g. to seed a library that takes a seed argument
            ...
    """
    stack = getattr(_local, "stack", None)
    return stack[-1].seed if stack else None


def datapoint_rng(salt: int = 0) -> np.random.RandomState:
    """Inside a :func:`datapoint_context`: an RNG seeded from (the datapoint's seed, ``salt``);
    calls with the same salt for the same datapoint continue one stream. Outside one: this
    thread's own RNG made by :func:`new_rng` (fresh entropy, or from the global seed).

    Use it in a map function to draw numbers that are the same whichever worker maps the
    datapoint, with any number of workers, and after a restore.

    Example::

        def jitter(dp):
            return [dp[0] + datapoint_rng().uniform(-1, 1)]
    """
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1].rng((_USER, int(salt)), _USER, int(salt))
    fallback = getattr(_local, "fallback", None)
    if fallback is None or getattr(_local, "fallback_pid", None) != os.getpid():
        fallback = _local.fallback = new_rng()
        _local.fallback_pid = os.getpid()
    return fallback


def augmentor_rng(owner: Any) -> Optional[np.random.RandomState]:
    """Inside a :func:`datapoint_context`: the RNG of ``owner`` (an augmentor) for this datapoint,
    a stream of the datapoint's seed numbered by the order in which owners first asked; None
    outside one. Image augmentors call it from their ``rng`` property.

    Example::

        rng = augmentor_rng(self) or self._process_rng
    """
    stack = getattr(_local, "stack", None)
    if not stack:
        return None
    context = stack[-1]
    key = (_AUGMENTOR, id(owner))
    rng = context.rngs.get(key)
    if rng is None:
        rng = context.rng(key, _AUGMENTOR, len(context.owners))
        context.owners.append(owner)
    return rng


_global_seed = _seed_from_env()
