"""The input position: which datapoint the training steps consumed, saved in every TF checkpoint.

The feeding thread asks the DataFlow for its state right after taking each datapoint
(:meth:`InputPosition.tag`) and gives the datapoint a sequence number, which travels with it as
one more int64 component through the queue and the staging areas. The step that consumes a batch
records the batch's number in the graph (:meth:`InputPosition.record_op`: a ``scatter_max`` into a
local int64 variable, run by the step itself), so the record is there before any ``after_run``
hook (``CheckpointSaverHook`` saves in its ``after_run``, before the user's hooks run theirs).

The checkpoint holds the position as a string: a ``SaveableObject`` in the graph's
``SAVEABLE_OBJECTS`` collection, which every default ``tf.compat.v1.train.Saver()`` (and so
every ``MonitoredTrainingSession``) saves and restores. Its tensor is made at save time only: a
``numpy_function`` looks up the state of the recorded number and encodes it as JSON. So a step
pays one small in-graph op, and JSON is written only when a checkpoint is. Restoring is plain
TensorFlow: the JSON is assigned to a string variable outside every collection (so no
initializer overwrites it), which the source reads and clears when the session starts and
applies (``DataFlow.set_state``) before its feeding thread runs. A graph exported with
``export_meta_graph`` or as a SavedModel therefore restores in any process, where the
``numpy_function`` of the building process does not exist.

Example::

    position = InputPosition("QueueInput", df)
    position.build(window=64)               # in the graph, at setup
    record = position.record_op(seq)        # with the consuming step
    seq = position.tag()                    # in the feeding thread, per datapoint
"""
import json
import threading
from typing import Any, Dict, List, Optional

import tensorflow as tf
from tensorflow.python.training.saving import saveable_object

from ..dataflow._core.state import check_plain_state
from ..dataflow.base import NotResumableError
from ..utils.compat import numpy_function, quiet_tf_deprecations
from ..utils.logger import get_logger
from .placement import on_host

__all__ = ["InputPosition", "STATE_FORMAT", "encode_position", "decode_position", "not_resumable_reason"]

logger = get_logger(__name__)

#: Version of the JSON document saved in checkpoints.
STATE_FORMAT = 1


def encode_position(source: str, state: Optional[Dict[str, Any]], flow: str) -> bytes:
    """The JSON document saved in a checkpoint: the DataFlow's state (None: not resumable)."""
    return json.dumps({"format": STATE_FORMAT, "source": source, "dataflow": flow, "state": state},
                      separators=(",", ":")).encode("utf-8")


def decode_position(owner: str, data: bytes) -> Optional[Dict[str, Any]]:
    """The document :func:`encode_position` made, or None for an empty one (no position saved:
    the data starts at the beginning). Raises ValueError naming ``owner`` for anything else."""
    if not data:
        return None
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError("{}: the checkpoint's input position is not JSON ({}); got {!r}".format(
            owner, err, data[:80])) from None
    except RecursionError:
        raise ValueError("{}: the checkpoint's input position nests too deeply to be a position; got {!r}".format(
            owner, data[:80])) from None
    if not isinstance(document, dict) or document.get("format") != STATE_FORMAT or "state" not in document:
        raise ValueError("{}: the checkpoint's input position has an unknown layout: expected format {} "
                         "with a 'state', got {!r}".format(owner, STATE_FORMAT, data[:120]))
    return document


class _PositionSaveable(saveable_object.SaveableObject):
    """Saves the consumed position as a string and hands a restored one to Python."""

    def __init__(self, position: "InputPosition", name: str):
        self._position = position
        spec = saveable_object.SaveSpec(self._save_tensor, "", name, dtype=tf.string, device="/cpu:0")
        super().__init__(position.variable, [spec], name)

    def _save_tensor(self) -> tf.Tensor:
        with tf.device("/cpu:0"):
            consumed = self._position.variable[0]
            encoded = numpy_function(self._position.encode_consumed, [consumed, self._position.pending_document],
                                     tf.string, stateful=True, name="encode_input_position")
            encoded.set_shape([])
            return encoded

    def restore(self, restored_tensors, restored_shapes):
        with tf.device("/cpu:0"):
            return self._position.restored.assign(restored_tensors[0], name="restore_input_position", read_value=False)


class InputPosition:
    """The consumed position of one source's DataFlow (see the module docstring).

    ``get_state``/``set_state`` are the DataFlow's (or, for a DataFlow run in a worker
    process, the worker feed's). When ``enabled`` is False (the chain is not resumable, or
    tracking was turned off) :meth:`tag` only numbers datapoints and checkpoints hold a position
    saying the data restarts.

    Example::

        position = InputPosition("QueueInput", df)
        if not position.enabled:
            print(position.reason)
    """

    def __init__(self, owner: str, ds: Any, state_owner: Any = None, track: Optional[bool] = None):
        self.owner = owner
        self.ds = ds
        self.flow = type(ds).__name__
        self._state_owner = ds if state_owner is None else state_owner
        self.requested = track               # None: track when the chain is resumable, say why not
        self.reason: Optional[str] = None
        self._save_warned = False
        self._save_warning_due = False
        if track is False:
            self.reason = "{}: input position tracking is off (track_state=False)".format(owner)
        else:
            self.reason = not_resumable_reason(ds)
        self.enabled = self.reason is None
        #: The owner's data continues across sessions in this process (see ``continuing.py``): the
        #: steps record what they consume even when the position is not tracked, and a checkpoint
        #: without a position does not restart the data here (only a new process starts it over).
        self.continuing = False
        #: Whether checkpoints save and restore the position (a source that starts its data afresh
        #: in every session, e.g. for evaluation, has nothing to save).
        self.checkpointed = True
        self._next = 0
        self._states: Dict[int, Dict[str, Any]] = {}
        self._window = 0
        self._unit = 1
        self._partial_last = False
        self._span = 0
        self._lock = threading.Lock()
        self._start_document = b""         # what a session that consumed nothing yet saves
        self._received: Optional[bytes] = None
        self.variable: Any = None            # the local int64 [1] record (made by build())
        self.restored: Any = None            # the string a restore assigns (made by build())
        self.pending_document: Any = None    # its value, "" when unset
        self._take_restored: Any = None      # reads and clears it

    @property
    def records(self) -> bool:
        """Whether the consuming steps record the number of what they take."""
        return self.enabled or self.continuing

    def disable(self, reason: Optional[str]) -> None:
        """Stop tracking, for ``reason`` (None: keep tracking)."""
        if reason is not None and self.enabled:
            self.enabled, self.reason = False, reason

    def report(self) -> None:
        """At setup: say why the position is not tracked. A warning when tracking was asked for
        (``track_state=True``); otherwise an info line, and a warning when the first checkpoint
        without a position is saved (a run that never checkpoints is not bothered)."""
        if self.enabled or self.requested is False or self.continuing:
            return                          # (a continuing owner says it once itself)
        log = logger.warning if self.requested else logger.info
        log("%s: the input position will not be saved in checkpoints, so a restored session starts the "
            "data over: %s", self.owner, self.reason)

    def warn_saved(self) -> None:
        """Log the warning of a checkpoint saved without the position, once (called in Python's
        threads: at session start, after the start-up checkpoint, and when the source stops)."""
        if self._save_warning_due:
            self._save_warning_due = False
            logger.warning("%s: a checkpoint was saved without the input position, so a session restored from "
                           "it starts the data over: %s", self.owner, self.reason)

    # -- graph -------------------------------------------------------------------------------
    def build(self, window: int) -> None:
        """Make the local variable the steps record into and the checkpoint's saveable.
        ``window``: how many numbered datapoints can be in flight (queued, staged) at most."""
        self._window = int(window)
        self._update_span()
        with on_host(), quiet_tf_deprecations():
            self.variable = tf.compat.v1.Variable(
                tf.constant([-1], tf.int64, name="no_position"), trainable=False, name="input_position",
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES], use_resource=True)
            # in no collection: no initializer runs after a restore (unset until one assigns it)
            self.restored = tf.compat.v1.Variable(tf.constant("", name="no_restored_position"), trainable=False,
                                                  name="input_position_restored", collections=[], use_resource=True)
            document = self.pending_document = tf.cond(
                self.restored.is_initialized(), self.restored.read_value, lambda: tf.constant(""),
                name="restored_input_position")
            with tf.control_dependencies([document]):
                clear = self.restored.assign("", read_value=False)
            with tf.control_dependencies([clear]):
                self._take_restored = tf.identity(document, name="take_restored_input_position")
        if self.checkpointed:
            name = self.variable.op.name
            tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS, _PositionSaveable(self, name))

    def widen(self, extra: int) -> None:
        """Allow ``extra`` more datapoints in flight (a wrapper that reads ahead, e.g. staging)."""
        self._window += int(extra)
        self._update_span()

    def batches(self, unit: int, partial_last: bool) -> None:
        """Steps take ``unit`` datapoints at a time (``BatchQueueInput``), so a step's record is
        always the number of a ``unit``-th datapoint, or, when the data may end with a partial
        batch (``partial_last``), of the latest one: only those states are asked for and kept."""
        self._unit, self._partial_last = int(unit), bool(partial_last)
        self._update_span()

    def _update_span(self) -> None:
        # A batch end may be recorded while at most `window` datapoints were tagged after it (the one
        # being tagged included), so its state is forgotten only when the window has passed it: the
        # first multiple of the batch above the window (never rounded down, which would forget one).
        self._span = (self._window // self._unit + 1) * self._unit

    def record_op(self, seq: tf.Tensor) -> tf.Operation:
        """An op recording that the step consumed the datapoint (or batch ending with) ``seq``."""
        with on_host():
            if seq.dtype != tf.int64:
                seq = tf.cast(seq, tf.int64)
            # a batch's number is its last datapoint's (the queue is FIFO: every earlier one is taken)
            last = tf.reshape(seq, [1]) if seq.shape.rank == 0 else tf.reshape(seq, [-1])[-1:]
            return tf.compat.v1.scatter_max(self.variable, [0], last, name="record_input_position").op

    def recorded(self, tensors: List[tf.Tensor], seq: tf.Tensor) -> List[tf.Tensor]:
        """``tensors`` as identities that record ``seq`` whenever a step uses any of them (no
        extra fetch: the record runs inside the step, before every ``after_run`` hook)."""
        with tf.control_dependencies([self.record_op(seq)]):
            outputs = [tf.identity(t, name=t.op.name.rsplit("/", 1)[-1]) for t in tensors]
        for out, t in zip(outputs, tensors):
            out.set_shape(t.shape)
        return outputs

    # -- session -----------------------------------------------------------------------------
    def start_session(self, session: tf.compat.v1.Session) -> Optional[Dict[str, Any]]:
        """Called when the source starts in ``session``: reset the record and the numbering and
        return the DataFlow state to continue from (restored from a checkpoint or set by
        :meth:`pending`), or None to start at the beginning."""
        _, restored = session.run([self.variable.initializer, self._take_restored])
        with self._lock:
            self._next = 0
            self._states = {}
            document, self._received = self._received or restored, None   # set_state() by hand goes first
        self._start_document = document or b""
        decoded = decode_position(self.owner, document or b"")
        if decoded is None:
            return None
        state = decoded["state"]
        if self.continuing and (not self.enabled or state is None):
            logger.debug("%s: the checkpoint holds no input position; the data continues where this process "
                         "left it", self.owner)
            return None
        if not self.enabled:
            logger.warning("%s: a checkpoint was restored, but %s; the data starts over at the beginning",
                           self.owner, self.reason)
            return None
        if state is None:
            logger.warning("%s: the restored checkpoint holds no input position (its DataFlow %s was not "
                           "resumable); the data starts over at the beginning", self.owner, decoded.get("dataflow"))
            return None
        return state

    def pending(self, state: Dict[str, Any]) -> None:
        """Continue from ``state`` (a DataFlow state) when the source starts next."""
        if not self.enabled:
            raise NotResumableError(self.reason)
        check_plain_state(self.ds, state)           # what json can hold (the flow checks the rest when it starts)
        with self._lock:
            self._received = encode_position(self.owner, state, self.flow)

    # -- feeding thread ------------------------------------------------------------------------
    def tag(self) -> int:
        """Number the datapoint just taken from the DataFlow and remember the DataFlow's state
        when a step can end on it (every datapoint, or every ``unit``-th and the latest one, see
        :meth:`batches`); forget the states no step can record any more."""
        seq = self._next
        self._next = seq + 1
        if self.enabled:
            ends_batch = (seq + 1) % self._unit == 0
            if ends_batch or self._partial_last:
                states = self._states
                states[seq] = self._state_owner.get_state()
                states.pop(seq - self._span, None)
                if seq % self._unit:        # the datapoint before ends no batch: it was kept as the latest
                    states.pop(seq - 1, None)
        return seq

    def consumed_count(self, session: tf.compat.v1.Session) -> int:
        """How many datapoints the steps of ``session`` consumed (the recorded number plus one)."""
        return int(session.run(self.variable)[0]) + 1

    def consumed_state(self, session: Optional[tf.compat.v1.Session]) -> Optional[Dict[str, Any]]:
        """The DataFlow state after the last datapoint the steps consumed in ``session``, or None
        when nothing was consumed yet there (see :meth:`encode_consumed`)."""
        if not self.enabled:
            raise NotResumableError(self.reason)
        if session is None:
            raise RuntimeError("{}: get_state() needs the session the source runs in".format(self.owner))
        record, restored = session.run([self.variable, self.pending_document])
        decoded = decode_position(self.owner, self.encode_consumed(record[0], restored))
        return None if decoded is None else decoded["state"]

    # -- checkpoint (TF threads) ---------------------------------------------------------------
    def state_at(self, seq: int) -> Optional[Dict[str, Any]]:
        """The DataFlow state right after datapoint ``seq`` (None when it is not remembered)."""
        return self._states.get(int(seq))

    def encode_consumed(self, seq: Any, restored: Any = b"") -> bytes:
        """The checkpoint's document for the recorded number ``seq`` (-1: nothing consumed yet in
        this session: the position the session started from); a position set or ``restored``
        that no session start took yet is saved as it is."""
        seq = int(seq)
        with self._lock:
            if self._received is not None:      # set by hand, the source has not started yet
                return self._received
        if restored:                            # restored, the source has not started yet
            return bytes(restored)
        if not self.enabled:
            if not self._save_warned and self.requested is not False and not self.continuing:
                self._save_warned = True           # logged by the next warn_saved() (TF's thread must not log:
                self._save_warning_due = True      # logging would register it with `threading` for good)
            return encode_position(self.owner, None, self.flow)
        if seq < 0:
            return self._start_document
        state = self.state_at(seq)
        if state is None:
            raise RuntimeError("{}: the state of consumed datapoint {} is no longer remembered (window {}); "
                               "the queue or staging holds more than the source allows for".format(
                                   self.owner, seq, self._window))
        return encode_position(self.owner, state, self.flow)


def not_resumable_reason(ds: Any) -> Optional[str]:
    check = getattr(ds, "check_resumable", None)
    if check is None:
        return "{} has no get_state()/set_state()".format(type(ds).__name__)
    try:
        check()
    except NotResumableError as err:
        return str(err)
    return None
