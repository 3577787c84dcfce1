"""Sources made of tensors you build: :class:`TensorInput` and :class:`DummyConstantInput`.

Example::

    source = TensorInput(lambda: [tf.random.uniform([8, 4])], size=100)
"""
from typing import Any, Callable, List, Optional, Sequence

import tensorflow as tf

from ..utils.arguments import require_callable
from ..utils.compat import shape_text
from .base import FeedfreeInput, Tower
from .errors import InputSourceError

__all__ = ["TensorInput", "DummyConstantInput"]


def _as_input_tensor(value: Any, name: str) -> tf.Tensor:
    """``value`` as a plain tensor: a variable (``tf.compat.v1.Variable``, resource or not) or a
    reference tensor (dtype ``float32_ref``...) is read through an ``Identity`` op, so each step
    takes the variable's current value and the tensor has the base dtype."""
    if isinstance(value, tf.Variable) or (isinstance(value, tf.Tensor) and value.dtype._is_ref_dtype):
        return tf.identity(value, name=name)
    if isinstance(value, tf.Tensor):
        return value
    return tf.convert_to_tensor(value, name=name)


class TensorInput(FeedfreeInput):
    """Use the tensors returned by ``get_tensor_fn()`` (called once per tower) as inputs.
    Variables (resource or reference ones) are accepted and read every step.

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
        self.get_tensor_fn = require_callable(get_tensor_fn, type(self).__name__, "get_tensor_fn")
        self._fixed_size = None if size is None else int(size)

    def _size(self) -> int:
        if self._fixed_size is None:
            raise NotImplementedError("{}: size was not given".format(self.name))
        return self._fixed_size

    def _make_tensors(self) -> List[Any]:
        return tf.nest.flatten(self.get_tensor_fn())

    def _build_tower(self) -> Tower:
        specs = self._require_setup()
        values = self._make_tensors()
        if len(values) != len(specs):
            raise InputSourceError("{}: got {} tensors, the input signature has {} ({})".format(
                self.name, len(values), len(specs), ", ".join(s.name for s in specs)))
        tensors = [_as_input_tensor(v, "{}_read".format(s.name)) for v, s in zip(values, specs)]
        for tensor, spec in zip(tensors, specs):
            if tensor.dtype != spec.dtype or not tensor.shape.is_compatible_with(spec.shape):
                raise InputSourceError("{}: tensor for {!r}: expected dtype {} and shape {}, got dtype {} and "
                                       "shape {}".format(self.name, spec.name, spec.dtype.name, shape_text(spec.shape),
                                                         tensor.dtype.name, shape_text(tensor.shape)))
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
        specs = self._require_setup()
        if len(self.shapes) != len(specs):
            raise InputSourceError("{}: {} shapes given, the input signature has {} entries".format(
                self.name, len(self.shapes), len(specs)))
        return [tf.zeros(shape, spec.dtype, name=spec.name) for shape, spec in zip(self.shapes, specs)]
