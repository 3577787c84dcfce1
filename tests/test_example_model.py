"""The example's ResNet (examples/resnet_model.py): every variant builds and trains in graph mode."""
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from resnet_model import ModelConfig, build_train_graph, count_parameters  # noqa: E402

v1 = tf.compat.v1


def _build(variant, depth=8, size=32, batch=4, classes=5):
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        images = v1.placeholder(tf.float32, [batch, size, size, 3])
        labels = v1.placeholder(tf.int32, [batch])
        model = build_train_graph(images, labels, ModelConfig(variant, depth=depth, num_classes=classes))
        init = v1.global_variables_initializer()
    return graph, images, labels, model, init


@pytest.mark.parametrize("variant, depth, params, bn_layers", [
    ("cifar", 8, 77_717, 9),
    ("resnet18", 8, 11_179_077, 20),
    ("resnet50", 8, 23_518_277, 53),
])
def test_variants_have_the_published_structure(variant, depth, params, bn_layers):
    graph, images, labels, model, init = _build(variant, depth)
    with graph.as_default():
        assert count_parameters() == params
        update_ops = v1.get_collection(v1.GraphKeys.UPDATE_OPS)
        # two moving-average updates (mean, variance) per batch-norm layer
        assert len(update_ops) == 2 * bn_layers
    assert model.logits.shape.as_list() == [4, 5]


def test_training_lowers_the_loss_and_updates_batch_norm_statistics():
    graph, images, labels, model, init = _build("cifar", depth=8, size=16, batch=8, classes=2)
    rng = np.random.RandomState(0)
    x = rng.standard_normal((8, 16, 16, 3)).astype(np.float32)
    y = np.array([0, 1] * 4, np.int32)
    x[y == 1] += 1.5  # a separable batch
    with graph.as_default():
        moving_mean = [v for v in v1.global_variables() if v.op.name == "resnet/conv0_bn/mean/EMA"][0]
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        feed = {images: x, labels: y}
        first = sess.run(model.loss, feed)
        for _ in range(15):
            sess.run(model.train_op, feed)
        last, step, mean = sess.run([model.loss, model.global_step, moving_mean], feed)
    assert np.isfinite(first) and np.isfinite(last)
    assert last < first * 0.5
    assert step == 15
    assert np.abs(mean).max() > 0  # the moving averages moved away from their zero start


@pytest.mark.parametrize("kwargs, message", [
    ({"variant": "vgg"}, "unknown ResNet variant 'vgg'"),
    ({"variant": "cifar", "depth": 10}, "depth = 6n + 2"),
    ({"num_classes": 1}, "at least 2 classes"),
])
def test_bad_configs_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("+", r"\+")):
        ModelConfig(**kwargs)
