"""ResNet for TF1-style graph mode, built from ``tf.compat.v1.get_variable`` and ``tf.nn``.

Keras 3 removed ``tf.compat.v1.layers``, so every layer here is a few lines of plain ops:
NHWC convolutions, batch norm with moving averages (their update ops go to
``tf.compat.v1.GraphKeys.UPDATE_OPS`` and run with every train step), global average pooling,
a fully connected classifier, weight decay and momentum SGD.

Variants: ``resnet18``, ``resnet34``, ``resnet50`` (ImageNet layout: 7x7 stem, max pool, four
stages) and ``cifar`` (3x3 stem, three stages of 16/32/64 channels, ``depth = 6n + 2``), the
small one the example trains by default on a 2-core CPU.

Example::

    import tensorflow as tf
    from resnet_model import ModelConfig, build_train_graph

    images = tf.compat.v1.placeholder(tf.float32, [None, 32, 32, 3])
    labels = tf.compat.v1.placeholder(tf.int32, [None])
    graph = build_train_graph(images, labels, ModelConfig("cifar", depth=8, num_classes=10))
    # graph.train_op, graph.loss, graph.accuracy
"""
from dataclasses import dataclass
from typing import NamedTuple

import tensorflow as tf

v1 = tf.compat.v1

VARIANTS = ("cifar", "resnet18", "resnet34", "resnet50")

# Blocks per stage of the ImageNet variants (He et al., 2016).
_IMAGENET_STAGES = {
    "resnet18": ("basic", [2, 2, 2, 2]),
    "resnet34": ("basic", [3, 4, 6, 3]),
    "resnet50": ("bottleneck", [3, 4, 6, 3]),
}

BN_DECAY = 0.9
BN_EPSILON = 1e-5


@dataclass
class ModelConfig:
    """Which ResNet to build and how to train it.

    ``depth`` only matters for the ``cifar`` variant (``6n + 2``: 8, 14, 20, 32, ...);
    ``width`` is the channel count of its first stage (16 in the paper).
    """

    variant: str = "cifar"
    num_classes: int = 10
    depth: int = 8
    width: int = 16
    learning_rate: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError("unknown ResNet variant {!r}; choose one of {}".format(self.variant, ", ".join(VARIANTS)))
        if self.variant == "cifar" and (self.depth < 8 or (self.depth - 2) % 6):
            raise ValueError("the cifar variant needs depth = 6n + 2 (8, 14, 20, ...), got {}".format(self.depth))
        if self.num_classes < 2:
            raise ValueError("a classifier needs at least 2 classes, got {}".format(self.num_classes))

    def describe(self) -> str:
        if self.variant == "cifar":
            return "ResNet-{} (CIFAR-style, width {})".format(self.depth, self.width)
        return {"resnet18": "ResNet-18", "resnet34": "ResNet-34", "resnet50": "ResNet-50"}[self.variant]


class TrainGraph(NamedTuple):
    """The tensors and ops of one training graph."""

    logits: tf.Tensor
    loss: tf.Tensor
    accuracy: tf.Tensor
    train_op: tf.Operation
    global_step: tf.Variable


def conv2d(name: str, x: tf.Tensor, out_channels: int, kernel: int, stride: int = 1) -> tf.Tensor:
    """A bias-free NHWC convolution with He-normal initialisation and "SAME" padding."""
    in_channels = int(x.shape[-1])
    with v1.variable_scope(name):
        w = v1.get_variable(
            "W", [kernel, kernel, in_channels, out_channels],
            initializer=v1.variance_scaling_initializer(scale=2.0, mode="fan_out", distribution="truncated_normal"),
        )
        return tf.nn.conv2d(x, w, strides=[1, stride, stride, 1], padding="SAME")


def batch_norm(name: str, x: tf.Tensor, training: bool, zero_init: bool = False) -> tf.Tensor:
    """Batch normalisation over N, H, W with moving mean/variance for inference.

    In training the batch statistics normalise ``x`` and the moving averages' update ops are
    added to ``UPDATE_OPS``; otherwise the moving averages are used. ``zero_init`` starts the
    scale at 0 (the last BN of a residual branch), so each block starts as the identity.
    """
    channels = int(x.shape[-1])
    with v1.variable_scope(name):
        gamma_init = v1.zeros_initializer() if zero_init else v1.ones_initializer()
        gamma = v1.get_variable("gamma", [channels], initializer=gamma_init)
        beta = v1.get_variable("beta", [channels], initializer=v1.zeros_initializer())
        moving_mean = v1.get_variable("mean/EMA", [channels], initializer=v1.zeros_initializer(), trainable=False)
        moving_var = v1.get_variable("variance/EMA", [channels], initializer=v1.ones_initializer(), trainable=False)
        if not training:
            y, _, _ = v1.nn.fused_batch_norm(
                x, gamma, beta, mean=moving_mean, variance=moving_var, epsilon=BN_EPSILON, is_training=False)
            return y
        y, mean, variance = v1.nn.fused_batch_norm(x, gamma, beta, epsilon=BN_EPSILON, is_training=True)
        update_mean = v1.assign_sub(moving_mean, (1.0 - BN_DECAY) * (moving_mean - mean))
        update_var = v1.assign_sub(moving_var, (1.0 - BN_DECAY) * (moving_var - variance))
        v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, update_mean)
        v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, update_var)
        return y


def _shortcut(x: tf.Tensor, out_channels: int, stride: int, training: bool) -> tf.Tensor:
    if int(x.shape[-1]) == out_channels and stride == 1:
        return x
    return batch_norm("convshortcut_bn", conv2d("convshortcut", x, out_channels, 1, stride), training)


def basic_block(x: tf.Tensor, channels: int, stride: int, training: bool) -> tf.Tensor:
    """Two 3x3 convolutions plus the shortcut (ResNet-18/34 and the CIFAR variant)."""
    shortcut = _shortcut(x, channels, stride, training)
    y = tf.nn.relu(batch_norm("bn1", conv2d("conv1", x, channels, 3, stride), training))
    y = batch_norm("bn2", conv2d("conv2", y, channels, 3), training, zero_init=True)
    return tf.nn.relu(y + shortcut)


def bottleneck_block(x: tf.Tensor, channels: int, stride: int, training: bool) -> tf.Tensor:
    """1x1 reduce, 3x3 (strided), 1x1 expand to ``4 * channels``, plus the shortcut (ResNet-50)."""
    shortcut = _shortcut(x, channels * 4, stride, training)
    y = tf.nn.relu(batch_norm("bn1", conv2d("conv1", x, channels, 1), training))
    y = tf.nn.relu(batch_norm("bn2", conv2d("conv2", y, channels, 3, stride), training))
    y = batch_norm("bn3", conv2d("conv3", y, channels * 4, 1), training, zero_init=True)
    return tf.nn.relu(y + shortcut)


def _stage(name: str, x: tf.Tensor, block, channels: int, count: int, stride: int, training: bool) -> tf.Tensor:
    with v1.variable_scope(name):
        for i in range(count):
            with v1.variable_scope("block{}".format(i)):
                x = block(x, channels, stride if i == 0 else 1, training)
    return x


def resnet_logits(images: tf.Tensor, config: ModelConfig, training: bool = True) -> tf.Tensor:
    """Logits ``[N, num_classes]`` for NHWC float ``images``."""
    if images.shape.rank != 4:
        raise ValueError("resnet_logits expects NHWC images of rank 4, got shape {}".format(images.shape))
    with v1.variable_scope("resnet"):
        if config.variant == "cifar":
            n = (config.depth - 2) // 6
            x = tf.nn.relu(batch_norm("conv0_bn", conv2d("conv0", images, config.width, 3), training))
            for i, multiplier in enumerate((1, 2, 4)):
                stride = 1 if i == 0 else 2
                x = _stage("group{}".format(i), x, basic_block, config.width * multiplier, n, stride, training)
        else:
            kind, counts = _IMAGENET_STAGES[config.variant]
            block = basic_block if kind == "basic" else bottleneck_block
            x = tf.nn.relu(batch_norm("conv0_bn", conv2d("conv0", images, 64, 7, 2), training))
            x = tf.nn.max_pool2d(x, ksize=3, strides=2, padding="SAME")
            for i, count in enumerate(counts):
                x = _stage("group{}".format(i), x, block, 64 * 2 ** i, count, 1 if i == 0 else 2, training)
        x = tf.reduce_mean(x, axis=[1, 2], name="gap")
        with v1.variable_scope("linear"):
            w = v1.get_variable("W", [int(x.shape[-1]), config.num_classes],
                                initializer=v1.random_normal_initializer(stddev=0.01))
            b = v1.get_variable("b", [config.num_classes], initializer=v1.zeros_initializer())
            return tf.nn.bias_add(tf.matmul(x, w), b, name="logits")


def build_train_graph(images: tf.Tensor, labels: tf.Tensor, config: ModelConfig) -> TrainGraph:
    """Cross entropy, accuracy and a momentum-SGD train op that minimises the cross entropy plus
    L2 weight decay on the conv/fc weights and also runs the batch-norm moving-average updates.
    ``TrainGraph.loss`` is the cross entropy alone (what the example logs), not the decayed total."""
    logits = resnet_logits(images, config, training=True)
    labels = tf.cast(labels, tf.int32)
    xent = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits),
                          name="cross_entropy")
    weights = [v for v in v1.trainable_variables() if v.op.name.endswith("/W")]
    decay = tf.multiply(config.weight_decay, tf.add_n([tf.nn.l2_loss(w) for w in weights]), name="weight_decay")
    loss = tf.add(xent, decay, name="loss")
    correct = tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels)
    accuracy = tf.reduce_mean(tf.cast(correct, tf.float32), name="accuracy")

    global_step = v1.train.get_or_create_global_step()
    optimizer = v1.train.MomentumOptimizer(config.learning_rate, config.momentum)
    with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
        train_op = optimizer.minimize(loss, global_step=global_step, name="train_op")
    return TrainGraph(logits, xent, accuracy, train_op, global_step)


def count_parameters() -> int:
    """Number of trainable scalars in the default graph."""
    return int(sum(v.shape.num_elements() for v in v1.trainable_variables()))

