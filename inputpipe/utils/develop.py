"""tensorpack's ``utils.develop`` at the same path: deprecation messages and stand-ins for what an
optional dependency would provide.

- :func:`log_deprecated` / :func:`deprecated` log ``[Deprecated] ...`` warnings (at most
  ``max_num_warnings`` times per message);
- :func:`create_dummy_class` / :func:`create_dummy_func` stand for a class or a function whose
  dependency cannot be imported: using one raises ``ImportError`` naming the dependency;
- :func:`building_rtfd` tells whether the docs are being built on Read the Docs;
  :func:`HIDE_DOC` marks a function to leave out of the API docs;
- :class:`LazyLoader` stands for a module imported the first time one of its attributes is read.

Example::

    from inputpipe.utils.develop import create_dummy_func, log_deprecated
    try:
        from lmdb import open as open_lmdb
    except ImportError:
        open_lmdb = create_dummy_func("open_lmdb", "lmdb")
    log_deprecated("read_all()", "Use read() instead.", "2027-01-01")
"""
import datetime
import functools
import importlib
import os
import sys
import threading
import types
from typing import Any, Callable, Dict, List, Optional, TypeVar

from .logger import get_logger

__all__ = []   # as tensorpack's: nothing for a star import

logger = get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

_deprecation_counts: Dict[str, int] = {}
_count_lock = threading.Lock()


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
        with _count_lock:
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


def _missing(what: str, dependency: Any) -> str:
    names = dependency if isinstance(dependency, (list, tuple)) else [dependency]
    return "{} is not available: it needs {}, which cannot be imported (install {})".format(
        what, ", ".join(repr(str(name)) for name in names), "them" if len(names) > 1 else "it")


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
    message = _missing(klass, dependency)

    class _MissingDependencyMeta(type):
        def __getattr__(cls, attribute: str) -> Any:
            raise AttributeError(message)

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise ImportError(message)

    return _MissingDependencyMeta(klass, (object,), {"__init__": refuse, "__doc__": message})


def create_dummy_func(func: str, dependency: Any) -> Callable[..., Any]:
    """A stand-in for the function named ``func`` when ``dependency`` (a name, or a list of
    names) cannot be imported: calling it raises ``ImportError`` naming them.

    Example::

        try:
            from scipy.io import loadmat
        except ImportError:
            loadmat = create_dummy_func("loadmat", "scipy")
    """
    message = _missing(func, dependency)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ImportError(message)

    refuse.__name__ = refuse.__qualname__ = func
    refuse.__doc__ = message
    return refuse


def building_rtfd() -> bool:
    """Whether the code runs in a docs build on Read the Docs (``READTHEDOCS`` set) or a build
    that sets ``DOC_BUILDING``.

    Example::

        if not building_rtfd():
            import cv2
    """
    return os.environ.get("READTHEDOCS") == "True" or bool(os.environ.get("DOC_BUILDING"))


def HIDE_DOC(func: F) -> F:
    """A decorator that marks ``func`` to be left out of the API docs (``__HIDE_SPHINX_DOC__``,
    which a Sphinx ``autodoc-skip-member`` hook reads); the function itself is unchanged.

    Example::

        @HIDE_DOC
        def _internal_helper():
            ...
    """
    func.__HIDE_SPHINX_DOC__ = True    # type: ignore[attr-defined]
    return func


class LazyLoader(types.ModuleType):
    """A module that is imported the first time one of its attributes is read (tensorpack's, after
    TensorFlow's): ``name`` is the module to import, ``local_name`` the name it has in the
    namespace ``parent_module_globals`` (usually ``globals()``), where the module replaces this
    stand-in once imported. An import that fails raises there, when the attribute is read.

    Example::

        cv2 = LazyLoader("cv2", globals(), "cv2")     # no import yet
        image = cv2.imread(path)                       # imported here
    """

    def __init__(self, local_name: str, parent_module_globals: Dict[str, Any], name: str):
        self._local_name = local_name
        self._parent_module_globals = parent_module_globals
        super().__init__(name)

    def _load(self) -> types.ModuleType:
        module = importlib.import_module(self.__name__)
        self._parent_module_globals[self._local_name] = module
        # later reads find the attributes here, without __getattr__
        self.__dict__.update(module.__dict__)
        return module

    def __getattr__(self, item: str) -> Any:
        return getattr(self._load(), item)

    def __dir__(self) -> List[str]:
        return dir(self._load())
