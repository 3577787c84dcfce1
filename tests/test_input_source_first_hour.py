"""What a new user meets first: a clear error in eager mode, plain numbers from the statistics,
and no queue-size scalar for sources without a queue."""
import contextlib

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.input_source import QueueInput, TensorInput, hooked_session

from input_source_helpers import SPECS, Counting, build


def _eager():
    """Eager execution: TF 2's default; TF 1.15 builds graphs unless told otherwise (its
    ``enable_eager_execution`` works only at program start, so here TensorFlow's own scope)."""
    if tf.executing_eagerly():
        return contextlib.nullcontext()
    from tensorflow.python.eager import context
    return context.eager_mode()


def test_setup_in_eager_mode_says_how_to_build_in_graph_mode():
    with _eager(), pytest.raises(RuntimeError) as info:
        assert tf.executing_eagerly()
        QueueInput(Counting(2)).setup(SPECS)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("QueueInput.setup() builds graph ops, but TensorFlow is executing eagerly")
    assert "tf.compat.v1.disable_eager_execution()" in message and "with tf.Graph().as_default():" in message


def test_stats_summary_holds_plain_python_numbers():
    source = QueueInput(Counting(4))
    graph, (x, label) = build(source)
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        for _ in range(source.stats.warmup_steps + 3):
            run(label)
    summary = source.stats.summary()
    assert summary["steps"] == source.stats.warmup_steps + 3 and type(summary["steps"]) is int
    # The rates and CPU shares are None while the feeding thread has not measured them after the
    # warm-up steps (documented in InputStats.summary); everything present is a plain Python number.
    optional = {"delivered_per_s", "consumed_per_s", "dataflow_cpu_ms_per_step", "feed_cpu_ms_per_step",
                "empty_queue_fraction"}
    for key, value in summary.items():
        if value is None:
            assert key in optional, key
            continue
        assert type(value) in (int, float), (key, type(value))
        assert not isinstance(value, np.generic)
    for key in ("input_wait_s", "mean_wait_ms", "stall_fraction", "mean_queue_size"):
        assert type(summary[key]) is float, key
    assert isinstance(source.stats.last["queue_size"], float) and type(source.stats.last["queue_size"]) is float


def _summary_names(graph):
    return sorted(op.name for op in graph.get_operations() if op.type == "ScalarSummary")


def test_queue_size_scalar_only_for_sources_with_a_queue():
    tensor_source = TensorInput(lambda: [tf.zeros([3]), tf.constant(1)])
    tensor_graph, (_, tensor_label) = build(tensor_source)
    queue_source = QueueInput(Counting(3))
    queue_graph, (_, queue_label) = build(queue_source)
    for source, graph, label in [(tensor_source, tensor_graph, tensor_label), (queue_source, queue_graph, queue_label)]:
        with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
            run(label)
    assert [n for n in _summary_names(tensor_graph) if "queue_size" in n] == []
    assert [n for n in _summary_names(tensor_graph) if "wait_ms" in n] != []
    assert [n for n in _summary_names(queue_graph) if "queue_size" in n] != []
