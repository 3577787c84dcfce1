"""The TensorFlow-side helpers that tensorpack 0.11's ``input_source`` modules import, working here.

tensorpack's ``input_source.input_source`` and ``input_source_base`` import helpers from
``tfutils``, ``callbacks`` and ``utils`` at module level, and InputSources written for tensorpack
import them from there (``from tensorpack.input_source.input_source_base import
build_or_reuse_placeholder``). The same names exist at the same paths in inputpipe (outside
``__all__``, as in tensorpack); this module holds those that need TensorFlow:

- graph helpers: :func:`build_or_reuse_placeholder`, :func:`get_op_tensor_name`,
  :func:`get_sublist_by_names`, :func:`get_tensors_inputs`, :func:`dependency_of_fetches`;
- :func:`add_moving_summary`: a plain scalar summary of each tensor (tensorpack kept a moving
  average, maintained by its trainer's ``MovingAverageSummary`` callback, which does not exist here);
- :func:`get_current_tower_context`: always None (there are no tensorpack towers here);
- :class:`ShareSessionThread`: a thread that runs under the default session of the thread that
  started it;
- :class:`Callback`, :class:`CallbackFactory`, :class:`RunOp`: the callbacks an InputSource's
  ``_get_callbacks()`` may return; inputpipe runs them as ``SessionRunHook``\\ s (see
  :mod:`~inputpipe.input_source.callback_hooks`): ``setup_graph``, ``before_train``,
  ``before_run``, ``after_run`` and ``after_train``; as in tensorpack, an InputSource's callbacks
  have no trainer and their ``trigger*`` and ``*_epoch`` methods are not called;
- :class:`EnqueueThread`: a stand-in: tensorpack's QueueInput thread is inside
  :class:`~inputpipe.input_source.QueueInput` here, and making one raises an error saying to use
  it, or a ``SessionRunHook`` that starts a thread of your own.

Example::

    from inputpipe.input_source.input_source_base import build_or_reuse_placeholder
    image = build_or_reuse_placeholder(tf.TensorSpec([None, 28, 28], tf.float32, "image"))
"""
import contextlib
import re
import threading
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

from ..utils.logger import get_logger
from .dependency import FetchDependencies
from .signature import signature_placeholder

__all__ = ["build_or_reuse_placeholder", "get_op_tensor_name", "get_sublist_by_names", "get_tensors_inputs",
           "dependency_of_fetches", "add_moving_summary", "get_current_tower_context", "ShareSessionThread",
           "Callback", "CallbackFactory", "RunOp", "EnqueueThread"]

logger = get_logger(__name__)


# ----------------------------------------------------------------------------------------- the graph

def build_or_reuse_placeholder(tensor_spec: tf.TensorSpec) -> tf.Tensor:
    """The placeholder of ``tensor_spec`` named exactly ``tensor_spec.name`` at the root of the
    default graph, reusing one of that name, dtype and shape (see
    :func:`~inputpipe.input_source.signature.signature_placeholder`).

    Example::

        image = build_or_reuse_placeholder(tf.TensorSpec([None, 28, 28], tf.float32, "image"))
        assert image.name == "image:0"
    """
    return signature_placeholder(tensor_spec, "build_or_reuse_placeholder")


def get_op_tensor_name(name: str) -> Tuple[str, str]:
    """``(op_name, tensor_name)`` of ``name``, an op name (its tensor is output 0) or a tensor name
    (``op:index``).

    Example::

        assert get_op_tensor_name("image") == ("image", "image:0")
        assert get_op_tensor_name("split:1") == ("split", "split:1")
    """
    if len(name) >= 3 and name[-2] == ":":
        return name[:-2], name
    return name, name + ":0"


def get_sublist_by_names(lst: Sequence[Any], names: Sequence[str]) -> List[Any]:
    """The items of ``lst`` (objects with a ``name``) named ``names``, in that order.

    Example::

        label_spec, = get_sublist_by_names(input_signature, ["label"])
    """
    by_name = [item.name for item in lst]
    sublist = []
    for name in names:
        if name not in by_name:
            raise ValueError("get_sublist_by_names: {!r} is not among the names {}".format(name, by_name))
        sublist.append(lst[by_name.index(name)])
    return sublist


def get_tensors_inputs(placeholders: Sequence[tf.Tensor], tensors: Sequence[tf.Tensor],
                       names: Sequence[str]) -> List[tf.Tensor]:
    """``placeholders`` with the one named ``names[i]`` (an op or tensor name) replaced by
    ``tensors[i]``, for every i.

    Example::

        inputs = get_tensors_inputs([image_ph, label_ph], [label_tensor], ["label"])
    """
    if len(tensors) != len(names):
        raise ValueError("get_tensors_inputs: {} tensors but {} names ({})".format(len(tensors), len(names), list(names)))
    inputs = list(placeholders)
    placeholder_names = [p.name for p in placeholders]
    for name, tensor in zip(names, tensors):
        tensor_name = get_op_tensor_name(name)[1]
        if tensor_name not in placeholder_names:
            raise ValueError("get_tensors_inputs: {!r} is not a model input (the inputs are {})".format(
                tensor_name, placeholder_names))
        inputs[placeholder_names.index(tensor_name)] = tensor
    return inputs


def dependency_of_fetches(fetches: Any, op: Any) -> bool:
    """Whether running ``fetches`` (anything ``Session.run`` takes: tensors, ops, names, nested
    lists and dicts) runs ``op`` (an operation or a tensor).

    Example::

        assert dependency_of_fetches([train_op], dequeue_op)
    """
    if isinstance(op, tf.Tensor):
        op = op.op
    if not isinstance(op, tf.Operation):
        raise TypeError("dependency_of_fetches: op must be a tf.Operation or tf.Tensor, got {!r}".format(op))
    return op in FetchDependencies(op.graph).executed_ops(fetches)


def add_moving_summary(*args: Any, **kwargs: Any) -> List[tf.Tensor]:
    """A scalar summary (``tf.compat.v1.summary.scalar``) of each scalar tensor in ``args``, named
    ``<op name>-summary`` without a ``towerN/`` prefix; returns the summary tensors.

    tensorpack summarised a moving average of each tensor (``decay``), kept up to date by its
    trainer's ``MovingAverageSummary`` callback (``collection``); with no such trainer here, the
    summary records the tensor's value itself. ``decay`` and ``collection`` are accepted and not
    used; ``summary_collections`` is passed on.

    Example::

        add_moving_summary(tf.reduce_mean(loss, name="loss"))
    """
    unknown = set(kwargs) - {"decay", "collection", "summary_collections"}
    if unknown:
        raise TypeError("add_moving_summary() got unexpected keyword arguments {}".format(sorted(unknown)))
    summaries = []
    for tensor in args:
        if not isinstance(tensor, (tf.Tensor, tf.Variable)) or tensor.shape.ndims != 0:
            raise ValueError("add_moving_summary: expected scalar tensors, got {!r}".format(tensor))
        name = re.sub("tower[0-9]+/", "", tensor.op.name)
        value = tensor if tensor.dtype.is_floating else tf.cast(tensor, tf.float32)
        with tf.compat.v1.name_scope(None):
            summaries.append(tf.compat.v1.summary.scalar(name + "-summary", value,
                                                         collections=kwargs.get("summary_collections")))
    return summaries


def get_current_tower_context() -> None:
    """tensorpack's current ``TowerContext``: always None here (no tensorpack trainer builds towers).

    Example::

        ctx = get_current_tower_context()
        is_training = ctx is None or ctx.is_training
    """
    return None


# ---------------------------------------------------------------------------------------- threads

class ShareSessionThread(threading.Thread):
    """A thread that runs under the default session (and its graph) of the thread that called
    :meth:`start` (e.g. an ``InputSource``'s thread started by a hook). Wrap a thread (``th``: its ``run`` is
    run), or subclass and use ``with self.default_sess():`` in ``run``.

    Example::

        thread = ShareSessionThread(threading.Thread(target=lambda: enqueue_op.run()))
        with sess.as_default():
            thread.start()
    """

    def __init__(self, th: Optional[threading.Thread] = None):
        super().__init__()
        self._th = th
        self._sess: Optional[tf.compat.v1.Session] = None
        if th is not None:
            if not isinstance(th, threading.Thread):
                raise TypeError("ShareSessionThread wraps a threading.Thread, got {!r}".format(th))
            self.name = th.name
            self.daemon = th.daemon

    @contextlib.contextmanager
    def default_sess(self) -> Iterator[Optional[tf.compat.v1.Session]]:
        """The session taken at :meth:`start` as the default session, its graph as the default graph
        (None, with a warning, when there was no default session)."""
        if self._sess is None:
            logger.warning("ShareSessionThread %s was started without a default session", self.name)
            yield None
            return
        with self._sess.graph.as_default(), self._sess.as_default():     # a new thread has neither by default
            yield self._sess

    def start(self) -> None:
        self._sess = tf.compat.v1.get_default_session()
        super().start()

    def run(self) -> None:
        if self._th is None:
            raise NotImplementedError("ShareSessionThread: pass a thread to wrap, or override run()")
        with self.default_sess():
            self._th.run()


class EnqueueThread:
    """A stand-in for tensorpack's ``EnqueueThread`` (QueueInput's feeding thread): creating one
    raises ``NotImplementedError`` saying what to use (see the module docstring).

    Example::

        source = QueueInput(df)        # its thread feeds the queue, started and stopped by its hooks
    """

    def __init__(self, queue: Any = None, ds: Any = None, placehdrs: Any = None, *args: Any, **kwargs: Any):
        raise NotImplementedError(
            "EnqueueThread: tensorpack's QueueInput thread is inside inputpipe's QueueInput(ds) (and "
            "BatchQueueInput), which feeds its queue from a thread its hooks start and stop; use that source. A custom "
            "InputSource that needs its own thread returns a tf.compat.v1.train.SessionRunHook from _get_callbacks() "
            "that starts the thread in after_create_session() and stops it in end() (see docs/input_source.md)")


# ------------------------------------------------------------------------------------------ callbacks

class Callback:
    """tensorpack's ``Callback``, for the callbacks of an InputSource: subclasses implement
    ``_setup_graph()``, ``_before_train()``, ``_before_run(ctx)`` (returning fetches or a
    ``SessionRunArgs``), ``_after_run(ctx, values)`` and ``_after_train()``. inputpipe runs them
    from a ``SessionRunHook`` (``begin``, ``after_create_session``, ``before_run``, ``after_run``,
    ``end``); ``trainer`` is None, and ``trigger*`` and ``*_epoch`` are not called (tensorpack's
    rule for an InputSource's callbacks).

    Example::

        class InitIterator(Callback):
            def __init__(self, iterator):
                self.iterator = iterator

            def _before_train(self):
                self.iterator.initializer.run()
    """

    _chief_only = True
    name_scope = ""
    trainer: Any = None
    graph: Optional[tf.Graph] = None

    def setup_graph(self, trainer: Any) -> None:
        self.trainer = trainer
        self.graph = tf.compat.v1.get_default_graph()
        with tf.name_scope(self.name_scope or type(self).__name__):
            self._setup_graph()

    def before_train(self) -> None:
        self._before_train()

    def before_run(self, ctx: Any) -> Optional[tf.compat.v1.train.SessionRunArgs]:
        fetches = self._before_run(ctx)
        if fetches is None or isinstance(fetches, tf.compat.v1.train.SessionRunArgs):
            return fetches
        if not isinstance(fetches, list):
            raise TypeError("{}._before_run() must return None, a SessionRunArgs or a list of tensors, ops or their "
                            "names, got {!r}".format(type(self).__name__, fetches))
        graph = self.graph or tf.compat.v1.get_default_graph()
        return tf.compat.v1.train.SessionRunArgs(
            fetches=[f if isinstance(f, (tf.Tensor, tf.Operation)) else graph.as_graph_element(f) for f in fetches])

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._after_run(run_context, run_values)

    def after_train(self) -> None:
        self._after_train()

    def before_epoch(self) -> None:
        self._before_epoch()

    def after_epoch(self) -> None:
        self._after_epoch()

    def trigger_step(self) -> None:
        self._trigger_step()

    def trigger_epoch(self) -> None:
        self._trigger_epoch()

    def trigger(self) -> None:
        self._trigger()

    def _setup_graph(self) -> None:
        pass

    def _before_train(self) -> None:
        pass

    def _before_run(self, ctx: Any) -> Any:
        return None

    def _after_run(self, run_context: Any, run_values: Any) -> None:
        pass

    def _after_train(self) -> None:
        pass

    def _before_epoch(self) -> None:
        pass

    def _after_epoch(self) -> None:
        pass

    def _trigger_step(self) -> None:
        pass

    def _trigger_epoch(self) -> None:
        self._trigger()

    def _trigger(self) -> None:
        pass

    @property
    def chief_only(self) -> bool:
        return self._chief_only

    @chief_only.setter
    def chief_only(self, value: bool) -> None:
        self._chief_only = value

    def set_chief_only(self, v: bool = True) -> "Callback":
        """Set :attr:`chief_only` (kept for tensorpack's code; inputpipe runs every callback) and
        return the callback."""
        self._chief_only = v
        return self


class CallbackFactory(Callback):
    """A callback made of functions that each take the callback: ``setup_graph``, ``before_train``,
    ``after_train`` (and ``trigger``, which an InputSource's callbacks may not have: inputpipe
    refuses it, with an error saying to use a SessionRunHook).

    Example::

        CallbackFactory(before_train=lambda _: self.reset_state())
    """

    def __init__(self, setup_graph: Optional[Callable[[Any], Any]] = None,
                 before_train: Optional[Callable[[Any], Any]] = None, trigger: Optional[Callable[[Any], Any]] = None,
                 after_train: Optional[Callable[[Any], Any]] = None):
        self._cb_setup_graph = setup_graph
        self._cb_before_train = before_train
        self._cb_trigger = trigger
        self._cb_after_train = after_train

    def _setup_graph(self) -> None:
        if self._cb_setup_graph:
            self._cb_setup_graph(self)

    def _before_train(self) -> None:
        if self._cb_before_train:
            self._cb_before_train(self)

    def _trigger(self) -> None:
        if self._cb_trigger:
            self._cb_trigger(self)

    def _after_train(self) -> None:
        if self._cb_after_train:
            self._cb_after_train(self)


class RunOp(Callback):
    """Run an op (or the op a function returns, made in ``setup_graph``): before training
    (``run_before``) and with every step (``run_step``). ``run_as_trigger`` is accepted for
    tensorpack's signature; an InputSource's callbacks are never triggered.

    Example::

        RunOp(lambda: iterator.initializer, run_before=True, run_as_trigger=False)
    """

    _chief_only = False

    def __init__(self, op: Any, run_before: bool = True, run_as_trigger: bool = True, run_step: bool = False,
                 verbose: bool = False):
        self.setup_func = op if callable(op) else (lambda: op)
        self.run_before = run_before
        self.run_as_trigger = run_as_trigger
        self.run_step = run_step
        self.verbose = verbose
        self._op: Any = None

    def _setup_graph(self) -> None:
        self._op = self.setup_func()

    def _run(self) -> None:
        if self.verbose:
            logger.info("Running Op %s ...", self._op.name)
        self._op.run()

    def _before_train(self) -> None:
        if self.run_before:
            self._run()

    def _trigger(self) -> None:
        if self.run_as_trigger:
            self._run()

    def _before_run(self, ctx: Any) -> Any:
        if self.run_step:
            if self.verbose:
                logger.info("Running Op %s ...", self._op.name)
            return tf.compat.v1.train.SessionRunArgs(fetches=self._op)
        return None
