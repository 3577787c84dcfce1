"""tensorpack's ``utils.argtools`` at the same path: decorators and argument helpers that data code
imports (``from tensorpack.utils.argtools import memoized, log_once, shape2d``).

- :data:`memoized` is ``functools.lru_cache(maxsize=None)``, as in tensorpack (it keeps its keys
  and values alive); :func:`memoized_ignoreargs` keeps the first result whatever the arguments;
  :func:`memoized_method` keeps results on the object; :func:`graph_memoized` one cache per
  TensorFlow default graph (TensorFlow is imported only when such a function is called);
- :func:`call_only_once` refuses a second call of a method on one object (``RuntimeError``;
  tensorpack asserted);
- :func:`log_once` logs a message once per process;
- :func:`map_arg` maps named arguments before the call; :func:`shape2d`, :func:`shape4d`.

Example::

    from inputpipe.utils.argtools import memoized, shape2d

    @memoized
    def class_names(path):
        return open(path).read().split()

    height, width = shape2d(224)
"""
import functools
import inspect
import threading
from typing import Any, Callable, Dict, List, Sequence, Set, Tuple, TypeVar, Union

import numpy as np

from .logger import get_logger

__all__ = ["map_arg", "memoized", "memoized_method", "graph_memoized", "shape2d", "shape4d", "memoized_ignoreargs",
           "log_once"]

logger = get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

#: ``functools.lru_cache(maxsize=None)``: a function's result kept per argument values (hashable),
#: which stay alive as long as the cache does.
memoized = functools.lru_cache(maxsize=None)

_LOG_METHODS = {"debug": "debug", "info": "info", "warn": "warning", "warning": "warning", "error": "error",
                "exception": "exception", "critical": "critical"}
_logged_once: Set[Tuple[str, str]] = set()
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


def map_arg(**maps: Callable[[Any], Any]) -> Callable[[F], F]:
    """A decorator: the arguments named in ``maps`` (given by position or by name) go through
    their function before the call.

    Example::

        @map_arg(size=shape2d)
        def resize(image, size):
            ...
        resize(img, 32)          # size == [32, 32]
    """
    def decorate(func: F) -> F:
        signature = inspect.signature(func)
        unknown = sorted(set(maps) - set(signature.parameters))
        if unknown:
            raise TypeError("map_arg: {} has no argument {}".format(func.__name__, ", ".join(unknown)))

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind_partial(*args, **kwargs)
            for name, mapping in maps.items():
                if name in bound.arguments:
                    bound.arguments[name] = mapping(bound.arguments[name])
            return func(*bound.args, **bound.kwargs)
        return wrapper  # type: ignore[return-value]
    return decorate


_NOT_CACHED = object()
_ignoring_args_lock = threading.Lock()


def memoized_ignoreargs(func: F) -> F:
    """A decorator: the first call's result is returned by every later call, whatever their
    arguments (e.g. a dataset's metadata loaded once).

    Example::

        @memoized_ignoreargs
        def load_meta(path):
            return read(path)
    """
    result: List[Any] = [_NOT_CACHED]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if result[0] is _NOT_CACHED:
            value = func(*args, **kwargs)
            with _ignoring_args_lock:
                if result[0] is _NOT_CACHED:
                    result[0] = value
        return result[0]
    return wrapper  # type: ignore[return-value]


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


def graph_memoized(func: F) -> F:
    """Like :data:`memoized`, with one cache per TensorFlow default graph (ops made for one graph
    are not reused in another). TensorFlow is imported at the first call.

    Example::

        @graph_memoized
        def get_quantizer(bits):
            return make_quantize_ops(bits)
    """
    caches: Dict[Any, Dict[Any, Any]] = {}

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import tensorflow as tf

        graph = tf.compat.v1.get_default_graph()
        cache = caches.setdefault(graph, {})
        key = (args, tuple(sorted(kwargs.items())))
        value = cache.get(key, _NOT_CACHED)
        if value is _NOT_CACHED:
            value = cache[key] = func(*args, **kwargs)
        return value
    return wrapper  # type: ignore[return-value]


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


_KERAS_NAMES = {"NCHW": "channels_first", "NHWC": "channels_last"}


def get_data_format(data_format: str, keras_mode: bool = True) -> str:
    """``data_format`` in Keras' names (``"channels_first"``/``"channels_last"``) with
    ``keras_mode``, else in TensorFlow's (``"NCHW"``/``"NHWC"``); either spelling is accepted.

    Example::

        assert get_data_format("NHWC") == "channels_last"
    """
    names = _KERAS_NAMES if keras_mode else {v: k for k, v in _KERAS_NAMES.items()}
    result = names.get(data_format, data_format)
    if result not in names.values():
        raise ValueError("get_data_format: unknown data_format {!r}: expected one of NHWC, NCHW, channels_last, "
                         "channels_first".format(data_format))
    return result


def shape4d(a: Union[int, Sequence[int]], data_format: str = "NHWC") -> List[int]:
    """A 2-d size as the 4-d shape of ``data_format``: ``[1, h, w, 1]`` (NHWC) or ``[1, 1, h, w]``.

    Example::

        assert shape4d(3) == [1, 3, 3, 1] and shape4d((2, 3), "NCHW") == [1, 1, 2, 3]
    """
    size = shape2d(a)
    return [1] + size + [1] if get_data_format(data_format, keras_mode=False) == "NHWC" else [1, 1] + size
