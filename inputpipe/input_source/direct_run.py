"""Run one op with a feed many times from a feeding thread, without ``session.run``'s Python work.

``session.run(op, feed_dict=..., options=...)`` spends about 160 us of Python per call under the
GIL (fetch handlers, feed checks, options serialised into a new buffer) before TensorFlow's own
C call, which takes 20-30 us for an enqueue. A feeding thread makes that call once per batch, in
the training process, on the cores the step uses. :class:`DirectRunner` makes the same C call
TensorFlow's ``session.run`` ends in (``BaseSession._call_tf_sessionrun``) with the run options
serialised once, the placeholders' graph outputs looked up once, and each value converted as
``session.run`` converts it. What ``session.run`` checks beyond that is checked by whoever built
the feed (inputpipe's :class:`~inputpipe.input_source.signature.DatapointConverter` checks dtypes
and shapes before every enqueue).

These are private TensorFlow names; when one is missing (another TensorFlow version, a session
that is not a ``tf.compat.v1.Session``) the runner uses ``session.run`` and says so at debug
level. Either way a run raises what ``session.run`` raises: ``tf.errors.OpError`` subclasses,
and ``RuntimeError("Attempted to use a closed Session.")`` on a closed session.

Example::

    runner = DirectRunner(session, tf.compat.v1.RunOptions(timeout_in_ms=1000))
    try:
        runner.run(enqueue_op, {placeholder: array})
    finally:
        runner.close()
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from ..utils.compat import session_c_api
from ..utils.logger import get_logger

__all__ = ["DirectRunner"]

logger = get_logger(__name__)


def _session_run_call(session: Any) -> Optional[Tuple[Callable[..., Any], Callable[[Any], None], Any]]:
    """``(call, delete_buffer, new_buffer)`` from TensorFlow's session internals, or None when
    this TensorFlow or this session does not have them."""
    c_api = session_c_api()
    try:
        from tensorflow.python.client.session import BaseSession
    except ImportError:
        return None
    if c_api is None or not isinstance(session, BaseSession):
        return None
    functions: List[Any] = [getattr(session, "_call_tf_sessionrun", None), getattr(session, "_extend_graph", None),
                            getattr(c_api, "TF_DeleteBuffer", None), getattr(c_api, "TF_NewBufferFromString", None)]
    if not all(callable(f) for f in functions):
        return None
    call, _, delete_buffer, new_buffer = functions
    return call, delete_buffer, new_buffer


class DirectRunner:
    """Run ops with a feed dict and fixed run options, as ``session.run`` would, with less Python.

    One runner belongs to one thread and one session; :meth:`close` frees the serialised options.
    ``direct`` says whether the fast call is used (False: every run is ``session.run``).

    Example::

        runner = DirectRunner(sess, tf.compat.v1.RunOptions(timeout_in_ms=1000))
        runner.run(enqueue_op, {images: batch, labels: labels})
        runner.close()
    """

    def __init__(self, session: tf.compat.v1.Session, options: tf.compat.v1.RunOptions):
        self.session = session
        self.options = options
        self._outputs: Dict[Any, Tuple[Any, Any]] = {}     # placeholder -> (its TF_Output, numpy dtype)
        self._buffer: Any = None
        self._call: Optional[Callable[..., Any]] = None
        self._delete_buffer: Optional[Callable[[Any], None]] = None
        internals = _session_run_call(session)
        if internals is None:
            logger.debug("DirectRunner: this TensorFlow or session (%s) has no direct run call; using "
                         "session.run", type(session).__name__)
            return
        self._call, self._delete_buffer, new_buffer = internals
        self._buffer = new_buffer(options.SerializeToString())

    @property
    def direct(self) -> bool:
        return self._call is not None

    def _feed(self, feed: Dict[tf.Tensor, Any]) -> Dict[Any, np.ndarray]:
        feeds = {}
        for placeholder, value in feed.items():
            entry = self._outputs.get(placeholder)
            if entry is None:
                entry = self._outputs[placeholder] = (placeholder._as_tf_output(), placeholder.dtype.as_numpy_dtype)
            output, dtype = entry
            if type(value) is not np.ndarray or value.dtype != dtype:
                value = np.asarray(value, dtype=dtype)      # what session.run does with every value
            feeds[output] = value
        return feeds

    def run(self, op: tf.Operation, feed: Dict[tf.Tensor, Any]) -> None:
        """Run ``op`` (no fetched values) with ``feed`` (placeholder -> value)."""
        if self._call is None:
            self.session.run(op, feed_dict=feed, options=self.options)
            return
        if self.session._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        feeds = self._feed(feed)
        self.session._extend_graph()        # ops added since the last run (as session.run does)
        self._call(self._buffer, feeds, [], [op._c_op], None)

    def close(self) -> None:
        """Free the serialised run options (the runner falls back to ``session.run`` after)."""
        if self._buffer is not None and self._delete_buffer is not None:
            self._delete_buffer(self._buffer)
        self._buffer, self._call = None, None
