"""tensorpack's trainer with inputpipe's data side, tensorpack 0.11 installed alongside.

The training runs are tensorpack's examples (tests/tensorpack_examples/: mnist-convnet and
cifar-convnet, with their data imports changed to inputpipe) run as scripts for a few steps on
files written here; each prints what its steps and inference passes took, checked here by value.
They need tensorpack 0.11 and a TensorFlow that still has ``tf.compat.v1.layers`` (tensorpack's
layers are built on it; Keras 3, from TF 2.16 on, removed it): the TF 2.15 stack, which
``.ci/tensorpack.sh`` builds and runs this file on. Elsewhere the file is skipped, saying so.
The other direction (tensorpack's DataFlows and tensorpack-style InputSources inside inputpipe)
is checked here with real tensorpack objects too.
"""
import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TF215_STACK = "the TF 2.15 stack of .ci/tensorpack.sh"
if importlib.util.find_spec("tensorpack") is None:
    pytest.skip("tensorpack 0.11 is not installed: this file runs on {} (tensorpack's layers need "
                "tf.compat.v1.layers, which Keras 3 removed)".format(TF215_STACK), allow_module_level=True)

import tensorflow as tf  # noqa: E402

if not hasattr(tf.compat.v1, "layers") or tf.__version__ >= "2.16":
    pytest.skip("TensorFlow {} has no tf.compat.v1.layers (Keras 3), which tensorpack's layers need: this file runs "
                "on {}".format(tf.__version__, TF215_STACK), allow_module_level=True)

import tensorpack  # noqa: E402
from tensorpack.callbacks import CallbackFactory  # noqa: E402
from tensorpack.callbacks.group import Callbacks  # noqa: E402
from tensorpack.dataflow import DataFromList as TensorpackDataFromList  # noqa: E402
from tensorpack.dataflow import MapData as TensorpackMapData  # noqa: E402

from inputpipe.dataflow import BatchData, DataFromList, FakeData, MapData, MultiProcessRunnerZMQ  # noqa: E402
from inputpipe.input_source import (FeedInput, InputSource, QueueInput, StagingInput, TFDatasetInput,  # noqa: E402
                                    hooked_session)
from inputpipe.tensorpack_interop import registered_pairs  # noqa: E402

# a module-scoped fixture is made once: the module's tests run in one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_tensorpack_trainer")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXAMPLES = HERE / "tensorpack_examples"
TRAIN_IMAGES, TEST_IMAGES, BATCH = 48, 10, 8


# ---------------------------------------------------------------------------------------- helpers

def _write_idx(path, array, magic):
    with gzip.open(str(path), "wb") as f:
        f.write(np.array([magic] + list(array.shape), dtype=">u4").tobytes() + array.astype(np.uint8).tobytes())


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    """MNIST files whose image i has pixel (0, 0) = i and label i % 10."""
    directory = tmp_path_factory.mktemp("mnist")
    for prefix, count in (("train", TRAIN_IMAGES), ("t10k", TEST_IMAGES)):
        images = np.zeros((count, 28, 28), np.uint8)
        images[:, 0, 0] = np.arange(count)
        images[:, 5:20, 5:20] = 100
        _write_idx(directory / (prefix + "-images-idx3-ubyte.gz"), images, 2051)
        _write_idx(directory / (prefix + "-labels-idx1-ubyte.gz"), np.arange(count) % 10, 2049)
    return directory


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory):
    """CIFAR-10 files: 5 training batches of 16 images, a test batch of 6."""
    sys.path.insert(0, str(HERE))
    try:
        from test_dataset_readers import make_cifar
    finally:
        sys.path.remove(str(HERE))
    return make_cifar(str(tmp_path_factory.mktemp("cifar")), rows=16, test_rows=6)


def run_example(script, *args, expect_failure=False, timeout=240):
    """Run a tensorpack example script; its RESULT line as a dict (or the process on failure)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(EXAMPLES / script)] + [str(a) for a in args], cwd=str(EXAMPLES),
                          env=env, capture_output=True, text=True, timeout=timeout)
    if expect_failure:
        assert proc.returncode != 0, proc.stdout[-2000:]
        return proc
    assert proc.returncode == 0, proc.stderr[-6000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout[-2000:]
    return json.loads(lines[0][len("RESULT "):])


def batches_of(ids):
    return [ids[i:i + BATCH] for i in range(0, len(ids), BATCH)]


def _python(code):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


SPECS = [tf.TensorSpec([], tf.int64, "x")]


# ------------------------------------------------------------------------------- the registration

@pytest.mark.timeout(150)
@pytest.mark.parametrize("order", ["tensorpack first", "inputpipe first"])
def test_tensorpack_accepts_inputpipes_classes_whichever_is_imported_first(order):
    imports = ["import tensorpack", "import inputpipe.dataflow as df, inputpipe.input_source as src"]
    if order == "inputpipe first":
        imports.reverse()
    code = "\n".join(imports + [
        "from tensorpack.dataflow import DataFlow, RNGDataFlow, ProxyDataFlow",
        "from tensorpack.input_source import InputSource, FeedfreeInput, QueueInput, StagingInput, FeedInput",
        "flow = df.FakeData([[2]], 4)",
        "queue = src.QueueInput(flow)",
        "checks = [isinstance(flow, DataFlow), isinstance(flow, RNGDataFlow), isinstance(df.MapData(flow, len), ProxyDataFlow),",
        "          isinstance(queue, QueueInput), isinstance(queue, FeedfreeInput), isinstance(queue, InputSource),",
        "          isinstance(src.StagingInput(queue), StagingInput), isinstance(src.FeedInput(flow), FeedInput),",
        "          isinstance(src.FeedInput(flow), FeedfreeInput)]",
        "print(*checks)"])
    assert _python(code) == ["True"] * 8 + ["False"]


@pytest.mark.timeout(150)
def test_inputpipe_imports_no_tensorpack_and_registers_once_tensorpack_is_imported():
    code = ("import sys, inputpipe.dataflow, inputpipe.input_source; from inputpipe.tensorpack_interop import "
            "registered_pairs; print('tensorpack' in sys.modules, len(registered_pairs()))\n"
            "import tensorpack; print(len(registered_pairs()))")
    assert _python(code) == ["False", "0", "3"]


def test_pairs_are_registered_in_this_process():
    assert sorted(registered_pairs()) == [("tensorpack.dataflow.base", "inputpipe.dataflow.base"),
                                         ("tensorpack.input_source.input_source", "inputpipe.input_source"),
                                         ("tensorpack.train.interface", "inputpipe.input_source")]


# ------------------------------------------------------------- inputpipe's DataFlows in tensorpack

def test_train_config_and_tensorpacks_sources_take_an_inputpipe_dataflow():
    flow = BatchData(DataFromList([[i] for i in range(6)], shuffle=False), 2)
    config = tensorpack.TrainConfig(model=tensorpack.ModelDesc(), dataflow=flow, max_epoch=1)
    assert config.dataflow is flow and config.steps_per_epoch == 3
    assert tensorpack.QueueInput(flow).ds is flow and tensorpack.FeedInput(flow).ds is flow
    runner = tensorpack.InferenceRunner(flow, [tensorpack.ScalarStats("cost")])
    assert isinstance(runner._input_source, tensorpack.FeedInput) and runner._size == 3


def test_dataflow_to_dataset_and_test_data_speed_iterate_an_inputpipe_dataflow():
    flow = DataFromList([[i, float(i) / 2] for i in range(5)], shuffle=False)
    with tf.Graph().as_default():
        dataset = tensorpack.input_source.TFDatasetInput.dataflow_to_dataset(flow, [tf.int64, tf.float32])
        element = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        with tf.compat.v1.Session() as sess:
            values = [tuple(v.item() for v in sess.run(element)) for _ in range(5)]
    assert values == [(i, i / 2) for i in range(5)]
    speed = tensorpack.dataflow.TestDataSpeed(MapData(FakeData([[3]], 20, random=False), lambda dp: dp), size=12)
    speed.start()        # tensorpack's loop over the flow: reset_state, iter, 12 datapoints, no error


# ------------------------------------------------------------ inputpipe's InputSources in tensorpack

def test_setup_returns_hooks_that_are_tensorpack_callbacks_and_run_in_a_plain_session():
    source = QueueInput(DataFromList([[i] for i in range(4)], shuffle=False), infinite=False)
    with tf.Graph().as_default() as graph:
        callbacks = source.setup(SPECS)
        x, = source.get_input_tensors()
    assert callbacks == source.get_callbacks() and len(callbacks) == len(source.get_hooks())
    for callback, hook in zip(callbacks, source.get_hooks()):
        assert isinstance(callback, tensorpack.callbacks.Callback) and callback.hook is hook
        assert isinstance(callback, tf.compat.v1.train.SessionRunHook) and not callback.chief_only
    with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
        assert [int(run(x)) for _ in range(4)] == [0, 1, 2, 3]


def test_in_tensorpacks_callback_protocol_a_run_fetching_nothing_of_its_own_takes_a_batch():
    # InferenceRunner's way: hooked_sess.run(fetches=[]) while its inferencers fetch the outputs
    from tensorflow.python.training.monitored_session import _HookedSession

    source = QueueInput(DataFromList([[i] for i in range(6)], shuffle=False), infinite=False)
    with tf.Graph().as_default() as graph:
        callbacks = Callbacks(source.setup(SPECS))
        x, = source.get_input_tensors()
        callbacks.setup_graph(None)
    with tf.compat.v1.Session(graph=graph) as sess:
        with sess.as_default():
            callbacks.before_train()
        hooked = _HookedSession(sess, callbacks.get_hooks())
        taken = [int(hooked.run(x)), hooked.run([]), int(hooked.run(x)), int(hooked.run({"x": x})["x"])]
        with sess.as_default():
            callbacks.after_train()
    assert taken == [0, [], 2, 3]
    assert source.stats.summary()["steps"] == 4


def test_launch_train_with_config_stages_inputpipes_queue_with_inputpipes_staging():
    from tensorpack.train.interface import apply_default_prefetch

    multi = tensorpack.SyncMultiGPUTrainerReplicated(2, mode="cpu")
    ours = QueueInput(FakeData([[2]], 4))
    staged = apply_default_prefetch(ours, multi)
    assert type(staged) is StagingInput and staged._input is ours
    theirs = tensorpack.QueueInput(FakeData([[2]], 4))
    assert type(apply_default_prefetch(theirs, multi)) is tensorpack.StagingInput      # tensorpack's rule stays
    assert apply_default_prefetch(ours, tensorpack.SimpleTrainer()) is ours


# -------------------------------------------------------- tensorpack's examples, data from inputpipe

@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("trainer,source", [("queue", "queue"), ("simple", "queue-worker"), ("simple", "feed"),
                                            ("simple", "dataflow")])     # (simple, queue): the resume test
def test_mnist_example_trains_on_every_batch_in_order_and_validates_on_every_test_image(
        mnist_dir, tmp_path, trainer, source):
    result = run_example("mnist_convnet.py", "--data", mnist_dir, "--logdir", tmp_path, "--trainer", trainer,
                         "--input", source, "--epochs", 2)
    assert result["global_step"] == 12
    assert result["steps"] == batches_of(list(range(TRAIN_IMAGES)) * 2)      # 6 steps an epoch, in order
    assert len(result["inference"]) == 2                                      # one pass per epoch ...
    for labels in result["inference"]:
        assert sorted(labels) == list(range(TEST_IMAGES))                     # ... over every test image once
    assert sorted(p.name for p in tmp_path.glob("model-*.index")) == ["model-12.index", "model-6.index"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mnist_example_continues_its_data_from_a_model_saver_checkpoint(mnist_dir, tmp_path):
    first = run_example("mnist_convnet.py", "--data", mnist_dir, "--logdir", tmp_path / "a", "--epochs", 1,
                        "--steps-per-epoch", 4)
    assert first["steps"] == batches_of(list(range(32)))
    position = json.loads(tf.train.load_variable(str(tmp_path / "a" / "model-4"), "QueueInput/input_position"))
    assert position["state"]["input"]["position"] == 32
    second = run_example("mnist_convnet.py", "--data", mnist_dir, "--logdir", tmp_path / "b", "--epochs", 2,
                         "--steps-per-epoch", 4, "--load", tmp_path / "a" / "model-4")
    assert second["global_step"] == 12                                        # 4 restored + 8
    assert second["steps"] == batches_of(list(range(32, TRAIN_IMAGES)) + list(range(TRAIN_IMAGES)))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("trainer,source,workers", [("replicated", "queue", 0), ("parameter", "staging", 0),
                                                    ("replicated", "dataflow", 0), ("replicated", "queue", 2)])
def test_cifar_example_trains_on_two_towers(cifar_dir, tmp_path, trainer, source, workers):
    from inputpipe.dataflow import dataset

    labels = [dp[1] for dp in _iterate(dataset.Cifar10("train", shuffle=False, dir=cifar_dir))]
    test_labels = [dp[1] for dp in _iterate(dataset.Cifar10("test", shuffle=False, dir=cifar_dir))]
    result = run_example("cifar_convnet.py", "--data", cifar_dir, "--logdir", tmp_path, "--trainer", trainer,
                         "--input", source, "--workers", workers, "--epochs", 2)
    assert result["global_step"] == 10 and len(result["steps"]) == 10       # 80 images, 8 a batch, 2 towers
    for step in result["steps"]:
        assert [len(tower) for tower in step] == [BATCH, BATCH]
    if workers == 0:     # one pass a epoch: the towers together took every image once (the flow shuffles)
        for epoch in (result["steps"][:5], result["steps"][5:]):
            assert sorted(label for step in epoch for tower in step for label in tower) == sorted(labels)
    assert [sorted(p) for p in result["inference"]] == [sorted(test_labels)] * 2


def _iterate(flow):
    flow.reset_state()
    return list(flow)


# ------------------------------------------------------------------------- promises in the trainer

@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_failing_dataflow_stops_tensorpacks_trainer_with_the_named_error(mnist_dir, tmp_path):
    proc = run_example("mnist_convnet.py", "--data", mnist_dir, "--logdir", tmp_path, "--input", "queue-worker",
                       "--fail-after", 20, expect_failure=True)
    assert ("InputSourceError_WorkerError[KeyError]: QueueInput: WorkerError[KeyError]: MultiProcessRunnerZMQ: "
            "worker 0") in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "KeyError: 'image 20 is missing' (raised while preparing input in a background thread)"


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_inputpipes_queue_inside_tensorpacks_staging_is_refused_with_the_fix(mnist_dir, tmp_path):
    proc = run_example("mnist_convnet.py", "--data", mnist_dir, "--logdir", tmp_path, "--input",
                       "tensorpack-staging", expect_failure=True)
    assert ("InputSourceError: QueueInput: inputpipe's QueueInput is inside tensorpack's StagingInput, which runs its "
            "queue outside inputpipe's hooks; use inputpipe's StagingInput") in proc.stderr


# ------------------------------------------------------------------------------------ the guide

@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_migration_guides_tensorpack_blocks_train_and_continue(tmp_path):
    # the blocks of docs/migrating.md that need tensorpack (marked "not run" for tests/test_doc_snippets.py)
    text = "\n" + (REPO / "docs" / "migrating.md").read_text(encoding="utf-8")
    blocks = [m.group(2) for m in re.finditer(r"([^\n]*)\n```python\n(.*?)```", text, re.S)
              if "not run" in m.group(1) and "tests/test_tensorpack_trainer.py" in m.group(1)]
    assert len(blocks) == 2
    script = tmp_path / "guide.py"
    script.write_text("\n".join(blocks), encoding="utf-8")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # 2 epochs of 8 batches of 32 saved, then one more epoch on top of the restored step
    assert "'position': 256, 'size': 256" in proc.stdout
    assert "global_step 16) finished" in proc.stdout and "global_step 24) finished" in proc.stdout


# --------------------------------------------------- the other direction: tensorpack's in inputpipe

def test_tensorpack_dataflows_feed_inputpipes_sources():
    flow = TensorpackMapData(TensorpackDataFromList([[i] for i in range(5)], shuffle=False), lambda dp: [dp[0] * 10])
    for source in (QueueInput(flow, infinite=False), FeedInput(flow, infinite=False),
                   TFDatasetInput(TensorpackDataFromList([[i] for i in range(5)], shuffle=False))):
        with tf.Graph().as_default() as graph:
            source.setup(SPECS)
            x, = source.get_input_tensors()
        with tf.compat.v1.Session(graph=graph) as sess, hooked_session(sess, source) as run:
            values = [int(run(x)) for _ in range(5)]
        assert values == ([0, 1, 2, 3, 4] if isinstance(source, TFDatasetInput) else [0, 10, 20, 30, 40])


def test_a_tensorpack_style_source_returning_tensorpacks_own_callbacks_runs_in_inputpipe():
    calls = []

    class CountInput(InputSource):              # written for tensorpack, with tensorpack's CallbackFactory
        def _setup(self, inputs):
            self.counter = tf.compat.v1.get_variable("n", [], tf.int64, tf.compat.v1.zeros_initializer(),
                                                     trainable=False, use_resource=True)

        def _get_input_tensors(self):
            return [self.counter.assign_add(1)]

        def _get_callbacks(self):
            return [CallbackFactory(before_train=lambda cb: calls.append("before_train"),
                                    after_train=lambda cb: calls.append("after_train"))]

    source = CountInput()
    with tf.Graph().as_default() as graph:
        source.setup(SPECS)
        x, = source.get_input_tensors()
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        with hooked_session(sess, source) as run:
            assert [int(run(x)) for _ in range(3)] == [1, 2, 3]
    assert calls == ["before_train", "after_train"]


def test_inputpipes_flow_in_a_tensorpack_multiprocess_runner_and_back():
    inner = MultiProcessRunnerZMQ(DataFromList([[i] for i in range(4)], shuffle=False), 1)
    flow = TensorpackMapData(inner, lambda dp: [dp[0] + 100])
    flow.reset_state()
    try:
        assert sorted(dp[0] for _, dp in zip(range(4), flow)) == [100, 101, 102, 103]
    finally:
        inner.close()
