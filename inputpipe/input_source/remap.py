"""remap_input_source: feed a model whose inputs are a superset/reordering of a source's.

Example::

    inner = QueueInput(df)                 # df yields [image, label]
    source = remap_input_source(inner, ["image", "label"])
    source.setup([score_spec, label_spec, image_spec])
    score, label, image = source.get_input_tensors()   # score is a placeholder
"""
from typing import Any, Dict, List, Optional, Sequence

import tensorflow as tf

from ..utils.arguments import ArgumentKindError
from .base import InputSource, Tower
from .errors import InputSourceError
from .signature import signature_placeholder
from .stats import InputStats

__all__ = ["remap_input_source", "RemappedInput"]


class RemappedInput(InputSource):
    """The InputSource returned by :func:`remap_input_source`: ``input`` provides the entries
    named ``names`` (in that order); every other entry of the signature is a placeholder.

    Example::

        source = RemappedInput(QueueInput(df), ["image", "label"])
    """

    def __init__(self, input: InputSource, names: Sequence[str]):
        if not isinstance(input, InputSource):
            raise ArgumentKindError("remap_input_source takes an InputSource, got {!r}".format(input))
        self._input = input
        self._names = list(names)
        super().__init__()

    @property
    def name(self) -> str:
        return self._input.name

    @name.setter
    def name(self, value: str) -> None:
        self._input.name = value

    @property
    def stats(self) -> InputStats:
        return self._input.stats

    @stats.setter
    def stats(self, value: InputStats) -> None:  # the base class assigns one; the inner's is used
        pass

    def reset_state(self) -> None:
        self._input.reset_state()

    def size(self) -> int:
        return self._input.size()

    def failure(self) -> Optional[BaseException]:
        return self._input.failure()

    def close(self) -> None:
        super().close()
        self._input.close()

    def get_hooks(self) -> List[tf.compat.v1.train.SessionRunHook]:
        self._require_setup()
        return self._input.get_hooks()

    def _lifecycle_hooks(self) -> List[tf.compat.v1.train.SessionRunHook]:
        return self._input._lifecycle_hooks()

    def _last_tower(self) -> Tower:
        return self._input._last_tower()

    def _input_position(self) -> Optional[Any]:
        return self._input._input_position()

    def _running_session(self) -> Optional[tf.compat.v1.Session]:
        return self._input._running_session()

    def _read_for_staging(self) -> None:
        super()._read_for_staging()
        self._input._read_for_staging()

    def _source_stat_tensors(self) -> Dict[str, tf.Tensor]:
        return self._input._source_stat_tensors()

    def _claim_batch(self, timeout: float) -> Optional[bool]:
        return self._input._claim_batch(timeout)

    def _scoped_setup(self) -> bool:
        return not self._input._tensorpack_protocol()    # its scope would be the wrapped source's own name

    def _setup(self, specs: List[tf.TensorSpec]) -> None:
        by_name = {s.name: s for s in specs}
        missing = [n for n in self._names if n not in by_name]
        if missing:
            raise InputSourceError("remap_input_source: names {} are not in the input signature {}".format(
                missing, list(by_name)))
        self._setup_wrapped(self._input, [by_name[n] for n in self._names])
        self._placeholders = {s.name: signature_placeholder(s, self.name)
                              for s in specs if s.name not in self._names}

    def _build_tower(self) -> Tower:
        provided = dict(zip(self._names, self._input.get_input_tensors()))
        tensors = [provided[s.name] if s.name in provided else self._placeholders[s.name]
                   for s in self._require_setup()]
        return Tower(tensors, consume_op=None)


def remap_input_source(input: InputSource, names: Sequence[str]) -> InputSource:
    """Let ``input``, which provides the entries ``names`` in that order, serve a signature that
    has more entries or another order; the other entries become placeholders.

    Example::

        source = remap_input_source(QueueInput(df), ["image", "label"])
        source.setup([tf.TensorSpec([None], tf.float32, "score"), label_spec, image_spec])
        score, label, image = source.get_input_tensors()
    """
    return RemappedInput(input, names)
