"""InputSource subclasses written against tensorpack 0.11's protocol run unchanged: no
``super().__init__()``, ``_setup(inputs)`` with a list of ``tf.TensorSpec``,
``_get_input_tensors()``, ``_size()``, ``_reset_state()`` (run under a default session when the
session starts), ``_get_callbacks()``, ``cached_name_scope()``, ``self._setup_done``,
``get_callbacks()``. Each style found in real code is run in a plain session, in a
``MonitoredTrainingSession`` through ``get_hooks()`` and under ``StagingInput``."""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.input_source import FeedfreeInput, InputSource, InputSourceError, StagingInput, remap_input_source

SPECS = [tf.TensorSpec([3], tf.float32, "x"), tf.TensorSpec([], tf.int32, "label")]


def expected_x(i):
    return np.array([i, i + 0.5, -i], np.float32)


# -- the styles of tensorpack-era code ---------------------------------------------------------
class DatasetIteratorInput(FeedfreeInput):
    """tf.data iterator built in _setup, initialised in _reset_state (a default session is set),
    with a size; no super().__init__()."""

    def __init__(self, n):
        self.n = n
        self.resets = 0

    def _setup(self, inputs):
        self._spec = inputs
        dataset = tf.data.Dataset.range(self.n).repeat().map(
            lambda i: (tf.cast(tf.stack([i, i, -i]), tf.float32) + tf.constant([0, 0.5, 0]),
                       tf.cast(i, tf.int32)))
        self._iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
        self._init_op = self._iterator.initializer

    def _reset_state(self):
        self.resets += 1
        self._init_op.run()                     # needs the default session, as in tensorpack

    def _size(self):
        return self.n

    def _get_input_tensors(self):
        ret = self._iterator.get_next()
        for t, spec in zip(ret, self._spec):
            t.set_shape(spec.shape)
        return ret


class _SharedSessionThread(threading.Thread):
    """tensorpack's ShareSessionThread: takes the default session when started."""

    def __init__(self, queue, placeholders, make_datapoint):
        super().__init__(name="test-tensorpack-enqueue", daemon=True)
        self.op = queue.enqueue(placeholders)
        self.close_op = queue.close(cancel_pending_enqueues=True)
        self.placeholders = placeholders
        self.make_datapoint = make_datapoint
        self.stop_event = threading.Event()

    def start(self):
        self.sess = tf.compat.v1.get_default_session()
        super().start()

    def run(self):
        with self.sess.as_default():
            i = 0
            try:
                while not self.stop_event.is_set():
                    self.op.run(feed_dict=dict(zip(self.placeholders, self.make_datapoint(i))))
                    i += 1
            except (tf.errors.CancelledError, tf.errors.OutOfRangeError):
                pass


class StartThreadHook(tf.compat.v1.train.SessionRunHook):
    """What tensorpack's StartProcOrThread callback does, as a SessionRunHook."""

    def __init__(self, thread):
        self.thread = thread

    def after_create_session(self, session, coord):
        with session.as_default():
            self.thread.start()

    def end(self, session):
        self.thread.stop_event.set()
        session.run(self.thread.close_op)
        self.thread.join(2)


class ThreadQueueInput(FeedfreeInput):
    """A queue built in _setup under cached_name_scope(), filled by a thread that a hook returned
    from _get_callbacks() starts (tensorpack's QueueInput pattern); no super().__init__()."""

    def __init__(self, count=1000):
        self.count = count

    def _setup(self, inputs):
        self._placeholders = [tf.compat.v1.placeholder(v.dtype, v.shape, name=v.name) for v in inputs]
        with self.cached_name_scope():
            self.queue = tf.compat.v1.FIFOQueue(8, [p.dtype for p in self._placeholders], name="input_queue")
        self.thread = _SharedSessionThread(self.queue, self._placeholders,
                                           lambda i: [expected_x(i % self.count), i % self.count])

    def _get_callbacks(self):
        return [StartThreadHook(self.thread)]

    def _get_input_tensors(self):
        with tf.device("/cpu:0"), self.cached_name_scope():
            ret = self.queue.dequeue(name="input_deque")
            for qv, v in zip(ret, self._placeholders):
                qv.set_shape(v.get_shape())
            return ret

    def _size(self):
        return self.count


class FeedHook(tf.compat.v1.train.SessionRunHook):
    """tensorpack's FeedInput._FeedCallback as a SessionRunHook: feeds every run."""

    def __init__(self, source):
        self.source = source

    def before_run(self, run_context):
        dp = next(self.source.itr)
        return tf.compat.v1.train.SessionRunArgs(fetches=[], feed_dict=dict(zip(self.source.placeholders, dp)))


class FedPlaceholderInput(InputSource):
    """Placeholders made in _setup and fed by a hook; a size; _reset_state restarts the data."""

    def __init__(self, n):
        self.n = n

    def _setup(self, inputs):
        self.placeholders = [tf.compat.v1.placeholder(v.dtype, v.shape, name=v.name) for v in inputs]
        self._hook = FeedHook(self)
        self.itr = None

    def _datapoints(self):
        while True:
            for i in range(self.n):
                yield [expected_x(i), i]

    def _reset_state(self):
        self.itr = self._datapoints()

    def _get_input_tensors(self):
        return self.placeholders

    def _get_callbacks(self):
        return [self._hook]

    def _size(self):
        return self.n


STYLES = {
    "dataset_iterator": lambda: DatasetIteratorInput(5),
    "thread_queue": lambda: ThreadQueueInput(5),
    "fed_placeholders": lambda: FedPlaceholderInput(5),
}


def _build(source, specs=SPECS):
    graph = tf.Graph()
    with graph.as_default():
        hooks = source.setup(specs)
        tensors = source.get_input_tensors()
    return graph, hooks, tensors


def _hooks_of(callbacks):
    """The hooks behind what setup()/get_callbacks() returned: with tensorpack imported (as
    .ci/tensorpack.sh runs this file) each hook comes wrapped as a tensorpack Callback too."""
    return [getattr(c, "hook", c) for c in callbacks]


def _no_test_threads():
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        if not [t for t in threading.enumerate() if t.name == "test-tensorpack-enqueue"]:
            return True
        time.sleep(0.01)
    return False


# -- each style in a plain session, a MonitoredTrainingSession and under StagingInput ----------
@pytest.mark.parametrize("style", sorted(STYLES))
def test_a_tensorpack_style_source_runs_in_a_plain_session(style):
    source = STYLES[style]()
    graph, hooks, (x, label) = _build(source)
    assert source.setup_done() and source._setup_done and source.size() == 5
    assert x.dtype == tf.float32 and x.shape.as_list() == [3] and label.dtype == tf.int32
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        got = [run([x, label]) for _ in range(7)]
    assert [int(v) for _, v in got] == [0, 1, 2, 3, 4, 0, 1]
    for xv, lv in got:
        np.testing.assert_array_equal(xv, expected_x(int(lv)))
    assert _no_test_threads()


@pytest.mark.parametrize("style", sorted(STYLES))
def test_a_tensorpack_style_source_runs_in_a_monitored_training_session(style):
    source = STYLES[style]()
    graph, hooks, (x, label) = _build(source)
    assert [type(h) for h in _hooks_of(hooks)] == [type(h) for h in source.get_hooks()]
    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.assign_add(step, 1)
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks(), log_step_count_steps=None,
                                                         save_summaries_steps=None,
                                                         save_summaries_secs=None) as sess:
            labels = [int(sess.run([label, train_op])[0]) for _ in range(6)]
    assert labels == [0, 1, 2, 3, 4, 0]
    assert _no_test_threads()


@pytest.mark.parametrize("style", ["dataset_iterator", "thread_queue"])
def test_staging_input_stages_the_tensors_of_a_tensorpack_style_source(style):
    inner = STYLES[style]()
    source = StagingInput(inner, nr_stage=2, device="/cpu:0")
    graph, hooks, (x, label) = _build(source)
    assert label.op.type == "Unstage"                     # the tensors come out of the staging area
    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.assign_add(step, 1)
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(tf.compat.v1.variables_initializer([step]))
        with source.session(sess) as run:
            got = [run([x, label, train_op]) for _ in range(6)]
            staged = sess.run(source._area_sizes)
    assert [int(v) for _, v, _ in got] == [0, 1, 2, 3, 4, 0]
    np.testing.assert_array_equal(got[3][0], expected_x(3))
    assert [int(n) for n in staged] == [2]
    if style == "dataset_iterator":
        assert inner.resets == 1                          # _reset_state ran once, before the prefill
    assert _no_test_threads()


def test_a_tensorpack_style_source_under_remap_input_source():
    source = remap_input_source(DatasetIteratorInput(5), ["x", "label"])
    graph, _, (score, x, label) = _build(source, [tf.TensorSpec([], tf.float32, "score")] + SPECS)
    assert score.op.type == "Placeholder" and score.name == "score:0"
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        assert [int(run(label)) for _ in range(3)] == [0, 1, 2]
        assert float(run(score, feed_dict={score: 2.5})) == 2.5


# -- the rest of tensorpack's base-class protocol ----------------------------------------------
def test_name_cached_name_scope_setup_done_and_get_callbacks():
    source = ThreadQueueInput()
    assert source.name == "ThreadQueueInput" and not source.setup_done() and not source._setup_done
    class Sizeless(FeedfreeInput):
        def _get_input_tensors(self):
            return []

    with pytest.raises(NotImplementedError, match="Sizeless has no known size"):
        Sizeless().size()
    graph, hooks, (x, label) = _build(source)
    assert source.queue.queue_ref.op.name == "ThreadQueueInput/input_queue"   # cached_name_scope() in _setup
    assert x.op.name == "ThreadQueueInput/input_deque"                      # the same scope, re-entered
    with graph.as_default():
        with source.cached_name_scope() as scope:
            assert scope == "ThreadQueueInput/"
    assert _hooks_of(source.get_callbacks()) == source.get_hooks() == _hooks_of(hooks)
    assert sum(isinstance(h, StartThreadHook) for h in _hooks_of(hooks)) == 1    # _get_callbacks() is called once
    with pytest.raises(RuntimeError, match="ThreadQueueInput.setup.. was already called"):
        source.setup(SPECS)


@pytest.mark.parametrize("wrap", ["none", "staging", "remap"])
def test_a_wrapped_tensorpack_style_source_names_its_ops_as_in_tensorpack(wrap):
    inner = ThreadQueueInput()
    source = {"none": inner, "staging": StagingInput(inner), "remap": remap_input_source(inner, ["x", "label"])}[wrap]
    graph = tf.Graph()
    with graph.as_default(), tf.name_scope("outer"):
        source.setup(SPECS)
        source.get_input_tensors()
    assert inner.queue.queue_ref.op.name == "outer/ThreadQueueInput/input_queue"


def test_a_user_may_name_the_source_and_base_sources_without_tensors_say_what_to_implement():
    class Named(DatasetIteratorInput):
        def __init__(self, n):
            super().__init__(n)
            self.name = "train_input"

    source = Named(3)
    graph, _, (x, label) = _build(source)
    assert source.name == "train_input"

    class Nothing(FeedfreeInput):
        pass

    with pytest.raises(NotImplementedError, match="Nothing implements neither _build_tower.. .inputpipe's protocol. "
                                                  "nor _get_input_tensors.. .tensorpack's."):
        _build(Nothing())


def test_the_number_of_tensors_must_match_the_signature():
    class TooFew(FeedfreeInput):
        def _get_input_tensors(self):
            return [tf.zeros([3])]

    with pytest.raises(InputSourceError, match=r"TooFew._get_input_tensors\(\) returned 1 tensors, the input "
                                               r"signature has 2 \(x, label\)"):
        _build(TooFew())


class CallbackFactory:
    """tensorpack's CallbackFactory, as migrated code may still carry it (lambdas taking the callback)."""

    def __init__(self, setup_graph=None, before_train=None, trigger=None, after_train=None):
        self._cb_setup_graph = setup_graph
        self._cb_before_train = before_train
        self._cb_trigger = trigger
        self._cb_after_train = after_train


class Callback:
    """The shape of tensorpack's Callback (setup_graph/before_train/before_run/after_run/after_train)."""

    def setup_graph(self, trainer):
        self.trainer = trainer
        self.graph = tf.compat.v1.get_default_graph()
        self._setup_graph()

    def _setup_graph(self):
        pass

    def before_train(self):
        self._before_train()

    def _before_train(self):
        pass

    def before_run(self, ctx):
        return self._before_run(ctx)

    def _before_run(self, ctx):
        return None

    def after_run(self, ctx, values):
        self._after_run(ctx, values)

    def _after_run(self, ctx, values):
        pass

    def after_train(self):
        self._after_train()

    def _after_train(self):
        pass

    def trigger_step(self):
        pass


class CountingCallback(Callback):
    """Builds an op in _setup_graph, runs it under the default session in _before_train, fetches
    a tensor with every run and counts what came back."""

    def __init__(self, log):
        self.log = log

    def _setup_graph(self):
        self.counter = tf.compat.v1.get_variable("calls", [], tf.int64, initializer=tf.zeros_initializer(),
                                                 trainable=False, collections=[])
        self.init = self.counter.initializer
        self.add = tf.compat.v1.assign_add(self.counter, 1)
        self.log.append("setup_graph")

    def _before_train(self):
        self.init.run()
        self.log.append("before_train")

    def _before_run(self, ctx):
        return [self.add]                     # tensorpack's Callback also takes a list of fetches

    def _after_run(self, ctx, values):
        self.log.append(int(values.results[0]))

    def _after_train(self):
        self.log.append("after_train")


class WithCallbacks(DatasetIteratorInput):
    def __init__(self, n, callbacks):
        super().__init__(n)
        self.callbacks = callbacks

    def _get_callbacks(self):
        return list(self.callbacks)


def test_tensorpack_callbacks_and_callback_factories_run_as_hooks():
    log = []
    factory = CallbackFactory(setup_graph=lambda cb: log.append("factory setup_graph"),
                              before_train=lambda cb: log.append(
                                  "factory before_train, default session: {}".format(
                                      tf.compat.v1.get_default_session() is not None)),
                              after_train=lambda cb: log.append("factory after_train"))
    source = WithCallbacks(5, [factory, CountingCallback(log)])
    graph, _, (x, label) = _build(source)
    with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
        labels = [int(run(label)) for _ in range(3)]
    assert labels == [0, 1, 2]
    assert log == ["factory setup_graph", "setup_graph", "factory before_train, default session: True",
                   "before_train", 1, 2, 3, "factory after_train", "after_train"]


def test_a_tensorpack_hook_wrapped_as_a_callback_is_the_hook():
    class HookToCallback(Callback):          # tensorpack's wrapper of a SessionRunHook
        def __init__(self, hook):
            self._hook = hook

    hook = tf.compat.v1.train.StopAtStepHook(last_step=10)
    source = WithCallbacks(5, [HookToCallback(hook)])
    _build(source)
    assert hook in source.get_hooks()


@pytest.mark.parametrize("returned, message", [
    (["not a callback"], r"WithCallbacks._get_callbacks\(\) returned 'not a callback' \(a str\), which inputpipe "
                         r"cannot run: an InputSource's extra work runs in tf.compat.v1.train.SessionRunHook objects "
                         r"here \(begin, after_create_session, before_run, after_run, end\); return those from "
                         r"_get_callbacks\(\)"),
    ([CallbackFactory(trigger=lambda cb: None)],
     r"WithCallbacks._get_callbacks\(\) returned a CallbackFactory with trigger=: an InputSource's callbacks cannot "
     r"use trigger\(\) \(tensorpack's rule too\), and inputpipe has no epochs to trigger it; do that work in a "
     r"tf.compat.v1.train.SessionRunHook \(e.g. its after_run\)"),
])
def test_callbacks_that_cannot_run_are_a_clear_error_naming_the_hook_way(returned, message):
    source = WithCallbacks(5, returned)
    with pytest.raises(InputSourceError, match=message):
        _build(source)


def test_closing_after_a_failed_step_still_ends_the_callbacks():
    log = []
    source = WithCallbacks(5, [CountingCallback(log)])
    graph, _, (x, label) = _build(source)
    with tf.compat.v1.Session(graph=graph) as sess:
        with pytest.raises(ZeroDivisionError):
            with source.session(sess) as run:
                run(label)
                raise ZeroDivisionError("the training loop failed")
    assert log == ["setup_graph", "before_train", 1, "after_train"]


def test_the_examples_tensorpack_style_source_runs_under_staging_input():
    import runpy
    from pathlib import Path

    example = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "custom_input_source.py"),
                             run_name="example")
    assert example["tensorpack_protocol_demo"]() == [6, 4, 4, 9, 6, 4]
    assert not [t for t in threading.enumerate() if t.name == "WordQueueInput-filler"]


def test_a_queue_input_subclass_reading_tensorpacks_internals_is_told_what_to_use():
    # a third-party FlexibleQueueInput overrode _setup to size the queue and start tensorpack's
    # EnqueueThread over self._inf_ds: the missing internal is named with the ways inputpipe has
    from inputpipe.dataflow import DataFromList
    from inputpipe.input_source import QueueInput

    class FlexibleQueueInput(QueueInput):
        def _setup(self, inputs):
            self.thread = (self._inf_ds, inputs)

    source = FlexibleQueueInput(DataFromList([[np.zeros(3, np.float32), 1]], shuffle=False))
    with tf.Graph().as_default():
        with pytest.raises(AttributeError, match=r"'FlexibleQueueInput' object has no attribute '_inf_ds': tensorpack's "
                                                 r"QueueInput internals \(.*\) do not exist in inputpipe.*"
                                                 r"QueueInput\(ds, queue=\.\.\.\) or set QueueInput.default_capacity"):
            source.setup(SPECS)
