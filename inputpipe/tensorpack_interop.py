"""inputpipe's classes registered with tensorpack's, when both libraries are imported.

tensorpack's trainer checks the types of what it is given: ``TrainConfig(dataflow=...)``,
tensorpack's ``QueueInput``/``FeedInput``, ``InferenceRunner`` and ``dataflow_to_dataset`` want a
tensorpack ``DataFlow``; ``TrainConfig(data=...)`` an ``InputSource``; ``QueueInputTrainer`` a
``QueueInput``; the multi-GPU trainers a ``FeedfreeInput``. Those base classes are ``ABCMeta``
classes on both sides, so ``TensorpackClass.register(InputpipeClass)`` makes such a check pass
without either class inheriting the other.

inputpipe never imports tensorpack. :func:`install` (run by ``import inputpipe``) puts a finder
on ``sys.meta_path`` that notices when a module of a pair below finishes loading, and registers
the pair once both of its modules are in ``sys.modules``, whichever was imported first (pairs
already loaded are registered by :func:`install` itself). The DataFlow pair is registered here,
in pure Python; the InputSource pair and the trainer's default prefetching are registered by
:mod:`inputpipe.input_source.tensorpack_trainer`, which also makes inputpipe's InputSources
speak tensorpack's callback protocol.

Example::

    from tensorpack import TrainConfig              # either order
    from inputpipe.dataflow import FakeData
    config = TrainConfig(model=model, dataflow=FakeData([[8, 4]], 100))   # accepted
"""
import importlib.abc
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["install", "registered_pairs"]

#: The tensorpack DataFlow base classes and inputpipe's, registered name for name.
DATAFLOW_CLASSES = ("DataFlow", "RNGDataFlow", "ProxyDataFlow")


def _register_dataflows(tensorpack_base: ModuleType, inputpipe_base: ModuleType) -> None:
    for name in DATAFLOW_CLASSES:
        getattr(tensorpack_base, name).register(getattr(inputpipe_base, name))


def _register_input_sources(tensorpack_module: ModuleType, inputpipe_module: ModuleType) -> None:
    from .input_source import tensorpack_trainer

    tensorpack_trainer.register_input_sources(tensorpack_module, inputpipe_module)


def _register_default_prefetch(tensorpack_module: ModuleType, inputpipe_module: ModuleType) -> None:
    from .input_source import tensorpack_trainer

    tensorpack_trainer.wrap_default_prefetch(tensorpack_module, inputpipe_module)


# (tensorpack's module, inputpipe's module, what registers them)
_PAIRS: List[Tuple[str, str, Callable[[ModuleType, ModuleType], None]]] = [
    ("tensorpack.dataflow.base", "inputpipe.dataflow.base", _register_dataflows),
    ("tensorpack.input_source.input_source", "inputpipe.input_source", _register_input_sources),
    ("tensorpack.train.interface", "inputpipe.input_source", _register_default_prefetch),
]
_WATCHED = frozenset(name for pair in _PAIRS for name in pair[:2])
_done: Dict[Tuple[str, str], bool] = {}
_lock = threading.RLock()


def registered_pairs() -> List[Tuple[str, str]]:
    """The ``(tensorpack module, inputpipe module)`` pairs registered so far in this process.

    Example::

        import tensorpack, inputpipe.dataflow
        assert ("tensorpack.dataflow.base", "inputpipe.dataflow.base") in registered_pairs()
    """
    with _lock:
        return [pair for pair, done in _done.items() if done]


def _register_loaded(just_loaded: Optional[str] = None) -> None:
    """Register every pair whose two modules have finished loading (each pair once);
    ``just_loaded`` names a module whose code has just run to its end."""
    with _lock:
        for tensorpack_name, inputpipe_name, register in _PAIRS:
            key = (tensorpack_name, inputpipe_name)
            if _done.get(key):
                continue
            tensorpack_module = _loaded_module(tensorpack_name, just_loaded)
            inputpipe_module = _loaded_module(inputpipe_name, just_loaded)
            if tensorpack_module is None or inputpipe_module is None:
                continue
            _done[key] = True
            try:
                register(tensorpack_module, inputpipe_module)
            except Exception as err:     # never break the user's import over it
                from .utils.logger import get_logger

                get_logger(__name__).warning(
                    "inputpipe could not register its classes of %s with tensorpack's %s (%s: %s); tensorpack's "
                    "type checks will refuse them", inputpipe_name, tensorpack_name, type(err).__name__, err)


def _loaded_module(name: str, just_loaded: Optional[str]) -> Optional[ModuleType]:
    """``sys.modules[name]`` once its code has run to the end (not while it is being imported)."""
    module = sys.modules.get(name)
    if module is None or name == just_loaded:
        return module
    spec = getattr(module, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return None
    return module


class _NotifyingLoader:
    """A module's own loader, which registers the pairs once the module's code has run."""

    def __init__(self, loader: Any):
        self._loader = loader

    def create_module(self, spec: Any) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _register_loaded(just_loaded=module.__name__)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _PairFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched module, it gives the spec the other finders give,
    with the loader wrapped in a :class:`_NotifyingLoader`."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _WATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _PairFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _NotifyingLoader(spec.loader)
            return spec
        return None


def install() -> None:
    """Watch for tensorpack's and inputpipe's modules (once per process) and register the
    pairs already loaded. Run by ``import inputpipe``.

    Example::

        install()        # again: does nothing more
    """
    with _lock:
        if not any(isinstance(finder, _PairFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, _PairFinder())
    _register_loaded()

