"""Feed-dict sources: :class:`PlaceholderInput` (you feed) and :class:`FeedInput` (the hook feeds
the next datapoint of a DataFlow in every consuming step; the slow, simple baseline).

Example::

    source = FeedInput(df)
    source.setup(specs)
    x, y = source.get_input_tensors()
"""
from typing import Any, Dict, Generator, List, Optional

import numpy as np
import tensorflow as tf

from ..dataflow.base import get_length
from ..utils.arguments import require_dataflow
from ..utils.logger import get_logger
from .base import InputSource, Tower
from .errors import InputSourceError, failure_error
from ._iteration import close_dataflow, iterate_datapoints
from .placement import on_host
from .position import InputPosition
from .signature import DatapointConverter, signature_placeholder

logger = get_logger(__name__)

__all__ = ["PlaceholderInput", "FeedInput"]


class PlaceholderInput(InputSource):
    """Placeholders matching the input signature; feed them yourself. Each is named after its
    signature entry at the root of the graph (``image:0``), and an existing placeholder of that
    name, dtype and shape is reused, as in tensorpack (see
    :func:`~inputpipe.input_source.signature.signature_placeholder`).

    Example::

        source = PlaceholderInput()
        source.setup([tf.TensorSpec([None], tf.float32, "x")])
        x, = source.get_input_tensors()
        sess.run(y, feed_dict={x: [1.0, 2.0]})
    """

    def _setup(self, specs: List[tf.TensorSpec]) -> None:
        self._placeholders = [signature_placeholder(s, self.name) for s in specs]

    def _build_tower(self) -> Tower:
        return Tower(list(self._placeholders), consume_op=None)


class FeedInput(InputSource):
    """Feed datapoints of a DataFlow through ``feed_dict``, one per consuming step, in the
    training thread (so data preparation is *not* hidden: use it as a baseline or for tests).
    The placeholders are named like :class:`PlaceholderInput`'s (``image:0``).

    With ``infinite=True`` (default) a new epoch starts when the DataFlow ends; otherwise the end
    of the DataFlow raises ``tf.errors.OutOfRangeError`` from the step (which
    ``MonitoredTrainingSession`` treats as a clean end).

    The DataFlow's position is saved with TF checkpoints (``track_state`` as in
    :class:`~inputpipe.input_source.QueueInput`): each fed datapoint carries a number that the
    consuming step records (one more fed scalar and op).

    Example::

        source = FeedInput(df, infinite=False)
        source.setup(specs)
        x, = source.get_input_tensors()
        with tf.compat.v1.Session() as sess, source.session(sess) as run:
            while True:
                run(train_op)     # ends with OutOfRangeError after one epoch
    """

    def __init__(self, ds: Any, infinite: bool = True, *, track_state: Optional[bool] = None):
        super().__init__()
        self.ds = require_dataflow(ds, type(self).__name__)
        self.infinite = infinite
        self._position = InputPosition(self.name, self.ds, track=track_state)
        self._track_state = track_state is not False
        self._session = None
        self._resumed = False         # the next iteration continues from a restored state
        self._iterator: Optional[Generator[Any, None, None]] = None
        self._claimed_feed: Optional[Dict[tf.Tensor, Any]] = None
        self._claims_ended = False    # a claim met the end: stays ended until reset_state()
        self._reset_done = False

    def reset_state(self) -> None:
        self.ds.reset_state()
        self._reset_done = True
        self._iterator = None
        self._claimed_feed = None
        self._claims_ended = False

    def size(self) -> int:
        n = get_length(self.ds)
        if n is None:
            raise NotImplementedError("{}: the DataFlow has no length".format(self.name))
        return n

    def _setup(self, specs: List[tf.TensorSpec]) -> None:
        self._placeholders = [signature_placeholder(s, self.name) for s in specs]
        self._convert = DatapointConverter(specs, self.name)
        with on_host():
            self._seq = tf.compat.v1.placeholder_with_default(np.int64(-1), [], name="position")
        self._position.build(4)
        self._position.report()

    def _build_tower(self) -> Tower:
        consume = [p.op for p in self._placeholders]
        if not self._position.enabled:
            return Tower(list(self._placeholders), consume_op=consume, feed_fn=self._take_feed)
        if self._staged_reads:
            return Tower(list(self._placeholders), consume_op=consume, feed_fn=self._take_feed, seq=self._seq)
        return Tower(list(self._placeholders), consume_op=consume, feed_fn=self._take_feed,
                     run_ops=[self._position.record_op(self._seq)])

    def _input_position(self) -> Optional[InputPosition]:
        return self._position

    def _start(self, session: tf.compat.v1.Session, coord: Any) -> None:
        if not self._reset_done:
            self.reset_state()
        self._session = session
        state = self._position.start_session(session)
        self._resumed = state is not None
        if state is not None:
            self.ds.set_state(state)
        self._position.warn_saved()

    def _claim_batch(self, timeout: float) -> Optional[bool]:
        """Read the next datapoint ahead (kept for the next feed); False at the end of the data."""
        if self._claimed_feed is None and not self._claims_ended:
            try:
                self._claimed_feed = self._next_feed()
            except tf.errors.OutOfRangeError:
                self._claims_ended = True
        return self._claimed_feed is not None

    def _take_feed(self) -> Dict[tf.Tensor, Any]:
        feed, self._claimed_feed = self._claimed_feed, None
        return feed if feed is not None else self._next_feed()

    def _next_feed(self) -> Dict[tf.Tensor, Any]:
        if not self._reset_done:
            self.reset_state()
        if self._iterator is None:
            self._iterator = iterate_datapoints(self.ds, self.infinite, self.name, self._resumed)
            self._resumed = False
        try:
            datapoint = next(self._iterator)
        except StopIteration:
            self._iterator = None
            raise tf.errors.OutOfRangeError(None, None, "{}: end of the DataFlow".format(self.name)) from None
        except InputSourceError:
            self._iterator = None
            raise
        except Exception as err:
            self._iterator = None
            raise failure_error("{}: the DataFlow raised {}: {}".format(self.name, type(err).__name__, err),
                                err) from err
        seq = self._position.tag()
        feed = dict(zip(self._placeholders, self._convert(datapoint)))
        feed[self._seq] = seq
        return feed

    def _close_data(self) -> None:
        close_dataflow(self.ds, self.name)
        self._reset_done = False

    def _stop(self, session: Optional[tf.compat.v1.Session]) -> None:
        self._position.warn_saved()
        self._session = None
        self._claimed_feed = None
        self._claims_ended = False
        iterator, self._iterator = self._iterator, None
        if iterator is not None:
            iterator.close()
