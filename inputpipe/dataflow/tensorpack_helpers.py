"""The small ``tensorpack.utils`` helpers that tensorpack 0.11's data modules import, working here.

tensorpack's dataflow modules import helpers at module level (``get_tqdm`` in ``dataflow.common``,
``get_rng`` in ``dataflow.base``, ``download`` in every dataset module, ...), and scripts import
them from there: ``from tensorpack.dataflow.common import get_tqdm``. inputpipe's modules expose
the same names (outside their ``__all__``, as tensorpack does), all defined here once. They do
what tensorpack documents, with inputpipe's pieces underneath:

- :func:`get_rng` is :func:`inputpipe.dataflow.seeding.new_rng`: fresh entropy by default,
  reproducible under ``set_global_seed`` (tensorpack's ``fix_rng_seed``);
- :func:`download` is the verified downloader of the dataset readers: a ``.part`` file moved into
  place only when complete and, with ``expect_size``, of that size (tensorpack only logs a
  mismatch; here it is a ``DatasetDownloadError``);
- :func:`enable_death_signal` is what inputpipe's workers do: the process is killed (SIGKILL) when
  its parent dies (tensorpack sends SIGHUP, and only when ``python-prctl`` is installed);
- :func:`get_caffe_pb` is a stand-in: tensorpack compiled Caffe's protobuf with ``protoc``;
  inputpipe reads Caffe LMDB files without protobuf (``CaffeLMDB``), and calling it says so.

Nothing here imports TensorFlow or OpenCV.

Example::

    from inputpipe.dataflow.common import get_tqdm
    from inputpipe.dataflow.base import get_rng
    rng = get_rng()
    for _ in get_tqdm(range(3), disable=True):
        rng.rand()
"""
import atexit
import contextlib
import datetime
import functools
import multiprocessing.process
import os
import signal
import sys
import threading
import time
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, TypeVar, Union

import numpy as np

from ..utils.logger import get_logger
from ..utils.utils import PROGRESS_REFRESH_ENV, get_rng, get_tqdm, get_tqdm_kwargs  # noqa: F401 (tensorpack's)
from ..utils.processes import _set_parent_death_signal

__all__ = ["get_rng", "get_tqdm_kwargs", "get_tqdm", "log_once", "log_deprecated", "deprecated", "timed_operation",
           "mkdir_p", "download", "maybe_download", "create_dummy_class", "shape2d", "call_only_once", "memoized_method",
           "enable_death_signal", "ensure_proc_terminate", "start_proc_mask_signal", "DIE", "del_weakref",
           "get_caffe_pb"]

logger = get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

#: Seconds :func:`ensure_proc_terminate` waits for a terminated process before it kills it.
_TERMINATE_GRACE_SECONDS = 1.0


# ------------------------------------------------------------------------------------------- logging

_LOG_METHODS = {"debug": "debug", "info": "info", "warn": "warning", "warning": "warning", "error": "error",
                "exception": "exception", "critical": "critical"}
_logged_once: Set[Tuple[str, str]] = set()
_deprecation_counts: Dict[str, int] = {}
_log_lock = threading.Lock()


def log_once(message: str, func: str = "info") -> None:
    """Log ``message`` with the logger method ``func`` (``"info"``, ``"warn"``, ``"error"``, ...)
    the first time it is asked for in this process; later calls with the same pair do nothing.

    Example::

        log_once("the file has no index; reading it sequentially", "warn")
    """
    method = _LOG_METHODS.get(func)
    if method is None:
        raise ValueError("log_once: func must be one of {}, got {!r}".format(sorted(_LOG_METHODS), func))
    with _log_lock:
        if (message, method) in _logged_once:
            return
        _logged_once.add((message, method))
    getattr(logger, method)(message)


def _end_of_service(eos: str) -> str:
    try:
        year, month, day = (int(part) for part in eos.split("-"))
        return "after " + datetime.date(year, month, day).strftime("%d %b")
    except ValueError:
        raise ValueError("log_deprecated: eos must be a date 'YYYY-MM-DD', got {!r}".format(eos)) from None


def log_deprecated(name: str = "", text: str = "", eos: str = "", max_num_warnings: Optional[int] = None) -> None:
    """Log a deprecation warning about ``name`` (with the explanation ``text`` and the end of
    service date ``eos``, ``"YYYY-MM-DD"``); at most ``max_num_warnings`` times per message.

    Example::

        log_deprecated("MyFlow(nr_proc=)", "Use num_proc= instead.", "2025-12-31")
    """
    if not name and not text:
        raise ValueError("log_deprecated: give the name of the deprecated thing or a text")
    when = _end_of_service(eos) if eos else ""
    if name:
        message = "{} will be deprecated {}. {}".format(name, when, text) if when else \
            "{} was deprecated. {}".format(name, text)
    else:
        message = text + (" Legacy period ends {}".format(when) if when else "")
    if max_num_warnings is not None:
        with _log_lock:
            count = _deprecation_counts.get(message, 0)
            if count >= max_num_warnings:
                return
            _deprecation_counts[message] = count + 1
    logger.warning("[Deprecated] %s", message)


def deprecated(text: str = "", eos: str = "", max_num_warnings: Optional[int] = None) -> Callable[[F], F]:
    """A decorator: each call of the function logs :func:`log_deprecated` with its name and the
    caller's file and line, then runs it.

    Example::

        @deprecated("Use read_all() instead.", "2025-12-31")
        def read():
            ...
    """
    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1)
            log_deprecated("{} [{}:{}]".format(func.__name__, caller.f_code.co_filename, caller.f_lineno), text,
                           eos, max_num_warnings=max_num_warnings)
            return func(*args, **kwargs)
        return wrapper  # type: ignore[return-value]
    return decorate


@contextlib.contextmanager
def timed_operation(msg: str, log_start: bool = False) -> Iterator[None]:
    """Log how long the block took (``"<Msg> finished, time:1.2345 sec."``), and its start when
    ``log_start``.

    Example::

        with timed_operation("loading the index"):
            index = load_index()
    """
    if not msg:
        raise ValueError("timed_operation: msg must be a non-empty message")
    if log_start:
        logger.info("Start %s ...", msg)
    start = time.perf_counter()
    yield
    logger.info("%s finished, time:%.4f sec.", msg[0].upper() + msg[1:], time.perf_counter() - start)


# ------------------------------------------------------------------------------------------------ files

def mkdir_p(dirname: str) -> None:
    """Make the directory ``dirname`` and its parents, like ``mkdir -p`` (nothing for ``""`` or an
    existing directory).

    Example::

        mkdir_p("/tmp/cache/images")
    """
    if dirname is None:
        raise ValueError("mkdir_p: dirname is None")
    if dirname:
        os.makedirs(dirname, exist_ok=True)


def download(url: str, dir: str, filename: Optional[str] = None, expect_size: Optional[int] = None) -> str:
    """Download ``url`` into the directory ``dir`` (made if missing) as ``filename`` (default: the
    last part of the URL) and return the file's path.

    A file already there is kept when it has ``expect_size`` bytes (or when no size is given),
    else downloaded again. The download goes to a ``.part`` file that is moved into place only
    when it is complete and of ``expect_size`` bytes: a failure raises
    :class:`~inputpipe.dataflow.dataset.DatasetDownloadError` naming the URL and leaves no
    partial file.

    Example::

        path = download("http://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "/data", expect_size=170498071)
    """
    from ._formats.dataset_files import RemoteFile, fetch

    class _WholeUrl(RemoteFile):
        """A RemoteFile fetched from ``base_urls[0]`` as it is (its name in the directory may differ)."""

        __slots__ = ()

        @property
        def urls(self) -> Tuple[str, ...]:
            return self.base_urls

    name = filename or url.rstrip("/").rsplit("/", 1)[-1]
    if not name or "://" in name or name.endswith(":"):
        raise ValueError("download: cannot tell a file name from the URL {!r}; pass filename=".format(url))
    mkdir_p(dir)
    path = os.path.join(dir, name)
    if os.path.isfile(path):
        size = os.path.getsize(path)
        if expect_size is None or size == expect_size:
            logger.info("download: %s exists, not downloading it again", path)
            return path
        logger.warning("download: %s has %d bytes, expected %d: downloading it again", path, size, expect_size)
        os.remove(path)
    return fetch(_WholeUrl(name, (url,), size=expect_size), dir, "download")


def maybe_download(url: str, work_directory: str) -> str:
    """The path of ``url``'s file in ``work_directory``, downloaded there first when it is missing
    (tensorpack's helper of the MNIST and Caltech101 readers); see :func:`download`.

    Example::

        path = maybe_download("http://yann.lecun.com/exdb/mnist/t10k-labels-idx1-ubyte.gz", "/data/mnist")
    """
    return download(url, work_directory)


# ------------------------------------------------------------------------------------- classes, arguments

def create_dummy_class(klass: str, dependency: str) -> type:
    """A stand-in for the class named ``klass`` when ``dependency`` cannot be imported: creating
    one raises ``ImportError``, reading a class attribute ``AttributeError``, both naming the
    dependency.

    Example::

        try:
            from lmdb_backed import Reader
        except ImportError:
            Reader = create_dummy_class("Reader", "lmdb")
    """
    message = "{} is not available: it needs {!r}, which cannot be imported (install it)".format(klass, dependency)

    class _MissingDependencyMeta(type):
        def __getattr__(cls, attribute: str) -> Any:
            raise AttributeError(message)

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise ImportError(message)

    return _MissingDependencyMeta(klass, (object,), {"__init__": refuse, "__doc__": message})


def shape2d(a: Union[int, Sequence[int]]) -> List[int]:
    """``[a, a]`` for an int, ``list(a)`` for a list or tuple of two.

    Example::

        assert shape2d(224) == [224, 224] and shape2d((480, 640)) == [480, 640]
    """
    if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
        return [int(a), int(a)]
    if isinstance(a, (list, tuple)) and len(a) == 2:
        return list(a)
    raise ValueError("shape2d: expected an int or a list/tuple of two, got {!r}".format(a))


def call_only_once(func: F) -> F:
    """Decorate a method (or a property's function) that may run only once per object: a second
    call on the same object raises ``RuntimeError``.

    Example::

        class Source:
            @call_only_once
            def setup(self, specs):
                ...
    """
    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        called = self.__dict__.setdefault("_CALL_ONLY_ONCE_CACHE", set())
        if func in called:
            raise RuntimeError("{}.{} can only be called once per object".format(type(self).__name__, func.__name__))
        called.add(func)
        return func(self, *args, **kwargs)
    return wrapper  # type: ignore[return-value]


_NOT_CACHED = object()


def memoized_method(func: F) -> F:
    """Decorate a method whose result is kept on the object, per argument values (which must be
    hashable): later calls with the same arguments return it without running the method.

    Example::

        class Source:
            @memoized_method
            def get_callbacks(self):
                return [make_hook()]
    """
    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        cache = self.__dict__.setdefault("_MEMOIZED_CACHE", {})
        key = (func, args, tuple(sorted(kwargs.items())))
        value = cache.get(key, _NOT_CACHED)
        if value is _NOT_CACHED:
            value = cache[key] = func(self, *args, **kwargs)
        return value
    return wrapper  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------ processes

def enable_death_signal(_warn: bool = True) -> None:
    """Have Linux kill this process (SIGKILL) when its parent dies, as inputpipe does in every
    worker it starts; a no-op elsewhere. ``_warn`` is accepted for tensorpack's signature.

    Example::

        def worker_main():
            enable_death_signal()
            ...
    """
    _set_parent_death_signal()


def _check_processes(component: str, proc: Any) -> List[multiprocessing.process.BaseProcess]:
    processes = list(proc) if isinstance(proc, (list, tuple)) else [proc]
    for p in processes:
        if not isinstance(p, multiprocessing.process.BaseProcess):
            raise TypeError("{}: expected a multiprocessing.Process or a list of them, got {!r}".format(component, p))
    return processes


def _stop_at_exit(ref: "weakref.ReferenceType[multiprocessing.process.BaseProcess]") -> None:
    proc = ref()
    if proc is None:
        return
    try:
        if not proc.is_alive():
            return
    except (AssertionError, ValueError):    # not a child of this process (a forked copy), or closed
        return
    proc.terminate()
    proc.join(_TERMINATE_GRACE_SECONDS)
    if proc.is_alive():
        proc.kill()
        proc.join(_TERMINATE_GRACE_SECONDS)


def ensure_proc_terminate(proc: Any) -> None:
    """Make sure ``proc`` (a ``multiprocessing.Process`` or a list of them) ends when this process
    exits: at exit each one still alive is terminated, and killed if it has not ended a second
    later. Only a weak reference is kept.

    Example::

        p = mp.Process(target=serve)
        ensure_proc_terminate(p)
        p.start()
    """
    for p in _check_processes("ensure_proc_terminate", proc):
        atexit.register(_stop_at_exit, weakref.ref(p))


def start_proc_mask_signal(proc: Any) -> None:
    """Start ``proc`` (a ``multiprocessing.Process`` or a list of them) with SIGINT ignored, so a
    Ctrl-C reaches the parent, which stops them; the parent's handler is restored afterwards.
    The mask applies only when called from the main thread (Python sets handlers there only).

    Example::

        start_proc_mask_signal([mp.Process(target=serve) for _ in range(2)])
    """
    processes = _check_processes("start_proc_mask_signal", proc)
    if threading.current_thread() is not threading.main_thread():
        for p in processes:
            p.start()
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for p in processes:
            p.start()
    finally:
        signal.signal(signal.SIGINT, previous)


class DIE:
    """The end-of-queue sentinel of tensorpack's process queues: the index ``DIE`` in an
    ``(index, datapoint)`` item says the producer is done (see
    :func:`~inputpipe.dataflow.remote.dump_dataflow_to_process_queue`).

    Example::

        index, dp = queue.get()
        if index is DIE:
            ...
    """


def del_weakref(x: "weakref.ReferenceType[Any]") -> None:
    """Stop the object a weak reference points to, if it is still alive: its ``close()`` (what
    stops an inputpipe flow's workers), else its ``__del__`` (tensorpack's runners').

    Example::

        weakref.finalize(owner, del_weakref, weakref.ref(runner))
    """
    obj = x()
    if obj is None:
        return
    stop = getattr(obj, "close", None) or getattr(obj, "__del__", None)
    if stop is not None:
        stop()


# ---------------------------------------------------------------------------------------- stand-ins

def get_caffe_pb() -> Any:
    """A stand-in: tensorpack compiled Caffe's ``caffe.proto`` with ``protoc`` to decode the
    ``Datum`` records of Caffe LMDB files. inputpipe decodes them without protobuf; calling this
    raises ``NotImplementedError`` saying so.

    Example::

        ds = CaffeLMDB("/data/ilsvrc12_train_lmdb", shuffle=False)   # instead of get_caffe_pb()
    """
    raise NotImplementedError(
        "get_caffe_pb: tensorpack built Caffe's protobuf module with protoc to decode the Datum records of Caffe "
        "LMDB files; inputpipe needs neither protobuf nor Caffe for them: read such a file with "
        "inputpipe.dataflow.CaffeLMDB(lmdb_path, shuffle=...), or decode one record with "
        "inputpipe.dataflow.caffe_datum.parse_datum(value)")

