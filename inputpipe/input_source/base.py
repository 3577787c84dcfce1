"""The InputSource contract and the hook that drives every source in any TF1 training loop.

An InputSource moves data into the graph. ``setup(input_signature)`` builds its ops,
``get_input_tensors()`` returns tensors matching the signature (call it once per tower),
``get_hooks()`` returns the ``SessionRunHook``\\ s that start, feed, stage, measure and stop
everything, so it works in a ``MonitoredTrainingSession`` or, through
:func:`inputpipe.input_source.session.hooked_session`, a plain ``tf.compat.v1.Session``.

Example::

    source = QueueInput(df)
    source.setup([tf.TensorSpec([None, 28, 28], tf.float32, "image"),
                  tf.TensorSpec([None], tf.int32, "label")])
    image, label = source.get_input_tensors()
    ...
    with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
        sess.run(train_op)
"""
import contextlib
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

from ..dataflow.base import NotResumableError
from ..utils.logger import get_logger
from .callback_hooks import CallbackHook, callbacks_as_hooks
from .dependency import FetchDependencies
from .errors import InputSourceError, cleanup_after, failure_error
from .placement import on_host
from .session import hooked_session
from .signature import normalize_signature
from .stats import InputStats, dataflow_in_process
from .tensorpack_trainer import trainer_callbacks

__all__ = ["InputSource", "FeedfreeInput", "InputSourceHook", "InputStepHook", "Tower", "timed_input"]

logger = get_logger(__name__)


class Tower:
    """What one ``get_input_tensors()`` call built: the returned ``tensors``, the ``consume_op``
    (or list of ops) whose execution means "this step takes a batch", per-step ``run_ops`` to add to consuming
    steps (e.g. a stage op), ``stat_tensors`` to fetch with them (e.g. ``{"wait": seconds}``),
    an optional ``feed_fn`` giving the feed_dict of a consuming step, and, for a tower built for
    staging, an optional ``real`` bool tensor: False when the tensors are filler read after the
    end of the data (see :meth:`InputSource._read_for_staging`), with an optional string
    ``problem`` tensor: non-empty when the element read was bad (then ``real`` is False and the
    tensors are filler), saying why. ``seq``: for a tower built for staging by a source that
    tracks its input position, the int64 tensor numbering the batch read (the wrapper records it
    when a step consumes the batch, see :mod:`~inputpipe.input_source.position`).

    Example::

        Tower(tensors=outs, consume_op=dequeue_op, stat_tensors={"wait": t1 - t0})
    """

    def __init__(self, tensors: List[tf.Tensor], consume_op: Any,
                 run_ops: Sequence[Any] = (), stat_tensors: Optional[Dict[str, tf.Tensor]] = None,
                 feed_fn: Optional[Callable[[], Dict[Any, Any]]] = None, real: Optional[tf.Tensor] = None,
                 problem: Optional[tf.Tensor] = None, seq: Optional[tf.Tensor] = None):
        self.tensors = tensors
        if consume_op is None:
            consume_op = []
        self.consume_ops = list(consume_op) if isinstance(consume_op, (list, tuple)) else [consume_op]
        self.run_ops = list(run_ops)
        self.stat_tensors = dict(stat_tensors or {})
        self.feed_fn = feed_fn
        self.real = real
        self.problem = problem
        self.seq = seq


def timed_input(make_outputs: Callable[[], Any]):
    """Build ``make_outputs()`` between two ``tf.timestamp`` ops; returns ``(outputs, wait)``
    where ``wait`` is the number of seconds the producing op blocked in the step. Everything is
    placed on the host (CPU) of the current device scope: timestamps and the producing ops
    (dequeues, iterators) have no GPU kernels."""
    with on_host():
        start = tf.timestamp(name="input_wait_start")
        with tf.control_dependencies([start]):
            outputs = make_outputs()
        flat = [t for t in tf.nest.flatten(outputs) if t is not None]
        with tf.control_dependencies([t.op for t in flat]):
            end = tf.timestamp(name="input_wait_end")
        return outputs, tf.subtract(end, start, name="input_wait_seconds")


# What a tensorpack QueueInput subclass reads of its base (tensorpack 0.11's feeding machinery).
_TENSORPACK_QUEUE_INTERNALS = frozenset(["_inf_ds", "_input_placehdrs", "thread", "refill_queue", "_dequeue_op"])


class InputSource:
    """Base class of every InputSource (tensorpack's names and signatures).

    Subclasses implement ``_setup(specs)`` and ``_build_tower()`` (returning a :class:`Tower`),
    and, if they run something in the session, ``_start(session, coord)`` and ``_stop(session)``.

    Example::

        class Ones(InputSource):
            def _setup(self, specs):
                self.specs = specs

            def _build_tower(self):
                ones = [tf.ones(s.shape, s.dtype, name=s.name) for s in self.specs]
                return Tower(ones, consume_op=None)

    A subclass written for tensorpack 0.11 runs unchanged: it implements ``_get_input_tensors()``
    instead of ``_build_tower()`` (its tensors become the tower), may skip ``super().__init__()``,
    and may use ``_setup(inputs)``, ``_size()``, ``_reset_state()`` (run when the session starts,
    with it as the default session), ``_get_callbacks()`` (SessionRunHooks, or tensorpack callbacks
    that do what a hook does: see :mod:`~inputpipe.input_source.callback_hooks`),
    ``cached_name_scope()``, ``self._setup_done`` and ``get_callbacks()``.

    See ``examples/custom_input_source.py`` for a complete, runnable one of each protocol.
    """

    # defaults for subclasses written for tensorpack, which do not call super().__init__()
    _specs: Optional[List[tf.TensorSpec]] = None
    _hooks: Optional[List[tf.compat.v1.train.SessionRunHook]] = None
    _callback_hooks: Optional[List[tf.compat.v1.train.SessionRunHook]] = None
    _closed = False
    _failure: Optional[BaseException] = None
    _staged_reads = False
    _setup_done = False
    _name_scope: Optional[str] = None

    def __init__(self):
        self._specs = None
        self._towers: List[Tower] = []
        self._hooks = None
        self._closed = False
        self._failure = None
        self._failure_lock = threading.Lock()
        self._staged_reads = False
        self.stats = InputStats(self.name)

    def __getattr__(self, attribute: str) -> Any:
        """The base attributes a subclass that skipped ``super().__init__()`` has not made yet."""
        if attribute == "_towers":
            value: Any = []
        elif attribute == "_failure_lock":
            value = threading.Lock()
        elif attribute == "stats":
            value = InputStats(self.name)
        elif attribute in _TENSORPACK_QUEUE_INTERNALS:
            raise AttributeError(
                "{!r} object has no attribute {!r}: tensorpack's QueueInput internals ({}) do not exist in inputpipe, "
                "whose QueueInput feeds its queue itself. To size the queue pass QueueInput(ds, queue=...) or set "
                "QueueInput.default_capacity; to write your own source see docs/input_source.md, "
                "\"tensorpack's protocol\"".format(type(self).__name__, attribute,
                                                     ", ".join(sorted(_TENSORPACK_QUEUE_INTERNALS))))
        else:
            raise AttributeError("{!r} object has no attribute {!r}".format(type(self).__name__, attribute))
        self.__dict__[attribute] = value
        return value

    # -- public API (tensorpack) -------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.__dict__.get("_name") or type(self).__name__

    @name.setter
    def name(self, value: str) -> None:
        self.__dict__["_name"] = value
        self.stats.owner = value

    def setup(self, input_signature: Sequence[tf.TensorSpec]) -> List[tf.compat.v1.train.SessionRunHook]:
        """Build the source's ops for ``input_signature`` (named ``tf.TensorSpec``\\ s) in the
        default graph. Returns ``get_callbacks()``."""
        if self._specs is not None:
            raise RuntimeError("{}.setup() was already called".format(self.name))
        if tf.executing_eagerly():
            raise RuntimeError(
                "{}.setup() builds graph ops, but TensorFlow is executing eagerly; build the model in graph "
                "mode: call tf.compat.v1.disable_eager_execution() at start, or build inside "
                "`with tf.Graph().as_default():`".format(self.name))
        specs = normalize_signature(input_signature, self.name)
        self._graph = tf.compat.v1.get_default_graph()
        self._caller_scope = self._graph.get_name_scope()
        self._specs = specs
        if self._tensorpack_protocol() or not self._scoped_setup():  # as tensorpack: cached_name_scope() is the scope
            self._setup(specs)
        else:
            with self.cached_name_scope():     # the scope made here is the one cached_name_scope() re-enters
                self._setup(specs)
        self._setup_done = True
        return self.get_callbacks()

    def setup_done(self) -> bool:
        return self._specs is not None

    @property
    def input_signature(self) -> List[tf.TensorSpec]:
        return list(self._require_setup())

    def get_input_tensors(self) -> List[tf.Tensor]:
        """Tensors matching the input signature, built in the current device and name scope.
        Call it once per tower; every call makes a new, independent consumer."""
        specs = self._require_setup()
        if tf.compat.v1.get_default_graph() is not self._graph:
            raise RuntimeError("{}.get_input_tensors(): call it in the graph setup() ran in".format(self.name))
        if self._tensorpack_protocol():
            tower = self._build_tower()
        else:
            with tf.name_scope("{}_tower{}".format(self.name, len(self._towers))):
                tower = self._build_tower()
        for spec, tensor in zip(specs, tower.tensors):
            if tensor.dtype != spec.dtype:
                raise InputSourceError("{}: tensor for {!r} has dtype {}, expected {}".format(
                    self.name, spec.name, tensor.dtype.name, spec.dtype.name))
        self._towers.append(tower)
        return list(tower.tensors)

    def get_hooks(self) -> List[tf.compat.v1.train.SessionRunHook]:
        """The ``SessionRunHook``\\ s this source needs (always the same list for one source)."""
        self._require_setup()
        if self._hooks is None:
            self._hooks = self._lifecycle_hooks() + [InputStepHook(self)]
        return list(self._hooks)

    def get_callbacks(self) -> List[tf.compat.v1.train.SessionRunHook]:
        """:meth:`get_hooks`; once tensorpack is imported, the same hooks as objects that are
        tensorpack ``Callback``\\ s too, for its trainer (see
        :mod:`~inputpipe.input_source.tensorpack_trainer`)."""
        return trainer_callbacks(self, self.get_hooks())

    def reset_state(self) -> None:
        """Prepare the data for iteration (e.g. ``DataFlow.reset_state()``); calls
        ``_reset_state()`` (tensorpack's protocol)."""
        self._reset_state()

    def size(self) -> int:
        """Number of batches per epoch (``_size()``); raises ``NotImplementedError`` when unknown."""
        return self._size()

    @contextlib.contextmanager
    def cached_name_scope(self) -> Iterator[str]:
        """tensorpack's: enter the same name scope (the source's name, made at the first call) on
        every call, wherever it is called from.

        Example::

            with self.cached_name_scope():
                self.queue = tf.compat.v1.FIFOQueue(50, dtypes, name="input_queue")
        """
        if self._name_scope:
            with tf.compat.v1.name_scope(self._name_scope):
                yield self._name_scope
        else:
            with tf.compat.v1.name_scope(self.name) as scope:
                self._name_scope = scope
                yield scope

    def get_state(self, session: Optional[tf.compat.v1.Session] = None) -> Optional[Dict[str, Any]]:
        """The state of the source's DataFlow after the last datapoint the training steps consumed
        in ``session`` (default: the session the source runs in), or None when no step consumed
        one yet in it (then the position is where the session started). Checkpoints save it
        without this call (see ``docs/resuming.md``); raises ``NotResumableError`` for a source
        that does not track a DataFlow position."""
        return self._require_position().consumed_state(session or self._running_session())

    def set_state(self, state: Dict[str, Any]) -> None:
        """Continue the DataFlow from ``state`` (a :meth:`get_state` value) when the source
        starts in its next session, instead of at the beginning. Raises ``NotResumableError``
        when the source has no DataFlow position or its DataFlow chain is not resumable."""
        self._require_position().pending(state)

    def close(self) -> None:
        """Stop every thread the source started and close its DataFlow (which stops the DataFlow's
        worker processes and threads). Idempotent. The end of a session (leaving
        :meth:`session`, the end of a ``MonitoredSession``) does the same."""
        if self._closed:
            return
        self._closed = True
        try:
            self._stop(None)
        finally:
            try:
                for hook in self._callback_hooks or []:
                    if isinstance(hook, CallbackHook):
                        hook.finish()             # a session that raised did not end them
            finally:
                self._close_data()

    def session(self, session: tf.compat.v1.Session) -> "Any":
        """A context manager running this source's hooks around a plain ``tf.compat.v1.Session``.

        Example::

            with tf.compat.v1.Session(graph=g) as sess, source.session(sess) as run:
                run(train_op)
        """
        return hooked_session(session, self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- for subclasses ------------------------------------------------------------------------
    def _scoped_setup(self) -> bool:
        """Whether ``_setup`` runs in a name scope of the source's name (inputpipe's protocol)."""
        return True

    def _setup_wrapped(self, inner: "InputSource", specs: List[tf.TensorSpec]) -> None:
        """Set up the source ``inner`` that this wrapper reads: one of tensorpack's protocol in the
        name scope this wrapper's ``setup()`` was called in (as tensorpack's wrappers do), one of
        inputpipe's inside this wrapper's scope (where its checkpointed variables have always been)."""
        if not inner._tensorpack_protocol():
            inner.setup(specs)
            return
        with tf.compat.v1.name_scope(self._caller_scope + "/" if self._caller_scope else None):
            inner.setup(specs)

    def _input_position(self) -> Optional[Any]:
        """The :class:`~inputpipe.input_source.position.InputPosition` of the DataFlow this source
        reads, or None (wrappers return the wrapped source's)."""
        return None

    def _running_session(self) -> Optional[tf.compat.v1.Session]:
        """The session the source runs in (None when not running)."""
        return getattr(self, "_session", None)

    def _require_position(self) -> Any:
        position = self._input_position()
        if position is None:
            raise NotResumableError("{} reads no DataFlow whose position it could save or restore".format(self.name))
        return position

    def _setup(self, specs: List[tf.TensorSpec]) -> None:
        pass

    def _size(self) -> int:
        raise NotImplementedError("{} has no known size".format(self.name))

    def _reset_state(self) -> None:
        pass

    def _get_callbacks(self) -> List[Any]:
        """tensorpack's protocol: what the source needs run while the session runs (see
        :mod:`~inputpipe.input_source.callback_hooks`)."""
        return []

    @classmethod
    def _tensorpack_protocol(cls) -> bool:
        """Whether the class implements ``_get_input_tensors()`` (tensorpack's protocol) rather
        than ``_build_tower()``."""
        return callable(getattr(cls, "_get_input_tensors", None)) and cls._build_tower is InputSource._build_tower

    def _build_tower(self) -> Tower:
        """This base class' version: the tensors of ``_get_input_tensors()`` (tensorpack's
        protocol) are the tower; a step consumes a batch when it runs the ops that make them."""
        make = getattr(self, "_get_input_tensors", None)
        if make is None:
            raise NotImplementedError("{} implements neither _build_tower() (inputpipe's protocol) nor "
                                      "_get_input_tensors() (tensorpack's)".format(type(self).__name__))
        returned = make()
        tensors = [returned] if isinstance(returned, tf.Tensor) else list(returned)
        specs = self._require_setup()
        if len(tensors) != len(specs):
            raise InputSourceError("{}._get_input_tensors() returned {} tensors, the input signature has {} ({})".format(
                type(self).__name__, len(tensors), len(specs), ", ".join(s.name for s in specs)))
        consume = list(dict.fromkeys(t.op for t in tensors))
        return Tower(tensors, consume_op=consume)

    def _lifecycle_hooks(self) -> List[tf.compat.v1.train.SessionRunHook]:
        """Hooks that start/stop the source, and those its ``_get_callbacks()`` asks for (made
        once), but not its per-step statistics (used by wrappers)."""
        if self._callback_hooks is None:
            self._callback_hooks = callbacks_as_hooks(type(self).__name__, self._get_callbacks())
        return [InputSourceHook(self)] + list(self._callback_hooks)

    def _start(self, session: tf.compat.v1.Session, coord: Any) -> None:
        """This base class' version runs ``reset_state()`` with ``session`` as the default
        session for a source of tensorpack's protocol (as tensorpack's trainer does before
        training); a source of inputpipe's protocol does what it needs here itself."""
        if self._tensorpack_protocol():
            with session.as_default():
                self.reset_state()

    def _stop(self, session: Optional[tf.compat.v1.Session]) -> None:
        pass

    def _close_data(self) -> None:
        """Close what the source reads from (e.g. its DataFlow chain, see
        :func:`~inputpipe.input_source._iteration.close_dataflow`); called after ``_stop``."""

    def _raise_failure_before_step(self) -> None:
        """Called before every step: raise a background failure that must stop training now.
        Wrappers that still hold good batches read before the failure defer it (StagingInput)."""
        self.raise_if_failed()

    def _last_tower(self) -> Tower:
        """The :class:`Tower` of the latest ``get_input_tensors()`` call (wrappers delegate)."""
        return self._towers[-1]

    def _read_for_staging(self) -> None:
        """Called by :class:`StagingInput` before it builds towers: they will be read one step
        ahead of use. A source that learns of the end of its data only by trying to read
        (tf.data) then builds towers that never fail at the end: past the end they give filler
        and a ``real`` tensor that is False, so no staged batch is lost with a failing step.
        Wrappers pass it on to the source they wrap."""
        self._staged_reads = True

    def _source_stat_tensors(self) -> Dict[str, tf.Tensor]:
        """Tensors fetched with every consuming step, e.g. ``{"queue_size": queue.size()}``."""
        return {}

    def _feed_sample(self) -> Optional[Tuple[int, float, float, float]]:
        """The feeding thread's cumulative ``(delivered, dataflow_cpu_s, dataflow_wall_s,
        feed_cpu_s)`` (see :class:`~inputpipe.input_source.feeder.EnqueueThread`), or None for a
        source without one. Read after every consuming step by the statistics."""
        return None

    def _datapoints_per_batch(self) -> int:
        """DataFlow datapoints one tower takes per step (``BatchQueueInput``: ``batch_size``)."""
        return 1

    def _in_worker_advice(self) -> Optional[str]:
        """The same source with its DataFlow run outside the training process (e.g.
        ``"QueueInput(df, in_worker=True)"``), for the statistics' GIL warning; None when there
        is no such setup or the DataFlow already runs elsewhere."""
        return None

    def _claim_batch(self, timeout: float) -> Optional[bool]:
        """Reserve the next batch for a run of this source's producing op (used by wrappers that
        must not start a run whose producing op could fail at the end of the data, e.g.
        :class:`StagingInput`). True: the op will get a batch (it is queued or will surely come);
        False: the data has ended, the op would raise ``OutOfRangeError``; None: not known
        within ``timeout`` seconds (ask again). Sources without an end of data return True."""
        return True

    def _step_plan(self, indices: List[int]) -> List[Tuple[List[Any], Dict[str, tf.Tensor], Optional[Callable[[], Dict[Any, Any]]]]]:
        """What a step consuming towers ``indices`` adds, per tower: ``(run_ops, stat_tensors,
        feed_fn)``. May raise ``tf.errors.OutOfRangeError`` to end the data before the run."""
        return [(self._towers[i].run_ops, self._towers[i].stat_tensors, self._towers[i].feed_fn) for i in indices]

    def _step_done(self, run_results: List[Any]) -> None:
        """The consuming step planned last (:meth:`_step_plan`) ran successfully; ``run_results``
        are the values of the planned ``run_ops``, in plan order."""

    def _step_failed(self, session: tf.compat.v1.Session) -> None:
        """The consuming step planned last raised instead of finishing: resynchronise any state
        kept in Python about it (``session`` is free to run)."""

    def _set_failure(self, err: BaseException) -> None:
        """Record a background failure (first one wins), as an InputSourceError naming this source."""
        if not isinstance(err, InputSourceError):
            err = failure_error("{}: {}: {} (raised while preparing input in a background thread)".format(
                self.name, type(err).__name__, err), err)
        with self._failure_lock:
            if self._failure is None:
                self._failure = err

    def failure(self) -> Optional[BaseException]:
        """The error that stopped this source's data (from any background thread), or None."""
        return self._failure

    def raise_if_failed(self) -> None:
        """Raise the source's background failure in the calling (training) thread, as an
        :class:`InputSourceError` that is also of the original exception's type (see
        :func:`~inputpipe.input_source.errors.failure_error`)."""
        err = self.failure()
        if err is None:
            return
        cause = err.__cause__ or err
        raise failure_error(str(err), cause) from cause

    def _require_setup(self) -> List[tf.TensorSpec]:
        """The input signature; a RuntimeError before ``setup()``."""
        if self._specs is None:
            raise RuntimeError("{}: call setup(input_signature) first".format(self.name))
        return self._specs


class FeedfreeInput(InputSource):
    """Base class of the sources whose tensors need no ``feed_dict`` (tensorpack's name): the
    data comes from ops in the graph (a queue, a staging area, a ``tf.data`` iterator, tensors).
    :class:`QueueInput`, :class:`StagingInput`, :class:`TFDatasetInput`, :class:`TensorInput`,
    :class:`DummyConstantInput` and :class:`ZMQInput` are instances of it.

    Example::

        if isinstance(source, FeedfreeInput):
            source = StagingInput(source)
    """


class InputSourceHook(tf.compat.v1.train.SessionRunHook):
    """Starts an InputSource when the session is created and stops it at the end.

    Example::

        hooks = source.get_hooks()      # these plus an InputStepHook, for MonitoredTrainingSession
    """

    def __init__(self, source: InputSource):
        self.source = source

    def after_create_session(self, session, coord) -> None:
        self.source._closed = False
        try:
            self.source._start(session, coord)
        except BaseException as err:
            # the session will not run (an error, or Ctrl-C while StagingInput prefills): whoever
            # created it may not end the hooks, so stop what the source started now; what goes
            # wrong while stopping is logged, and the error that stopped the session is raised
            cleanup_after(err, self.source.name, self.source.close)
            raise

    def end(self, session) -> None:
        try:
            self.source._stop(session)
        finally:
            self.source._close_data()


class InputStepHook(tf.compat.v1.train.SessionRunHook):
    """Adds an InputSource's per-step work (feeds, stage ops, statistics) to the steps that
    consume its tensors, inside the training step's own run; raises the source's background
    failure in the training thread.

    Example::

        hook = InputStepHook(source)     # the last of source.get_hooks()
    """

    def __init__(self, source: InputSource):
        self.source = source
        self._deps: Optional[FetchDependencies] = None
        #: Of the consuming run in progress: (start, seconds waited before it, stat names, waits, datapoints).
        self._step: Optional[Tuple[float, float, List[str], int, int]] = None

    def begin(self) -> None:
        self._deps = FetchDependencies(self.source._graph)
        self.source.stats.configure(advice=self.source._in_worker_advice())
        self.source.stats.watch_workers(dataflow_in_process(self.source))
        self._per_batch = self.source._datapoints_per_batch()
        with self.source._graph.as_default():
            scalars = [s for s in InputStats.SCALARS if s != "queue_size" or s in self.source._source_stat_tensors()]
            self.source.stats.build_summaries(self.source.name, scalars)

    def before_run(self, run_context):
        source = self.source
        if self._step is not None:        # the previous consuming run raised: after_run never came
            self._step = None
            source._step_failed(run_context.session)
        source._raise_failure_before_step()
        args = run_context.original_args
        assert self._deps is not None       # begin() comes before every run
        executed = self._deps.executed_ops(args.fetches, args.feed_dict)
        consumed = [i for i, t in enumerate(source._towers) if any(op in executed for op in t.consume_ops)]
        if not consumed:
            return None
        start = time.perf_counter()
        feeds = {}
        # one flat list (TF builds a fetch mapper per nested item on every run): the source's
        # statistics, each tower's wait time, then the ops to run
        source_stats = source._source_stat_tensors()
        waits, run_ops = [], []
        for ops, stat_tensors, feed_fn in source._step_plan(consumed):
            if feed_fn is not None:
                feeds.update(feed_fn())
            run_ops.extend(ops)
            if "wait" in stat_tensors:
                waits.append(stat_tensors["wait"])
        fetches = list(source_stats.values()) + waits + run_ops
        # the time spent here (preparing feeds, waiting for a batch to be sure) is input wait
        self._step = (start, time.perf_counter() - start, list(source_stats), len(waits),
                      len(consumed) * self._per_batch)
        return tf.compat.v1.train.SessionRunArgs(fetches, feed_dict=feeds or None)

    def after_run(self, run_context, run_values) -> None:
        if self._step is None:
            return
        start, python_wait, stat_names, wait_count, datapoints = self._step
        self._step = None
        results = run_values.results
        self.source._step_done(results[len(stat_names) + wait_count:])
        source_stats = dict(zip(stat_names, results))
        waits = results[len(stat_names):len(stat_names) + wait_count]
        wait = python_wait + (max(waits) if waits else 0.0)
        self.source.stats.record(wait, time.perf_counter() - start, source_stats.get("queue_size"),
                                 datapoints=datapoints, feed=self.source._feed_sample())

    def end(self, session) -> None:
        self.source.raise_if_failed()
