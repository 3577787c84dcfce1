"""Input signatures and the checks that turn a datapoint into arrays matching them.

An input signature is a list of named ``tf.TensorSpec``. :class:`DatapointConverter` checks a
datapoint (a list/tuple of components, or a dict keyed by the spec names) against it and returns
one numpy array per spec. It refuses, with a message naming the source, the component, what was
expected and what came, anything that does not fit: a wrong number of components, a wrong shape,
or a dtype that cannot be converted without losing data (e.g. float64 -> int32).

Example::

    specs = normalize_signature([tf.TensorSpec([None, 4], tf.float32, "x")], "QueueInput")
    convert = DatapointConverter(specs, "QueueInput")
    x, = convert([np.zeros((2, 4))])          # float64 -> float32 is accepted (no overflow)
"""
from typing import Any, List, Sequence

import numpy as np
import tensorflow as tf

from ..utils.buffers import ALIGN_MIN_BYTES, aligned_empty
from ..utils.compat import shape_text
from .errors import InputSourceError

__all__ = ["normalize_signature", "DatapointConverter", "describe_value", "signature_placeholder"]


def normalize_signature(input_signature: Sequence[Any], owner: str) -> List[tf.TensorSpec]:
    """Check ``input_signature`` is a non-empty list of uniquely named ``tf.TensorSpec``."""
    if isinstance(input_signature, tf.TensorSpec):
        input_signature = [input_signature]
    specs = list(input_signature)
    if not specs:
        raise ValueError("{}: the input signature is empty".format(owner))
    names = set()
    for i, spec in enumerate(specs):
        if not isinstance(spec, tf.TensorSpec):
            raise TypeError("{}: input_signature[{}] must be a tf.TensorSpec, got {!r}".format(owner, i, spec))
        if not spec.name:
            raise ValueError("{}: input_signature[{}] ({}) has no name; give every tf.TensorSpec a "
                             "name, e.g. tf.TensorSpec([None], tf.int32, 'label')".format(owner, i, spec))
        if spec.name in names:
            raise ValueError("{}: two tf.TensorSpecs are named {!r}".format(owner, spec.name))
        names.add(spec.name)
    return specs


def signature_placeholder(spec: tf.TensorSpec, owner: str) -> tf.Tensor:
    """The placeholder of the model input ``spec``, named exactly ``spec.name`` at the root of the
    graph (outside any name scope), as tensorpack names them, so inference code finds it with
    ``graph.get_tensor_by_name("image:0")``. A placeholder of that name with the same dtype and
    shape is reused (several sources then feed the same input); one of the same name but a
    different, compatible shape gets a new placeholder (``image_1``), as in tensorpack.

    Example::

        image = signature_placeholder(tf.TensorSpec([None, 28, 28], tf.float32, "image"), "FeedInput")
        assert image.name == "image:0"
    """
    graph = tf.compat.v1.get_default_graph()
    try:
        existing = graph.get_tensor_by_name(spec.name + ":0")
    except (KeyError, ValueError):
        existing = None
    if existing is not None:
        if existing.op.type not in ("Placeholder", "PlaceholderWithDefault"):
            raise InputSourceError("{}: the graph already has a tensor {!r} made by a {} op, so the input {!r} "
                                   "cannot be a placeholder of that name; rename one of them".format(
                                       owner, existing.name, existing.op.type, spec.name))
        if existing.dtype != spec.dtype or not existing.shape.is_compatible_with(spec.shape):
            raise InputSourceError("{}: the graph already has a placeholder {!r} of dtype {} and shape {}; the "
                                   "input {!r} needs dtype {} and shape {}".format(
                                       owner, existing.name, existing.dtype.name, shape_text(existing.shape),
                                       spec.name, spec.dtype.name, shape_text(spec.shape)))
        if existing.shape.rank == spec.shape.rank and (
                spec.shape.rank is None or existing.shape.as_list() == spec.shape.as_list()):
            return existing
    with graph.name_scope(None):
        return tf.compat.v1.placeholder(spec.dtype, spec.shape, name=spec.name)


def describe_value(value: Any) -> str:
    """A short description of a datapoint component for error messages."""
    if isinstance(value, np.ndarray):
        return "{} array of shape {}".format(value.dtype, value.shape)
    return "{} {!r}".format(type(value).__name__, value if len(repr(value)) < 60 else repr(value)[:57] + "...")


def _astype(arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``arr`` converted to ``dtype`` in new memory; large results are 64-byte aligned, so TF
    shares them when fed instead of copying them a second time (see :mod:`inputpipe.utils.buffers`)."""
    if arr.size * dtype.itemsize < ALIGN_MIN_BYTES:
        return arr.astype(dtype)
    out = aligned_empty(arr.shape, dtype)
    np.copyto(out, arr, casting="unsafe")
    return out


def _lossless_cast(arr: np.ndarray, dtype: np.dtype) -> "np.ndarray | None":
    """``arr`` as ``dtype`` when no value changes beyond float rounding, else None."""
    src = arr.dtype
    if np.can_cast(src, dtype, casting="safe"):
        return _astype(arr, dtype)
    if src.kind in "biu" and dtype.kind in "iu":
        info = np.iinfo(dtype)
        if arr.size == 0 or (arr.min() >= info.min and arr.max() <= info.max):
            return _astype(arr, dtype)
        return None
    if src.kind in "biu" and dtype.kind == "f":
        limit = 2 ** (np.finfo(dtype).nmant + 1)
        if arr.size == 0 or np.abs(arr.astype(np.float64)).max() <= limit:
            return _astype(arr, dtype)
        return None
    if src.kind == "f" and dtype.kind == "f":
        out = _astype(arr, dtype)
        if np.isinf(out).sum() == np.isinf(arr).sum():
            return out
        return None
    return None


class DatapointConverter:
    """Turn datapoints into arrays matching an input signature, or raise a clear error.

    Accepted conversions are the lossless ones: identical dtype, numpy's "safe" casts, integers
    into a narrower integer or a float when every value fits exactly, and floats into a narrower
    float when nothing overflows. Anything else (float -> int, str -> number, ...) is an error.

    Example::

        convert = DatapointConverter(specs, "FeedInput")
        arrays = convert({"x": x, "label": 3})
    """

    def __init__(self, specs: Sequence[tf.TensorSpec], owner: str, drop_leading_dim: bool = False):
        self.specs = list(specs)
        self.owner = owner
        self._dtypes = [np.dtype(s.dtype.as_numpy_dtype) for s in self.specs]
        shapes = [s.shape for s in self.specs]
        if drop_leading_dim:
            shapes = [tf.TensorShape(s[1:]) if s.rank is not None else s for s in shapes]
        self._shapes = shapes
        self._names = [s.name for s in self.specs]

    @property
    def shapes(self) -> List[tf.TensorShape]:
        return list(self._shapes)

    def _error(self, message: str) -> InputSourceError:
        return InputSourceError("{}: {}".format(self.owner, message))

    def components(self, datapoint: Any) -> List[Any]:
        """The datapoint's components in signature order."""
        if isinstance(datapoint, dict):
            missing = [n for n in self._names if n not in datapoint]
            extra = sorted(str(k) for k in datapoint if k not in self._names)
            if missing or extra:
                raise self._error("a dict datapoint must have exactly the keys {}; missing {}, unexpected {}".format(
                    self._names, missing, extra))
            return [datapoint[n] for n in self._names]
        if not isinstance(datapoint, (list, tuple)):
            raise self._error("a datapoint must be a list, tuple or dict of {} components {}; got {}".format(
                len(self._names), self._names, describe_value(datapoint)))
        if len(datapoint) != len(self._names):
            raise self._error("a datapoint has {} components, expected {} ({})".format(
                len(datapoint), len(self._names), ", ".join(self._names)))
        return list(datapoint)

    def convert_component(self, index: int, value: Any) -> np.ndarray:
        name, dtype, shape = self._names[index], self._dtypes[index], self._shapes[index]
        if isinstance(value, np.ndarray) and value.dtype == dtype:
            arr = value
        else:
            try:
                arr = np.asarray(value)
            except Exception as err:  # ragged lists and the like
                raise self._error("component {!r} (#{}) cannot become an array: {}".format(name, index, err)) from err
            if arr.dtype != dtype:
                cast = _lossless_cast(arr, dtype) if arr.dtype.kind in "biuf" and dtype.kind in "biuf" else None
                if dtype.kind in "SUO" and arr.dtype.kind in "SU":
                    cast = arr.astype(object)
                if cast is None:
                    got = describe_value(value)
                    if not isinstance(value, np.ndarray):
                        got += " (numpy dtype {})".format(arr.dtype)
                    raise self._error(
                        "component {!r} (#{}): expected dtype {} with shape {}, got {}; converting would lose "
                        "data, so convert it in the DataFlow if that is what you want".format(
                            name, index, dtype.name, shape_text(shape), got))
                arr = cast
        if not shape.is_compatible_with(arr.shape):
            raise self._error("component {!r} (#{}): expected shape {} (dtype {}), got {}".format(
                name, index, shape_text(shape), dtype.name, describe_value(arr)))
        return arr

    def __call__(self, datapoint: Any) -> List[np.ndarray]:
        return [self.convert_component(i, v) for i, v in enumerate(self.components(datapoint))]
