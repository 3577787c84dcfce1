"""tensorpack's ``ProxyInputSource``: an InputSource that forwards to the one it wraps.

In tensorpack's protocol, as tensorpack defines it: ``_setup`` sets the wrapped source up,
``_get_input_tensors()`` returns its tensors, ``_size()`` and ``_reset_state()`` are its own.
Subclasses override some of them (typically ``_get_input_tensors`` to transform the tensors). The
wrapped source keeps running as inputpipe's sources run: its hooks (threads, feeds, staging,
statistics, its DataFlow position) are part of this source's hooks, and ``StagingInput`` can wrap
the proxy. A subclass's ``_get_input_tensors()`` must call the wrapped source's
``get_input_tensors()`` once per call (as tensorpack's proxies do): each tower of the proxy is
fed by one tower of the wrapped source.

Example::

    class Normalized(ProxyInputSource):
        def _get_input_tensors(self):
            image, label = self._input.get_input_tensors()
            return [image / 255.0, label]

    source = Normalized(QueueInput(df))
"""
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf

from ..utils.arguments import ArgumentKindError
from .base import InputSource, Tower
from .errors import InputSourceError
from .stats import InputStats

__all__ = ["ProxyInputSource"]


class ProxyInputSource(InputSource):
    """An InputSource that forwards everything to ``input`` (tensorpack's protocol; see the module
    docstring). Its statistics are the wrapped source's; ``close()`` closes both.

    Example::

        class Renamed(ProxyInputSource):
            def _get_input_tensors(self):
                return [tf.identity(t, name="proxied") for t in self._input.get_input_tensors()]
    """

    def __init__(self, input: InputSource):
        if not isinstance(input, InputSource):
            raise ArgumentKindError("{} wraps an InputSource, got {!r}".format(type(self).__name__, input))
        self._input = input
        super().__init__()

    # -- tensorpack's protocol ---------------------------------------------------------------------
    def _setup(self, specs: List[tf.TensorSpec]) -> None:
        self._setup_wrapped(self._input, specs)

    def _get_input_tensors(self) -> List[tf.Tensor]:
        return self._input.get_input_tensors()

    def _get_callbacks(self) -> List[Any]:
        """This source's own callbacks: none (tensorpack returned the wrapped source's here; in
        inputpipe they are among this source's hooks already)."""
        return []

    def _size(self) -> int:
        return self._input.size()

    def _reset_state(self) -> None:
        self._input.reset_state()

    # -- the wrapped source keeps running ----------------------------------------------------------
    @property
    def stats(self) -> InputStats:
        return self._input.stats

    @stats.setter
    def stats(self, value: InputStats) -> None:  # the base class assigns one; the wrapped source's is used
        pass

    def failure(self) -> Optional[BaseException]:
        return self._failure or self._input.failure()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._input.close()

    def _lifecycle_hooks(self) -> List[tf.compat.v1.train.SessionRunHook]:
        own = super()._lifecycle_hooks()        # this source's start (its _reset_state) and callbacks
        return own[:1] + self._input._lifecycle_hooks() + own[1:]

    def _wrapped_towers(self) -> None:
        if len(self._towers) != len(self._input._towers):
            raise InputSourceError(
                "{}: made {} towers from {} of the wrapped {}: its _get_input_tensors() must call the wrapped source's "
                "get_input_tensors() once per call".format(self.name, len(self._towers), len(self._input._towers),
                                                          self._input.name))

    def _last_tower(self) -> Tower:
        """The proxy's tensors with the wrapped source's per-step work (for wrappers such as
        StagingInput)."""
        self._wrapped_towers()
        outer, inner = self._towers[-1], self._input._last_tower()
        return Tower(outer.tensors, consume_op=outer.consume_ops, run_ops=inner.run_ops,
                     stat_tensors=inner.stat_tensors, feed_fn=inner.feed_fn, real=inner.real, problem=inner.problem,
                     seq=inner.seq)

    def _step_plan(self, indices: List[int]) -> List[Tuple[List[Any], Dict[str, tf.Tensor], Any]]:
        self._wrapped_towers()
        return self._input._step_plan(indices)

    def _step_done(self, run_results: List[Any]) -> None:
        self._input._step_done(run_results)

    def _step_failed(self, session: tf.compat.v1.Session) -> None:
        self._input._step_failed(session)

    def _raise_failure_before_step(self) -> None:
        if self._failure is not None:
            self.raise_if_failed()
        self._input._raise_failure_before_step()       # which may defer it (StagingInput)

    def _claim_batch(self, timeout: float) -> Optional[bool]:
        return self._input._claim_batch(timeout)

    def _read_for_staging(self) -> None:
        super()._read_for_staging()
        self._input._read_for_staging()

    def _input_position(self) -> Optional[Any]:
        return self._input._input_position()

    def _running_session(self) -> Optional[tf.compat.v1.Session]:
        return self._input._running_session()

    def _source_stat_tensors(self) -> Dict[str, tf.Tensor]:
        return self._input._source_stat_tensors()

    def _feed_sample(self) -> Optional[Tuple[int, float, float, float]]:
        return self._input._feed_sample()

    def _datapoints_per_batch(self) -> int:
        return self._input._datapoints_per_batch()

    def _in_worker_advice(self) -> Optional[str]:
        return self._input._in_worker_advice()
