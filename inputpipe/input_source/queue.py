"""Queue sources: a background thread feeds a CPU ``FIFOQueue``; training dequeues.

:class:`QueueInput` enqueues whole batches (datapoints that are batches already);
:class:`BatchQueueInput` enqueues single datapoints and dequeues ``batch_size`` of them.

Example::

    source = QueueInput(BatchData(df, 32))
    source.setup([tf.TensorSpec([None, 28, 28], tf.float32, "image"),
                  tf.TensorSpec([None], tf.int32, "label")])
    image, label = source.get_input_tensors()
"""
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from ..dataflow.base import get_length
from ..utils.arguments import require_dataflow
from ..utils.compat import shape_text
from ..utils.concurrency import POLL_INTERVAL
from ..utils.logger import get_logger
from .base import FeedfreeInput, Tower, timed_input
from .errors import InputSourceError, cleanup_after
from .feeder import EnqueueThread
from ._iteration import close_dataflow, iterate_datapoints
from .placement import on_host
from .position import InputPosition
from .realign import RealigningEnqueue
from .signature import DatapointConverter
from .worker_feed import WorkerFeed

__all__ = ["QueueInput", "BatchQueueInput"]

logger = get_logger(__name__)

_STOP_TIMEOUT = 2.0
#: Seconds the feeding thread of an ``in_worker`` source gets to stop before its worker is stopped.
_WORKER_STOP_GRACE = 0.3
#: The GIL switch interval (seconds) while a DataFlow runs in the training process (Python's is 0.005).
DEFAULT_GIL_SWITCH_INTERVAL = 0.001


def _named_like_tensorpack(tensors: List[tf.Tensor], source: "QueueInput", after: List[tf.Operation]) -> List[tf.Tensor]:
    """The dequeued tensors as the outputs of one ``IdentityN`` op named ``input_deque`` in the
    scope the source's ``setup()`` made (``QueueInput/input_deque:0``, ...: tensorpack's names for
    the tensors the model reads, which code that restores the graph feeds by name), run after
    ``after`` (the input position's record)."""
    with tf.control_dependencies(after), source.cached_name_scope():
        named = tf.identity_n(tensors, name="input_deque")
    for out, tensor in zip(named, tensors):
        out.set_shape(tensor.shape)
    return list(named)


class QueueInput(FeedfreeInput):
    """Prepare data in a background thread: iterate ``ds`` and enqueue each datapoint into
    ``queue`` (default: a ``FIFOQueue`` of capacity 50 on the CPU) in the training session;
    each tower dequeues one datapoint per step.

    ``infinite=True`` (default, as in tensorpack) starts a new epoch whenever ``ds`` ends; with
    ``infinite=False`` the end of ``ds`` closes the queue and training gets a clean
    ``tf.errors.OutOfRangeError`` after the last datapoint.

    ``in_worker=True`` (recommended whenever the DataFlow does real work in Python) runs ``ds``
    in one worker process instead of the training process, so its Python never competes with
    the train step for the GIL: the feeding thread only receives each datapoint (large arrays
    through shared memory, without a copy) and enqueues it. One worker runs the whole flow: the
    same datapoints in the same order and the same epochs as in the training process. A worker
    that raises or dies fails the training step with a ``WorkerError`` carrying the worker's
    traceback; ``close()`` and the end of the session stop the worker. The datapoints must be
    what :mod:`inputpipe.utils.serialize` carries (numbers, strings, bytes, numpy arrays, lists,
    tuples, dicts). ``source.stats`` shows how much Python the DataFlow ran in the training
    process per step, and its input-bound warning says when to switch.

    ``gil_switch_interval`` (seconds; None leaves it alone): while the feeding thread runs ``ds``
    in the training process, the interpreter's GIL switch interval (``sys.setswitchinterval``)
    is at most this, and the previous value comes back when the thread ends. A DataFlow that
    holds the GIL then delays each of the step's GIL acquisitions (returning from
    ``session.run``, a ``tf.numpy_function``) by up to 1 ms instead of Python's 5 ms; with
    ``in_worker=True`` nothing is changed.

    The position of the DataFlow is saved with every TF checkpoint and restored with it (see
    ``docs/resuming.md``): the feeding thread asks the DataFlow for its state after each datapoint,
    numbers the datapoint (one more int64 component in the queue) and the step that consumes it
    records the number in the graph. A restored session continues after the last datapoint a saved
    step consumed; what was queued or staged then is produced again. ``track_state``: None (default)
    tracks when the DataFlow chain is resumable, and otherwise logs why at setup (info) and warns
    when a checkpoint is saved without the position and when one is restored; True also warns at
    setup; False never asks the DataFlow for its state. A queue passed as ``queue`` tracks the
    position when it has the signature's dtypes followed by ``tf.int64``.

    TF shares the memory of 64-byte aligned arrays instead of copying them (see
    :mod:`inputpipe.utils.buffers`), so the DataFlow must not modify an array in place
    after yielding it. Large unaligned arrays are copied once, by TF's intra-op threads while the
    feeding thread waits without holding the GIL (see :mod:`inputpipe.input_source.realign`).

    Example::

        source = QueueInput(df, in_worker=True)
        source.setup(specs)
        x, y = source.get_input_tensors()
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
            for _ in range(100):
                sess.run(train_op)
    """

    default_capacity = 50

    def __init__(self, ds: Any, queue: Optional[tf.queue.QueueBase] = None, *, infinite: bool = True,
                 in_worker: bool = False, track_state: Optional[bool] = None,
                 gil_switch_interval: Optional[float] = DEFAULT_GIL_SWITCH_INTERVAL):
        super().__init__()
        self.ds = require_dataflow(ds, type(self).__name__)
        self.queue = queue
        self.infinite = infinite
        self.in_worker = bool(in_worker)
        if gil_switch_interval is not None and not gil_switch_interval > 0:
            raise ValueError("{}: gil_switch_interval must be a positive number of seconds or None, got {!r}"
                             .format(type(self).__name__, gil_switch_interval))
        self.gil_switch_interval = gil_switch_interval
        self._worker_feed = WorkerFeed(self.ds, self.name) if self.in_worker else None
        self._position = InputPosition(self.name, self.ds, state_owner=self._worker_feed, track=track_state)
        self._track_state = track_state is not False
        self._tagged = True          # the queue carries the position numbers (set up in _setup)
        self._resumed = False        # this session's DataFlow continues from a restored state
        self._thread: Optional[EnqueueThread] = None
        self._lingering: Optional[EnqueueThread] = None   # a feeding thread that did not stop in time
        self._claimed = 0            # datapoints reserved by _claim_batch() in this session
        self._dequeued = 0           # datapoints the steps of this session took (without a wrapper)
        self._planned_towers = 0     # towers the running step dequeues from
        self._session = None
        self._reset_done = False

    def reset_state(self) -> None:
        """Reset the DataFlow (``in_worker``: start its worker process, which resets it there).
        While a session's feeding thread iterates it, nothing is done, as in tensorpack (whose
        ``InferenceRunner`` calls it before every pass): the pass continues the stream."""
        if self._thread is not None:
            logger.debug("%s: reset_state() while the feeding thread runs does nothing", self.name)
            return
        if self._worker_feed is not None:
            self._worker_feed.reset_state()
        else:
            self.ds.reset_state()
        self._reset_done = True

    @property
    def worker_pids(self) -> List[int]:
        """The pid of the worker running the DataFlow (``in_worker``; empty before it starts)."""
        return [] if self._worker_feed is None else list(self._worker_feed.worker_pids)

    def size(self) -> int:
        n = get_length(self.ds)
        if n is None:
            raise NotImplementedError("{}: the DataFlow has no length".format(self.name))
        return n

    # -- graph ---------------------------------------------------------------------------------
    def _element_shapes(self, specs: List[tf.TensorSpec]) -> List[tf.TensorShape]:
        return [s.shape for s in specs]

    def _make_queue(self, specs: List[tf.TensorSpec]) -> tf.queue.QueueBase:
        return tf.queue.FIFOQueue(self.default_capacity, [s.dtype for s in specs] + [tf.int64], name="input_queue")

    def _setup(self, specs: List[tf.TensorSpec]) -> None:
        shapes = self._element_shapes(specs)
        self._convert = DatapointConverter(specs, self.name, drop_leading_dim=shapes != [s.shape for s in specs])
        with on_host():
            self._placeholders = [tf.compat.v1.placeholder(s.dtype, shape, name=s.name)
                                  for s, shape in zip(specs, shapes)]
            if self.queue is None:
                self.queue = self._make_queue(specs)
            queue = self.queue
            self._tagged = len(queue.dtypes) == len(specs) + 1
            if self._tagged:
                self._placeholders.append(tf.compat.v1.placeholder(tf.int64, [], name="position"))
            elif self._track_state:
                self._position.disable("{}: the queue given has no int64 position component after the signature's "
                                       "dtypes".format(self.name))
            self._check_queue(specs, shapes)
            self._enqueue_op = queue.enqueue(self._placeholders, name="enqueue")
            self._realign = RealigningEnqueue(queue, self._placeholders)
            self._close_op = queue.close(cancel_pending_enqueues=False, name="close")
            self._cancel_op = queue.close(cancel_pending_enqueues=True, name="close_and_cancel")
            self._size_op = queue.size(name="size")
            self._position.build(self._queue_capacity() + 2 * self._claim_unit() + 2)
            self._position.batches(self._claim_unit(), partial_last=not self.infinite)
        self._position.report()

    def _require_queue(self) -> tf.queue.QueueBase:
        """The queue: given, or made by ``setup()``."""
        if self.queue is None:
            raise RuntimeError("{}: call setup(input_signature) first".format(self.name))
        return self.queue

    def _check_queue(self, specs: List[tf.TensorSpec], shapes: List[tf.TensorShape]) -> None:
        queue = self._require_queue()
        if getattr(queue.queue_ref, "graph", None) is not tf.compat.v1.get_default_graph():
            raise InputSourceError("{}: the queue was created outside the graph being built (eagerly or in "
                                   "another tf.Graph); create it inside `with graph.as_default():`".format(self.name))
        dtypes = list(queue.dtypes)
        wanted = [s.dtype for s in specs] + ([tf.int64] if self._tagged else [])
        if dtypes != wanted:
            raise InputSourceError("{}: the queue holds dtypes {}, but the input signature {} needs {} (optionally "
                                   "followed by int64, the position)".format(
                                       self.name, [d.name for d in dtypes], [s.name for s in specs],
                                       [s.dtype.name for s in specs]))
        if queue.shapes is not None:
            for spec, want, have in zip(specs, shapes, queue.shapes):
                if not want.is_compatible_with(have):
                    raise InputSourceError("{}: the queue's shape for {!r} is {}, the signature needs {}".format(
                        self.name, spec.name, have, want))

    def _queue_capacity(self) -> int:
        """Datapoints the queue holds at most (its ``capacity`` attribute; unbounded: 10000)."""
        try:
            capacity = int(self._require_queue().queue_ref.op.get_attr("capacity"))
        except (ValueError, AttributeError):
            capacity = -1
        return capacity if capacity > 0 else 10000

    def _dequeue(self) -> List[tf.Tensor]:
        return tf.nest.flatten(self._require_queue().dequeue(name="dequeue"))

    def _build_tower(self) -> Tower:
        outputs, wait = timed_input(self._dequeue)
        seq = outputs.pop() if self._tagged else None
        for tensor, spec in zip(outputs, self._require_setup()):
            tensor.set_shape(spec.shape)
        consume_op = outputs[0].op
        if not self._staged_reads:
            record = [self._position.record_op(seq)] if seq is not None and self._position.records else []
            outputs = _named_like_tensorpack(outputs, self, record)
        return Tower(outputs, consume_op=consume_op, stat_tensors={"wait": wait},
                     seq=seq if self._staged_reads else None)

    def _input_position(self) -> Optional[InputPosition]:
        return self._position

    def _source_stat_tensors(self) -> Dict[str, tf.Tensor]:
        return {"queue_size": self._size_op}

    def _claim_unit(self) -> int:
        """Datapoints one dequeue takes while the queue is open."""
        return 1

    def _datapoints_per_batch(self) -> int:
        return self._claim_unit()

    def _raise_failure_before_step(self) -> None:
        """After the DataFlow failed, the steps still take what was queued before the failure
        (the feeding thread counts what it enqueued, the steps what they took); the step that
        would find the queue empty raises the failure."""
        if self._failure is None:
            return
        thread = self._thread
        available = 0 if thread is None else thread.enqueued - self._dequeued
        unit = self._claim_unit()
        if available >= unit or (not self.infinite and available > 0):
            return
        self.raise_if_failed()

    def _step_plan(self, indices: List[int]) -> List[Tuple[List[Any], Dict[str, tf.Tensor], Any]]:
        self._planned_towers = len(indices)
        thread = self._thread
        if thread is not None:
            while not self._first_datapoint_enqueued(thread, POLL_INTERVAL):
                continue                 # a Python wait, one poll at a time: Ctrl-C acts
        return super()._step_plan(indices)

    def _first_datapoint_enqueued(self, thread: EnqueueThread, timeout: float) -> bool:
        """Whether the feeding thread of this session enqueued its first datapoint, or never will
        (it ended or failed), waiting up to ``timeout`` seconds for it. Before that the steps wait
        here, in Python, rather than in the dequeue op: a DataFlow restored far into its data may
        re-read for a long time first, and a training thread inside ``session.run`` would not
        act on Ctrl-C (nor notice the thread's failure) until then."""
        if thread.enqueued or thread.finished or not thread.is_alive():
            return True
        with thread.progress:
            thread.progress.wait(timeout)
        return bool(thread.enqueued or thread.finished or not thread.is_alive())

    def _step_done(self, run_results: List[Any]) -> None:
        self._dequeued += self._planned_towers * self._claim_unit()

    def _feed_sample(self) -> Optional[Tuple[int, float, float, float]]:
        thread = self._thread
        return None if thread is None else thread.sample()

    def _in_worker_advice(self) -> Optional[str]:
        return None if self.in_worker else "{}(df, in_worker=True)".format(self.name)

    def _claim_batch(self, timeout: float) -> Optional[bool]:
        """Count the datapoints the feeding thread enqueued against those already claimed, so a
        claimed dequeue never meets the closed end of the queue, also with ``infinite=True``: a
        claim made before the datapoints are queued would let a failure of the DataFlow that
        comes while the step waits in the dequeue fail that step, and the batch it unstages
        with it. Once the feeding thread failed, only what it enqueued before can be claimed
        (False after that: the wrapper uses what it holds, then raises the failure). The wait
        for a batch not queued yet is in Python, ``timeout`` at a time (None: ask again), which
        costs no overlap: the step that restages batch k+1 starts once it is queued, and its
        compute on batch k overlaps the making of batch k+2."""
        thread = self._thread
        if thread is None:
            raise InputSourceError("{}: the source is not running (no session started it, or it was "
                                   "closed)".format(self.name))
        unit = self._claim_unit()
        deadline = time.monotonic() + timeout
        with thread.progress:
            while True:
                available = thread.enqueued - self._claimed
                if available >= unit or (thread.finished and available > 0):
                    self._claimed += min(unit, available)     # the last batch may be partial
                    return True
                if thread.finished:
                    return False
                if not thread.is_alive():
                    if self._failure is not None:
                        return False       # the queue holds no more whole batches: raised by the consumer
                    raise InputSourceError("{}: the feeding thread stopped after {} datapoints, before the end "
                                           "of the data".format(self.name, thread.enqueued))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                thread.progress.wait(min(remaining, POLL_INTERVAL))

    # -- session -------------------------------------------------------------------------------
    def _make_enqueue(self, datapoint: Any) -> Tuple[tf.Operation, Dict[tf.Tensor, Any]]:
        """The enqueue op for ``datapoint`` and its feed dict: the plain one, whose aligned arrays
        TF shares and whose others it copies while holding the GIL, or, when a large unaligned
        array is part of it, the op that has TF copy it in parallel (see realign.py)."""
        seq = self._position.tag()
        arrays: List[Any] = self._convert(datapoint)      # the arrays, then (tagged) the position
        if self._tagged:
            arrays.append(np.int64(seq))
        if self._realign.needed(arrays):
            return self._realign.enqueue_op, self._realign.feed(arrays)
        return self._enqueue_op, dict(zip(self._placeholders, arrays))

    def _datapoints(self, should_stop: Callable[[], bool]) -> Iterator[Any]:
        """The datapoints to enqueue (run in the feeding thread)."""
        if self._worker_feed is not None:
            return self._worker_feed.datapoints(self.infinite, self._resumed)
        return iterate_datapoints(self.ds, self.infinite, self.name, self._resumed)

    def _start(self, session: tf.compat.v1.Session, coord: Any) -> None:
        self._stop(None)
        self._await_lingering()
        self._failure = None
        if not self._reset_done:
            self.reset_state()
        try:
            state = self._position.start_session(session)
            self._resumed = state is not None
            if state is not None:
                (self._worker_feed or self.ds).set_state(state)
                logger.info("%s: the DataFlow continues from the restored input position", self.name)
        except BaseException as err:
            cleanup_after(err, self.name, self._close_data)   # the session will not start: stop the workers now
            raise
        self._position.warn_saved()
        self._session = session
        self._claimed = 0
        self._dequeued = 0
        self._thread = EnqueueThread(self.name, session, coord, self._datapoints, self._make_enqueue,
                                     self._close_op, self._cancel_op, self._set_failure,
                                     switch_interval=None if self.in_worker else self.gil_switch_interval)
        if coord is not None:
            coord.register_thread(self._thread)
        self._thread.start()

    def _close_data(self) -> None:
        if self._worker_feed is not None:
            self._worker_feed.close()
        close_dataflow(self.ds, self.name)
        self._reset_done = False          # a later session resets it again (if it can restart)

    def _stop(self, session: Optional[tf.compat.v1.Session]) -> None:
        self._position.warn_saved()
        thread, self._thread = self._thread, None
        if thread is None:
            return
        thread.stop()
        try:
            running = session or self._session
            if running is not None:     # (no session at all: nothing to cancel)
                running.run(self._cancel_op, options=tf.compat.v1.RunOptions(timeout_in_ms=1000))
        except Exception:  # session already closed: its queues are gone too
            pass
        self._session = None
        thread.join(_STOP_TIMEOUT if self._worker_feed is None else _WORKER_STOP_GRACE)
        if thread.is_alive() and self._worker_feed is not None:
            # waiting for the worker's next datapoint: stopping the worker ends that wait
            self._worker_feed.close()
            self._reset_done = False
            thread.join(_STOP_TIMEOUT)
        if thread.is_alive():
            self._lingering = thread
            logger.warning("%s: the feeding thread did not stop within %.0f s (is the DataFlow stuck in "
                           "__iter__?); it is a daemon and will end with the DataFlow", self.name, _STOP_TIMEOUT)

    def _await_lingering(self) -> None:
        """Before a new session: wait (up to the stop timeout) for a feeding thread of an earlier
        session that did not stop in time; the DataFlow cannot be reset or iterated while it
        still runs inside it."""
        thread, self._lingering = self._lingering, None
        if thread is None:
            return
        thread.join(_STOP_TIMEOUT)
        if thread.is_alive():
            self._lingering = thread
            raise InputSourceError("{}: the feeding thread of the previous session is still inside the DataFlow {} "
                                   "(it was told to stop and has not returned); the source cannot start again until "
                                   "it does. Is the DataFlow stuck in __iter__ (a long loop that does not call "
                                   "inputpipe.dataflow.raise_if_stopping)?".format(self.name, type(self.ds).__name__))


class BatchQueueInput(QueueInput):
    """Enqueue single datapoints, dequeue batches of ``batch_size`` (``dequeue_many``; with
    ``infinite=False``, ``dequeue_up_to`` so the last, smaller batch is not lost).

    The input signature describes batches (leading dimension ``None`` or ``batch_size``); every
    other dimension must be known. The default queue holds 3000 datapoints.

    Example::

        source = BatchQueueInput(df_of_single_images, batch_size=32)
        source.setup([tf.TensorSpec([None, 28, 28], tf.float32, "image")])
        images, = source.get_input_tensors()      # shape (32, 28, 28)
    """

    default_capacity = 3000

    def __init__(self, ds: Any, batch_size: int, queue: Optional[tf.queue.QueueBase] = None, *,
                 infinite: bool = True, in_worker: bool = False, track_state: Optional[bool] = None,
                 gil_switch_interval: Optional[float] = DEFAULT_GIL_SWITCH_INTERVAL):
        super().__init__(ds, queue, infinite=infinite, in_worker=in_worker, track_state=track_state,
                         gil_switch_interval=gil_switch_interval)
        if int(batch_size) <= 0:
            raise ValueError("BatchQueueInput: batch_size must be positive, got {}".format(batch_size))
        self.batch_size = int(batch_size)

    def size(self) -> int:
        return super().size() // self.batch_size

    def _element_shapes(self, specs: List[tf.TensorSpec]) -> List[tf.TensorShape]:
        shapes = []
        for spec in specs:
            if spec.shape.rank is None or spec.shape.rank == 0 or not spec.shape[1:].is_fully_defined():
                raise InputSourceError(
                    "{}: {!r} has shape {}; BatchQueueInput needs a leading batch dimension and every other "
                    "dimension known".format(self.name, spec.name, shape_text(spec.shape)))
            if spec.shape[0] is not None and spec.shape[0] != self.batch_size:
                raise InputSourceError("{}: {!r} has batch dimension {}, but batch_size is {}".format(
                    self.name, spec.name, spec.shape[0], self.batch_size))
            shapes.append(spec.shape[1:])
        return shapes

    def _make_queue(self, specs: List[tf.TensorSpec]) -> tf.queue.QueueBase:
        return tf.queue.FIFOQueue(self.default_capacity, [s.dtype for s in specs] + [tf.int64],
                                  shapes=self._element_shapes(specs) + [tf.TensorShape([])], name="input_queue")

    def _check_queue(self, specs: List[tf.TensorSpec], shapes: List[tf.TensorShape]) -> None:
        super()._check_queue(specs, shapes)
        queue = self._require_queue()
        if queue.shapes is None or not all(tf.TensorShape(s).is_fully_defined() for s in queue.shapes):
            raise InputSourceError("{}: the queue must be created with fully defined shapes (one datapoint "
                                   "each) so that batches can be dequeued".format(self.name))

    def _claim_unit(self) -> int:
        return self.batch_size

    def _in_worker_advice(self) -> Optional[str]:
        return None if self.in_worker else "BatchQueueInput(df, batch_size={}, in_worker=True)".format(self.batch_size)

    def _dequeue(self) -> List[tf.Tensor]:
        if self.infinite:
            return tf.nest.flatten(self._require_queue().dequeue_many(self.batch_size, name="dequeue"))
        return tf.nest.flatten(self._require_queue().dequeue_up_to(self.batch_size, name="dequeue"))
