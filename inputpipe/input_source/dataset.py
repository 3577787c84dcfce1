"""TFDatasetInput: a TF2 ``tf.data.Dataset`` as the input of a graph-mode model.

Example::

    with graph.as_default():
        ds = TFDatasetInput.dataflow_to_dataset(df, [tf.float32, tf.int32]).repeat().prefetch(4)
        source = TFDatasetInput(ds)
        source.setup(specs)
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, cast

import tensorflow as tf

from ..utils.arguments import ArgumentKindError, is_dataflow
from ..utils.compat import dataset_from_generator, shape_text, where
from .base import FeedfreeInput, Tower, timed_input
from .errors import InputSourceError
from ._iteration import close_dataflow
from .placement import on_host
from .signature import DatapointConverter

__all__ = ["TFDatasetInput"]

TypeSpec = Union[tf.dtypes.DType, tf.TensorSpec]


def _filler(spec: tf.TensorSpec) -> tf.Tensor:
    """A zero tensor that fits ``spec`` (unknown dimensions are 0): the element read past the end."""
    if spec.shape.rank is None:
        return tf.zeros([], spec.dtype)
    return tf.zeros([0 if d is None else d for d in spec.shape.as_list()], spec.dtype)


def _needs_shape_check(declared: tf.TensorShape, required: tf.TensorShape) -> bool:
    """True when ``required`` (the signature) fixes something ``declared`` (the dataset) leaves open."""
    if required.rank is None:
        return False
    if declared.rank is None:
        return True
    return any(want is not None and have is None for want, have in zip(required.as_list(), declared.as_list()))


def _shape_fits(tensor: tf.Tensor, spec: tf.TensorSpec) -> Tuple[tf.Tensor, tf.Tensor]:
    """``(fits, actual)``: whether ``tensor``'s run-time shape fits ``spec``, and that shape."""
    actual = tf.shape(tensor, out_type=tf.int64)
    rank = spec.shape.rank
    fits = tf.equal(tf.size(actual), rank)
    known = [(i, d) for i, d in enumerate(spec.shape.as_list()) if d is not None]
    if known:
        padded = tf.concat([actual, tf.zeros([rank], tf.int64)], 0)    # safe to index if the rank is wrong
        dims = tf.gather(padded, [i for i, _ in known])
        fits = tf.logical_and(fits, tf.reduce_all(tf.equal(dims, tf.constant([d for _, d in known], tf.int64))))
    return fits, actual


def _mismatch_message(spec: tf.TensorSpec, index: int, owner: str) -> str:
    # no quotes around the name: TF's Assert prints strings with their quotes escaped
    return "{}: component {} (#{}): expected shape {} (dtype {}), got a value of shape".format(
        owner, spec.name, index, shape_text(spec.shape), spec.dtype.name)


def _checked(tensor: tf.Tensor, spec: tf.TensorSpec, index: int, owner: str) -> tf.Tensor:
    """``tensor`` after a run-time check that its shape fits ``spec`` (an error naming ``owner``,
    the component, the expected and the actual shape), with the static shape set to ``spec``'s."""
    fits, actual = _shape_fits(tensor, spec)
    check = tf.debugging.Assert(fits, [_mismatch_message(spec, index, owner), actual],
                                name="check_{}_shape".format(index))
    with tf.control_dependencies([check]):
        tensor = tf.identity(tensor)
    tensor.set_shape(spec.shape)
    return tensor


def _flag_mismatch(parts: List[tf.Tensor], specs: List[tf.TensorSpec], unchecked: Sequence[int],
                   owner: str) -> Tuple[List[tf.Tensor], tf.Tensor, tf.Tensor]:
    """For staged reads, which must not fail one step early: ``(parts, ok, problem)`` where a
    component of the wrong shape makes ``ok`` False, ``problem`` the error message (empty when
    ``ok``) and every part filler of the signature's shape."""
    ok, problem = tf.constant(True), tf.constant("")
    for i in reversed(list(unchecked)):          # the message names the first bad component
        fits, actual = _shape_fits(parts[i], specs[i])
        text = tf.strings.join([_mismatch_message(specs[i], i, owner), tf.strings.format("{}", actual)], " ")
        problem = where(fits, problem, text)
        ok = tf.logical_and(ok, fits)
    kept = []
    for part, spec in zip(parts, specs):
        part = tf.cond(ok, lambda part=part: part, lambda spec=spec: _filler(spec))
        part.set_shape(spec.shape)
        kept.append(part)
    return kept, ok, problem


class TFDatasetInput(FeedfreeInput):
    """Read inputs from a ``tf.data.Dataset`` through an initializable iterator (initialized by
    the hook when the session starts, and by ``reset_state()`` once a session runs).

    As in tensorpack, ``dataset`` may also be a DataFlow: ``setup()`` then wraps it with
    :meth:`dataflow_to_dataset`, with the signature's dtypes and shapes (every datapoint, a
    list or a dict, is checked against them), and ``close()`` closes it.

    When the dataset leaves a dimension open that the signature fixes (e.g. a dataset made with
    dtypes only), every element is checked at run time: a value of the wrong shape fails the
    step with an error naming the source, the component, and the expected and actual shapes.

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

    def __init__(self, dataset: Union[tf.data.Dataset, Any]):
        super().__init__()
        self._dataflow = None
        if is_dataflow(dataset) and not isinstance(dataset, tf.data.Dataset):
            self._dataflow, dataset = dataset, None
        elif not isinstance(dataset, tf.data.Dataset):
            raise ArgumentKindError("TFDatasetInput takes a tf.data.Dataset or a DataFlow, got {!r}".format(dataset))
        self._dataset = dataset
        self._iterator = None
        self._session = None

    def _setup(self, specs: List[tf.TensorSpec]) -> None:
        if self._dataflow is not None:
            with on_host():
                self._dataset = _dataflow_dataset(self._dataflow, {s.name: s for s in specs}, None, self.name)
        graph = getattr(self._require_dataset()._variant_tensor, "graph", None)
        if graph is not tf.compat.v1.get_default_graph():
            raise InputSourceError(
                "{}: the dataset was built outside this graph (eagerly or in another tf.Graph); build it "
                "inside `with graph.as_default():`".format(self.name))
        self._element_names = self._check_element_spec(specs)
        self._iterator = None                 # made by the first tower: its kind depends on staging
        self._iterator_flagged = False

    def _require_dataset(self) -> tf.data.Dataset:
        """The dataset: given to ``__init__``, or made from the DataFlow by ``setup()``."""
        assert self._dataset is not None    # the DataFlow case has none only until _setup() made it
        return self._dataset

    def _check_element_spec(self, specs: List[tf.TensorSpec]) -> Optional[List[str]]:
        element = self._require_dataset().element_spec
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
        self._unchecked = []       # signature indices whose shape only a run-time check can ensure
        for index, (spec, got) in enumerate(zip(specs, have)):
            if not isinstance(got, tf.TensorSpec):
                raise InputSourceError("{}: component {!r} of the dataset is a {}, not a dense tensor".format(
                    self.name, spec.name, type(got).__name__))
            if got.dtype != spec.dtype or not got.shape.is_compatible_with(spec.shape):
                raise InputSourceError("{}: component {!r}: expected dtype {} and shape {}, the dataset gives dtype "
                                       "{} and shape {}".format(self.name, spec.name, spec.dtype.name, shape_text(spec.shape),
                                                                got.dtype.name, shape_text(got.shape)))
            if _needs_shape_check(got.shape, spec.shape):
                self._unchecked.append(index)
        return names if isinstance(element, dict) else None

    def _with_shape_checks(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """``dataset`` with a run-time shape check on the components the signature fixes more
        than the dataset does (its element_spec then has the signature's shapes)."""
        if not self._unchecked:
            return dataset
        specs, names, unchecked, owner = self._require_setup(), self._element_names, set(self._unchecked), self.name

        def check(*components):
            element: Any = components[0] if len(components) == 1 else components
            if names is not None:
                return {n: _checked(element[n], specs[i], i, owner) if i in unchecked else element[n]
                        for i, n in enumerate(names)}
            parts = tf.nest.flatten(element)
            parts = [_checked(t, specs[i], i, owner) if i in unchecked else t for i, t in enumerate(parts)]
            return tf.nest.pack_sequence_as(element, parts)

        return dataset.map(check)

    def _make_iterator(self, flagged: bool) -> Any:
        """The iterator all towers share: over the dataset, or (``flagged``, for staging) over
        ``(element, True)`` pairs followed by endless ``(filler, False)``."""
        if self._iterator is not None:
            if self._iterator_flagged != flagged:
                raise InputSourceError("{}: its tensors were already taken {} StagingInput; one source cannot feed "
                                       "both staged and unstaged towers".format(
                                           self.name, "through" if self._iterator_flagged else "without"))
            return self._iterator
        with on_host():      # iterators, dataset ops and their checks have no GPU kernels
            return self._new_iterator(flagged)

    def _flagged_reads(self) -> tf.data.Dataset:
        """``(element, real, problem)`` triples: the dataset's elements (``real`` True), a bad
        one replaced by filler with ``real`` False and ``problem`` its error message, then
        endless ``(filler, False, "")``. Nothing here fails: the consuming step raises."""
        specs, names, unchecked, owner = self._require_setup(), self._element_names, self._unchecked, self.name

        def flag(*components):
            element: Any = components[0] if len(components) == 1 else components
            parts = [element[n] for n in names] if names is not None else tf.nest.flatten(element)
            if not unchecked:
                return element, tf.constant(True), tf.constant("")
            parts, ok, problem = _flag_mismatch(parts, specs, unchecked, owner)
            packed = dict(zip(names, parts)) if names is not None else tf.nest.pack_sequence_as(element, parts)
            return packed, ok, problem

        real = self._require_dataset().map(flag)
        filler = tf.nest.map_structure(_filler, real.element_spec[0])
        return real.concatenate(tf.data.Dataset.from_tensors((filler, False, "")).repeat())

    def _new_iterator(self, flagged: bool) -> Any:
        dataset = self._flagged_reads() if flagged else self._with_shape_checks(self._require_dataset())
        self._iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
        self._iterator_flagged = flagged
        return self._iterator

    def _build_tower(self) -> Tower:
        flagged = self._staged_reads
        iterator = self._make_iterator(flagged)
        read, wait = timed_input(lambda: iterator.get_next(name="get_next"))
        element, real, problem = read if flagged else (read, None, None)
        if problem is not None and not self._unchecked:
            problem = None                   # never set: not worth a fetch per step
        if self._element_names is not None:
            outputs = [element[n] for n in self._element_names]
        else:
            outputs = tf.nest.flatten(element)
        for tensor, spec in zip(outputs, self._require_setup()):
            tensor.set_shape(spec.shape)
        return Tower(outputs, consume_op=outputs[0].op, stat_tensors={"wait": wait}, real=real, problem=problem)

    def _start(self, session: tf.compat.v1.Session, coord: Any) -> None:
        self._session = session
        if self._iterator is not None:
            session.run(self._iterator.initializer)

    def _stop(self, session: Optional[tf.compat.v1.Session]) -> None:
        self._session = None

    def _close_data(self) -> None:
        if self._dataflow is not None:
            close_dataflow(self._dataflow, self.name)

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
        return _dataflow_dataset(df, types, shapes, "dataflow_to_dataset({})".format(type(df).__name__))


def _dataflow_dataset(df: Any, types: Union[Sequence[TypeSpec], Dict[str, TypeSpec]],
                      shapes: Optional[Union[Sequence[Any], Dict[str, Any]]], owner: str) -> tf.data.Dataset:
    """:meth:`TFDatasetInput.dataflow_to_dataset`, with errors naming ``owner``."""
    if not is_dataflow(df):
        raise ArgumentKindError("{}: takes a DataFlow, got {!r}".format(owner, df))
    if isinstance(types, dict):
        names = list(types)
        entries = [types[n] for n in names]
        # dict types go with dict shapes
        shape_list = None if shapes is None else [cast(Dict[str, Any], shapes)[n] for n in names]
    elif isinstance(types, (list, tuple)):
        names = ["component{}".format(i) for i in range(len(types))]
        entries = list(types)
        shape_list = None if shapes is None else list(shapes)
        if shape_list is not None and len(shape_list) != len(entries):
            raise ValueError("{}: {} types but {} shapes".format(owner, len(entries), len(shape_list)))
    else:
        raise ArgumentKindError("{}: types must be a list or dict of dtypes, got {!r}".format(owner, types))
    specs = []
    for i, (name, entry) in enumerate(zip(names, entries)):
        if isinstance(entry, tf.TensorSpec):
            shape, dtype = entry.shape, entry.dtype
        else:
            shape, dtype = tf.TensorShape(None), tf.as_dtype(entry)
        if shape_list is not None:
            shape = tf.TensorShape(shape_list[i])
        specs.append(tf.TensorSpec(shape, dtype, name))
    convert = DatapointConverter(specs, owner)
    df.reset_state()

    signature: Union[Dict[str, tf.TensorSpec], Tuple[tf.TensorSpec, ...]]
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

    return dataset_from_generator(generate, signature)
