"""TFDatasetInput: a TF2 ``tf.data.Dataset`` as the input of a graph-mode model.

Example::

    with graph.as_default():
        ds = TFDatasetInput.dataflow_to_dataset(df, [tf.float32, tf.int32]).repeat().prefetch(4)
        source = TFDatasetInput(ds)
        source.setup(specs)
"""
from typing import Any, Dict, List, Optional, Sequence, Union

import tensorflow as tf

from .base import InputSource, Tower, timed_input
from .errors import InputSourceError
from .signature import DatapointConverter

__all__ = ["TFDatasetInput"]

TypeSpec = Union[tf.dtypes.DType, tf.TensorSpec]


def _filler(spec: tf.TensorSpec) -> tf.Tensor:
    """A zero tensor that fits ``spec`` (unknown dimensions are 0): the element read past the end."""
    if spec.shape.rank is None:
        return tf.zeros([], spec.dtype)
    return tf.zeros([0 if d is None else d for d in spec.shape.as_list()], spec.dtype)


class TFDatasetInput(InputSource):
    """Read inputs from a ``tf.data.Dataset`` through an initializable iterator (initialized by
    the hook when the session starts, and by ``reset_state()`` once a session runs).

    The dataset must be built in the graph the model is built in (inside
    ``with graph.as_default():``), and its elements must be a tuple/list in signature order, a dict
    keyed by the signature names, or a single tensor for a one-entry signature; dtypes must be
    identical and shapes compatible. The end of the dataset is a ``tf.errors.OutOfRangeError``.

    Under :class:`StagingInput`, a finite dataset loses nothing either: the staged towers read
    the dataset followed by endless filler elements flagged as such, so the read one step ahead
    never fails at the end; the filler is never unstaged (see ``StagingInput``).

    Example::

        with graph.as_default():
            ds = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(32).repeat()
            source = TFDatasetInput(ds)
            source.setup([tf.TensorSpec([None, 4], tf.float32, "x"), tf.TensorSpec([None], tf.int64, "y")])
            x, y = source.get_input_tensors()
    """

    def __init__(self, dataset: tf.data.Dataset):
        super().__init__()
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError("TFDatasetInput takes a tf.data.Dataset, got {!r}".format(dataset))
        self._dataset = dataset
        self._iterator = None
        self._session = None

    def _setup(self, specs: List[tf.TensorSpec]) -> None:
        graph = getattr(self._dataset._variant_tensor, "graph", None)
        if graph is not tf.compat.v1.get_default_graph():
            raise InputSourceError(
                "{}: the dataset was built outside this graph (eagerly or in another tf.Graph); build it "
                "inside `with graph.as_default():`".format(self.name))
        self._element_names = self._check_element_spec(specs)
        self._iterator = None                 # made by the first tower: its kind depends on staging
        self._iterator_flagged = False

    def _check_element_spec(self, specs: List[tf.TensorSpec]) -> Optional[List[str]]:
        element = self._dataset.element_spec
        names = [s.name for s in specs]
        if isinstance(element, dict):
            if sorted(element) != sorted(names):
                raise InputSourceError("{}: the dataset's elements have keys {}, the input signature needs {}".format(
                    self.name, sorted(element), names))
            have = [element[n] for n in names]
        else:
            have = list(element) if isinstance(element, (tuple, list)) else [element]
            if len(have) != len(specs):
                raise InputSourceError("{}: the dataset's elements have {} components, the input signature has {} "
                                       "({})".format(self.name, len(have), len(specs), ", ".join(names)))
        for spec, got in zip(specs, have):
            if not isinstance(got, tf.TensorSpec):
                raise InputSourceError("{}: component {!r} of the dataset is a {}, not a dense tensor".format(
                    self.name, spec.name, type(got).__name__))
            if got.dtype != spec.dtype or not got.shape.is_compatible_with(spec.shape):
                raise InputSourceError("{}: component {!r}: expected dtype {} and shape {}, the dataset gives dtype "
                                       "{} and shape {}".format(self.name, spec.name, spec.dtype.name, spec.shape,
                                                                got.dtype.name, got.shape))
        return names if isinstance(element, dict) else None

    def _make_iterator(self, flagged: bool) -> Any:
        """The iterator all towers share: over the dataset, or (``flagged``, for staging) over
        ``(element, True)`` pairs followed by endless ``(filler, False)``."""
        if self._iterator is not None:
            if self._iterator_flagged != flagged:
                raise InputSourceError("{}: its tensors were already taken {} StagingInput; one source cannot feed "
                                       "both staged and unstaged towers".format(
                                           self.name, "through" if self._iterator_flagged else "without"))
            return self._iterator
        dataset = self._dataset
        if flagged:
            filler = tf.nest.map_structure(_filler, dataset.element_spec)
            real = dataset.map(lambda *element: (element[0] if len(element) == 1 else element, True))
            dataset = real.concatenate(tf.data.Dataset.from_tensors((filler, False)).repeat())
        self._iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
        self._iterator_flagged = flagged
        return self._iterator

    def _build_tower(self) -> Tower:
        flagged = self._staged_reads
        iterator = self._make_iterator(flagged)
        read, wait = timed_input(lambda: iterator.get_next(name="get_next"))
        element, real = read if flagged else (read, None)
        if self._element_names is not None:
            outputs = [element[n] for n in self._element_names]
        else:
            outputs = tf.nest.flatten(element)
        for tensor, spec in zip(outputs, self._specs):
            tensor.set_shape(spec.shape)
        return Tower(outputs, consume_op=outputs[0].op, stat_tensors={"wait": wait}, real=real)

    def _start(self, session: tf.compat.v1.Session, coord: Any) -> None:
        self._session = session
        if self._iterator is not None:
            session.run(self._iterator.initializer)

    def _stop(self, session: Optional[tf.compat.v1.Session]) -> None:
        self._session = None

    def reset_state(self) -> None:
        """Re-initialize the iterator (start the dataset again) if a session is running."""
        if self._session is not None and self._iterator is not None:
            self._session.run(self._iterator.initializer)

    @staticmethod
    def dataflow_to_dataset(df: Any, types: Union[Sequence[TypeSpec], Dict[str, TypeSpec]],
                            shapes: Optional[Union[Sequence[Any], Dict[str, Any]]] = None) -> tf.data.Dataset:
        """Wrap a DataFlow as a ``tf.data.Dataset`` (``from_generator``), calling ``df.reset_state()``.

        ``types`` is a list of dtypes (list/tuple datapoints) or a dict name -> dtype (dict
        datapoints); entries may be ``tf.TensorSpec``\\ s to give shapes, or pass ``shapes`` (same
        structure). Every datapoint is checked (component count, shape, lossless dtype) with an
        error naming the component. A finite DataFlow gives a finite dataset: add ``.repeat()``.

        Example::

            ds = TFDatasetInput.dataflow_to_dataset(df, {"image": tf.uint8, "label": tf.int32},
                                                    shapes={"image": [28, 28], "label": []})
        """
        if isinstance(types, dict):
            names = list(types)
            entries = [types[n] for n in names]
            shape_list = None if shapes is None else [shapes[n] for n in names]
        elif isinstance(types, (list, tuple)):
            names = ["component{}".format(i) for i in range(len(types))]
            entries = list(types)
            shape_list = None if shapes is None else list(shapes)
            if shape_list is not None and len(shape_list) != len(entries):
                raise ValueError("dataflow_to_dataset: {} types but {} shapes".format(len(entries), len(shape_list)))
        else:
            raise TypeError("dataflow_to_dataset: types must be a list or dict of dtypes, got {!r}".format(types))
        specs = []
        for i, (name, entry) in enumerate(zip(names, entries)):
            if isinstance(entry, tf.TensorSpec):
                shape, dtype = entry.shape, entry.dtype
            else:
                shape, dtype = tf.TensorShape(None), tf.as_dtype(entry)
            if shape_list is not None:
                shape = tf.TensorShape(shape_list[i])
            specs.append(tf.TensorSpec(shape, dtype, name))
        convert = DatapointConverter(specs, "dataflow_to_dataset({})".format(type(df).__name__))
        df.reset_state()

        if isinstance(types, dict):
            signature = {s.name: tf.TensorSpec(s.shape, s.dtype) for s in specs}

            def generate():
                for datapoint in df:
                    yield dict(zip(names, convert(datapoint)))
        else:
            signature = tuple(tf.TensorSpec(s.shape, s.dtype) for s in specs)

            def generate():
                for datapoint in df:
                    yield tuple(convert(datapoint))

        return tf.data.Dataset.from_generator(generate, output_signature=signature)
