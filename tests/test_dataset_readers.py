"""Dataset readers (inputpipe.dataflow.dataset) on small files written in each dataset's real format.

The expected values (EXPECTED below) are what tensorpack 0.11 yields for the same generated files:
run this file with tensorpack's interpreter to print them again::

    /opt/tpvenv/bin/python tests/test_dataset_readers.py

Where tensorpack cannot read small files (it hard-codes CIFAR's 10000 rows per batch and the
Caltech split sizes) the CIFAR comparison uses a full-size test batch, and Caltech is compared
on the structure only. No test touches the network: downloads go through a monkeypatched
``_fetch_url`` (of inputpipe.utils.fs).
"""
import gzip
import hashlib
import os
import pickle
import sys
import urllib.error

import numpy as np

import pytest

# Run as a script (or imported by one) under tensorpack's interpreter, only the file writers are used.
UNDER_TENSORPACK = __name__ == "__main__" or os.environ.get("INPUTPIPE_TESTS_UNDER_TENSORPACK") == "1"
if not UNDER_TENSORPACK:
    from inputpipe.dataflow import dataset
    from inputpipe.dataflow.dataset import DatasetDownloadError
    from inputpipe.dataflow._formats import dataset_files as _files
    from inputpipe.utils import fs as _downloads

# --------------------------------------------------------------------------------------------
# Writing small files in the datasets' own formats
# --------------------------------------------------------------------------------------------


def _write_idx(path, array, magic):
    header = np.array([magic] + list(array.shape), dtype=">u4").tobytes()
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def make_mnist(directory, train=5, test=3, seed=0):
    """The four MNIST files with ``train`` / ``test`` random 28x28 images and labels."""
    rng = np.random.RandomState(seed)
    os.makedirs(directory, exist_ok=True)
    for prefix, count in (("train", train), ("t10k", test)):
        _write_idx(os.path.join(directory, prefix + "-images-idx3-ubyte.gz"),
                   rng.randint(0, 256, size=(count, 28, 28)), 2051)
        _write_idx(os.path.join(directory, prefix + "-labels-idx1-ubyte.gz"), rng.randint(0, 10, size=count), 2049)
    return directory


def _dump_py2_style(obj, path):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def make_cifar(directory, classnum=10, rows=4, test_rows=3, seed=0):
    """A CIFAR folder (cifar-10-batches-py or cifar-100-python) under ``directory``: batch dicts with
    bytes keys and a uint8 (rows, 3072) b'data' array, and a meta dict with str keys, as the real
    python-version files load in Python 3."""
    rng = np.random.RandomState(seed)
    if classnum == 10:
        folder = os.path.join(directory, "cifar-10-batches-py")
        os.makedirs(folder, exist_ok=True)
        names = ["data_batch_{}".format(i) for i in range(1, 6)] + ["test_batch"]
        for name in names:
            count = test_rows if name == "test_batch" else rows
            _dump_py2_style({b"batch_label": name.encode(), b"labels": rng.randint(0, 10, count).tolist(),
                             b"data": rng.randint(0, 256, (count, 3072)).astype(np.uint8),
                             b"filenames": [b"f%d.png" % i for i in range(count)]}, os.path.join(folder, name))
        _dump_py2_style({"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                         "horse", "ship", "truck"], "num_cases_per_batch": 10000, "num_vis": 3072},
                        os.path.join(folder, "batches.meta"))
    else:
        folder = os.path.join(directory, "cifar-100-python")
        os.makedirs(folder, exist_ok=True)
        for name, count in (("train", rows), ("test", test_rows)):
            _dump_py2_style({b"filenames": [b"f%d.png" % i for i in range(count)], b"batch_label": name.encode(),
                             b"fine_labels": rng.randint(0, 100, count).tolist(),
                             b"coarse_labels": rng.randint(0, 20, count).tolist(),
                             b"data": rng.randint(0, 256, (count, 3072)).astype(np.uint8)}, os.path.join(folder, name))
        _dump_py2_style({"fine_label_names": ["class%d" % i for i in range(100)],
                         "coarse_label_names": ["super%d" % i for i in range(20)]}, os.path.join(folder, "meta"))
    return directory


def make_svhn(directory, name="test", count=6, seed=0):
    import scipy.io

    rng = np.random.RandomState(seed)
    os.makedirs(directory, exist_ok=True)
    scipy.io.savemat(os.path.join(directory, name + "_32x32.mat"), {
        "X": rng.randint(0, 256, (32, 32, 3, count)).astype(np.uint8),
        "y": np.array([[10], [1], [2], [10], [9], [5]][:count], dtype=np.uint8)})
    return directory


def make_caltech(directory, counts=(("train", 5), ("val", 3), ("test", 4)), seed=0):
    import scipy.io

    rng = np.random.RandomState(seed)
    os.makedirs(directory, exist_ok=True)
    content = {}
    for name, count in counts:
        content[name + "_data"] = (rng.rand(count, 784) > 0.5).astype(np.float64)
        content[name + "_labels"] = rng.randint(1, 102, (count, 1)).astype(np.float64)
    scipy.io.savemat(os.path.join(directory, "caltech101_silhouettes_28_split1.mat"), content)
    return directory


def make_bsds500(directory, seed=0):
    """BSR/BSDS500/data with two 'val' images (one landscape, one portrait) and their annotations."""
    import cv2
    import scipy.io

    rng = np.random.RandomState(seed)
    root = os.path.join(directory, "BSR", "BSDS500", "data")
    os.makedirs(os.path.join(root, "images", "val"))
    os.makedirs(os.path.join(root, "groundTruth", "val"))
    for image_id, (h, w), annotators in (("3096", (321, 481), 2), ("100007", (481, 321), 3)):
        image = rng.randint(0, 256, (h, w, 3)).astype(np.uint8)
        cv2.imwrite(os.path.join(root, "images", "val", image_id + ".jpg"), image)
        cell = np.empty((1, annotators), dtype=object)
        for k in range(annotators):
            cell[0, k] = {"Segmentation": rng.randint(1, 5, (h, w)).astype(np.uint16),
                          "Boundaries": (rng.rand(h, w) > 0.9).astype(np.uint8)}
        scipy.io.savemat(os.path.join(root, "groundTruth", "val", image_id + ".mat"), {"groundTruth": cell})
    return directory


def _write_image(path, rng, shape=(5, 7, 3)):
    import cv2

    os.makedirs(os.path.dirname(path), exist_ok=True)
    assert cv2.imwrite(path, rng.randint(0, 256, shape).astype(np.uint8)), path


SYNSETS = ["n01440764", "n01443537", "n01484850"]


def make_ilsvrc(root, seed=0):
    """An ILSVRC12 layout: ``root/meta`` (caffe metadata), ``root/original`` (train/ + val/ with the
    images directly inside + test/), ``root/trainstyle`` (val/ in synset folders)."""
    rng = np.random.RandomState(seed)
    meta = os.path.join(root, "meta")
    os.makedirs(meta)
    with open(os.path.join(meta, "synsets.txt"), "w") as f:
        f.write("\n".join(SYNSETS) + "\n")
    with open(os.path.join(meta, "synset_words.txt"), "w") as f:
        f.write("n01440764 tench, Tinca tinca\nn01443537 goldfish, Carassius auratus\n"
                "n01484850 great white shark, white shark\n")
    train = [("n01443537/n01443537_2.JPEG", 1), ("n01440764/n01440764_10026.JPEG", 0),
             ("n01484850/n01484850_7.JPEG", 2), ("n01440764/n01440764_39.JPEG", 0)]
    val = [("ILSVRC2012_val_00000001.JPEG", 2), ("ILSVRC2012_val_00000002.JPEG", 0),
           ("ILSVRC2012_val_00000003.JPEG", 1)]
    test = [("ILSVRC2012_test_00000001.JPEG", 0)]
    for name, lst in (("train", train), ("val", val), ("test", test)):
        with open(os.path.join(meta, name + ".txt"), "w") as f:
            f.write("".join("{} {}\n".format(path, label) for path, label in lst))
    for path, _ in train:
        _write_image(os.path.join(root, "original", "train", path), rng)
        os.makedirs(os.path.join(root, "trainstyle", "train", os.path.dirname(path)), exist_ok=True)
    for path, label in val:
        _write_image(os.path.join(root, "original", "val", path), rng)
        _write_image(os.path.join(root, "trainstyle", "val", SYNSETS[label], path), rng)
    for path, _ in test:
        _write_image(os.path.join(root, "original", "test", path), rng)
    return root


def make_places(directory, seed=0):
    rng = np.random.RandomState(seed)
    lines = ["train/bedroom/00000001.jpg", "train/airfield/00000001.jpg", "train/bedroom/00000002.jpg",
             "train/canyon/00000001.jpg"]
    os.makedirs(directory, exist_ok=True)
    for line in lines:
        _write_image(os.path.join(directory, line), rng, (6, 4, 3))
    with open(os.path.join(directory, "train.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return directory


def make_tiny_imagenet(directory, seed=0):
    """wnids.txt with 200 wnids, one 64x64 training image per class, three val images."""
    rng = np.random.RandomState(seed)
    wnids = ["n{:08d}".format(1000 + 7 * i) for i in range(200)]
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "wnids.txt"), "w") as f:
        f.write("\n".join(wnids) + "\n")
    for wnid in wnids:
        _write_image(os.path.join(directory, "train", wnid, "images", wnid + "_0.JPEG"), rng, (64, 64, 3))
    val = [("val_0.JPEG", wnids[5]), ("val_1.JPEG", wnids[199]), ("val_2.JPEG", wnids[0])]
    for fname, _ in val:
        _write_image(os.path.join(directory, "val", "images", fname), rng, (64, 64, 3))
    with open(os.path.join(directory, "val", "val_annotations.txt"), "w") as f:
        f.write("".join("{}\t{}\t0\t0\t63\t63\n".format(fname, wnid) for fname, wnid in val))
    return directory, wnids


def make_bbox_xml(directory, relative, box):
    path = os.path.join(directory, os.path.splitext(relative)[0] + ".xml")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("<annotation><size><width>7</width><height>5</height></size><object><name>x</name>"
                "<bndbox><xmin>{}</xmin><ymin>{}</ymin><xmax>{}</xmax><ymax>{}</ymax></bndbox></object>"
                "</annotation>".format(*box))


# --------------------------------------------------------------------------------------------
# Fingerprints of an epoch (the same function runs under tensorpack to make EXPECTED)
# --------------------------------------------------------------------------------------------

def fingerprint(datapoints):
    """A digest of every component's type, dtype, shape and bytes (or python value), in order."""
    digest = hashlib.sha256()
    for dp in datapoints:
        digest.update(b"|dp")
        for value in dp:
            if isinstance(value, (np.ndarray, np.generic)):
                array = np.ascontiguousarray(value)
                digest.update("{}{}{}".format(type(value).__name__, array.dtype.str, array.shape).encode())
                digest.update(array.tobytes())
            else:
                digest.update("{}:{!r}".format(type(value).__name__, value).encode())
    return digest.hexdigest()[:20]


def describe(dp):
    """[(type, dtype, shape)] of each component, or (type, value) for python values."""
    out = []
    for value in dp:
        if isinstance(value, (np.ndarray, np.generic)):
            out.append((type(value).__name__, str(value.dtype), tuple(np.shape(value))))
        else:
            out.append((type(value).__name__, value if not isinstance(value, str) else os.path.basename(value)))
    return out


def epoch(ds):
    return list(ds)


def seeded_epochs(ds, seed=7, epochs=2):
    """``epochs`` epochs of a shuffling flow whose RNG is a RandomState(seed)."""
    ds.rng = np.random.RandomState(seed)
    return [dp for _ in range(epochs) for dp in ds]


def assert_reshuffled(ds, plain):
    """inputpipe's shuffle stream is its own, not tensorpack's: epoch e is a permutation drawn from (the
    flow's base seed, e), so a restored state repeats it (tests/test_resume_flows_sources.py). Every epoch
    holds exactly the unshuffled epoch's datapoints, and two epochs come in different orders."""
    ds.base_seed = 7
    first, second = epoch(ds), epoch(ds)

    def keys(dps):
        return [fingerprint([dp]) for dp in dps]

    assert sorted(keys(first)) == sorted(keys(plain)) == sorted(keys(second))
    assert keys(first) != keys(second)


# What tensorpack 0.11 yields for the files above (printed by running this file with its venv).
EXPECTED = {
    'mnist_train': 'a7a23baf050a8267ddeb',
    'mnist_describe': [('ndarray', 'float32', (28, 28)), ('uint8', 'uint8', ())],
    'mnist_labels': [5, 4, 2, 7, 3],
    'mnist_test': 'e4feccea0dda23e1e196',
    'mnist_train_seeded': 'bc34e3eeb7d1414a2742',
    'cifar10_shuffle': False,
    'cifar10_test': '8dbfb8c2bcf96d83dc21',
    'cifar10_describe': [('ndarray', 'uint8', (32, 32, 3)), ('int', 5)],
    'cifar10_names': ['airplane', 'automobile', 'bird'],
    'cifar10_mean': '791a63b69c91e8e28dc3',
    'cifar10_channel_mean': [127.51248168945312, 127.45002746582031, 127.52693176269531],
    'cifar10_seeded': 'b708e7f2585715cdf669',
    'cifar100_shuffle': False,
    'cifar100_test': '996ba13b5e5ff983edf2',
    'cifar100_describe': [('ndarray', 'uint8', (32, 32, 3)), ('int', 41)],
    'cifar100_names': ['class0', 'class1', 'class2'],
    'cifar100_mean': 'b32783b91eeca1a0583d',
    'cifar100_channel_mean': [127.4591064453125, 127.49816131591797, 127.53179168701172],
    'cifar100_seeded': '5d2274a7395effe09ef6',
    'svhn_test': '0db8b9f30aba895bf24f',
    'svhn_describe': [('ndarray', 'uint8', (32, 32, 3)), ('uint8', 'uint8', ())],
    'svhn_labels': [0, 1, 2, 0, 9, 5],
    'bsds500_each': ['0b50ffa0894496884d0c', 'd2376c5d13565e4ed9b1'],
    'bsds500_describe': [('ndarray', 'uint8', (321, 481, 3)), ('ndarray', 'float32', (321, 481))],
    'ilsvrc_files_train': [['original/train/n01443537/n01443537_2.JPEG', 1], ['original/train/n01440764/n01440764_10026.JPEG', 0], ['original/train/n01484850/n01484850_7.JPEG', 2], ['original/train/n01440764/n01440764_39.JPEG', 0]],
    'ilsvrc_files_val': [['original/val/ILSVRC2012_val_00000001.JPEG', 2], ['original/val/ILSVRC2012_val_00000002.JPEG', 0], ['original/val/ILSVRC2012_val_00000003.JPEG', 1]],
    'ilsvrc_files_val_trainstyle': [['trainstyle/val/n01484850/ILSVRC2012_val_00000001.JPEG', 2], ['trainstyle/val/n01440764/ILSVRC2012_val_00000002.JPEG', 0], ['trainstyle/val/n01443537/ILSVRC2012_val_00000003.JPEG', 1]],
    'ilsvrc_files_test': [['original/test/ILSVRC2012_test_00000001.JPEG', 0]],
    'ilsvrc_val': '28bb74f9e64ac5f9bad6',
    'ilsvrc_describe': [('ndarray', 'uint8', (5, 7, 3)), ('int', 2)],
    'ilsvrc_train_shuffle': True,
    'ilsvrc_train_seeded': [['original/train/n01484850/n01484850_7.JPEG', 2], ['original/train/n01440764/n01440764_10026.JPEG', 0], ['original/train/n01443537/n01443537_2.JPEG', 1], ['original/train/n01440764/n01440764_39.JPEG', 0], ['original/train/n01440764/n01440764_39.JPEG', 0], ['original/train/n01440764/n01440764_10026.JPEG', 0], ['original/train/n01443537/n01443537_2.JPEG', 1], ['original/train/n01484850/n01484850_7.JPEG', 2]],
    'ilsvrc_words': {0: 'n01440764 tench, Tinca tinca', 1: 'n01443537 goldfish, Carassius auratus', 2: 'n01484850 great white shark, white shark'},
    'ilsvrc_synsets': {0: 'n01440764', 1: 'n01443537', 2: 'n01484850'},
    'ilsvrc_bbox': [None, None, None, None],
    'places_shuffle_default': True,
    'places_names': ['airfield', 'bedroom', 'canyon'],
    'places_labels': [1, 0, 1, 2],
    'places_train': 'd71f6c5c12253f05d7ab',
    'tiny_val_shuffle': False,
    'tiny_val': 'cfdd365c973e90401b64',
    'tiny_val_labels': [5, 199, 0],
    'tiny_train_len': 200,
    'tiny_train': '64fb87bc29e78df2104f',
}


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    """Every download fails as offline would, and the default dataset root is a temporary folder."""
    def offline(url, destination, timeout):
        raise urllib.error.URLError("offline in tests: " + url)

    monkeypatch.setattr(_downloads, "_fetch_url", offline)
    monkeypatch.delenv("TENSORPACK_DATASET", raising=False)
    monkeypatch.setenv("INPUTPIPE_DATASET", str(tmp_path / "default_root"))
    dataset.SVHNDigit._Cache.clear()
    yield
    dataset.SVHNDigit._Cache.clear()


def ready(ds):
    ds.reset_state()
    return ds


# --- MNIST ------------------------------------------------------------------------------------

def test_mnist_matches_tensorpack(tmp_path):
    d = make_mnist(str(tmp_path / "mnist"))
    ds = ready(dataset.Mnist("train", shuffle=False, dir=d))
    assert len(ds) == 5
    assert fingerprint(epoch(ds)) == EXPECTED["mnist_train"]
    assert describe(next(iter(ds))) == EXPECTED["mnist_describe"]
    assert [int(dp[1]) for dp in ds] == EXPECTED["mnist_labels"]
    assert fingerprint(epoch(ready(dataset.Mnist("test", shuffle=False, dir=d)))) == EXPECTED["mnist_test"]
    shuffled = ready(dataset.Mnist("train", dir=d))
    assert shuffled.shuffle is True
    assert_reshuffled(shuffled, epoch(ds))  # EXPECTED["mnist_train_seeded"] is tensorpack's own stream


def test_mnist_pixels_are_the_file_bytes_over_255(tmp_path):
    d = make_mnist(str(tmp_path / "mnist"), train=2, test=1, seed=3)
    with gzip.open(os.path.join(d, "train-images-idx3-ubyte.gz")) as f:
        raw = np.frombuffer(f.read()[16:], np.uint8).reshape(2, 28, 28)
    images = [dp[0] for dp in ready(dataset.Mnist("train", shuffle=False, dir=d))]
    np.testing.assert_array_equal(images[1], raw[1].astype(np.float32) / 255.0)
    assert images[1].min() >= 0.0 and images[1].max() <= 1.0


def test_fashion_mnist_reads_its_default_directory(tmp_path):
    make_mnist(str(tmp_path / "default_root" / "fashion_mnist_data"))
    ds = ready(dataset.FashionMnist("test", shuffle=False))
    assert ds.dir == str(tmp_path / "default_root" / "fashion_mnist_data")
    assert fingerprint(epoch(ds)) == EXPECTED["mnist_test"]
    assert ds.get_label_names()[:3] == ["T-shirt/top", "Trouser", "Pullover"]
    assert len(ds.get_label_names()) == 10


def test_mnist_rejects_bad_files_and_arguments(tmp_path):
    d = make_mnist(str(tmp_path / "mnist"))
    os.rename(os.path.join(d, "t10k-labels-idx1-ubyte.gz"), os.path.join(d, "keep.gz"))
    _write_idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"), np.zeros(3), 2051)
    with pytest.raises(ValueError, match=r"Mnist: .*t10k-labels-idx1-ubyte.gz is not an MNIST IDX file: "
                                         r"expected the magic number 2049, found 2051"):
        dataset.Mnist("test", dir=d)
    with gzip.open(os.path.join(d, "t10k-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(np.array([2049, 10], ">u4").tobytes() + bytes(4))
    with pytest.raises(ValueError, match=r"is truncated: its header announces 10 values of shape \(10,\), "
                                         r"the file has 4"):
        dataset.Mnist("test", dir=d)
    with pytest.raises(ValueError, match="train_or_test must be 'train' or 'test', got 'val'"):
        dataset.Mnist("val", dir=d)


# --- downloads ---------------------------------------------------------------------------------

def test_offline_fails_at_once_naming_url_directory_and_files(tmp_path):
    directory = str(tmp_path / "default_root" / "mnist_data")
    with pytest.raises(DatasetDownloadError) as info:
        dataset.Mnist("train")
    message = str(info.value)
    assert "Mnist: cannot download http://yann.lecun.com/exdb/mnist/train-images-idx3-ubyte.gz" in message
    assert "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz" in message  # the mirror
    assert "put the files train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz into " + directory in message
    assert os.listdir(directory) == []   # no partial file left behind
    assert isinstance(info.value, OSError)


def _serve(monkeypatch, contents):
    """Make _fetch_url serve ``contents[url]`` (bytes) and fail for other URLs; returns the URLs asked."""
    asked = []

    def fetch(url, destination, timeout):
        asked.append(url)
        if url not in contents:
            raise urllib.error.URLError("no route to " + url)
        with open(destination, "wb") as f:
            f.write(contents[url])

    monkeypatch.setattr(_downloads, "_fetch_url", fetch)
    return asked


def test_download_is_verified_and_falls_back_to_the_next_url(tmp_path, monkeypatch):
    body = b"the standard bytes"
    remote = _files.RemoteFile("data.bin", ("http://a/", "http://b/"), md5=hashlib.md5(body).hexdigest(),
                               size=len(body))
    asked = _serve(monkeypatch, {"http://a/data.bin": b"a corrupted copy", "http://b/data.bin": body})
    path = _files.fetch(remote, str(tmp_path / "d"), "Test")
    assert asked == ["http://a/data.bin", "http://b/data.bin"]
    assert path == str(tmp_path / "d" / "data.bin")
    with open(path, "rb") as f:
        assert f.read() == body
    assert _files.fetch(remote, str(tmp_path / "d"), "Test") == path   # present: not fetched again
    assert len(asked) == 2


def test_download_with_a_wrong_checksum_or_size_is_refused(tmp_path, monkeypatch):
    _serve(monkeypatch, {"http://a/data.bin": b"tampered"})
    remote = _files.RemoteFile("data.bin", ("http://a/",), md5="0" * 32)
    with pytest.raises(DatasetDownloadError, match=r"Test: the file downloaded from http://a/data.bin has md5 "
                                                   r"[0-9a-f]{32}, but the standard data.bin has md5 0{32}"):
        _files.fetch(remote, str(tmp_path / "d"), "Test")
    with pytest.raises(DatasetDownloadError, match=r"has 8 bytes, but the standard data.bin has 9"):
        _files.fetch(remote._replace(md5=None, size=9), str(tmp_path / "d"), "Test")
    assert os.listdir(str(tmp_path / "d")) == []


def test_dataset_path_prefers_inputpipe_then_tensorpack_variable(monkeypatch, tmp_path):
    assert dataset.get_dataset_path("x") == str(tmp_path / "default_root" / "x")
    monkeypatch.delenv("INPUTPIPE_DATASET")
    monkeypatch.setenv("TENSORPACK_DATASET", "/data/tp")
    assert dataset.get_dataset_path("mnist_data") == "/data/tp/mnist_data"
    monkeypatch.delenv("TENSORPACK_DATASET")
    assert dataset.get_dataset_path("a", "b") == os.path.join(os.path.expanduser("~"), "tensorpack_data", "a", "b")


def test_cifar_downloads_verifies_and_unpacks_the_archive(tmp_path, monkeypatch):
    import tarfile

    source = make_cifar(str(tmp_path / "source"), rows=2, test_rows=3)
    archive = str(tmp_path / "cifar-10-python.tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(os.path.join(source, "cifar-10-batches-py"), arcname="cifar-10-batches-py")
    with open(archive, "rb") as f:
        body = f.read()
    from inputpipe.dataflow.dataset import cifar

    remote, folder = cifar._ARCHIVES[10]
    monkeypatch.setitem(cifar._ARCHIVES, 10, (remote._replace(md5=hashlib.md5(body).hexdigest(), size=len(body)),
                                              folder))
    asked = _serve(monkeypatch, {"http://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz": body})
    ds = ready(dataset.Cifar10("test", shuffle=False))
    assert asked == ["http://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"]
    assert len(ds) == 3
    assert os.path.isdir(str(tmp_path / "default_root" / "cifar10_data" / "cifar-10-batches-py"))


def test_archive_members_outside_the_directory_are_refused(tmp_path):
    import io
    import tarfile

    archive = str(tmp_path / "evil.tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(DatasetDownloadError, match=r"Test: refusing to unpack .*escaped.txt"):
        _files.extract_tar(archive, str(tmp_path / "out"), "Test")
    assert not os.path.exists(str(tmp_path / "escaped.txt"))


# --- CIFAR -------------------------------------------------------------------------------------

@pytest.mark.parametrize("classnum", [10, 100])
def test_cifar_matches_tensorpack_on_a_full_size_test_batch(tmp_path, classnum):
    d = make_cifar(str(tmp_path / "cifar"), classnum, rows=1, test_rows=10000)
    cls = dataset.Cifar10 if classnum == 10 else dataset.Cifar100
    key = "cifar%d" % classnum
    ds = ready(cls("test", dir=d))
    assert ds.shuffle is EXPECTED[key + "_shuffle"]
    assert len(ds) == 10000
    assert fingerprint(epoch(ds)) == EXPECTED[key + "_test"]
    assert describe(next(iter(ds))) == EXPECTED[key + "_describe"]
    assert ds.get_label_names()[:3] == EXPECTED[key + "_names"]
    assert fingerprint([[ds.get_per_pixel_mean(("test",))]]) == EXPECTED[key + "_mean"]
    assert ds.get_per_channel_mean(("test",)).tolist() == EXPECTED[key + "_channel_mean"]
    assert_reshuffled(ready(cls("test", shuffle=True, dir=d)), epoch(ds))  # not EXPECTED[key + "_seeded"]


def test_cifar_reads_batches_of_any_size_in_file_order(tmp_path):
    d = make_cifar(str(tmp_path / "cifar"), rows=4, test_rows=3)
    ds = ready(dataset.Cifar10("train", dir=d))
    assert ds.shuffle is True and len(ds) == 20
    ds.shuffle = False
    expected = []
    for i in range(1, 6):
        with open(os.path.join(d, "cifar-10-batches-py", "data_batch_%d" % i), "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        expected += [[row.reshape(3, 32, 32).transpose(1, 2, 0), label]
                     for row, label in zip(batch[b"data"], batch[b"labels"])]
    got = epoch(ds)
    assert fingerprint(got) == fingerprint(expected)
    got[0][1] = "changed downstream"
    assert fingerprint(epoch(ds)) == fingerprint(expected)   # the stored datapoints are not shared
    with pytest.raises(ValueError, match="names must be 'train' or 'test', got 'val'"):
        ds.get_per_pixel_mean(("val",))


class _RunsCode:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_cifar_pickle_that_would_run_code_is_refused(tmp_path):
    d = make_cifar(str(tmp_path / "cifar"), rows=1, test_rows=1)
    marker = str(tmp_path / "code_ran")
    _dump_py2_style({b"data": np.zeros((1, 3072), np.uint8), b"labels": [_RunsCode(marker)]},
                    os.path.join(d, "cifar-10-batches-py", "test_batch"))
    with pytest.raises(pickle.UnpicklingError, match=r"Cifar10: .*test_batch names posix.mkdir; a dataset pickle "
                                                     r"may only hold numpy arrays"):
        dataset.Cifar10("test", dir=d)
    assert not os.path.exists(marker)


def test_cifar_missing_batch_file_is_named(tmp_path):
    d = make_cifar(str(tmp_path / "cifar"), rows=1, test_rows=1)
    os.remove(os.path.join(d, "cifar-10-batches-py", "data_batch_3"))
    with pytest.raises(FileNotFoundError, match=r"Cifar10: the CIFAR batch file .*data_batch_3 is missing"):
        dataset.Cifar10("train", dir=d)


# --- SVHN, Caltech101 Silhouettes, BSDS500 (.mat files) ----------------------------------------

def test_svhn_matches_tensorpack_and_caches_per_directory(tmp_path):
    d = make_svhn(str(tmp_path / "svhn"))
    ds = ready(dataset.SVHNDigit("test", data_dir=d, shuffle=False))
    assert fingerprint(epoch(ds)) == EXPECTED["svhn_test"]
    assert describe(next(iter(ds))) == EXPECTED["svhn_describe"]
    assert [int(dp[1]) for dp in ds] == EXPECTED["svhn_labels"]
    other = make_svhn(str(tmp_path / "svhn_other"), seed=1)
    ds_other = ready(dataset.SVHNDigit("test", data_dir=other, shuffle=False))
    assert fingerprint(epoch(ds_other)) != EXPECTED["svhn_test"]   # tensorpack would serve the cached first dir
    assert dataset.SVHNDigit("test", data_dir=d).X is ds.X


def test_mat_readers_need_scipy_and_say_so(tmp_path, monkeypatch):
    d = make_svhn(str(tmp_path / "svhn"))
    monkeypatch.setitem(sys.modules, "scipy.io", None)
    with pytest.raises(ImportError, match=r"^SVHNDigit reads MATLAB .mat files and needs SciPy: pip install scipy$"):
        dataset.SVHNDigit("test", data_dir=d)


def test_caltech101_silhouettes_reads_each_split(tmp_path):
    import scipy.io

    d = make_caltech(str(tmp_path / "caltech"))
    content = scipy.io.loadmat(os.path.join(d, "caltech101_silhouettes_28_split1.mat"))
    for name, count in (("train", 5), ("val", 3), ("test", 4)):
        ds = ready(dataset.Caltech101Silhouettes(name, shuffle=False, dir=d))
        assert len(ds) == count
        got = epoch(ds)
        assert describe(got[0]) == [("ndarray", "float64", (28, 28)), ("float64", "float64", ())]
        np.testing.assert_array_equal(np.stack([dp[0] for dp in got]), content[name + "_data"].reshape(-1, 28, 28))
        assert [dp[1] for dp in got] == (content[name + "_labels"].ravel() - 1).tolist()
    with pytest.raises(DatasetDownloadError, match=r"people.cs.umass.edu/~marlin/data/caltech101_silhouettes_28_"
                                                   r"split1.mat .*put the file caltech101_silhouettes_28_split1.mat"):
        dataset.Caltech101Silhouettes("train")


def test_bsds500_matches_tensorpack_in_sorted_order(tmp_path):
    import cv2

    d = make_bsds500(str(tmp_path / "bsds"))
    ds = ready(dataset.BSDS500("val", data_dir=d, shuffle=False))
    got = epoch(ds)
    assert sorted(fingerprint([dp]) for dp in got) == EXPECTED["bsds500_each"]
    assert describe(got[0]) == EXPECTED["bsds500_describe"]
    portrait = cv2.imread(os.path.join(d, "BSR", "BSDS500", "data", "images", "val", "100007.jpg"))
    np.testing.assert_array_equal(got[0][0], portrait.transpose(1, 0, 2))   # '100007' sorts first
    assert 0.0 <= got[0][1].min() and got[0][1].max() <= 1.0


# --- ILSVRC12, TinyImageNet, Places365 ----------------------------------------------------------

@pytest.mark.parametrize("key,sub,name,structure", [
    ("train", "original", "train", None), ("val", "original", "val", None),
    ("val_trainstyle", "trainstyle", "val", None), ("test", "original", "test", "original")])
def test_ilsvrc12_files_match_tensorpack(tmp_path, key, sub, name, structure):
    root = make_ilsvrc(str(tmp_path / "ilsvrc"))
    ds = ready(dataset.ILSVRC12Files(os.path.join(root, sub), name, meta_dir=os.path.join(root, "meta"),
                                     shuffle=False, dir_structure=structure))
    assert _relative(epoch(ds), root) == EXPECTED["ilsvrc_files_" + key]


def test_ilsvrc12_images_and_shuffle_match_tensorpack(tmp_path):
    import cv2

    root = make_ilsvrc(str(tmp_path / "ilsvrc"))
    meta = os.path.join(root, "meta")
    ds = ready(dataset.ILSVRC12(os.path.join(root, "original"), "val", meta_dir=meta, shuffle=False))
    got = epoch(ds)
    assert fingerprint(got) == EXPECTED["ilsvrc_val"]
    assert describe(got[0]) == EXPECTED["ilsvrc_describe"]
    np.testing.assert_array_equal(got[0][0], cv2.imread(os.path.join(root, "original", "val",
                                                                     "ILSVRC2012_val_00000001.JPEG")))
    files = ready(dataset.ILSVRC12Files(os.path.join(root, "original"), "train", meta_dir=meta))
    assert files.shuffle is EXPECTED["ilsvrc_train_shuffle"]
    plain = epoch(ready(dataset.ILSVRC12Files(os.path.join(root, "original"), "train", meta_dir=meta, shuffle=False)))
    assert_reshuffled(files, plain)  # not EXPECTED["ilsvrc_train_seeded"], tensorpack's own stream


def test_ilsvrc_meta_and_training_boxes(tmp_path):
    root = make_ilsvrc(str(tmp_path / "ilsvrc"))
    meta = dataset.ILSVRCMeta(os.path.join(root, "meta"))
    assert meta.get_synset_words_1000() == EXPECTED["ilsvrc_words"]
    assert meta.get_synset_1000() == EXPECTED["ilsvrc_synsets"]
    make_bbox_xml(os.path.join(root, "bbox"), "n01440764/n01440764_10026.JPEG", (1, 2, 5, 4))
    boxes = dataset.ILSVRC12.get_training_bbox(os.path.join(root, "bbox"), meta.get_image_list("train"))
    # tensorpack returns [None] * 4 here: its parser calls Element.getchildren(), gone since Python 3.9
    assert EXPECTED["ilsvrc_bbox"] == [None, None, None, None]
    assert boxes[0] is None and boxes[2] is None and boxes[3] is None
    assert boxes[1].dtype == np.float32 and boxes[1].tolist() == [1.0, 2.0, 5.0, 4.0]


def test_ilsvrc_errors_name_what_is_missing(tmp_path):
    root = make_ilsvrc(str(tmp_path / "ilsvrc"))
    os.remove(os.path.join(root, "original", "val", "ILSVRC2012_val_00000002.JPEG"))
    with pytest.raises(FileNotFoundError, match=r"ILSVRC12: the image .*ILSVRC2012_val_00000002.JPEG listed in the "
                                                r"metadata is missing \(dir_structure is 'original'\)"):
        dataset.ILSVRC12(os.path.join(root, "original"), "val", meta_dir=os.path.join(root, "meta"))
    with pytest.raises(FileNotFoundError, match=r"ILSVRC12Files: expected the image directory .*nowhere.val"):
        dataset.ILSVRC12Files(str(tmp_path / "nowhere"), "val", meta_dir=os.path.join(root, "meta"))
    os.makedirs(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="cannot guess the directory structure of .*empty: it is empty"):
        dataset.ILSVRCMeta.guess_dir_structure(str(tmp_path / "empty"))
    with pytest.raises(DatasetDownloadError) as info:
        dataset.ILSVRCMeta(str(tmp_path / "no_meta"))
    assert "http://dl.caffe.berkeleyvision.org/caffe_ilsvrc12.tar.gz" in str(info.value)
    assert "synsets.txt, synset_words.txt, train.txt, val.txt" in str(info.value)
    assert str(tmp_path / "no_meta") in str(info.value)


def _blob_proto_class():
    """caffe's BlobProto message (the fields the mean file uses), built with protobuf at run time."""
    protobuf = pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    del protobuf
    proto = descriptor_pb2.FileDescriptorProto(name="blob_for_test.proto", package="fortest", syntax="proto2")
    message = proto.message_type.add(name="BlobProto")
    field = descriptor_pb2.FieldDescriptorProto
    for name, number in (("num", 1), ("channels", 2), ("height", 3), ("width", 4)):
        message.field.add(name=name, number=number, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    message.field.add(name="data", number=5, type=field.TYPE_FLOAT, label=field.LABEL_REPEATED,
                      options=descriptor_pb2.FieldOptions(packed=True))
    message.field.add(name="diff", number=6, type=field.TYPE_FLOAT, label=field.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    descriptor = pool.FindMessageTypeByName("fortest.BlobProto")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)     # protobuf < 4.21 (TF 1.15's 3.20)


def test_ilsvrc_mean_image_is_read_without_caffe(tmp_path):
    root = make_ilsvrc(str(tmp_path / "ilsvrc"))
    planes = np.random.RandomState(0).uniform(0, 255, (3, 256, 256)).astype(np.float32)
    blob = _blob_proto_class()(num=1, channels=3, height=256, width=256, diff=[1.5, 2.5])
    blob.data.extend(planes.ravel().tolist())
    with open(os.path.join(root, "meta", "imagenet_mean.binaryproto"), "wb") as f:
        f.write(blob.SerializeToString())
    meta = dataset.ILSVRCMeta(os.path.join(root, "meta"))
    mean = meta.get_per_pixel_mean()
    assert mean.dtype == np.float32 and mean.shape == (256, 256, 3)
    np.testing.assert_array_equal(mean, planes.transpose(1, 2, 0))
    assert meta.get_per_pixel_mean((224, 200)).shape == (224, 200, 3)


def test_places365_matches_tensorpack(tmp_path):
    d = make_places(str(tmp_path / "places"))
    assert dataset.Places365Standard(d, "train").shuffle is EXPECTED["places_shuffle_default"]
    ds = ready(dataset.Places365Standard(d, "train", shuffle=False))
    assert ds.get_label_names() == EXPECTED["places_names"]
    got = epoch(ds)
    assert [dp[1] for dp in got] == EXPECTED["places_labels"]
    assert fingerprint(got) == EXPECTED["places_train"]


def test_tiny_imagenet_matches_tensorpack(tmp_path):
    d, wnids = make_tiny_imagenet(str(tmp_path / "tiny"))
    ds = ready(dataset.TinyImageNet(d, "val"))
    assert ds.shuffle is EXPECTED["tiny_val_shuffle"]
    got = epoch(ds)
    assert fingerprint(got) == EXPECTED["tiny_val"]
    assert [dp[1] for dp in got] == EXPECTED["tiny_val_labels"]
    train = ready(dataset.TinyImageNet(d, "train", shuffle=False))
    assert len(train) == EXPECTED["tiny_train_len"]
    assert fingerprint(epoch(train)) == EXPECTED["tiny_train"]
    with open(os.path.join(d, "wnids.txt"), "w") as f:
        f.write("\n".join(wnids[:10]))
    with pytest.raises(ValueError, match=r"TinyImageNet: .*wnids.txt should list 200 distinct wnids, it lists 10"):
        dataset.TinyImageNet(d, "val")

# --------------------------------------------------------------------------------------------
# Printing EXPECTED with tensorpack (run: /opt/tpvenv/bin/python tests/test_dataset_readers.py)
# --------------------------------------------------------------------------------------------

def _relative(dps, root, index=0):
    return [[os.path.relpath(dp[index], root)] + list(dp[index + 1:]) for dp in dps]


def _print_tensorpack_expected():  # pragma: no cover - a tool, run under tensorpack's interpreter
    import tempfile

    from tensorpack.dataflow import dataset as tp

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = make_mnist(os.path.join(tmp, "mnist"))
        ds = tp.Mnist("train", shuffle=False, dir=d)
        ds.reset_state()
        out["mnist_train"] = fingerprint(epoch(ds))
        out["mnist_describe"] = describe(next(iter(ds)))
        out["mnist_labels"] = [int(dp[1]) for dp in ds]
        out["mnist_test"] = fingerprint(epoch(tp.Mnist("test", shuffle=False, dir=d)))
        ds = tp.Mnist("train", shuffle=True, dir=d)
        ds.reset_state()
        out["mnist_train_seeded"] = fingerprint(seeded_epochs(ds))

        for classnum, cls in ((10, tp.Cifar10), (100, tp.Cifar100)):
            d = make_cifar(os.path.join(tmp, "cifar%d" % classnum), classnum, rows=1, test_rows=10000)
            ds = cls("test", dir=d)
            ds.reset_state()
            key = "cifar%d" % classnum
            out[key + "_shuffle"] = ds.shuffle
            out[key + "_test"] = fingerprint(epoch(ds))
            out[key + "_describe"] = describe(next(iter(ds)))
            out[key + "_names"] = ds.get_label_names()[:3]
            out[key + "_mean"] = fingerprint([[ds.get_per_pixel_mean(("test",))]])
            out[key + "_channel_mean"] = ds.get_per_channel_mean(("test",)).tolist()
            ds = cls("test", shuffle=True, dir=d)
            ds.reset_state()
            out[key + "_seeded"] = fingerprint(seeded_epochs(ds))

        d = make_svhn(os.path.join(tmp, "svhn"))
        ds = tp.SVHNDigit("test", data_dir=d, shuffle=False)
        ds.reset_state()
        out["svhn_test"] = fingerprint(epoch(ds))
        out["svhn_describe"] = describe(next(iter(ds)))
        out["svhn_labels"] = [int(dp[1]) for dp in ds]

        d = make_bsds500(os.path.join(tmp, "bsds"))
        ds = tp.BSDS500("val", data_dir=d, shuffle=False)
        ds.reset_state()
        out["bsds500_each"] = sorted(fingerprint([dp]) for dp in ds)
        out["bsds500_describe"] = describe(next(iter(ds)))

        root = make_ilsvrc(os.path.join(tmp, "ilsvrc"))
        meta = os.path.join(root, "meta")
        for key, sub, name, structure in (("train", "original", "train", None), ("val", "original", "val", None),
                                          ("val_trainstyle", "trainstyle", "val", None),
                                          ("test", "original", "test", "original")):
            ds = tp.ILSVRC12Files(os.path.join(root, sub), name, meta_dir=meta, shuffle=False,
                                  dir_structure=structure)
            ds.reset_state()
            out["ilsvrc_files_" + key] = _relative(epoch(ds), root)
        ds = tp.ILSVRC12(os.path.join(root, "original"), "val", meta_dir=meta, shuffle=False)
        ds.reset_state()
        out["ilsvrc_val"] = fingerprint(epoch(ds))
        out["ilsvrc_describe"] = describe(next(iter(ds)))
        ds = tp.ILSVRC12Files(os.path.join(root, "original"), "train", meta_dir=meta)
        ds.reset_state()
        out["ilsvrc_train_shuffle"] = ds.shuffle
        out["ilsvrc_train_seeded"] = _relative(seeded_epochs(ds), root)
        m = tp.ILSVRCMeta(meta)
        out["ilsvrc_words"] = m.get_synset_words_1000()
        out["ilsvrc_synsets"] = m.get_synset_1000()
        make_bbox_xml(os.path.join(root, "bbox"), "n01440764/n01440764_10026.JPEG", (1, 2, 5, 4))
        try:
            out["ilsvrc_bbox"] = tp.ILSVRC12.get_training_bbox(os.path.join(root, "bbox"), m.get_image_list("train"))
        except Exception as err:
            out["ilsvrc_bbox"] = repr(err)

        d = make_places(os.path.join(tmp, "places"))
        ds = tp.Places365Standard(d, "train", shuffle=False)
        ds.reset_state()
        out["places_shuffle_default"] = tp.Places365Standard(d, "train").shuffle
        out["places_names"] = ds.get_label_names()
        out["places_labels"] = [dp[1] for dp in ds]
        out["places_train"] = fingerprint(epoch(ds))

        d, _ = make_tiny_imagenet(os.path.join(tmp, "tiny"))
        ds = tp.TinyImageNet(d, "val")
        ds.reset_state()
        out["tiny_val_shuffle"] = ds.shuffle
        out["tiny_val"] = fingerprint(epoch(ds))
        out["tiny_val_labels"] = [dp[1] for dp in ds]
        ds = tp.TinyImageNet(d, "train", shuffle=False)
        ds.reset_state()
        out["tiny_train_len"] = len(ds)
        out["tiny_train"] = fingerprint(epoch(ds))
    for key, value in out.items():
        print("    {!r}: {!r},".format(key, value))


if __name__ == "__main__":  # pragma: no cover
    _print_tensorpack_expected()
