"""A graph trained from an InputSource that saves the input position restores in a process that
has only TensorFlow: the checkpoint's restore is plain TensorFlow (the Python function that
encodes the position at save time exists only in the training process), so a meta graph from the
training graph and a SavedModel of it load for inference, feeding the model's input tensor."""
import os
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.dataflow import DataFromList
from inputpipe.input_source import QueueInput, StagingInput, hooked_session

from fresh_python import run_python
from input_source_helpers import feeding_threads

pytestmark = pytest.mark.timeout(300)


def _train_and_save(tmp_path, wrap):
    """Train 3 steps of y = x @ w on a QueueInput (position tracked), save a checkpoint with its
    meta graph and a SavedModel; return the model input's name, the trained weight and paths."""
    df = DataFromList([[np.full([2], i, np.float32)] for i in range(20)], shuffle=False)
    source = wrap(QueueInput(df))
    with tf.Graph().as_default() as graph:
        source.setup([tf.TensorSpec([2], tf.float32, "x")])
        x, = source.get_input_tensors()
        w = tf.compat.v1.get_variable("w", [2, 1], initializer=tf.compat.v1.ones_initializer())
        y = tf.matmul(x[None], w, name="y")
        step = tf.compat.v1.assign_add(w, tf.fill([2, 1], 0.5) + 0 * tf.reduce_sum(y))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            with hooked_session(sess, source) as run:
                for _ in range(3):
                    run(step)
                checkpoint = saver.save(sess, str(tmp_path / "model"))
                export = str(tmp_path / "saved_model")
                tf.compat.v1.saved_model.simple_save(sess, export, {"x": x}, {"y": y})
            trained = sess.run(w)
    return x.name, y.name, trained, checkpoint, export


_LOADER = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    checkpoint, export, x_name, y_name = sys.argv[1:]
    for kind in ("meta", "new_saver", "saved_model"):
        with tf.Graph().as_default() as graph, tf.compat.v1.Session() as sess:
            if kind == "meta":
                tf.compat.v1.train.import_meta_graph(checkpoint + ".meta").restore(sess, checkpoint)
            elif kind == "new_saver":
                tf.compat.v1.train.import_meta_graph(checkpoint + ".meta")
                tf.compat.v1.train.Saver(var_list=tf.compat.v1.global_variables()).restore(sess, checkpoint)
            else:
                tf.compat.v1.saved_model.loader.load(sess, ["serve"], export)
            x, y = graph.get_tensor_by_name(x_name), graph.get_tensor_by_name(y_name)
            out = sess.run(y, {x: np.array([1.0, 2.0], np.float32)},
                           options=tf.compat.v1.RunOptions(timeout_in_ms=20000))
            print("RESULT", kind, out.ravel().tolist(), "inputpipe" in sys.modules)
""")


@pytest.mark.parametrize("wrap", [lambda s: s, lambda s: StagingInput(s, nr_stage=1, device="/cpu:0")],
                         ids=["QueueInput", "StagingInput"])
def test_the_training_graph_restores_for_inference_in_a_process_without_inputpipe(tmp_path, wrap):
    x_name, y_name, trained, checkpoint, export = _train_and_save(tmp_path, wrap)
    assert not feeding_threads()
    if "Staging" not in x_name:
        assert x_name == "QueueInput/input_deque:0"        # tensorpack's name, which restoring code feeds
    expected = (np.array([[1.0, 2.0]], np.float32) @ trained).ravel().tolist()
    assert trained.ravel().tolist() == [2.5, 2.5]
    done = run_python([sys.executable, "-c", _LOADER, checkpoint, export, x_name, y_name], capture_output=True,
                      text=True, timeout=240, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert results == ["RESULT {} {} False".format(kind, expected) for kind in ("meta", "new_saver", "saved_model")], \
        done.stdout
