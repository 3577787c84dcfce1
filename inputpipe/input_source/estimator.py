"""``tf.estimator``: an ``input_fn`` over a DataFlow or an InputSource, one pipeline for every graph.

``Estimator.train``, ``evaluate``, ``predict`` and each cycle of ``train_and_evaluate`` build a new
graph and call ``input_fn`` again. :class:`EstimatorInput` builds, in each of those graphs, a
QueueInput (with a StagingInput over it, so the batch is on the model's device before the step
asks) that reads one :class:`~inputpipe.input_source.continuing.ContinuingStream`, made once:

- **training** (``mode=TRAIN``) continues the stream where the last ``train()`` stopped, exactly
  once: what the last session's queue and staging areas held and its steps did not consume comes
  first. The input position is saved in every checkpoint, so after a restart the Estimator's
  restore continues it; a restore of a checkpoint that is not where the stream is (an older one)
  restarts the data at the checkpoint's position.
- **evaluation and prediction** (``EVAL``, ``PREDICT``) read the whole data once per call, in order,
  and end with ``OutOfRangeError`` (which ends ``evaluate()``); a last, smaller batch is delivered
  as it is (the signature's batch dimension must be ``None``). The next pass is read ahead while
  nothing evaluates.

The DataFlow, its worker processes, caches and shuffle buffers live until :meth:`EstimatorInput.close`
(or the object is garbage collected, or the interpreter exits), across all the graphs.

Estimator gives an ``input_fn`` no way to add hooks: pass :attr:`EstimatorInput.hooks` (one list)
to ``train``/``evaluate``/``predict`` or to ``TrainSpec``/``EvalSpec``. Without them the first step
fails with an error saying so, instead of waiting for data that never comes.

Example::

    train = EstimatorInput(train_df, specs, labels="label")
    evaluation = EstimatorInput(eval_df, specs, labels="label")
    tf.estimator.train_and_evaluate(
        estimator,
        tf.estimator.TrainSpec(train.input_fn, max_steps=1000, hooks=train.hooks),
        tf.estimator.EvalSpec(evaluation.input_fn, steps=None, hooks=evaluation.hooks))
    train.close(); evaluation.close()
"""
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import tensorflow as tf

from ..dataflow.base import NotResumableError
from ..utils.arguments import ArgumentKindError, is_dataflow
from ..utils.logger import get_logger
from .base import InputSource
from .continuing import ContinuingStream, FlowFeed, StreamFeed, WorkerStreamFeed
from .dataset import TFDatasetInput
from .errors import InputSourceError
from .estimator_hooks import EstimatorInputHook
from .placement import on_host
from .queue import DEFAULT_GIL_SWITCH_INTERVAL, BatchQueueInput, QueueInput
from .signature import normalize_signature
from .staging import StagingInput, default_staging_device
from .zmq import ZMQInput, ZMQStreamFeed

__all__ = ["EstimatorInput"]

logger = get_logger(__name__)

_TRAIN, _EVAL, _PREDICT = "train", "eval", "infer"        # tf.estimator.ModeKeys' values
NameList = Union[None, str, Sequence[str]]


class _Plan:
    """How to rebuild the data side in each graph: the stream's feed, the queue source's class and
    options, and the staging over it."""

    def __init__(self, feed: Optional[StreamFeed], queue_class: type = QueueInput, batch_size: Optional[int] = None,
                 nr_stage: int = 1, device: Optional[str] = None, make_source: Optional[Callable[[], Any]] = None,
                 endless: bool = False):
        self.feed = feed
        self.queue_class = queue_class
        self.batch_size = batch_size
        self.nr_stage = nr_stage
        self.device = device
        self.make_source = make_source      # a function building the whole source per graph (no stream)
        self.endless = endless              # the data has no passes (a socket)


class _Built:
    """What ``input_fn`` built in one graph (found again by the hook in that graph's session)."""

    def __init__(self, source: InputSource, features: Any, labels: Any, mark_started: Any,
                 stream: Optional[ContinuingStream]):
        self.source = source
        self.features = features
        self.labels = labels
        self.mark_started = mark_started
        self.stream = stream
        self.hooks: List[tf.compat.v1.train.SessionRunHook] = []
        self.fetched: List[bool] = []
        self.in_flight = False      # a run the source's hooks took part in has not come back (it raised)


class EstimatorInput:
    """An ``input_fn`` for ``tf.estimator`` over ``data`` (see the module docstring).

    ``data``: a DataFlow (datapoints in the order of ``signature``, or dicts by name; batches for
    ``QueueInput``), or an InputSource to rebuild in each graph with the same options: ``QueueInput``
    (also ``in_worker=True``), ``BatchQueueInput``, ``ZMQInput`` (training only: a socket has no
    passes), ``StagingInput`` over one of those (its ``nr_stage`` and ``device``), ``TFDatasetInput``
    of a DataFlow; or a function returning a new InputSource or ``tf.data.Dataset`` for each graph
    (it is called in each graph; the pipeline it builds is its own: a ``tf.data`` pipeline starts
    over in every graph, as in plain Estimator code).

    ``signature``: named ``tf.TensorSpec``\\ s of the components (batch dimension first, ``None``
    for a last partial batch). ``labels``: the name of the label component (the model gets that
    tensor), a list of names (a dict), or None (no labels). ``features``: None (a dict of every
    other component by name), a list of names (a dict of those), or one name (that tensor).

    ``evaluation``: True makes it serve evaluation or prediction (one whole pass per call), False
    training (a stream that continues); None (default) decides by the mode of the first
    ``input_fn`` call (an ``input_fn`` called without a mode serves training), so wrap it as
    ``lambda: x.input_fn()`` only with ``evaluation`` given.

    ``nr_stage``: batches kept staged on ``device`` (0: no staging; ignored when ``data`` is a
    ``StagingInput``, whose own settings count). ``device``: where to stage; default the first GPU
    when TensorFlow sees one, else the CPU (Estimator builds the ``input_fn`` under ``/cpu:0``, so
    the device is chosen here, not taken from the scope). ``read_ahead``: batches the reader
    thread keeps ready (for ``BatchQueueInput``: times its batch size); each graph's queue holds
    as many.

    Example::

        train = EstimatorInput(BatchData(MultiProcessMapData(files, 2, load), 128),
                               [tf.TensorSpec([None, 16000], tf.float32, "audio"),
                                tf.TensorSpec([None], tf.int64, "label")], labels="label")
        estimator.train(train.input_fn, hooks=train.hooks, max_steps=10000)
    """

    def __init__(self, data: Any, signature: Sequence[tf.TensorSpec], labels: NameList = None,
                 features: NameList = None, *, evaluation: Optional[bool] = None, nr_stage: int = 1,
                 device: Optional[str] = None, read_ahead: int = 4, name: str = "EstimatorInput"):
        self.name = name
        self._specs = normalize_signature(signature, name)
        names = [s.name for s in self._specs]
        self._label_names, self._labels_single = _names(name, "labels", labels, names)
        if features is None:
            self._feature_names, self._features_single = [n for n in names if n not in self._label_names], False
        else:
            self._feature_names, self._features_single = _names(name, "features", features, names)
        if int(nr_stage) != nr_stage or nr_stage < 0:
            raise ValueError("{}: nr_stage must be an integer >= 0, got {!r}".format(name, nr_stage))
        if int(read_ahead) != read_ahead or read_ahead < 1:
            raise ValueError("{}: read_ahead must be an integer >= 1, got {!r}".format(name, read_ahead))
        self._plan = _plan_for(data, name, int(nr_stage), device)
        self.read_ahead = int(read_ahead)
        self._lock = threading.Lock()
        self._graph: Optional[tf.Graph] = None     # the graph of the latest input_fn call and its build
        self._built: Optional[_Built] = None
        self._role: Optional[str] = None
        self._fixed_role = None if evaluation is None else (_EVAL if evaluation else _TRAIN)
        self._stream: Optional[ContinuingStream] = None
        self._hook = EstimatorInputHook(self.built_in, name)
        self._closed = False
        self._finalizer = weakref.finalize(self, _shut_down, [None])

    # -- public --------------------------------------------------------------------------------
    def input_fn(self, mode: Optional[str] = None, params: Any = None, config: Any = None,
                 input_context: Any = None) -> Tuple[Any, Any]:
        """The ``input_fn`` to give ``Estimator.train/evaluate/predict`` or a ``TrainSpec``/``EvalSpec``
        (Estimator passes ``mode``; called without one it serves training). Returns
        ``(features, labels)`` built in the default graph; a second call in the same graph returns
        the same tensors. ``params`` and ``config`` are taken and not used (``TPUEstimator``, also
        with ``use_tpu=False``, requires an ``input_fn`` that takes ``params``: the batch size is
        the DataFlow's)."""
        if input_context is not None:
            raise NotImplementedError(
                "{}: Estimator with a distribution strategy asks input_fn for a tf.data.Dataset per replica; "
                "EstimatorInput builds queue and staging ops instead. Build the model's towers in model_fn (split "
                "the batch), or give the strategy TFDatasetInput.dataflow_to_dataset(df) (see docs/estimator.md)"
                .format(self.name))
        if self._closed:
            raise InputSourceError("{}: input_fn called after close()".format(self.name))
        graph = tf.compat.v1.get_default_graph()
        built = self.built_in(graph)
        if built is None:
            built = self._build(self._fixed_role or _role_of(mode, self.name))
            self._graph, self._built = graph, built     # the graph before stays alive no longer than this
        return built.features, built.labels

    def built_in(self, graph: tf.Graph) -> Optional["_Built"]:
        """What the latest ``input_fn`` call built, if it was made in ``graph`` (else None)."""
        return self._built if graph is self._graph else None

    @property
    def hooks(self) -> List[tf.compat.v1.train.SessionRunHook]:
        """The hooks to pass with ``input_fn`` (``hooks=`` of ``train``/``evaluate``/``predict``, or
        of ``TrainSpec``/``EvalSpec``): one hook that starts, feeds and stops the source built in
        whichever graph the session runs (it does nothing in a graph without one)."""
        return [self._hook]

    @property
    def source(self) -> Optional[InputSource]:
        """The InputSource built by the latest ``input_fn`` call (its ``stats``, ``size()``), or None."""
        return None if self._built is None else self._built.source

    @property
    def role(self) -> Optional[str]:
        """``"train"`` (a stream that continues) or ``"eval"`` (a pass per call) once ``input_fn`` ran."""
        return self._role

    def close(self) -> None:
        """Stop the reader thread and close the DataFlow (its workers, sockets). Idempotent."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> "EstimatorInput":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- building ------------------------------------------------------------------------------
    def _build(self, role: str) -> _Built:
        source, stream = self._graph_source(role)
        source.setup(self._specs)
        with on_host():
            started = tf.compat.v1.Variable(False, trainable=False, name="{}_hooks_started".format(self.name),
                                            collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
            mark = started.assign(True, read_value=False)
            check = tf.debugging.Assert(started, [
                "{}: its hooks did not run in this session, so nothing feeds the input. Pass hooks={}.hooks "
                "with the input_fn (Estimator.train/evaluate/predict, TrainSpec, EvalSpec)".format(
                    self.name, self.name)], name="hooks_started_check")
        with tf.control_dependencies([check]):
            tensors = source.get_input_tensors()
        position = source._input_position()
        if stream is not None and position is not None:
            stream.window = position._window + 2 * stream.unit + 2
        by_name = dict(zip([s.name for s in self._specs], tensors))
        features = _pick(by_name, self._feature_names, self._features_single)
        labels = _pick(by_name, self._label_names, self._labels_single) if self._label_names else None
        return _Built(source, features, labels, mark, stream)

    def _graph_source(self, role: str) -> Tuple[InputSource, Optional[ContinuingStream]]:
        """A new source for this graph over the stream made for ``role`` (and the stream)."""
        plan = self._plan
        if plan.make_source is not None:
            made = plan.make_source()
            if isinstance(made, tf.data.Dataset):
                made = TFDatasetInput(made)
            if not isinstance(made, InputSource):
                raise ArgumentKindError("{}: the function given as data returned {!r}, not an InputSource or a "
                                        "tf.data.Dataset".format(self.name, made))
            return _staged(made, plan), None
        stream = self._stream_for(role)
        queue: QueueInput
        if plan.queue_class is BatchQueueInput:
            queue = BatchQueueInput(stream, plan.batch_size or 1, infinite=role == _TRAIN,
                                    track_state=None if role == _TRAIN else False, gil_switch_interval=None)
        else:
            queue = QueueInput(stream, infinite=role == _TRAIN, track_state=None if role == _TRAIN else False,
                               gil_switch_interval=None)
        queue.name = queue._position.owner = self.name
        # the stream reads ahead itself: a queue as deep as its read-ahead keeps the batches held
        # twice (queued, and kept by the stream until consumed) few
        queue.default_capacity = self.read_ahead * (plan.batch_size or 1)
        queue._position.continuing = role == _TRAIN
        queue._position.checkpointed = role == _TRAIN
        return _staged(queue, plan), stream

    def _stream_for(self, role: str) -> ContinuingStream:
        with self._lock:
            if self._role is not None and self._role != role:
                raise InputSourceError(
                    "{}: it serves {} (a stream that {}), and input_fn was now called for {}; make one EstimatorInput "
                    "for training data and another one for evaluation data".format(
                        self.name, _ROLE_TEXT[self._role][0], _ROLE_TEXT[self._role][1], _ROLE_TEXT[role][0]))
            if self._role is None:
                plan = self._plan
                if role != _TRAIN and plan.endless:
                    raise InputSourceError("{}: {} has no passes to evaluate on; a socket's stream serves training "
                                           "only".format(self.name, plan.feed.name if plan.feed else "the data"))
                endless = _endless_stage(plan.feed.flow()) if plan.feed is not None else None
                if role != _TRAIN and endless is not None:
                    raise InputSourceError(
                        "{}: evaluation reads one whole pass per call, but {} (strict=False) streams without end, as "
                        "in tensorpack; give it strict=True".format(self.name, type(endless).__name__))
                assert plan.feed is not None
                unit = plan.batch_size or 1
                self._stream = ContinuingStream(plan.feed, "continue" if role == _TRAIN else "passes",
                                                capacity=self.read_ahead * unit, unit=unit, track=role == _TRAIN)
                if role == _TRAIN and not self._stream.track:
                    logger.warning("%s: %s; the training data continues across calls in this process, but after a "
                                   "restart it starts over", self.name, _not_resumable_text(plan.feed))
                if isinstance(plan.feed, ZMQStreamFeed):
                    plan.feed.specs = self._specs
                self._finalizer.detach()
                self._finalizer = weakref.finalize(self, _shut_down, [self._stream])
                self._role = role
            assert self._stream is not None
            return self._stream


_ROLE_TEXT = {_TRAIN: ("training", "continues from call to call"),
              _EVAL: ("evaluation or prediction", "is read once per call")}


def _endless_stage(flow: Any) -> Any:
    """A parallel map in the chain ending at ``flow`` whose iterator never ends (``strict=False``)."""
    todo, seen = [flow], set()
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if getattr(current, "strict", None) is False:
            return current
        state = getattr(current, "__dict__", {})
        todo.append(state.get("ds"))
        todo.extend(entry[0] if isinstance(entry, tuple) and entry else entry for entry in state.get("df_lists") or ())
    return None


def _not_resumable_text(feed: StreamFeed) -> str:
    try:
        feed.check_resumable()
    except NotResumableError as err:
        return str(err)
    return "its position is not tracked"


def _shut_down(streams: List[Optional[ContinuingStream]]) -> None:
    for stream in streams:
        if stream is not None:
            stream.shutdown()


def _role_of(mode: Optional[str], owner: str) -> str:
    if mode is None or mode == _TRAIN:
        return _TRAIN
    if mode in (_EVAL, _PREDICT):
        return _EVAL
    raise ValueError("{}: unknown Estimator mode {!r} (expected 'train', 'eval' or 'infer')".format(owner, mode))


def _names(owner: str, what: str, value: NameList, names: List[str]) -> Tuple[List[str], bool]:
    """``value`` as a list of signature names, and whether it was one name (a tensor, not a dict)."""
    if value is None:
        return [], False
    single = isinstance(value, str)
    chosen = [value] if isinstance(value, str) else list(value)
    unknown = [n for n in chosen if n not in names]
    if unknown or not all(isinstance(n, str) for n in chosen):
        raise ValueError("{}: {} names {}, but the signature has {}".format(owner, what, unknown or chosen, names))
    return chosen, single


def _pick(by_name: Dict[str, tf.Tensor], names: List[str], single: bool) -> Any:
    if single:
        return by_name[names[0]]
    return {n: by_name[n] for n in names}


def _staged(source: InputSource, plan: _Plan) -> InputSource:
    if plan.nr_stage == 0:
        return source
    return StagingInput(source, nr_stage=plan.nr_stage, device=plan.device or default_staging_device())


def _plan_for(data: Any, owner: str, nr_stage: int, device: Optional[str]) -> _Plan:
    """How ``data`` (see :class:`EstimatorInput`) is rebuilt in each graph."""
    if isinstance(data, StagingInput):
        inner = _plan_for(data._input, owner, nr_stage, device)
        inner.nr_stage, inner.device = data.nr_stage, data._device
        return inner
    if isinstance(data, InputSource) and data.setup_done():
        raise InputSourceError("{}: the {} given was set up already (in another graph); give it before setup(): "
                               "it is rebuilt in every graph Estimator makes".format(owner, data.name))
    if isinstance(data, ZMQInput):
        return _Plan(ZMQStreamFeed(data, owner), nr_stage=nr_stage, device=device, endless=True)
    if type(data) in (QueueInput, BatchQueueInput):
        if data._worker_feed is not None:
            feed: StreamFeed = WorkerStreamFeed(data._worker_feed, owner)
        else:
            feed = FlowFeed(data.ds, owner, switch_interval=data.gil_switch_interval)
        return _Plan(feed, type(data), getattr(data, "batch_size", None), nr_stage, device)
    if isinstance(data, TFDatasetInput):
        if data._dataflow is None:
            raise InputSourceError(
                "{}: a TFDatasetInput of a tf.data.Dataset belongs to the graph the dataset was built in, and "
                "Estimator builds a new graph for every call; pass a function that builds the dataset (it is called "
                "in each graph), or the DataFlow itself".format(owner))
        return _Plan(FlowFeed(data._dataflow, owner), nr_stage=nr_stage, device=device)
    if isinstance(data, InputSource):
        raise InputSourceError(
            "{}: cannot rebuild a {} in each graph Estimator makes; pass its DataFlow, or a function that returns "
            "a new InputSource (called in each graph)".format(owner, type(data).__name__))
    if is_dataflow(data):
        return _Plan(FlowFeed(data, owner, switch_interval=DEFAULT_GIL_SWITCH_INTERVAL),
                     nr_stage=nr_stage, device=device)
    if callable(data):
        return _Plan(None, nr_stage=nr_stage, device=device, make_source=data)
    raise ArgumentKindError("{}: data must be a DataFlow, an InputSource or a function returning one (or a "
                            "tf.data.Dataset), got {!r}".format(owner, data))
