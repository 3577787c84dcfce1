"""Sources made of tensors you build: :class:`TensorInput` and :class:`DummyConstantInput`.

Example::

    source = TensorInput(lambda: [tf.random.uniform([8, 4])], size=100)
"""
from typing import Callable, List, Optional, Sequence

import tensorflow as tf

from .base import InputSource, Tower
from .errors import InputSourceError

__all__ = ["TensorInput", "DummyConstantInput"]


class TensorInput(InputSource):
    """Use the tensors returned by ``get_tensor_fn()`` (called once per tower) as inputs.

    ``size`` is the number of steps per epoch, if known.

    Example::

        def tensors():
            x = tf.random.uniform([32, 10])
            return [x, tf.reduce_sum(x, axis=1)]

        source = TensorInput(tensors, size=1000)
        source.setup([tf.TensorSpec([32, 10], tf.float32, "x"), tf.TensorSpec([32], tf.float32, "y")])
        x, y = source.get_input_tensors()
    """

    def __init__(self, get_tensor_fn: Callable[[], Sequence[tf.Tensor]], size: Optional[int] = None):
        super().__init__()
        if not callable(get_tensor_fn):
            raise TypeError("TensorInput: get_tensor_fn must be callable, got {!r}".format(get_tensor_fn))
        self.get_tensor_fn = get_tensor_fn
        self._size = None if size is None else int(size)

    def size(self) -> int:
        if self._size is None:
            raise NotImplementedError("{}: size was not given".format(self.name))
        return self._size

    def _make_tensors(self) -> List[tf.Tensor]:
        return tf.nest.flatten(self.get_tensor_fn())

    def _build_tower(self) -> Tower:
        tensors = self._make_tensors()
        if len(tensors) != len(self._specs):
            raise InputSourceError("{}: got {} tensors, the input signature has {} ({})".format(
                self.name, len(tensors), len(self._specs), ", ".join(s.name for s in self._specs)))
        for tensor, spec in zip(tensors, self._specs):
            if tensor.dtype != spec.dtype or not tensor.shape.is_compatible_with(spec.shape):
                raise InputSourceError("{}: tensor for {!r}: expected dtype {} and shape {}, got dtype {} and "
                                       "shape {}".format(self.name, spec.name, spec.dtype.name, spec.shape,
                                                         tensor.dtype.name, tensor.shape))
        return Tower(tensors, consume_op=[t.op for t in tensors])


class DummyConstantInput(TensorInput):
    """Zeros of the given fully defined ``shapes`` (one per signature entry, with its dtype):
    an input that costs nothing, to measure how fast the model runs without input cost.

    Example::

        source = DummyConstantInput([[64, 224, 224, 3], [64]])
        source.setup(specs)
        image, label = source.get_input_tensors()
    """

    def __init__(self, shapes: Sequence[Sequence[int]]):
        super().__init__(self._zeros)
        self.shapes = [tf.TensorShape(s) for s in shapes]
        for shape in self.shapes:
            if not shape.is_fully_defined():
                raise ValueError("DummyConstantInput: every shape must be fully defined, got {}".format(shape))

    def _zeros(self) -> List[tf.Tensor]:
        if len(self.shapes) != len(self._specs):
            raise InputSourceError("{}: {} shapes given, the input signature has {} entries".format(
                self.name, len(self.shapes), len(self._specs)))
        return [tf.zeros(shape, spec.dtype, name=spec.name) for shape, spec in zip(self.shapes, self._specs)]
