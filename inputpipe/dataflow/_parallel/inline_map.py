"""A parallel map's worker count of 0: the consumer's thread maps the datapoints itself.

A stage of :class:`~._parallel.map_scheduler._ParallelMapBase` maps in the thread that iterates
it when it is asked for 0 workers (``set_num_workers(0)``, or the controller of an ``"auto"``
process map or of ``Autoscale(min_workers=0)``, which chooses 0 when its measurements say that
is faster: a cheap map whose results cost more to move between processes than to make). That
thread is then the map's one worker: each task is numbered and seeded as it would be in a
worker, so every guarantee of the map holds (each datapoint once, the order of ordered maps,
resumable state, the same datapoints for any worker count), and it maps one task at a time,
just before it is due.
The worker processes or threads stay alive, parked: they answer what they held and get no new
task until the count rises again.

Example::

    df = MultiProcessMapData(ds, Autoscale(min_workers=0), make_big_array, strict=True)
    df.set_num_workers(0)          # or let the controller choose it
"""
import ctypes
import random
import sys
import time
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from ...utils import serialize
from ...utils._wire_layout import _DTYPE_NAMES, _INLINE_ARRAY_MAX_BYTES, DEFAULT_MAX_FRAMES
from ...utils.errors import error_from_exception

__all__ = ["InlineMapper", "GlobalDrawsWatch", "as_sent_by_a_process", "global_rngs_kept"]

#: What an error names as the worker when the consumer's thread mapped.
INLINE_WORKER = "the consumer's thread (0 workers: mapping inline)"
#: Bytes a result may have (the channel's own limit between processes).
_RESULT_MAX_BYTES = 1 << 40
#: The consumer's thread's CPU clock is read around one task in this many.
CPU_SAMPLE_EVERY = 8
_wall_clock, _cpu_clock = time.perf_counter, time.thread_time


class InlineMapper:
    """The consumer's thread as a map's worker: ``map(payload, ticket)`` maps one task with
    ``map_task(payload, ticket)`` and returns the result, raising what a worker would report as
    its error; it counts its busy seconds and tasks for the controller, and its CPU seconds, read
    around one task in :data:`CPU_SAMPLE_EVERY` (the thread's CPU clock is a system call, dear
    beside a cheap task on some hosts) and estimated for the others from the sampled tasks' CPU
    per busy second.

    Example::

        mapper = InlineMapper("MultiProcessMapData", lambda payload, ticket: f(payload))
        result = mapper.map(payload, [key, base_seed, epoch, index])
    """

    def __init__(self, component: str, map_task: Callable[[Any, List[Any]], Any]):
        self._component = component
        self._map_task = map_task
        self.busy_seconds = 0.0
        self.items = 0
        self._sampled_busy = 0.0
        self._sampled_cpu = 0.0

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds spent mapping (estimated from the sampled tasks)."""
        if not self._sampled_busy:
            return 0.0
        return self.busy_seconds * self._sampled_cpu / self._sampled_busy

    def map(self, payload: Any, ticket: List[Any]) -> Any:
        sampled = not self.items % CPU_SAMPLE_EVERY
        cpu_started = _cpu_clock() if sampled else 0.0
        started = _wall_clock()
        try:
            result = self._map_task(payload, ticket)
        except Exception as err:   # what a worker would report (KeyboardInterrupt and the like pass as they are)
            raise error_from_exception(self._component, INLINE_WORKER, err) from err
        busy = _wall_clock() - started
        if sampled:
            self._sampled_cpu += _cpu_clock() - cpu_started
            self._sampled_busy += busy
        self.busy_seconds += busy
        self.items += 1
        return result


class global_rngs_kept:
    """Restores ``numpy.random``'s and ``random``'s global states on exit, cached Gaussians
    included: a map that reseeds them for each datapoint (as worker processes do) leaves the
    consumer's own draws as they were. The states are copied as memory through
    :class:`_StateViews` (2.5 KB each; ``get_state()``/``getstate()`` take 10 to 30 times as
    long) where this interpreter's layout was checked to allow it, elsewhere through
    ``get_state()``/``getstate()``.

    Example::

        with global_rngs_kept():
            np.random.seed(7)
            value = np.random.rand()
    """

    def __enter__(self) -> "global_rngs_kept":
        views = self._views = _state_views()
        if views is None:
            self._numpy, self._python = np.random.get_state(), random.getstate()
            return self
        # the copies are reused (one per level of nesting, from any thread)
        self._copy = _spare_copies.pop() if _spare_copies else views.new_copy()
        views.copy_to(self._copy)
        return self

    def __exit__(self, *exc: Any) -> None:
        views = self._views
        if views is None:
            np.random.set_state(self._numpy)
            random.setstate(self._python)
            return
        views.copy_from(self._copy)
        _spare_copies.append(self._copy)


class GlobalDrawsWatch:
    """Maps a process map's tasks in the consumer's thread without seeding numpy's and Python's
    global generators, for as long as ``map_func`` is not seen drawing from them: seeding them
    and putting the consumer's states back (:class:`global_rngs_kept`) costs three times the rest
    of a task's cost there (about 30 us against 10). Each unseeded call is watched: should the
    generators' states (their words, position and cached Gaussians: a fingerprint of a few words,
    see :class:`_StateViews`) differ after it, or the consumer hold a Gaussian that numpy's legacy
    generator cached (its use would not show), the call's result is dropped, the consumer's
    states put back (copied before the call whenever they moved since the last copy), and the
    task mapped again as a worker would, seeded (``map_func`` then runs twice for that task);
    every later task is seeded. Where the states cannot be read as memory (another interpreter,
    numpy before 1.17) every task is seeded.

    Example::

        watch = GlobalDrawsWatch()
        result = watch.map(_apply, f, None, payload, ticket)     # calls _apply(..., reseed_global=)
    """

    def __init__(self) -> None:
        #: ``map_func`` drew from the global generators (or their states cannot be watched).
        self.draws = False
        # the consumer's states as last copied, and their fingerprint then
        self._kept: Optional[_StateCopy] = None
        self._kept_print: Optional[Tuple[Any, ...]] = None

    def map(self, apply: Callable[..., Any], *args: Any) -> Any:
        """``apply(*args, reseed_global=...)`` as a worker process would give it (see the class doc)."""
        views = None if self.draws else _state_views()
        if views is None or views.numpy_gauss_cached():
            self.draws = self.draws or views is None
            with global_rngs_kept():
                return apply(*args, reseed_global=True)
        before = views.fingerprint()
        kept = self._kept
        if kept is None:
            kept = self._kept = views.new_copy()
        if before != self._kept_print:            # the consumer moved them since the last copy
            views.copy_to(kept)
            self._kept_print = before
        try:
            result = apply(*args, reseed_global=False)
        except Exception:
            if views.fingerprint() == before:
                raise                                  # (what the seeded call would raise too)
        else:
            if views.fingerprint() == before:
                return result
        views.copy_from(kept)
        self.draws = True
        with global_rngs_kept():
            return apply(*args, reseed_global=True)


class _StateViews:
    """numpy's and Python's global generator states as memory, read and written in place, with
    numpy's cached Gaussian (its flag and value: the bytes from one to the other). Their
    fingerprint is a few words of each: the position, which every draw moves, and the first and
    last words, which every regeneration of the words (after 624 of them drawn) and every seeding
    change; read without touching the other 2.4 KB of each state."""

    def __init__(self, numpy_at: int, gauss_at: int, gauss_bytes: int, python_at: int):
        self.python = _python_generator()
        self._numpy_bytes = _memory(numpy_at, _MT19937_STATE_BYTES)
        self._python_bytes = _memory(python_at, _PYTHON_STATE_BYTES)
        self._numpy = self._numpy_bytes.cast("I")       # 624 words, then the position
        self._python = self._python_bytes.cast("I")     # the position, then 624 words
        self._gauss_bytes = _memory(gauss_at, gauss_bytes)
        self._gauss = _memory(gauss_at, 4).cast("i")    # the flag

    def numpy_gauss_cached(self) -> bool:
        return self._gauss[0] != 0

    def fingerprint(self) -> Tuple[Any, ...]:
        """Changes whenever either generator draws or is seeded (see the class doc)."""
        numpy, python = self._numpy, self._python
        return (numpy[0], numpy[623], numpy[624], python[0], python[1], python[624], self._gauss[0],
                getattr(self.python, "gauss_next", None))

    def new_copy(self) -> "_StateCopy":
        return _StateCopy(len(self._gauss_bytes))

    def copy_to(self, buffers: "_StateCopy") -> None:
        buffers.numpy[:] = self._numpy_bytes
        buffers.numpy_gauss[:] = self._gauss_bytes
        buffers.python[:] = self._python_bytes
        buffers.python_gauss = getattr(self.python, "gauss_next", None)

    def copy_from(self, buffers: "_StateCopy") -> None:
        """Puts back the states copied to ``buffers``."""
        self._numpy_bytes[:] = buffers.numpy
        self._gauss_bytes[:] = buffers.numpy_gauss
        self._python_bytes[:] = buffers.python
        self.python.gauss_next = buffers.python_gauss


class _StateCopy:
    """A copy of both generators' states made by :meth:`_StateViews.copy_to`."""

    def __init__(self, gauss_bytes: int):
        self.numpy = bytearray(_MT19937_STATE_BYTES)
        self.numpy_gauss = bytearray(gauss_bytes)
        self.python = bytearray(_PYTHON_STATE_BYTES)
        self.python_gauss: Optional[float] = None


def _memory(address: int, size: int) -> memoryview:
    """``size`` bytes at ``address`` as a writable view of bytes."""
    return memoryview((ctypes.c_char * size).from_address(address)).cast("B")


#: The generators the views were made for last (numpy's, its bit generator, ``random``'s) and
#: those views, None where the states cannot be watched.
_NOT_MADE = (object(), object(), object())
_views_made: List[Tuple[Tuple[Any, Any, Any], Optional[_StateViews]]] = [(_NOT_MADE, None)]
_mtrand = np.random.mtrand


def _state_views() -> Optional[_StateViews]:
    """The views of this process' global generators, made once (None where their layout is not
    the one checked, found once too); made again should ``random``'s or numpy's global generator
    be replaced."""
    generator = getattr(_mtrand, "_rand", None)
    bits = getattr(generator, "_bit_generator", None)
    python = random._inst
    made_for, views = _views_made[0]
    if made_for[0] is generator and made_for[1] is bits and made_for[2] is python:
        return views
    numpy_at, python_at, gauss = _numpy_state_memory(), _python_state_memory(), _gauss_memory()
    views = None if numpy_at is None or python_at is None or gauss is None else \
        _StateViews(numpy_at, id(generator) + gauss[0], gauss[1], python_at)
    _views_made[0] = ((generator, bits, python), views)
    return views


def _gauss_memory() -> Optional[Tuple[int, int]]:
    """Where numpy's legacy ``RandomState`` keeps its cached Gaussian: ``(offset of its flag,
    bytes from the flag to the end of the value)``, found on generators of its own (the int that
    one normal draw sets and the next clears, and the double after it that ``get_state()``
    reports); None unless exactly one place fits each."""
    probe = np.random.RandomState(1)
    size = type(probe).__basicsize__
    offsets = range(object.__basicsize__, size - 3, 4)

    def flags(rng: Any) -> List[int]:
        return [ctypes.c_int.from_address(id(rng) + offset).value for offset in offsets]

    empty = flags(probe)
    probe.standard_normal()
    cached = flags(probe)
    probe.standard_normal()
    spent = flags(probe)
    fits = [offset for offset, a, b, c in zip(offsets, empty, cached, spent) if a == 0 and b == 1 and c == 0]
    if len(fits) != 1:
        return None
    flag = fits[0]
    check = np.random.RandomState(2)
    value = None
    for _ in range(3):
        check.standard_normal()
        state: Any = check.get_state()           # (the legacy tuple: has_gauss, cached_gaussian last)
        if ctypes.c_int.from_address(id(check) + flag).value != state[3]:
            return None
        if state[3]:
            values = [at for at in (flag + 4, flag + 8) if at + 8 <= size
                      and ctypes.c_double.from_address(id(check) + at).value == state[4]]
            if len(values) != 1 or value not in (None, values[0]):
                return None
            value = values[0]
    return None if value is None else (flag, value + 8 - flag)


#: The bytes of numpy's MT19937 state: 624 32-bit words and the position in them.
_MT19937_STATE_BYTES = 624 * 4 + 4
#: The bytes of CPython's ``_random.Random`` state after the object's header: the position, then
#: 624 32-bit words.
_PYTHON_STATE_BYTES = 4 + 624 * 4
_python_layout_checked: List[bool] = []
#: Copies of :class:`global_rngs_kept` not in use (list.pop/append: safe between threads).
_spare_copies: List["_StateCopy"] = []


def _snapshot(address: int, size: int) -> Any:
    copy = ctypes.create_string_buffer(size)
    ctypes.memmove(copy, address, size)
    return copy


def _numpy_state_memory() -> Optional[int]:
    """The address of the state of numpy's global generator, or None where it is not exposed."""
    generator = getattr(np.random.mtrand, "_rand", None)
    bits: Any = getattr(generator, "_bit_generator", None)
    if type(bits).__name__ != "MT19937":
        return None
    try:
        return int(bits.ctypes.state_address)
    except (AttributeError, TypeError):
        return None


def _python_state_memory() -> Optional[int]:
    """The address of the state of ``random``'s global generator, where CPython lays it out as
    checked once on a generator of its own (a copy of those bytes restores ``getstate()``)."""
    if not _python_layout_checked:
        _python_layout_checked.append(_python_layout_holds())
    if not _python_layout_checked[0]:
        return None
    return id(_python_generator()) + object.__basicsize__


def _python_generator() -> Any:
    """The generator behind ``random``'s functions."""
    return vars(random)["_inst"]


def _python_layout_holds() -> bool:
    import _random
    if sys.implementation.name != "cpython" or \
            not 0 <= _random.Random.__basicsize__ - object.__basicsize__ - _PYTHON_STATE_BYTES <= 8:
        return False
    probe = random.Random(1)
    probe.random()
    expected = probe.getstate()
    saved = _snapshot(id(probe) + object.__basicsize__, _PYTHON_STATE_BYTES)
    probe.seed(2)
    probe.random()
    ctypes.memmove(id(probe) + object.__basicsize__, saved, _PYTHON_STATE_BYTES)
    return probe.getstate() == expected


def as_sent_by_a_process(result: Any) -> Any:
    """``result`` as a worker process's would arrive: through the wire format, so its types are
    those of every other result (a namedtuple arrives a tuple, a str subclass a str) and what the
    format cannot carry fails here as it would there; contiguous arrays are not copied. A result
    made only of what the format carries as it is (lists, tuples, dicts, numbers, strings, bytes,
    numpy arrays and scalars of the format's dtypes) is returned as it is."""
    if _travels_unchanged(result, 0, [0]):
        return result
    return serialize.loads_frames(serialize.dumps_frames(result), max_bytes=_RESULT_MAX_BYTES)


_PLAIN = (type(None), bool, float, str, bytes)
#: The format's dtype objects (kept alive by its table, so no other object takes their ids): an
#: array of one of them is checked without hashing its dtype.
_DTYPE_IDS = frozenset(id(dtype) for dtype in _DTYPE_NAMES)
#: Deeper results go through the format (which refuses what is too deep for it).
_MOST_DEPTH = 32


def _travels_unchanged(obj: Any, depth: int, arrays: List[int]) -> bool:
    """Whether the wire format gives back ``obj`` with the same types and values (``arrays``
    counts the large arrays seen, against the format's limit of frames)."""
    kind = type(obj)
    if kind is np.ndarray:
        if obj.nbytes > _INLINE_ARRAY_MAX_BYTES:
            arrays[0] += 1
        dtype = obj.dtype
        return (id(dtype) in _DTYPE_IDS or dtype in _DTYPE_NAMES) and arrays[0] <= DEFAULT_MAX_FRAMES
    if kind in _PLAIN:
        return True
    if kind is int:
        return -(1 << 63) <= obj < (1 << 64)
    if depth >= _MOST_DEPTH:
        return False
    if kind is list or kind is tuple:
        for value in obj:
            if type(value) not in _PLAIN and not _travels_unchanged(value, depth + 1, arrays):
                return False
        return True
    if kind is dict:
        for key, value in obj.items():
            if not (_travels_unchanged(key, depth + 1, arrays) and _travels_unchanged(value, depth + 1, arrays)):
                return False
        return True
    if isinstance(obj, np.generic):
        return kind is not np.str_ and kind is not np.bytes_ and obj.dtype in _DTYPE_NAMES
    return False
