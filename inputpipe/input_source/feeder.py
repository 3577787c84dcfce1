"""The background thread of QueueInput: iterate a DataFlow and enqueue each datapoint.

Every blocking session run uses a timeout (``ENQUEUE_TIMEOUT_MS``) and re-checks whether it was
told to stop (by the source, or by the session's ``Coordinator``). On an error the thread
records it in the source *before* closing the queue with ``cancel_pending_enqueues``, so the
training step that then fails to dequeue can report the real cause.

Example::

    thread = EnqueueThread(name, session, coord, make_datapoints, make_enqueue, close_op, ...)
    thread.start()
    ...
    thread.stop(); session.run(cancel_op); thread.join(2)
"""
import threading
import time
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import tensorflow as tf

from ..utils.concurrency import StoppableThread
from ..utils.logger import get_logger
from ..utils.switch_interval import shortened_switch_interval
from .direct_run import DirectRunner

__all__ = ["EnqueueThread", "ENQUEUE_TIMEOUT_MS"]

logger = get_logger(__name__)

#: Upper bound of one blocking enqueue run before the thread re-checks whether to stop.
ENQUEUE_TIMEOUT_MS = 1000

# errors meaning "the session or the queue went away under us", i.e. we are being shut down
_SHUTDOWN_ERRORS = (tf.errors.CancelledError, tf.errors.AbortedError)


def _session_closed(err: BaseException) -> bool:
    return isinstance(err, RuntimeError) and "closed Session" in str(err)


class EnqueueThread(StoppableThread):
    """Enqueue each datapoint until stopped or out of data.

    ``make_datapoints(should_stop)`` makes the datapoint iterator (in the thread);
    ``make_enqueue(datapoint)`` returns the enqueue op to run for it and that run's feed_dict;
    ``on_failure(err)`` is called with any error (DataFlow exception, bad datapoint, TF error);
    the queue is then closed with ``cancel_op``. A finite DataFlow's end closes it with
    ``close_op`` (remaining elements can still be dequeued, then ``OutOfRangeError``).

    ``enqueued`` (datapoints enqueued so far) and ``finished`` (the DataFlow ended and nothing
    more will be enqueued) change under the ``progress`` condition, which is notified on each
    change and when the thread ends, so a consumer can wait for "one more, or the end".

    ``dataflow_cpu`` and ``dataflow_wall`` (seconds) add up the thread's CPU time
    (``time.thread_time``) and wall time spent getting the next datapoint from the iterator: the
    DataFlow's own work in this process (or, for a DataFlow in a worker process, receiving its
    datapoints); ``feed_cpu`` adds the thread's CPU time converting and enqueueing them.
    ``delivered`` counts the datapoints the iterator gave. They are updated without a lock (one
    writer) and read as a :meth:`sample`.

    ``switch_interval`` (seconds, or None): while the thread runs, the interpreter's GIL switch
    interval is at most this (see :mod:`inputpipe.utils.switch_interval`), so a DataFlow that
    holds the GIL here delays the training thread by that much at a time instead of 5 ms.
    """

    def __init__(self, owner: str, session: tf.compat.v1.Session, coord: Any,
                 make_datapoints: Callable[[Callable[[], bool]], Iterator[Any]],
                 make_enqueue: Callable[[Any], Tuple[tf.Operation, Dict[Any, Any]]],
                 close_op: tf.Operation, cancel_op: tf.Operation, on_failure: Callable[[BaseException], None],
                 switch_interval: Optional[float] = None):
        super().__init__(name="{}-EnqueueThread".format(owner))
        self.owner = owner
        self.session = session
        self.coord = coord
        self.make_datapoints = make_datapoints
        self.datapoints: Optional[Iterator[Any]] = None
        self.make_enqueue = make_enqueue
        self.close_op = close_op
        self.cancel_op = cancel_op
        self.on_failure = on_failure
        self.enqueued = 0
        self.delivered = 0
        self.dataflow_cpu = 0.0
        self.dataflow_wall = 0.0
        self.feed_cpu = 0.0
        self.finished = False
        self.progress = threading.Condition()
        self._options = tf.compat.v1.RunOptions(timeout_in_ms=ENQUEUE_TIMEOUT_MS)
        self.switch_interval = switch_interval

    def should_stop(self) -> bool:
        return self.stopped() or (self.coord is not None and self.coord.should_stop())

    def run(self) -> None:
        runner = DirectRunner(self.session, self._options)
        try:
            with shortened_switch_interval(self.switch_interval):
                self._feed(runner)
        finally:
            runner.close()

    def _feed(self, runner: DirectRunner) -> None:
        close = self.cancel_op
        try:
            self.datapoints = self.make_datapoints(self.should_stop)
            iterator, thread_time, clock = iter(self.datapoints), time.thread_time, time.perf_counter
            while True:
                cpu, wall = thread_time(), clock()
                try:
                    datapoint = next(iterator)
                except StopIteration:
                    break
                got_cpu = thread_time()
                self.dataflow_cpu += got_cpu - cpu
                self.dataflow_wall += clock() - wall
                self.delivered += 1
                if self.should_stop():
                    return
                enqueued = self._enqueue(runner, *self.make_enqueue(datapoint))
                self.feed_cpu += thread_time() - got_cpu
                if not enqueued:
                    return
                with self.progress:
                    self.enqueued += 1
                    self.progress.notify_all()
            if not self.should_stop():
                logger.info("%s: the DataFlow ended after %d datapoints; closing the queue", self.owner, self.enqueued)
                close = self.close_op
                with self.progress:
                    self.finished = True
                    self.progress.notify_all()
        except _SHUTDOWN_ERRORS + (tf.errors.OutOfRangeError,) as err:
            if not self.should_stop():
                self._fail(err)
        except RuntimeError as err:
            if not _session_closed(err):  # a closed session is a shutdown, not a failure
                self._fail(err)
        except BaseException as err:
            if not self.should_stop():  # anything after a stop request is part of the shutdown
                self._fail(err)
        finally:
            self._close_queue(close)
            with self.progress:
                self.progress.notify_all()    # waiters re-check is_alive()
            closer = getattr(self.datapoints, "close", None)
            if closer is not None:
                try:
                    closer()
                except Exception:
                    logger.debug("%s: closing the DataFlow iterator failed", self.owner, exc_info=True)

    def sample(self) -> Tuple[int, float, float, float]:
        """``(delivered, dataflow_cpu, dataflow_wall, feed_cpu)`` so far (see the class docstring)."""
        return self.delivered, self.dataflow_cpu, self.dataflow_wall, self.feed_cpu

    def _fail(self, err: BaseException) -> None:
        logger.error("%s: feeding stopped: %s: %s", self.owner, type(err).__name__, err)
        self.on_failure(err)

    def _enqueue(self, runner: DirectRunner, enqueue_op: tf.Operation, feed: Dict[Any, Any]) -> bool:
        while True:
            try:
                runner.run(enqueue_op, feed)
                return True
            except tf.errors.DeadlineExceededError:
                if self.should_stop():
                    return False

    def _close_queue(self, op: tf.Operation) -> None:
        try:
            self.session.run(op, options=self._options)
        except Exception:  # the session may already be closed: then so is the queue
            pass
