"""The names tensorpack's ``input_source.input_source`` and ``input_source_base`` have outside
``__all__``, working here: the graph helpers, ``ShareSessionThread``, the callbacks an
InputSource returns (``Callback``, ``CallbackFactory``, ``RunOp``, run as SessionRunHooks),
``ProxyInputSource`` (forwards to the wrapped source, also under StagingInput), and the stand-in
``EnqueueThread`` naming what replaces it."""
import threading

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.dataflow import DataFromList
from inputpipe.input_source import FeedInput, InputSourceError, QueueInput, StagingInput
from inputpipe.input_source.input_source import (Callback, CallbackFactory, EnqueueThread, RunOp, ShareSessionThread,
                                                 add_moving_summary, dependency_of_fetches,
                                                 get_current_tower_context)
from inputpipe.input_source.input_source_base import (ProxyInputSource, build_or_reuse_placeholder,
                                                      get_op_tensor_name, get_sublist_by_names, get_tensors_inputs)

SPECS = [tf.TensorSpec([2], tf.float32, "x"), tf.TensorSpec([], tf.int32, "label")]


def datapoints(n):
    return [[np.array([i, -i], np.float32), i] for i in range(n)]


# -- graph helpers --------------------------------------------------------------------------
def test_placeholders_and_names():
    with tf.Graph().as_default():
        with tf.name_scope("somewhere"):
            image = build_or_reuse_placeholder(tf.TensorSpec([None, 4], tf.float32, "image"))
        assert image.name == "image:0" and image.op.type == "Placeholder"
        assert build_or_reuse_placeholder(tf.TensorSpec([None, 4], tf.float32, "image")) is image
        label = build_or_reuse_placeholder(tf.TensorSpec([None], tf.int32, "label"))
        assert get_op_tensor_name("image") == ("image", "image:0")
        assert get_op_tensor_name("split:1") == ("split", "split:1")
        assert get_sublist_by_names(SPECS, ["label", "x"]) == [SPECS[1], SPECS[0]]
        with pytest.raises(ValueError, match=r"get_sublist_by_names: 'y' is not among the names \['x', 'label'\]"):
            get_sublist_by_names(SPECS, ["y"])
        replacement = tf.constant([1, 2])
        assert get_tensors_inputs([image, label], [replacement], ["label"]) == [image, replacement]
        with pytest.raises(ValueError, match=r"'score:0' is not a model input \(the inputs are \['image:0', 'label:0'\]"):
            get_tensors_inputs([image, label], [replacement], ["score"])
        with pytest.raises(ValueError, match=r"get_tensors_inputs: 1 tensors but 2 names"):
            get_tensors_inputs([image, label], [replacement], ["label", "image"])


def test_dependency_of_fetches():
    with tf.Graph().as_default():
        a = tf.constant(1.0, name="a")
        b = tf.constant(2.0, name="b")
        total = tf.add(a, 3.0)
        assert dependency_of_fetches([total], a) and dependency_of_fetches({"t": total.op}, a.op)
        assert dependency_of_fetches("Add:0", a)
        assert not dependency_of_fetches([total], b)
        with pytest.raises(TypeError, match="op must be a tf.Operation or tf.Tensor, got 'a'"):
            dependency_of_fetches([total], "a")


def test_add_moving_summary_adds_scalar_summaries():
    with tf.Graph().as_default() as graph:
        with tf.name_scope("tower0"):
            loss = tf.constant(2.5, name="loss")
        steps = tf.constant(3, name="steps")
        summaries = add_moving_summary(loss, steps, decay=0.9)
        assert [s.op.name for s in summaries] == ["loss-summary", "steps-summary"]
        assert graph.get_collection(tf.compat.v1.GraphKeys.SUMMARIES) == summaries
        with tf.compat.v1.Session() as sess:
            values = [tf.compat.v1.Summary.FromString(v).value[0].simple_value for v in sess.run(summaries)]
        assert values == [2.5, 3.0]
        assert add_moving_summary(loss, summary_collections=["mine"])[0] in graph.get_collection("mine")
        with pytest.raises(ValueError, match="add_moving_summary: expected scalar tensors"):
            add_moving_summary(tf.zeros([2]))
        with pytest.raises(TypeError, match=r"unexpected keyword arguments \['decays'\]"):
            add_moving_summary(loss, decays=0.9)
    assert get_current_tower_context() is None


def test_share_session_thread_runs_under_the_starting_threads_session():
    with tf.Graph().as_default():
        counter = tf.Variable(0, name="counter")
        bump = counter.assign_add(5)
        seen = []
        wrapped = threading.Thread(target=lambda: seen.append(int(bump.eval())), name="bumper", daemon=True)
        thread = ShareSessionThread(wrapped)
        assert (thread.name, thread.daemon) == ("bumper", True)
        with tf.compat.v1.Session() as sess:
            sess.run(counter.initializer)
            with sess.as_default():
                thread.start()
            thread.join(10)
        assert seen == [5]
    with pytest.raises(TypeError, match="ShareSessionThread wraps a threading.Thread, got 3"):
        ShareSessionThread(3)


def test_enqueue_thread_names_queue_input_and_hooks():
    with pytest.raises(NotImplementedError, match=r"EnqueueThread: tensorpack's QueueInput thread is inside inputpipe's "
                                                  r"QueueInput\(ds\).*SessionRunHook from _get_callbacks\(\)"):
        EnqueueThread(None, None, None)


# -- callbacks of an InputSource ---------------------------------------------------------------
class CallbackProxy(ProxyInputSource):
    """A tensorpack-style proxy whose callbacks count what ran."""

    def _setup(self, specs):
        super()._setup(specs)
        self.events = []
        self.counter = tf.Variable(0, name="steps_seen", dtype=tf.int32)

        class Recorder(Callback):
            def _setup_graph(cb):
                self.events.append("setup_graph:" + tf.compat.v1.get_default_graph().get_name_scope())

            def _before_train(cb):
                self.events.append("before_train:" + str(tf.compat.v1.get_default_session() is not None))

            def _before_run(cb, ctx):
                return [self.counter]

            def _after_run(cb, ctx, values):
                self.events.append("after_run:{}".format(values.results[0]))

            def _after_train(cb):
                self.events.append("after_train")

        self.recorder = Recorder()

    def _get_callbacks(self):
        return [self.recorder,
                CallbackFactory(before_train=lambda cb: self.events.append("factory_before_train"),
                                after_train=lambda cb: self.events.append("factory_after_train")),
                RunOp(lambda: self.counter.initializer, run_before=True, run_as_trigger=True),
                RunOp(lambda: self.counter.assign_add(1), run_before=False, run_step=True)]


@pytest.mark.timeout(60)
def test_callbacks_run_as_session_run_hooks():
    source = CallbackProxy(QueueInput(DataFromList(datapoints(4), shuffle=False)))
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        x, label = source.get_input_tensors()
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        labels = [int(run(label)) for _ in range(3)]
    assert labels == [0, 1, 2]
    assert source.events[0] == "setup_graph:Recorder"
    assert source.events[1:3] == ["before_train:True", "factory_before_train"]
    runs = [e for e in source.events if e.startswith("after_run:")]
    assert len(runs) >= 3 and source.events[-2:] == ["after_train", "factory_after_train"]
    assert RunOp(tf.no_op).set_chief_only(False).chief_only is False


def test_a_callback_factory_with_trigger_is_refused():
    class Triggered(ProxyInputSource):
        def _get_callbacks(self):
            return [CallbackFactory(trigger=lambda cb: None)]

    source = Triggered(QueueInput(DataFromList(datapoints(2))))
    with tf.Graph().as_default():
        with pytest.raises(InputSourceError, match=r"CallbackFactory with trigger=.*SessionRunHook"):
            source.setup(SPECS)
    source.close()


# -- ProxyInputSource --------------------------------------------------------------------------
class Scaled(ProxyInputSource):
    def _get_input_tensors(self):
        x, label = self._input.get_input_tensors()
        return [x * 10.0, label]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inner", ["queue", "feed"])
def test_a_proxy_forwards_to_the_wrapped_source(inner):
    df = DataFromList(datapoints(5), shuffle=False)
    wrapped = QueueInput(df) if inner == "queue" else FeedInput(df)
    source = Scaled(wrapped)
    assert source.name == "Scaled" and source.size() == 5 and source.stats is wrapped.stats
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        x, label = source.get_input_tensors()
    assert wrapped.setup_done()
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        got = [run([x, label]) for _ in range(7)]
    assert [int(v) for _, v in got] == [0, 1, 2, 3, 4, 0, 1]
    np.testing.assert_array_equal(got[3][0], [30.0, -30.0])
    source.close()
    assert wrapped._closed


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inner", ["queue", "feed"])
def test_staging_input_stages_a_proxy(inner):
    df = DataFromList(datapoints(5), shuffle=False)
    source = StagingInput(Scaled(QueueInput(df) if inner == "queue" else FeedInput(df)), nr_stage=2, device="/cpu:0")
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        x, label = source.get_input_tensors()
    assert len(source._areas) == 1
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        got = [run([x, label]) for _ in range(6)]
        assert [int(n) for n in sess.run(source._area_sizes)] == [2]
    assert [int(v) for _, v in got] == [0, 1, 2, 3, 4, 0]
    np.testing.assert_array_equal(got[2][0], [20.0, -20.0])
    source.close()


def test_a_proxy_that_skips_the_wrapped_source_is_named():
    class Detached(ProxyInputSource):
        def _get_input_tensors(self):
            return [tf.zeros([2]), tf.constant(0)]

    source = Detached(QueueInput(DataFromList(datapoints(2))))
    graph = tf.Graph()
    with graph.as_default():
        source.setup(SPECS)
        source.get_input_tensors()
        with pytest.raises(InputSourceError, match=r"Detached: made 1 towers from 0 of the wrapped QueueInput: its "
                                                   r"_get_input_tensors\(\) must call the wrapped source's "
                                                   r"get_input_tensors\(\) once per call"):
            source._last_tower()
    source.close()
    with pytest.raises(TypeError, match=r"Scaled wraps an InputSource, got \[1\]"):
        Scaled([1])
