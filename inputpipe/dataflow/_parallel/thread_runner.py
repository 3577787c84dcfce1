"""Run COPIES of a DataFlow in threads: :class:`MultiThreadRunner`, importable from
:mod:`inputpipe.dataflow.parallel` (tensorpack's module) and :mod:`inputpipe.dataflow`.

Each thread iterates its own copy, made by ``get_df()``, over and over, into one bounded queue;
the runner yields whatever comes first. The number of threads may be ``"auto"``
(:mod:`~inputpipe.dataflow.autoscale`).

Example::

    df = MultiThreadRunner(lambda: ImagesFromUrls(urls), num_prefetch=100, num_thread=8)
    df.reset_state()
    with df:
        for image, label in df:
            ...
"""
import queue
import time
import weakref
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

from ...utils.arguments import no_other_arguments, renamed_argument
from ...utils.concurrency import POLL_INTERVAL, StoppableThread
from ...utils.errors import error_from_exception
from ...utils.resources import thread_schedstat
from .._core.helpers import empty_epoch_error as _empty_epoch_error, int_at_least_one as _check_positive
from .resizable import ResizableStage, WorkerClocks
from ..base import DataFlow, DataFlowReentrantGuard, call_len, empty_passes_mean_stuck, get_length, raise_if_stopping

__all__ = ["MultiThreadRunner"]


class _CopyThread(StoppableThread):
    """Iterates its copy of a DataFlow forever into a bounded queue; records its failure."""

    def __init__(self, name: str, ds: DataFlow, out: "queue.Queue", failures: list):
        super().__init__(name=name)
        self.ds = ds
        self._out = out
        self._failures = failures
        self.busy_seconds = 0.0          # time making datapoints (not waiting for queue room)
        self.items = 0
        #: Set by the runner to end the thread after it has queued the datapoint it is making.
        self.retiring = False

    def run(self):
        try:
            empty = 0                        # passes in a row without a datapoint
            while not self.stopped():
                produced = 0
                started = time.perf_counter()
                for dp in self.ds:
                    self.busy_seconds += time.perf_counter() - started
                    self.items += 1
                    produced += 1
                    if not self.queue_put_stoppable(self._out, dp) or self.retiring:
                        return
                    started = time.perf_counter()
                empty = 0 if produced else empty + 1
                if empty_passes_mean_stuck(self.ds, empty):
                    raise _empty_epoch_error(self.ds)
        except BaseException as err:  # reported to the consumer, which raises it
            self._failures.append((self.name, err))


def _stop_threads(threads: Sequence[StoppableThread]) -> None:
    for thread in threads:
        thread.stop()
    for thread in threads:
        if thread.is_alive():
            thread.join(timeout=2.0)


class MultiThreadRunner(ResizableStage, DataFlow):
    """Run ``num_thread`` COPIES of a DataFlow, made by ``get_df()``, in threads.

    .. warning::
       Each thread iterates its own copy: the same distribution, not the same set.

    Useful when the work releases the GIL (file or network I/O, image decoding in C). An epoch is
    ``len(get_df())`` datapoints; ``num_prefetch`` bounds the queue between threads and consumer.
    ``num_thread="auto"`` lets a controller choose the number of copies while it runs
    (:mod:`~inputpipe.dataflow.autoscale`); a retired thread queues the datapoint it is making
    first.
    An exception in a thread is raised in the consumer as
    :class:`~inputpipe.utils.errors.WorkerError`, chained to the original exception.

    tensorpack's old keywords ``nr_prefetch=`` and ``nr_thread=`` still work, with a
    ``DeprecationWarning``.

    Example::

        df = MultiThreadRunner(lambda: ImagesFromUrls(urls), num_prefetch=100, num_thread=8)
        df.reset_state()
        with df:
            for image, label in df:
                ...
    """

    def __init__(self, get_df: Callable[[], DataFlow], num_prefetch: Optional[int] = None,
                 num_thread: Any = None, **old_names: Any):
        name = type(self).__name__
        num_prefetch = renamed_argument(name, old_names, "nr_prefetch", "num_prefetch", num_prefetch, None)
        num_thread = renamed_argument(name, old_names, "nr_thread", "num_thread", num_thread, None)
        no_other_arguments(name, old_names)
        start = self._init_workers(name, "num_thread", num_thread)
        self.num_prefetch = _check_positive(name, "num_prefetch", num_prefetch)
        self._get_df = get_df
        self._dfs = [get_df() for _ in range(start)]
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=num_prefetch)
        self._failures: List[Tuple[str, BaseException]] = []   # (thread name, error)
        self._threads: List[_CopyThread] = []    # by rank, retired ones too (their statistics)
        self._clocks = WorkerClocks(thread_schedstat)
        self._guard = DataFlowReentrantGuard(name)
        self._finalizer: Optional[weakref.finalize] = None

    _worker_kind = "threads"

    def __len__(self) -> int:
        return call_len(self._dfs[0])

    @property
    def num_thread(self) -> int:
        """Threads that run copies now."""
        return self._active_workers()

    def reset_state(self) -> None:
        """Reset each copy and start the threads (once; later calls do nothing)."""
        if self._threads:
            return
        for df in self._dfs:
            df.reset_state()
        # the finalizer holds the list itself: threads added later are stopped too
        self._finalizer = weakref.finalize(self, _stop_threads, self._threads)
        for df in self._dfs:
            self._start_copy(df)
        self._begin_scaling()

    def _start_copy(self, df: DataFlow) -> None:
        thread = _CopyThread("{}-thread-{}".format(type(self).__name__, len(self._threads)), df, self._queue,
                             self._failures)
        self._threads.append(thread)
        thread.start()

    # ------------------------------------------------------------------------------ changing size

    def _active_workers(self) -> int:
        return sum(1 for t in self._threads if not t.retiring)

    def _grow_one(self) -> bool:
        df = self._get_df()
        self._dfs.append(df)
        df.reset_state()
        self._start_copy(df)
        return True

    def _shrink_one(self) -> bool:
        active = [t for t in self._threads if not t.retiring]
        if len(active) <= 1:
            return False
        active[-1].retiring = True              # ends once its datapoint in the making is queued
        return True

    def _scaling_counters(self) -> Tuple[float, int]:
        return sum(t.busy_seconds for t in self._threads), sum(t.items for t in self._threads)

    def _scaling_cpu(self) -> Tuple[Optional[float], Optional[float]]:
        return self._clocks.total([t.native_id for t in self._threads if t.native_id is not None and t.is_alive()])

    def worker_stats(self) -> List[dict]:
        """One dict per thread, cumulative since ``reset_state()``:
        ``{"rank": int, "busy_seconds": float, "items": int}``, the time spent making datapoints
        (not waiting for room in the queue) and how many were made. Empty before ``reset_state()``.

        Example::

            busy_share = [s["busy_seconds"] / elapsed for s in df.worker_stats()]
        """
        return [{"rank": rank, "busy_seconds": t.busy_seconds, "items": t.items, "active": not t.retiring}
                for rank, t in enumerate(self._threads)]

    def _raise_failure(self) -> None:
        name, err = self._failures[0]
        raise error_from_exception(type(self).__name__, name, err) from err

    def __iter__(self) -> Iterator[Any]:
        if not self._threads or self._finalizer is None or not self._finalizer.alive:
            raise RuntimeError("{}: call reset_state() before iterating (and not after close())".format(
                type(self).__name__))
        with self._guard:
            size = get_length(self._dfs[0])
            count = 0
            while size is None or count < size:
                if self._failures:
                    self._raise_failure()
                scaling = self._scaling
                try:
                    if scaling is None:
                        dp = self._queue.get(timeout=POLL_INTERVAL)
                    else:
                        if time.monotonic() >= scaling.due:
                            scaling.run()
                        started = time.monotonic()
                        try:
                            dp = self._queue.get(timeout=POLL_INTERVAL)
                        finally:
                            self._waited += time.monotonic() - started
                except queue.Empty:
                    raise_if_stopping(self)
                    continue
                count += 1
                yield dp

    def close(self) -> None:
        """Stop and join the threads (within about a second), then close every copy."""
        self._end_scaling()
        if self._finalizer is not None:
            self._finalizer()
        for df in self._dfs:
            close = getattr(df, "close", None)
            if callable(close):
                close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


