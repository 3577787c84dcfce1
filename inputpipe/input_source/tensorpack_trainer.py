"""inputpipe's InputSources as the input of tensorpack's trainers (loaded only next to tensorpack).

:mod:`inputpipe.tensorpack_interop` calls this module once tensorpack's modules are loaded; it
never imports tensorpack either, it uses what is in ``sys.modules``:

- :func:`register_input_sources`: each inputpipe InputSource class is registered with tensorpack's
  class of the same name (``InputSource``, ``FeedfreeInput``, ``QueueInput``, ``StagingInput``,
  ...), so ``TrainConfig(data=...)``, ``QueueInputTrainer`` and the multi-GPU trainers take them;
- :func:`trainer_callbacks`: what ``setup()`` and ``get_callbacks()`` return once tensorpack's
  callbacks are loaded: each of the source's hooks wrapped in an object that is both a
  ``SessionRunHook`` (so a ``MonitoredTrainingSession`` still takes the list) and a tensorpack
  ``Callback`` (so tensorpack's trainer and ``InferenceRunner`` run it): ``setup_graph`` is the
  hook's ``begin``, ``before_train`` its ``after_create_session`` (with the trainer's session),
  ``before_run``/``after_run`` its own, ``after_train`` its ``end``. In tensorpack's protocol a run
  that fetches nothing of its own is a step over the input (``InferenceRunner`` runs
  ``fetches=[]`` and its inferencers fetch the outputs), so such a run takes a batch;
- :func:`wrap_default_prefetch`: ``launch_train_with_config`` wraps a ``QueueInput`` in
  tensorpack's ``StagingInput`` for a multi-GPU trainer; inputpipe's ``QueueInput`` gets
  inputpipe's ``StagingInput`` instead (tensorpack's would run inputpipe's queue outside its hooks:
  an inputpipe source inside a tensorpack ``StagingInput`` is refused when the trainer sets up
  its callbacks, with the fix).

Example::

    import tensorpack
    from inputpipe.input_source import QueueInput
    config = tensorpack.TrainConfig(model=model, data=QueueInput(df), max_epoch=1)
    tensorpack.launch_train_with_config(config, tensorpack.SimpleTrainer())
"""
import functools
import sys
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf

from ..utils.logger import get_logger
from .errors import InputSourceError

__all__ = ["register_input_sources", "wrap_default_prefetch", "trainer_callbacks", "INPUT_SOURCE_CLASSES"]

logger = get_logger(__name__)

#: inputpipe's classes registered with tensorpack's class of the same name.
INPUT_SOURCE_CLASSES = ("InputSource", "FeedfreeInput", "PlaceholderInput", "FeedInput", "QueueInput",
                        "BatchQueueInput", "StagingInput", "TFDatasetInput", "TensorInput", "DummyConstantInput",
                        "ZMQInput")
_TENSORPACK_BASE = "tensorpack.input_source.input_source_base"
_TENSORPACK_CALLBACKS = "tensorpack.callbacks.base"
_callback_classes: Dict[type, type] = {}


def register_input_sources(tensorpack_input_source: ModuleType, inputpipe_input_source: ModuleType) -> None:
    """Register inputpipe's InputSource classes (and ``ProxyInputSource``) with tensorpack's.

    Example::

        register_input_sources(sys.modules["tensorpack.input_source.input_source"], inputpipe.input_source)
    """
    for name in INPUT_SOURCE_CLASSES:
        getattr(tensorpack_input_source, name).register(getattr(inputpipe_input_source, name))
    # ProxyInputSource is in input_source_base on both sides (tensorpack's module path, a submodule of the package)
    proxy_class = inputpipe_input_source.input_source_base.ProxyInputSource
    sys.modules[_TENSORPACK_BASE].ProxyInputSource.register(proxy_class)


def wrap_default_prefetch(tensorpack_interface: Any, inputpipe_input_source: ModuleType) -> None:
    """Make ``launch_train_with_config`` stage an inputpipe ``QueueInput`` with inputpipe's
    ``StagingInput`` on a multi-GPU trainer (everything else goes to tensorpack's rule).

    Example::

        wrap_default_prefetch(sys.modules["tensorpack.train.interface"], inputpipe.input_source)
    """
    tensorpack_rule: Callable[[Any, Any], Any] = tensorpack_interface.apply_default_prefetch
    queue_input, staging_input = inputpipe_input_source.QueueInput, inputpipe_input_source.StagingInput

    @functools.wraps(tensorpack_rule)
    def apply_default_prefetch(input_source_or_dataflow: Any, trainer: Any) -> Any:
        if isinstance(input_source_or_dataflow, queue_input) and len(getattr(trainer, "devices", ())) > 1:
            logger.info("Staging %s with inputpipe's StagingInput for the %d towers of %s",
                        input_source_or_dataflow.name, len(trainer.devices), type(trainer).__name__)
            return staging_input(input_source_or_dataflow)
        return tensorpack_rule(input_source_or_dataflow, trainer)

    tensorpack_interface.apply_default_prefetch = apply_default_prefetch


def trainer_callbacks(source: Any, hooks: List[tf.compat.v1.train.SessionRunHook]) -> List[Any]:
    """``hooks`` (the source's), or, once tensorpack's callbacks are loaded, the same hooks as
    objects that are tensorpack ``Callback``\\ s too (made once per source).

    Example::

        callbacks = trainer_callbacks(source, source.get_hooks())
    """
    callbacks_module = sys.modules.get(_TENSORPACK_CALLBACKS)
    if callbacks_module is None:
        return hooks
    made = source.__dict__.get("_trainer_callbacks")
    if made is None:
        wrapper = _callback_class(callbacks_module.Callback)
        made = source.__dict__["_trainer_callbacks"] = [wrapper(source, hook) for hook in hooks]
    return list(made)


def _callback_class(tensorpack_callback: type) -> type:
    """The class of :func:`trainer_callbacks`' objects, for tensorpack's ``Callback`` class."""
    made = _callback_classes.get(tensorpack_callback)
    if made is None:
        made = _callback_classes[tensorpack_callback] = type(
            "HookCallback", (_HookCallbackMethods, tensorpack_callback, tf.compat.v1.train.SessionRunHook), {})
    return made


def _fetches_nothing(run_context: Any) -> bool:
    """Whether the run asks for nothing of its own (``fetches=[]``, no feeds)."""
    args = run_context.original_args
    fetches = args.fetches
    empty = fetches is None or (isinstance(fetches, (list, tuple, dict)) and len(fetches) == 0)
    return empty and not args.feed_dict


def _refuse_foreign_staging(source: Any, trainer: Any) -> None:
    """An inputpipe source inside tensorpack's ``StagingInput``: tensorpack's staging callback runs
    the source's ops outside its hooks (its prefill, and its stage op in the steps), so what the
    source promises (checked steps, the saved position) would not hold. Refused, with the fix."""
    name = source.name
    registered = getattr(getattr(trainer, "_callbacks", None), "cbs", None) or []
    for callback in registered:
        staging = getattr(callback, "_input", None)
        if type(callback).__qualname__ == "StagingInput.StagingCallback" and getattr(staging, "_input", None) is source:
            raise InputSourceError(
                "{name}: inputpipe's {name} is inside tensorpack's StagingInput, which runs its queue outside inputpipe's "
                "hooks; use inputpipe's StagingInput: `from inputpipe.input_source import StagingInput` and "
                "TrainConfig(data=StagingInput({name}(...)))".format(name=name))


class _HookCallbackMethods:
    """The methods of :func:`trainer_callbacks`' objects (see the module docstring), ahead of
    tensorpack's ``Callback`` in their class."""

    _chief_only = False          # an InputSource's callbacks run on every worker (tensorpack's rule)

    def __init__(self, source: Any, hook: tf.compat.v1.train.SessionRunHook):
        self.source = source
        self.hook = hook
        self._session: Optional[tf.compat.v1.Session] = None
        self._in_trainer = False

    def __repr__(self) -> str:
        return "<{} of {}>".format(type(self.hook).__name__, getattr(self.source, "name", "?"))

    # tensorpack's Callback protocol (tensorpack's trainer, InferenceRunner)
    def setup_graph(self, trainer: Any) -> None:
        self.trainer = trainer
        self.graph = tf.compat.v1.get_default_graph()
        self._in_trainer = True
        _refuse_foreign_staging(self.source, trainer)
        with tf.compat.v1.name_scope(None):
            self.hook.begin()

    def before_train(self) -> None:
        self._session = tf.compat.v1.get_default_session()
        if self._session is None:
            raise InputSourceError("{}: before_train() without a default session (tensorpack's trainer runs it under "
                                   "its session)".format(self.source.name))
        self.hook.after_create_session(self._session, None)

    def after_train(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            self.hook.end(session)

    # both protocols
    def before_run(self, run_context: Any) -> Any:
        if self._in_trainer and _fetches_nothing(run_context):
            run_context = tf.compat.v1.train.SessionRunContext(
                tf.compat.v1.train.SessionRunArgs([t.tensors for t in self.source._towers]), run_context.session)
        return self.hook.before_run(run_context)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.hook.after_run(run_context, run_values)

    # the SessionRunHook protocol (MonitoredTrainingSession, hooked_session)
    def begin(self) -> None:
        self._in_trainer = False
        self.hook.begin()

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.hook.after_create_session(session, coord)

    def end(self, session: Any) -> None:
        self.hook.end(session)
