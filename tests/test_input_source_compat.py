"""tensorpack compatibility of inputpipe.input_source: names, module paths, construction,
placeholder names, variables as inputs, and the exception types tensorpack users catch."""
import threading

import numpy as np
import pytest
import tensorflow as tf

import inputpipe.input_source as isrc
from inputpipe.dataflow.remote import send_dataflow_zmq
from inputpipe.input_source import (
    BatchQueueInput, DummyConstantInput, FeedfreeInput, FeedInput, InputSourceError, PlaceholderInput, QueueInput,
    StagingInput, TensorInput, TFDatasetInput, ZMQInput, hooked_session, remap_input_source,
)
from inputpipe.utils.arguments import ArgumentKindError

from input_source_helpers import SPECS, Counting, Fixed, build, expected_x

# tensorpack 0.11: `[n for n in dir(tensorpack.input_source) if not n.startswith("_")]` minus
# its module-loading helpers (STATICA_HACK, global_import, iter_modules, module_name, os, srcpath)
TENSORPACK_NAMES = ["BatchQueueInput", "DummyConstantInput", "FeedInput", "FeedfreeInput", "InputSource",
                    "PlaceholderInput", "QueueInput", "StagingInput", "TFDatasetInput", "TensorInput", "ZMQInput",
                    "remap_input_source"]
TENSORPACK_MODULES = {
    "input_source": ["PlaceholderInput", "FeedInput", "FeedfreeInput", "QueueInput", "BatchQueueInput",
                     "DummyConstantInput", "TensorInput", "ZMQInput", "TFDatasetInput", "StagingInput"],
    "input_source_base": ["InputSource", "remap_input_source"],
}


def test_every_tensorpack_name_and_module_path_exists():
    import importlib

    missing = [n for n in TENSORPACK_NAMES if not hasattr(isrc, n)]
    assert missing == []
    for module, names in TENSORPACK_MODULES.items():
        mod = importlib.import_module("inputpipe.input_source." + module)
        assert sorted(mod.__all__) == sorted(names)
        assert all(getattr(mod, n) is getattr(isrc, n) for n in names)


def test_feedfree_sources_are_feedfree_inputs():
    ds = Counting(3)
    feedfree = [QueueInput(ds), BatchQueueInput(ds, 2), StagingInput(QueueInput(ds)), TensorInput(list),
                DummyConstantInput([[3], []]), ZMQInput("tcp://127.0.0.1:*", hwm=2)]
    with tf.Graph().as_default():
        feedfree.append(TFDatasetInput(tf.data.Dataset.range(3)))
    feedfree.append(TFDatasetInput(ds))
    assert all(isinstance(s, FeedfreeInput) for s in feedfree), [type(s).__name__ for s in feedfree]
    assert not isinstance(FeedInput(ds), FeedfreeInput)
    assert not isinstance(PlaceholderInput(), FeedfreeInput)
    feedfree[5].close()


# -- construction -----------------------------------------------------------------------------
@pytest.mark.parametrize("make, fragment", [
    (lambda: QueueInput([1, 2]), "QueueInput takes a DataFlow"),
    (lambda: BatchQueueInput(3, 2), "BatchQueueInput takes a DataFlow"),
    (lambda: FeedInput("abc"), "FeedInput takes a DataFlow"),
    (lambda: QueueInput(Counting), r"QueueInput takes a DataFlow \(an iterable with reset_state\(\)\), got the class "
                                   r"Counting \(make an instance\)"),
    (lambda: TensorInput(3), "TensorInput: get_tensor_fn must be callable"),
    (lambda: TFDatasetInput([1, 2]), "TFDatasetInput takes a tf.data.Dataset or a DataFlow"),
    (lambda: StagingInput(Counting(2)), "StagingInput wraps an InputSource"),
    (lambda: remap_input_source(Counting(2), ["x"]), "remap_input_source takes an InputSource"),
    (lambda: TFDatasetInput.dataflow_to_dataset([1], [tf.int32]), "takes a DataFlow"),
])
def test_an_argument_of_the_wrong_kind_matches_type_error_and_value_error(make, fragment):
    for caught in (TypeError, ValueError, ArgumentKindError):
        with pytest.raises(caught, match=fragment):
            make()


def test_input_source_error_is_a_value_error_and_a_runtime_error():
    assert issubclass(InputSourceError, ValueError) and issubclass(InputSourceError, RuntimeError)


@pytest.mark.parametrize("datapoints", ["list", "dict"])
def test_tf_dataset_input_takes_a_dataflow_like_tensorpack(datapoints):
    if datapoints == "list":
        df = Counting(4)
    else:
        df = Fixed([{"label": i, "x": expected_x(i)} for i in range(4)])
    source = TFDatasetInput(df)
    graph, (x, label) = build(source)
    assert x.shape.as_list() == [3] and label.shape.as_list() == []
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        got = [run([x, label]) for _ in range(4)]
        with pytest.raises(tf.errors.OutOfRangeError):
            run(label)
    for i, (xv, lv) in enumerate(got):
        np.testing.assert_array_equal(xv, expected_x(i))
        assert int(lv) == i and xv.dtype == np.float32


def test_tf_dataset_input_from_a_dataflow_names_itself_in_conversion_errors():
    source = TFDatasetInput(Fixed([[expected_x(0), 0.5]]))
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        with pytest.raises(tf.errors.OpError, match="TFDatasetInput: component 'label'.*int32.*float64"):
            run(label)


def test_zmq_input_to_dataset_reads_the_pushed_stream():
    source = ZMQInput("tcp://127.0.0.1:*", hwm=10)
    graph = tf.Graph()
    with graph.as_default():
        ds = source.to_dataset(SPECS)
        assert [s.shape.as_list() for s in ds.element_spec] == [[3], []]
        source.reset_state()              # bind now to learn the port; the dataset reads this socket
        sender = threading.Thread(target=send_dataflow_zmq, args=(Counting(5), source.endpoints[0]),
                                  kwargs={"num_epochs": 1}, name="test-sender")
        reader = TFDatasetInput(ds)
        reader.setup(SPECS)
        x, label = reader.get_input_tensors()
    sender.start()
    try:
        with tf.compat.v1.Session(graph=graph) as sess, reader.session(sess) as run:
            got = [run([x, label]) for _ in range(5)]
    finally:
        source.close()
        sender.join(5)
    assert not sender.is_alive()
    assert [int(v) for _, v in got] == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(got[3][0], expected_x(3))


# -- placeholder names ------------------------------------------------------------------------
def test_placeholders_are_named_after_the_signature_at_the_graph_root_and_reused():
    specs = [tf.TensorSpec([None, 3], tf.float32, "image"), tf.TensorSpec([None], tf.int32, "label")]
    graph = tf.Graph()
    with graph.as_default(), tf.name_scope("outer"):
        placeholder_input = PlaceholderInput()
        placeholder_input.setup(specs)
        image, label = placeholder_input.get_input_tensors()
        feed_input = FeedInput(Counting(2))
        feed_input.setup(specs)
        fed_image, fed_label = feed_input.get_input_tensors()
    assert (image.name, label.name) == ("image:0", "label:0")
    assert fed_image is image and fed_label is label          # tensorpack reuses them
    assert graph.get_tensor_by_name("image:0") is image
    assert image.shape.as_list() == [None, 3] and label.dtype == tf.int32


def test_remapped_placeholders_are_named_and_clashes_are_clear_errors():
    graph = tf.Graph()
    with graph.as_default():
        source = remap_input_source(QueueInput(Counting(2)), ["x", "label"])
        source.setup(SPECS + [tf.TensorSpec([None], tf.float32, "score")])
        assert source.get_input_tensors()[2].name == "score:0"
        tf.constant(1.0, name="weights")
        with pytest.raises(InputSourceError, match="'weights:0' made by a Const op"):
            PlaceholderInput().setup([tf.TensorSpec([], tf.float32, "weights")])
        with pytest.raises(InputSourceError, match="placeholder 'score:0' of dtype float32.*needs dtype int32"):
            PlaceholderInput().setup([tf.TensorSpec([None], tf.int32, "score")])
        other = PlaceholderInput()
        other.setup([tf.TensorSpec([4], tf.float32, "score")])      # compatible, more specific: a new one
        assert other.get_input_tensors()[0].name == "score_1:0"


# -- variables as inputs --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["ref_variable", "resource_variable", "ref_tensor"])
def test_tensor_input_accepts_variables_and_reads_them_every_step(kind):
    graph = tf.Graph()
    with graph.as_default():
        if kind == "ref_variable":
            var = tf.compat.v1.Variable(tf.zeros([2], tf.int32), use_resource=False)
            value = var
        elif kind == "resource_variable":
            var = tf.compat.v1.Variable(tf.zeros([2], tf.int32), use_resource=True)
            value = var
        else:
            var = tf.compat.v1.Variable(tf.zeros([2], tf.int32), use_resource=False)
            value = var._ref()
            assert value.dtype.name == "int32_ref"
        source = TensorInput(lambda: [value])
        source.setup([tf.TensorSpec([2], tf.int32, "v")])
        v, = source.get_input_tensors()
        add = tf.compat.v1.assign_add(var, [1, 2])
        init = tf.compat.v1.global_variables_initializer()
    assert v.dtype == tf.int32 and isinstance(v, tf.Tensor)
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        with source.session(sess) as run:
            first = run(v)
            sess.run(add)
            second = run(v)
    assert first.tolist() == [0, 0] and second.tolist() == [1, 2]


# -- exception types ------------------------------------------------------------------------------
class CustomError(Exception):
    def __init__(self, code, detail):
        super().__init__(code, detail)
        self.code = code


class RaisingWith:
    """Yields two good datapoints, then raises ``make_error()``."""

    def __init__(self, make_error):
        self.make_error = make_error

    def reset_state(self):
        pass

    def __iter__(self):
        yield [expected_x(0), 0]
        yield [expected_x(1), 1]
        raise self.make_error()


ERRORS = {
    "KeyError": (lambda: KeyError("missing key"), KeyError),
    "ValueError": (lambda: ValueError("bad value"), ValueError),
    "CustomError": (lambda: CustomError(7, "odd constructor"), CustomError),
    "FileNotFoundError": (lambda: FileNotFoundError(2, "No such file", "/x"), FileNotFoundError),
}
RAISING_SOURCES = {
    "FeedInput": lambda df: FeedInput(df),
    "QueueInput": lambda df: QueueInput(df),
    "StagingInput(QueueInput)": lambda df: StagingInput(QueueInput(df), nr_stage=2),
    "BatchQueueInput": lambda df: BatchQueueInput(df, 1),
}


@pytest.mark.parametrize("error", sorted(ERRORS))
@pytest.mark.parametrize("name", sorted(RAISING_SOURCES))
def test_the_dataflows_exception_type_reaches_the_training_thread(name, error):
    make_error, error_type = ERRORS[error]
    source = RAISING_SOURCES[name](RaisingWith(make_error))
    specs = SPECS if name != "BatchQueueInput" else [tf.TensorSpec([None, 3], tf.float32, "x"),
                                                     tf.TensorSpec([None], tf.int32, "label")]
    graph, (x, label) = build(source, specs)
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(error_type) as info:
            with hooked_session(sess, source) as run:
                for _ in range(10):
                    run(label)
    err = info.value
    assert isinstance(err, InputSourceError) and isinstance(err, ValueError)
    assert type(err.__cause__) is error_type
    assert str(make_error()) in str(err) or repr(make_error().args[0]) in str(err)
    assert name.split("(")[-1].rstrip(")") in str(err)
    if error == "CustomError":
        assert err.__cause__.code == 7


def test_an_exception_outside_exception_is_not_mixed_in():
    from inputpipe.input_source.errors import failure_error

    err = failure_error("QueueInput: stopped", KeyboardInterrupt())
    assert type(err) is InputSourceError and isinstance(err.__cause__, KeyboardInterrupt)
    err = failure_error("QueueInput: stopped", StopIteration())
    assert type(err) is InputSourceError            # would end a generator or loop silently
    assert type(failure_error("a", KeyError("k"))) is type(failure_error("b", KeyError("j")))   # cached


@pytest.mark.timeout(60)
@pytest.mark.parametrize("in_worker", [False, True])
def test_reset_state_while_the_session_runs_does_not_restart_the_dataflow(in_worker):
    # tensorpack's InferenceRunner calls input.reset_state() before each pass of size() steps; on a
    # running queue source that is a no-op there, so every pass is the epoch in order (resetting
    # the DataFlow under the feeding thread started each pass with the last batch queued before)
    from inputpipe.dataflow import BatchData, DataFromList
    from inputpipe.input_source import QueueInput, hooked_session
    source = QueueInput(BatchData(DataFromList([[i] for i in range(10)], shuffle=False), 2), in_worker=in_worker)
    with tf.Graph().as_default() as graph:
        source.setup([tf.TensorSpec([None], tf.int64, "label")])
        label, = source.get_input_tensors()
        with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
            passes = []
            for _ in range(3):
                with sess.as_default():
                    source.reset_state()
                passes.append([run(label).tolist() for _ in range(source.size())])
    assert passes == [[[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]] * 3


def test_the_model_reads_tensorpacks_tensor_names_in_the_scope_setup_made():
    from inputpipe.dataflow import DataFromList
    from inputpipe.input_source import BatchQueueInput, QueueInput

    def source(cls=QueueInput, *args):
        return cls(DataFromList([[np.float32(i)] for i in range(4)], shuffle=False), *args)

    with tf.Graph().as_default():
        first, second = source(), source()
        for s in (first, second):
            s.setup([tf.TensorSpec([], tf.float32, "x")])
        assert first.get_input_tensors()[0].name == "QueueInput/input_deque:0"
        assert second.get_input_tensors()[0].name == "QueueInput_1/input_deque:0"
        assert first.get_input_tensors()[0].name == "QueueInput/input_deque_1:0"      # a second tower
    with tf.Graph().as_default():
        scoped = source(BatchQueueInput, 2)
        with tf.compat.v1.name_scope("model"):
            scoped.setup([tf.TensorSpec([None], tf.float32, "x")])
        assert scoped.get_input_tensors()[0].name == "model/BatchQueueInput/input_deque:0"
