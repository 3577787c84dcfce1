"""Stand-ins for the names that documentation snippets leave to the reader.

tests/test_doc_snippets.py runs this before the Python blocks of a page, in a fresh interpreter
whose working directory is a temporary folder. A snippet that defines one of these names itself
uses its own.
"""
import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

IMAGE_SIZE = 224
NUM_CLASSES = 10


def _write_images(count: int) -> list:
    """``count`` small PNG-encoded images on disk (no image library needed to read the names)."""
    os.makedirs("images", exist_ok=True)
    paths = []
    for index in range(count):
        path = os.path.join("images", "{:03d}.npy".format(index))
        np.save(path, np.full((8, 8, 3), index % 256, np.uint8))
        paths.append(path)
    return paths


files = _write_images(256)
labels = [index % NUM_CLASSES for index in range(len(files))]


def load_and_augment(path):
    """A datapoint [image float32 224x224x3, label int64] from one of ``files``."""
    small = np.load(path).astype(np.float32) / 255.0
    image = np.repeat(np.repeat(small, IMAGE_SIZE // 8, axis=0), IMAGE_SIZE // 8, axis=1)
    return [image, np.int64(int(os.path.basename(path)[:3]) % NUM_CLASSES)]


def build_model(image, label):
    """A one-layer classifier on the mean colour; returns its train op (TF1 graph mode)."""
    import tensorflow as tf

    features = tf.reduce_mean(image, axis=[1, 2])
    weights = tf.compat.v1.get_variable("doc_w", [3, NUM_CLASSES], initializer=tf.compat.v1.zeros_initializer())
    logits = tf.matmul(features, weights)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits))
    return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)


def _small_dataflow():
    """``df``: 128 datapoints [float32 image 4x4x3, int label], the kind of flow the pages save and batch."""
    from inputpipe.dataflow import DataFromList

    return DataFromList([[np.full((4, 4, 3), i, np.float32), i % NUM_CLASSES] for i in range(128)], shuffle=False)


df = _small_dataflow()

# The examples' modules (pages import them as a reader in the repository would), and a file that
# tensorpack's LMDBSerializer wrote, for the page on reading tensorpack's files.
_REPO = os.environ.get("INPUTPIPE_REPO", "")
if _REPO:
    import shutil
    import sys

    sys.path.insert(0, os.path.join(_REPO, "examples"))
    _TENSORPACK_FILES = os.path.join(_REPO, "tests", "data", "tensorpack_files")
    if os.path.isdir(os.path.join(_TENSORPACK_FILES, "tp_pickle.lmdb")):
        shutil.copytree(os.path.join(_TENSORPACK_FILES, "tp_pickle.lmdb"), "tensorpack_train.lmdb")
    elif os.path.isfile(os.path.join(_TENSORPACK_FILES, "tp_pickle.lmdb")):
        shutil.copy(os.path.join(_TENSORPACK_FILES, "tp_pickle.lmdb"), "tensorpack_train.lmdb")
