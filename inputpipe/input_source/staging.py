"""StagingInput: keep ``nr_stage`` batches ready in ``StagingArea``\\ s on the training device.

Each tower gets its own ``StagingArea`` on ``device``. By default (``device=None``) that is the
device scope active when ``get_input_tensors()`` is called (so per-tower
``with tf.device("/gpu:i"):`` placement works), and, when that scope is empty, the first GPU
if TensorFlow sees one, else the CPU (:func:`default_staging_device`). The hook prefills ``nr_stage`` batches when the session
starts, then adds one stage op to every step that consumes the tower's tensors, so the copy of
the next batch to the device overlaps the current step. The number of staged batches therefore
stays ``nr_stage`` (any value >= 1), and a step that fetches nothing depending on the inputs
neither takes nor stages a batch.

Finite data loses nothing: the hook counts the staged batches in Python and adds the stage op
to a step only when the wrapped source has *claimed* a batch for it (``_claim_batch``: the
batch is queued, or, for a source that cannot fail or end, surely coming). At the end of the
data the steps only unstage, and once nothing is staged the hook raises
``tf.errors.OutOfRangeError`` itself, before the run, so no failing dequeue ever throws away a
batch unstaged in the same run; after a failure of the source, likewise, the step that finds
nothing staged raises the failure. A source that cannot claim ahead (``TFDatasetInput``:
tf.data learns of its end only by reading) instead builds towers that, past the end, stage
filler flagged ``real = False`` (``Tower.real``, fetched with the stage op): the hook counts
only real batches and stops restaging after the first filler.

Example::

    source = StagingInput(QueueInput(df), nr_stage=2, device="/gpu:0")
    source.setup(specs)
    with tf.device("/gpu:0"):
        x, y = source.get_input_tensors()
"""
import contextlib
from typing import Any, Dict, Iterable, List, Optional, Tuple

import tensorflow as tf
from tensorflow.python.ops import data_flow_ops

from ..utils.arguments import ArgumentKindError
from ..utils.compat import list_physical_devices
from ..utils.concurrency import POLL_INTERVAL
from .base import FeedfreeInput, InputSource, InputSourceHook, Tower
from .errors import InputSourceError

__all__ = ["StagingInput", "default_staging_device"]


def default_staging_device() -> str:
    """Where :class:`StagingInput` stages when neither its ``device`` nor the caller's device
    scope says: ``"/gpu:0"`` when TensorFlow sees a GPU, else ``"/cpu:0"``.

    Example::

        assert default_staging_device() in ("/gpu:0", "/cpu:0")
    """
    return "/gpu:0" if list_physical_devices("GPU") else "/cpu:0"


def _caller_scope_is_empty() -> bool:
    """True when ops made here get no device from the caller's ``tf.device`` scopes (probed with
    a ``NoOp`` that nothing runs)."""
    return tf.no_op(name="device_probe").device == ""


class StagingInput(FeedfreeInput):
    """Wrap ``input`` so each step's batch is already staged on ``device``.

    ``nr_stage`` batches are staged before the first step and stay staged; a step that consumes
    inputs unstages one and stages the next in the same run. Statistics (queue size, input wait)
    come from the wrapped source's producing op, fetched in the same run.

    With a finite wrapped source (``QueueInput(ds, infinite=False)``, ``BatchQueueInput``,
    ``FeedInput``, ``TFDatasetInput`` of a finite dataset), every batch reaches a step exactly
    once and in order, then the step raises ``tf.errors.OutOfRangeError`` (a clean stop in
    ``MonitoredTrainingSession``).

    Note: whether a step consumes is decided from the fetches and feeds of the ``run`` call
    itself; a *different* hook fetching input-dependent tensors in a step whose own fetches do
    not depend on the inputs takes a batch unseen. Every consuming step reads the areas' sizes
    back and refills what such runs took (extra runs) and, once the data is ending, re-reads the
    sizes before it unstages; but a run of that kind on an empty area (after the last batch, or
    more of them in a row than ``nr_stage``) waits forever. After a step that raised, the staged
    counts are re-read from the areas (one extra run); a batch whose dequeue ran in a failed
    step is not retried.

    Example::

        source = StagingInput(QueueInput(df), nr_stage=1, device="/cpu:0")
        source.setup(specs)
        x, = source.get_input_tensors()
        with tf.compat.v1.Session() as sess, source.session(sess) as run:
            run(train_op)
    """

    def __init__(self, input: InputSource, nr_stage: int = 1, device: Optional[str] = None):
        super().__init__()
        if not isinstance(input, InputSource):
            raise ArgumentKindError("StagingInput wraps an InputSource, got {!r}".format(input))
        if int(nr_stage) != nr_stage or nr_stage < 1:
            raise ValueError("StagingInput: nr_stage must be an integer >= 1, got {!r}".format(nr_stage))
        self._input = input
        self.nr_stage = int(nr_stage)
        self._device = device
        self._areas: List[data_flow_ops.StagingArea] = []
        self._area_sizes: List[tf.Tensor] = []
        # per tower: a consuming step's fetches with a restage (the size after it first), without one
        self._step_ops: List[Tuple[List[Any], List[Any]]] = []
        self._session: Optional[tf.compat.v1.Session] = None
        self._staged: List[int] = []                  # real batches staged per tower (Python's count)
        self._fillers: List[int] = []                 # filler elements staged per tower after the end
        self._real_at: List[Optional[int]] = []       # per tower: index of Tower.real in its run_ops
        self._problem_at: List[bool] = []             # per tower: Tower.problem follows Tower.real
        self._ended = False                           # a filler came: the wrapped source has ended
        # (tower, restaged?, index of its `real` value, index of its first fetch) in the running step's results
        self._planned: List[Tuple[int, bool, Optional[int], int]] = []

    def reset_state(self) -> None:
        self._input.reset_state()

    def size(self) -> int:
        return self._input.size()

    def failure(self) -> Optional[BaseException]:
        return self._failure or self._input.failure()

    def close(self) -> None:
        super().close()
        self._input.close()

    def _setup(self, specs: List[tf.TensorSpec]) -> None:
        if self._input.setup_done():
            if [(s.name, s.dtype, s.shape) for s in self._input.input_signature] != [
                    (s.name, s.dtype, s.shape) for s in specs]:
                raise InputSourceError("{}: the wrapped {} was set up with a different input signature".format(
                    self.name, self._input.name))
        else:
            self._setup_wrapped(self._input, specs)
        self._input._read_for_staging()

    def _lifecycle_hooks(self) -> List[tf.compat.v1.train.SessionRunHook]:
        return self._input._lifecycle_hooks() + [InputSourceHook(self)]

    def _source_stat_tensors(self) -> Dict[str, tf.Tensor]:
        return self._input._source_stat_tensors()

    def _feed_sample(self) -> Optional[Tuple[int, float, float, float]]:
        return self._input._feed_sample()

    def _datapoints_per_batch(self) -> int:
        return self._input._datapoints_per_batch()

    def _in_worker_advice(self) -> Optional[str]:
        inner = self._input._in_worker_advice()
        return None if inner is None else "StagingInput({})".format(inner)

    def _input_position(self) -> Optional[Any]:
        return self._input._input_position()

    def _build_tower(self) -> Tower:
        inner_tensors = self._input.get_input_tensors()
        inner = self._input._last_tower()
        position: Any = self._input._input_position()
        staged_seq = inner.seq is not None and position is not None and position.records
        if staged_seq:      # the batch's position number is staged with it, recorded when unstaged
            inner_tensors = inner_tensors + [inner.seq]
            position.widen((self.nr_stage + 1) * self._input._datapoints_per_batch())
        device = self._device
        if device is None and _caller_scope_is_empty():
            device = default_staging_device()
        scope = tf.device(device) if device is not None else contextlib.nullcontext()
        with scope:
            area = data_flow_ops.StagingArea([t.dtype for t in inner_tensors],
                                             shapes=[t.shape for t in inner_tensors])
            stage_op = area.put(inner_tensors, name="stage")
            outputs = tf.nest.flatten(area.get(name="unstage"))
            self._area_sizes.append(area.size(name="staged"))
            consume_op = outputs[0].op
            if staged_seq:
                seq = outputs.pop()
                outputs = position.recorded(outputs, seq)
            with tf.control_dependencies(outputs):
                after_unstage = area.size(name="staged_after_unstage")
            with tf.control_dependencies(outputs + [stage_op]):
                after_restage = area.size(name="staged_after_restage")
        self._areas.append(area)
        real = [] if inner.real is None else [inner.real]
        if real and inner.problem is not None:
            real.append(inner.problem)                # read right after `real`
        self._real_at.append(1 if real else None)
        self._problem_at.append(inner.problem is not None and bool(real))
        # what a consuming step fetches, made once: the size read after the restage runs the
        # stage op too (control dependency), so the op itself is not fetched
        self._step_ops.append(([after_restage] + real + inner.run_ops, [after_unstage]))
        return Tower(outputs, consume_op=consume_op, run_ops=[stage_op] + real + inner.run_ops,
                     stat_tensors=inner.stat_tensors, feed_fn=inner.feed_fn)

    def _claim(self) -> bool:
        """Wait until the wrapped source knows whether one more batch comes (see ``_claim_batch``).
        A failure of the wrapped source ends the claims: the batches staged before it are still
        consumed, and the step that finds nothing staged raises the failure."""
        if self._ended:
            return False
        while True:
            try:
                claimed = self._input._claim_batch(POLL_INTERVAL)
            except InputSourceError as err:      # e.g. FeedInput read a bad datapoint ahead
                self._set_failure(err)
                claimed = None
            if claimed is None and self.failure() is not None:
                claimed = False
            if claimed is not None:
                self._ended = self._ended or (not claimed and self.failure() is not None)
                return claimed

    def _raise_failure_before_step(self) -> None:
        """A failure of the wrapped source waits until the batches staged before it are used: the
        step that would take the bad batch raises it (in ``_step_plan``)."""

    def _start(self, session: tf.compat.v1.Session, coord: Any) -> None:
        """Prefill: stage up to ``nr_stage`` batches in every tower's area (fewer if the data ends)."""
        self._session = session
        self._staged = [0] * len(self._towers)
        self._fillers = [0] * len(self._towers)
        self._ended = False
        self._planned = []
        self._fill(range(len(self._towers)))

    def _stop(self, session: Optional[tf.compat.v1.Session]) -> None:
        self._session = None

    def _fill(self, towers: Iterable[int]) -> None:
        """Stage batches in ``towers`` until each holds ``nr_stage`` or the data ends (one run per batch)."""
        for index in towers:
            tower = self._towers[index]
            while self._staged[index] < self.nr_stage and self._claim():
                feeds = tower.feed_fn() if tower.feed_fn is not None else None
                session = self._session
                assert session is not None      # batches are staged only while the session runs
                try:
                    results = session.run(tower.run_ops, feed_dict=feeds)
                except tf.errors.OpError:
                    self.raise_if_failed()
                    raise
                self._count_restage(index, results, self._real_at[index])

    def _resync(self, session: tf.compat.v1.Session) -> None:
        """Set the staged counts from the areas themselves (one run)."""
        sizes = session.run(self._area_sizes)
        self._staged = [max(int(n) - fillers, 0) for n, fillers in zip(sizes, self._fillers)]

    def _count_restage(self, tower: int, run_results: List[Any], real_at: Optional[int]) -> None:
        """Count the batch a run of ``tower``'s stage op staged: a real one, or filler (the end,
        or a bad element: its problem becomes the failure the step that would take it raises)."""
        if real_at is None or bool(run_results[real_at]):
            self._staged[tower] += 1
            return
        self._fillers[tower] += 1
        self._ended = True
        problem = run_results[real_at + 1] if self._problem_at[tower] else b""
        if problem:
            self._set_failure(InputSourceError(problem.decode("utf-8", "replace")))

    def _step_plan(self, indices: List[int]) -> List[Tuple[List[Any], Dict[str, tf.Tensor], Any]]:
        """Unstage in every consuming tower; restage where the wrapped source claimed a batch.

        When a tower holds fewer than ``nr_stage`` batches (the data is ending), its count is
        first re-read from the area (one extra run), in case another run took a batch unseen
        since, so the step never unstages from an empty area."""
        if any(self._staged[i] < self.nr_stage for i in indices):
            self._resync(self._session)
            self._fill(indices)
        empty = [i for i in indices if self._staged[i] == 0]
        if empty:
            self.raise_if_failed()
            raise tf.errors.OutOfRangeError(None, None, "{}: end of data: every staged batch was consumed (tower {})"
                                            .format(self.name, empty[0]))
        plans, self._planned = [], []
        offset = 0                              # where this tower's run_ops start in the step's results
        for i in indices:
            tower = self._towers[i]
            restage = self._claim()
            tower_real_at = self._real_at[i]
            real_at = None if tower_real_at is None else offset + tower_real_at
            with_restage, without = self._step_ops[i]
            if restage:
                plans.append((with_restage, tower.stat_tensors, tower.feed_fn))
            else:
                plans.append((without, {}, None))
            self._planned.append((i, restage, real_at, offset))      # the size is the first fetch
            offset += len(with_restage if restage else without)
        return plans

    def _step_done(self, run_results: List[Any]) -> None:
        """Take the staged counts from the sizes the step read back; refill a tower that holds
        fewer than ``nr_stage`` (another run took a batch unseen) while the data lasts."""
        for i, restage, real_at, size_at in self._planned:
            if restage:
                self._count_restage(i, run_results, real_at)          # notes a filler: the data ended
            self._staged[i] = max(int(run_results[size_at]) - self._fillers[i], 0)
        towers = [i for i, _, _, _ in self._planned]
        self._planned = []
        self._fill(towers)

    def _step_failed(self, session: tf.compat.v1.Session) -> None:
        self._planned = []
        self._resync(session)
