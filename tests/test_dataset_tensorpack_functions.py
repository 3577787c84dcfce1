"""The functions and constants tensorpack's dataset modules have outside ``__all__`` work here, on
the readers' code: cifar.get_filenames / read_cifar / maybe_download_and_extract,
mnist.extract_images / extract_labels / maybe_download, caltech101.maybe_download, and the
URL and size constants (values as in tensorpack 0.11)."""
import os
import urllib.error

import numpy as np
import pytest

from inputpipe.dataflow.dataset import Cifar10, Cifar100, DatasetDownloadError, Mnist
from inputpipe.utils import fs as _files
from inputpipe.dataflow.dataset import bsds500, caltech101, cifar, ilsvrc, mnist, svhn
from test_dataset_readers import make_cifar, make_mnist


@pytest.fixture
def no_network(monkeypatch):
    def refuse(url, destination, timeout):
        raise urllib.error.URLError("no network in this test: " + url)

    monkeypatch.setattr(_files, "_fetch_url", refuse)


def test_constants_are_tensorpacks():
    assert cifar.DATA_URL_CIFAR_10 == ("http://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", 170498071)
    assert cifar.DATA_URL_CIFAR_100 == ("http://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz", 169001437)
    assert ilsvrc.CAFFE_ILSVRC12_URL == ("http://dl.caffe.berkeleyvision.org/caffe_ilsvrc12.tar.gz", 17858008)
    assert bsds500.DATA_URL == "http://www.eecs.berkeley.edu/Research/Projects/CS/vision/grouping/BSR/BSR_bsds500.tgz"
    assert (bsds500.DATA_SIZE, bsds500.IMG_W, bsds500.IMG_H) == (70763455, 481, 321)
    assert svhn.SVHN_URL == "http://ufldl.stanford.edu/housenumbers/"


@pytest.mark.parametrize("classnum, reader", [(10, Cifar10), (100, Cifar100)])
def test_cifar_functions_read_what_the_reader_reads(tmp_path, no_network, classnum, reader):
    make_cifar(str(tmp_path), classnum=classnum, rows=4, test_rows=3)
    cifar.maybe_download_and_extract(str(tmp_path), classnum)          # the folder is there: no download
    train_files, test_files, meta_file = cifar.get_filenames(str(tmp_path), classnum)
    folder = str(tmp_path / ("cifar-10-batches-py" if classnum == 10 else "cifar-100-python"))
    if classnum == 10:
        assert train_files == [os.path.join(folder, "data_batch_{}".format(i)) for i in range(1, 6)]
        assert (test_files, meta_file) == ([os.path.join(folder, "test_batch")], os.path.join(folder, "batches.meta"))
    else:
        assert (train_files, test_files, meta_file) == ([os.path.join(folder, "train")], [os.path.join(folder, "test")],
                                                        os.path.join(folder, "meta"))
    data = cifar.read_cifar(test_files, classnum)
    ds = reader("test", shuffle=False, dir=str(tmp_path))
    ds.reset_state()
    expected = list(ds)
    assert len(data) == 3 and [label for _, label in data] == [label for _, label in expected]
    for (image, _), (want, _) in zip(data, expected):
        assert image.shape == (32, 32, 3) and image.dtype == np.uint8
        np.testing.assert_array_equal(image, want)
    assert len(cifar.read_cifar(train_files, classnum)) == (20 if classnum == 10 else 4)


def test_cifar_functions_check_their_arguments(tmp_path, no_network):
    with pytest.raises(ValueError, match=r"read_cifar: cifar_classnum must be 10 or 100, got 20"):
        cifar.read_cifar([], 20)
    with pytest.raises(ValueError, match=r"get_filenames: cifar_classnum must be 10 or 100, got 1"):
        cifar.get_filenames(str(tmp_path), 1)
    with pytest.raises(DatasetDownloadError, match=r"cannot download http://www.cs.toronto.edu/~kriz/"
                                                   r"cifar-100-python.tar.gz"):
        cifar.maybe_download_and_extract(str(tmp_path), 100)


def test_mnist_functions_read_what_the_reader_reads(tmp_path):
    make_mnist(str(tmp_path), train=2, test=3)
    images = mnist.extract_images(str(tmp_path / "t10k-images-idx3-ubyte.gz"))
    labels = mnist.extract_labels(str(tmp_path / "t10k-labels-idx1-ubyte.gz"))
    assert images.shape == (3, 28, 28, 1) and images.dtype == np.float32 and labels.shape == (3,)
    assert labels.dtype == np.uint8 and 0.0 <= images.min() and images.max() <= 1.0
    ds = Mnist("test", shuffle=False, dir=str(tmp_path))
    ds.reset_state()
    for k, (image, label) in enumerate(ds):
        np.testing.assert_array_equal(images[k, :, :, 0], image)
        assert labels[k] == label
    with pytest.raises(ValueError, match=r"extract_labels: .*t10k-images-idx3-ubyte.gz is not an MNIST IDX file: "
                                         r"expected the magic number 2049, found 2051"):
        mnist.extract_labels(str(tmp_path / "t10k-images-idx3-ubyte.gz"))


def test_maybe_download_keeps_a_present_file_and_fetches_a_missing_one(tmp_path, no_network):
    assert caltech101.maybe_download is mnist.maybe_download
    make_mnist(str(tmp_path / "mnist"))
    present = mnist.maybe_download("http://yann.lecun.com/exdb/mnist/t10k-labels-idx1-ubyte.gz", str(tmp_path / "mnist"))
    assert present == str(tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz")
    with pytest.raises(DatasetDownloadError, match=r"cannot download http://example.invalid/x.mat"):
        caltech101.maybe_download("http://example.invalid/x.mat", str(tmp_path / "caltech"))
    assert os.listdir(str(tmp_path / "caltech")) == []
