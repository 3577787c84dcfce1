"""Migration: the CIFAR and MNIST data pipelines of tensorpack's examples (ResNet/cifar10-resnet.py's
get_data, basics/mnist-convnet.py's get_data and its QueueInput training input), with only the
import changed, on small generated dataset files; batches go into a TF1 graph through QueueInput.
"""
import numpy as np
import pytest
import tensorflow as tf

import inputpipe.dataflow as tp_dataflow
from inputpipe.dataflow import AugmentImageComponent, BatchData, MultiProcessRunner, dataset, imgaug
from inputpipe.input_source import QueueInput
from test_dataset_readers import make_cifar, make_mnist

BATCH_SIZE = 4


# ---- user code, as in tensorpack's examples (ResNet/cifar10-resnet.py) -------------------------

def get_cifar_data(train_or_test, data_dir):
    isTrain = train_or_test == "train"
    ds = dataset.Cifar10(train_or_test, dir=data_dir)
    pp_mean = ds.get_per_pixel_mean(("train",))
    if isTrain:
        augmentors = [
            imgaug.CenterPaste((40, 40)),
            imgaug.RandomCrop((32, 32)),
            imgaug.Flip(horiz=True),
            imgaug.MapImage(lambda x: x - pp_mean),
        ]
    else:
        augmentors = [
            imgaug.MapImage(lambda x: x - pp_mean)
        ]
    ds = AugmentImageComponent(ds, augmentors)
    ds = BatchData(ds, BATCH_SIZE, remainder=not isTrain)
    if isTrain:
        ds = MultiProcessRunner(ds, 3, 2)
    return ds


# ---- user code, as in tensorpack's examples (basics/mnist-convnet.py) --------------------------

def get_mnist_data(data_dir):
    train = BatchData(dataset.Mnist("train", dir=data_dir), 2)
    test = BatchData(dataset.Mnist("test", dir=data_dir), 2, remainder=True)
    return train, test


def mnist_inputs():
    return [tf.TensorSpec((None, 28, 28), tf.float32, "input"), tf.TensorSpec((None,), tf.int32, "label")]


# ---- end of user code -------------------------------------------------------------------------

def test_cifar_test_pipeline_subtracts_the_training_mean_in_order(tmp_path):
    d = make_cifar(str(tmp_path / "cifar"), rows=3, test_rows=6)
    reference = dataset.Cifar10("test", shuffle=False, dir=d)
    reference.reset_state()
    expected = list(reference)
    mean = reference.get_per_pixel_mean(("train",))
    ds = get_cifar_data("test", d)
    ds.reset_state()
    batches = list(ds)
    assert [len(b[1]) for b in batches] == [4, 2]   # remainder=True for the test set
    images = np.concatenate([b[0] for b in batches])
    assert images.dtype == np.float32 and images.shape == (6, 32, 32, 3)
    np.testing.assert_array_equal(images, np.stack([dp[0] - mean for dp in expected]))
    assert np.concatenate([b[1] for b in batches]).tolist() == [dp[1] for dp in expected]


def test_cifar_training_pipeline_runs_in_worker_processes(tmp_path):
    d = make_cifar(str(tmp_path / "cifar"), rows=3, test_rows=2)
    ds = get_cifar_data("train", d)
    ds.reset_state()
    try:
        assert len(ds) == 3   # 15 training images in batches of 4 without remainder
        batches = [batch for _ in range(2) for batch in ds]
    finally:
        ds.close()
    assert len(batches) == 6
    labels = {dp[1] for dp in dataset.Cifar10("train", shuffle=False, dir=d)}
    for images, batch_labels in batches:
        assert images.shape == (BATCH_SIZE, 32, 32, 3) and images.dtype == np.float32
        assert set(batch_labels.tolist()) <= labels


def test_mnist_batches_feed_a_graph_through_queue_input(tmp_path):
    d = make_mnist(str(tmp_path / "mnist"), train=6, test=3)
    train, test = get_mnist_data(d)
    assert len(train) == 3 and len(test) == 2
    train.reset_state()
    assert [b[0].shape for b in train] == [(2, 28, 28)] * 3
    expected = list(dataset.Mnist("test", shuffle=False, dir=d))
    source = QueueInput(BatchData(dataset.Mnist("test", shuffle=False, dir=d), 2, remainder=True), infinite=False)
    graph = tf.Graph()
    with graph.as_default():
        source.setup(mnist_inputs())
        image, label = source.get_input_tensors()
        assert image.dtype == tf.float32 and label.dtype == tf.int32
        got = []
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
            while not sess.should_stop():
                got.append(sess.run([image, label]))
    assert [g[1].tolist() for g in got] == [[int(expected[0][1]), int(expected[1][1])], [int(expected[2][1])]]
    np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), np.stack([dp[0] for dp in expected]))


def test_dataflow_names_import_from_the_tensorpack_paths():
    # ``from tensorpack.dataflow import dataset, imgaug`` and ``tensorpack.dataflow.dataset.Cifar10`` style
    assert tp_dataflow.dataset.Cifar10 is dataset.Cifar10
    assert tp_dataflow.imgaug.AugmentorList is imgaug.AugmentorList
    from inputpipe.dataflow.dataset.ilsvrc import ILSVRC12  # tensorpack.dataflow.dataset.ilsvrc.ILSVRC12
    from inputpipe.dataflow.image import AugmentImageComponents  # tensorpack.dataflow.image
    assert ILSVRC12 is dataset.ILSVRC12 and AugmentImageComponents is tp_dataflow.AugmentImageComponents


@pytest.mark.parametrize("name", ["Mnist", "FashionMnist", "Cifar10", "Cifar100", "CifarBase", "SVHNDigit",
                                  "BSDS500", "Caltech101Silhouettes", "Places365Standard", "ILSVRC12",
                                  "ILSVRC12Files", "ILSVRCMeta", "TinyImageNet"])
def test_every_tensorpack_dataset_name_exists(name):
    assert name in dataset.__all__ and hasattr(dataset, name)
