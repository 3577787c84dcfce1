"""Dataset readers on corrupt copies of their files: every reader raises a DatasetFormatError (a
ValueError) naming the reader, the file, what was expected and what was found, instead of a raw
EOFError, zlib.error, KeyError, IndexError or OpenCV/numpy error; a header that declares more data
than the file holds is refused without allocating what it declares.

The valid files come from the writers of tests/test_dataset_readers.py; each test damages one.
"""
import gzip
import os
import pickle
import tracemalloc

import numpy as np
import pytest

from inputpipe.dataflow import DatasetFormatError, dataset
from test_dataset_readers import (  # noqa: F401 - no_network: an autouse fixture, active here too
    _dump_py2_style, _write_idx, make_bsds500, make_caltech, make_cifar, make_ilsvrc, make_mnist, make_places,
    make_svhn, make_tiny_imagenet, no_network)


def _cut(path, keep):
    """Keep the first ``keep`` bytes of ``path`` (a negative ``keep`` drops that many from the end)."""
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:keep])
    return data


def _write_gzip(path, raw):
    with gzip.open(path, "wb") as f:
        f.write(raw)


# --- MNIST / Fashion-MNIST: gzipped IDX files -----------------------------------------------------

@pytest.fixture
def mnist_dir(tmp_path):
    return make_mnist(str(tmp_path / "mnist"), train=3, test=2)


def _images(directory):
    return os.path.join(directory, "t10k-images-idx3-ubyte.gz")


def _labels(directory):
    return os.path.join(directory, "t10k-labels-idx1-ubyte.gz")


@pytest.mark.parametrize("reader", [dataset.Mnist, dataset.FashionMnist])
def test_mnist_truncated_gzip_names_the_reader_and_file(mnist_dir, reader):
    _cut(_images(mnist_dir), -30)
    with pytest.raises(DatasetFormatError) as info:
        reader("test", dir=mnist_dir)
    message = str(info.value)
    assert message.startswith(reader.__name__ + ": " + _images(mnist_dir) + " is not a readable gzip file "
                              "(expected a gzipped IDX file): ")
    assert "ended before the end-of-stream marker" in message


def test_mnist_corrupt_or_foreign_gzip_is_a_format_error(mnist_dir):
    data = _cut(_images(mnist_dir), 0)
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0xFF                 # a flipped byte inside the deflate stream
    with open(_images(mnist_dir), "wb") as f:
        f.write(bytes(damaged))
    with pytest.raises(DatasetFormatError, match=r"^Mnist: .*t10k-images-idx3-ubyte.gz is not a readable gzip "
                                                 r"file \(expected a gzipped IDX file\): "):
        dataset.Mnist("test", dir=mnist_dir)
    with open(_images(mnist_dir), "wb") as f:
        f.write(b"not gzip at all" * 10)
    with pytest.raises(DatasetFormatError, match=r"is not a readable gzip file \(expected a gzipped IDX file\): "
                                                 r"Not a gzipped file \(b'no'\)"):
        dataset.Mnist("test", dir=mnist_dir)


def test_mnist_header_declaring_a_billion_images_is_refused_without_allocating(mnist_dir):
    _write_gzip(_images(mnist_dir), np.array([2051, 10 ** 9, 28, 28], ">u4").tobytes() + bytes(2 * 784))
    tracemalloc.start()
    try:
        with pytest.raises(DatasetFormatError) as info:
            dataset.Mnist("test", dir=mnist_dir)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(info.value) == ("Mnist: {} is truncated: its header announces 784000000000 values of shape "
                               "(1000000000, 28, 28), the file has 1568".format(_images(mnist_dir)))
    assert peak < 16 * 2 ** 20


def test_mnist_data_beyond_what_the_header_declares_is_refused(mnist_dir):
    _write_gzip(_labels(mnist_dir), np.array([2049, 2], ">u4").tobytes() + bytes([3, 4, 5]))
    with pytest.raises(DatasetFormatError, match=r"^Mnist: .*t10k-labels-idx1-ubyte.gz holds more than its header "
                                                 r"declares: expected 2 values of shape \(2,\), found more after "
                                                 r"them$"):
        dataset.Mnist("test", dir=mnist_dir)


def test_mnist_short_header_and_bad_values_are_named(mnist_dir):
    _write_gzip(_images(mnist_dir), np.array([2051], ">u4").tobytes() + b"\x00")
    with pytest.raises(DatasetFormatError, match=r"^Mnist: .*t10k-images-idx3-ubyte.gz is truncated: expected a "
                                                 r"16-byte IDX header, found 5 bytes$"):
        dataset.Mnist("test", dir=mnist_dir)
    make_mnist(mnist_dir, train=3, test=2)
    _write_gzip(_labels(mnist_dir), np.array([2049, 2], ">u4").tobytes() + bytes([3, 200]))
    with pytest.raises(DatasetFormatError, match=r"^Mnist: .*t10k-labels-idx1-ubyte.gz: expected labels 0-9, found "
                                                 r"200 at index 1$"):
        dataset.Mnist("test", dir=mnist_dir)
    _write_gzip(_labels(mnist_dir), np.array([2049, 3], ">u4").tobytes() + bytes([3, 2, 1]))
    with pytest.raises(DatasetFormatError, match=r"^Mnist: .*t10k-images-idx3-ubyte.gz has 2 images but "
                                                 r".*t10k-labels-idx1-ubyte.gz has 3 labels$"):
        dataset.Mnist("test", dir=mnist_dir)


# --- CIFAR: the dataset's own pickles ------------------------------------------------------------

def _cifar_file(directory, name="test_batch"):
    return os.path.join(directory, "cifar-10-batches-py", name)


@pytest.fixture
def cifar_dir(tmp_path):
    return make_cifar(str(tmp_path / "cifar"), rows=2, test_rows=2)


def test_cifar_truncated_or_garbage_batch_names_the_file(cifar_dir):
    _cut(_cifar_file(cifar_dir), 200)
    with pytest.raises(DatasetFormatError, match=r"^Cifar10: .*test_batch is not a readable CIFAR pickle "
                                                 r"\(expected the dataset's python-version batch file\): "
                                                 r"ValueError: (pickle exhausted before seeing STOP|expected \d+ bytes in a \w+, but only \d+ remain|"
                                                 r"not enough data in stream to read \w+)$"):
        dataset.Cifar10("test", dir=cifar_dir)
    with open(_cifar_file(cifar_dir), "wb") as f:
        f.write(b"\x93NUMPY garbage, not a pickle")
    with pytest.raises(DatasetFormatError, match=r"^Cifar10: .*test_batch is not a readable CIFAR pickle"):
        dataset.Cifar10("test", dir=cifar_dir)


@pytest.mark.parametrize("batch,message", [
    ({b"data": np.zeros((2, 3072), np.uint8)},
     r"test_batch: expected a dict with the keys b'data' and b'labels', found the keys \[b'data'\]"),
    ([1, 2, 3], r"test_batch: expected a dict with the keys b'data' and b'labels', found a list"),
    ({b"data": np.zeros((2, 3000), np.uint8), b"labels": [1, 2]},
     r"test_batch: expected b'data' as a uint8 array of shape \(N, 3072\), found an array of shape \(2, 3000\) "
     r"and dtype uint8"),
    ({b"data": [[0] * 3072] * 2, b"labels": [1, 2]},
     r"test_batch: expected b'data' as a uint8 array of shape \(N, 3072\), found a list"),
    ({b"data": np.zeros((2, 3072), np.float32), b"labels": [1, 2]},
     r"found an array of shape \(2, 3072\) and dtype float32"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]},
     r"test_batch has 2 images but 1 labels"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 10]},
     r"test_batch: expected labels 0-9, found 10 at index 1"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, "cat"]},
     r"test_batch: expected integer labels 0-9, found 'cat' at index 1"),
])
def test_cifar_batch_with_missing_keys_or_wrong_shapes_is_named(cifar_dir, batch, message):
    _dump_py2_style(batch, _cifar_file(cifar_dir))
    with pytest.raises(DatasetFormatError, match=r"^Cifar10: .*" + message + "$"):
        dataset.Cifar10("test", dir=cifar_dir)


def test_cifar100_and_meta_files_are_checked_too(tmp_path):
    d = make_cifar(str(tmp_path / "c100"), classnum=100, rows=2, test_rows=2)
    test_file = os.path.join(d, "cifar-100-python", "test")
    _dump_py2_style({b"data": np.zeros((2, 3072), np.uint8), b"coarse_labels": [1, 2]}, test_file)
    with pytest.raises(DatasetFormatError, match=r"^Cifar100: .*test: expected a dict with the keys b'data' and "
                                                 r"b'fine_labels', found the keys \[b'coarse_labels', b'data'\]$"):
        dataset.Cifar100("test", dir=d)
    d = make_cifar(str(tmp_path / "c10"), rows=2, test_rows=2)
    _dump_py2_style({"num_vis": 3072}, _cifar_file(d, "batches.meta"))
    with pytest.raises(DatasetFormatError, match=r"^Cifar10: .*batches.meta: expected a dict with the key "
                                                 r"'label_names', found the keys \['num_vis'\]$"):
        dataset.Cifar10("test", dir=d)
    _cut(_cifar_file(d, "batches.meta"), 0)
    with pytest.raises(DatasetFormatError, match=r"^Cifar10: .*batches.meta is not a readable CIFAR pickle"):
        dataset.Cifar10("test", dir=d)


def test_cifar_pickle_building_a_huge_array_is_refused(cifar_dir):
    class CallsNdarray:
        def __reduce__(self):
            return (np.ndarray, ((10 ** 6, 10 ** 6), "u1"))       # would reserve a terabyte
    with open(_cifar_file(cifar_dir), "wb") as f:
        pickle.dump({b"data": CallsNdarray(), b"labels": []}, f, protocol=2)
    with pytest.raises(pickle.UnpicklingError, match=r"^Cifar10: .*test_batch calls numpy.ndarray\(\(1000000, "
                                                     r"1000000\), 'u1'\); a dataset pickle may only rebuild arrays "
                                                     r"the way numpy pickles them$"):
        dataset.Cifar10("test", dir=cifar_dir)
    reconstruct = np.array([0]).__reduce__()[0]            # numpy's own _reconstruct

    class HugeReconstructed:
        def __reduce__(self):
            return (reconstruct, (np.ndarray, (10 ** 6, 10 ** 6), b"B"))
    with open(_cifar_file(cifar_dir), "wb") as f:
        pickle.dump({b"data": HugeReconstructed(), b"labels": []}, f, protocol=2)
    with pytest.raises(pickle.UnpicklingError, match=r"^Cifar10: .*test_batch builds an array of shape \(1000000, "
                                                     r"1000000\) with _reconstruct; numpy's pickles build shape "
                                                     r"\(0,\) and fill it from the pickled state$"):
        dataset.Cifar10("test", dir=cifar_dir)


def test_cifar_pickle_declaring_more_bytes_than_it_holds_is_refused_without_allocating(cifar_dir):
    with open(_cifar_file(cifar_dir), "wb") as f:
        f.write(b"\x80\x04\x8e" + (2 ** 33).to_bytes(8, "little") + b"abc")   # BINBYTES8 of 8 GiB, 3 bytes
    tracemalloc.start()
    try:
        with pytest.raises(DatasetFormatError, match=r"^Cifar10: .*test_batch is not a readable CIFAR pickle "
                                                     r"\(expected the dataset's python-version batch file\): "
                                                     r"ValueError: expected 8589934592 bytes in a bytes8, but only "
                                                     r"3 remain$"):
            dataset.Cifar10("test", dir=cifar_dir)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2 ** 20


# --- .mat readers: SVHN, Caltech101 Silhouettes, BSDS500 ------------------------------------------

def test_svhn_corrupt_mat_file_is_a_format_error(tmp_path):
    d = make_svhn(str(tmp_path / "svhn"))
    path = os.path.join(d, "test_32x32.mat")
    _cut(path, 300)
    with pytest.raises(DatasetFormatError, match=r"^SVHNDigit: .*test_32x32.mat is not a readable MATLAB .mat "
                                                 r"file: "):
        dataset.SVHNDigit("test", data_dir=d)
    with open(path, "wb") as f:
        f.write(os.urandom(64) * 4)
    with pytest.raises(DatasetFormatError, match=r"^SVHNDigit: .*test_32x32.mat is not a readable MATLAB .mat"):
        dataset.SVHNDigit("test", data_dir=d)


@pytest.mark.parametrize("content,message", [
    ({"y": np.ones((6, 1), np.uint8)}, r"expected the variables X and y, found \['y'\]"),
    ({"X": np.zeros((32, 32, 6), np.uint8), "y": np.ones((6, 1), np.uint8)},
     r"expected X as a uint8 array of shape \(32, 32, 3, N\), found an array of shape \(32, 32, 6\) and dtype "
     r"uint8"),
    ({"X": np.zeros((32, 32, 3, 6), np.uint8), "y": np.ones((5, 1), np.uint8)},
     r"has 6 images in X but 5 labels in y"),
    ({"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.array([[1], [11]], np.uint8)},
     r"expected labels 1-10 in y, found 11 at index 1"),
])
def test_svhn_mat_with_wrong_variables_is_named(tmp_path, content, message):
    import scipy.io

    os.makedirs(str(tmp_path / "svhn"))
    scipy.io.savemat(str(tmp_path / "svhn" / "test_32x32.mat"), content)
    with pytest.raises(DatasetFormatError, match=r"^SVHNDigit: .*test_32x32.mat: " + message + "$"):
        dataset.SVHNDigit("test", data_dir=str(tmp_path / "svhn"))


def test_caltech101_corrupt_or_malformed_mat_is_named(tmp_path):
    import scipy.io

    d = make_caltech(str(tmp_path / "caltech"))
    path = os.path.join(d, "caltech101_silhouettes_28_split1.mat")
    _cut(path, 200)
    with pytest.raises(DatasetFormatError, match=r"^Caltech101Silhouettes: .*split1.mat is not a readable MATLAB "
                                                 r".mat file: "):
        dataset.Caltech101Silhouettes("train", dir=d)
    scipy.io.savemat(path, {"val_data": np.zeros((2, 784)), "val_labels": np.ones((2, 1))})
    with pytest.raises(DatasetFormatError, match=r"split1.mat: expected the variables train_data and train_labels, "
                                                 r"found \['val_data', 'val_labels'\]$"):
        dataset.Caltech101Silhouettes("train", dir=d)
    scipy.io.savemat(path, {"train_data": np.zeros((2, 780)), "train_labels": np.ones((2, 1))})
    with pytest.raises(DatasetFormatError, match=r"split1.mat: expected train_data as an array of shape \(N, 784\), "
                                                 r"found an array of shape \(2, 780\) and dtype float64$"):
        dataset.Caltech101Silhouettes("train", dir=d)
    scipy.io.savemat(path, {"train_data": np.zeros((2, 784)), "train_labels": np.array([[1], [0]])})
    with pytest.raises(DatasetFormatError, match=r"split1.mat: expected labels 1-101 in train_labels, found 0 at "
                                                 r"index 1$"):
        dataset.Caltech101Silhouettes("train", dir=d)


def test_bsds500_corrupt_annotation_or_image_is_named(tmp_path):
    import scipy.io

    d = make_bsds500(str(tmp_path / "bsds"))
    root = os.path.join(d, "BSR", "BSDS500", "data")
    gt = os.path.join(root, "groundTruth", "val", "3096.mat")
    _cut(gt, 150)
    with pytest.raises(DatasetFormatError, match=r"^BSDS500: .*3096.mat is not a readable MATLAB .mat file: "):
        dataset.BSDS500("val", data_dir=d)
    scipy.io.savemat(gt, {"segs": np.zeros((2, 2))})
    with pytest.raises(DatasetFormatError, match=r"^BSDS500: .*3096.mat: expected a groundTruth cell array of "
                                                 r"annotations with a Boundaries map each, found the variables "
                                                 r"\['segs'\]$"):
        dataset.BSDS500("val", data_dir=d)
    cell = np.empty((1, 1), dtype=object)
    cell[0, 0] = {"Segmentation": np.zeros((321, 481), np.uint16)}
    scipy.io.savemat(gt, {"groundTruth": cell})
    with pytest.raises(DatasetFormatError, match=r"3096.mat: expected a groundTruth cell array of annotations with "
                                                 r"a Boundaries map each, found annotation 0 without Boundaries$"):
        dataset.BSDS500("val", data_dir=d)
    make_bsds500(str(tmp_path / "bsds_again"))
    image = os.path.join(str(tmp_path / "bsds_again"), "BSR", "BSDS500", "data", "images", "val", "3096.jpg")
    _cut(image, 40)
    with pytest.raises(OSError, match=r"^BSDS500: the JPEG file .*3096.jpg is damaged: the segment of marker 0xdb "
                                      r"at byte 20 declares 67 bytes, 18 are left$"):
        dataset.BSDS500("val", data_dir=str(tmp_path / "bsds_again"))


# --- ILSVRC12 metadata, TinyImageNet and Places365 text files -------------------------------------

@pytest.fixture
def ilsvrc(tmp_path):
    root = make_ilsvrc(str(tmp_path / "ilsvrc"))
    return root, os.path.join(root, "meta")


def _write(path, text):
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())


@pytest.mark.parametrize("text,message", [
    ("ILSVRC2012_val_00000001.JPEG two\n", r"val.txt: line 1: expected '<image path> <integer label>', found "
                                           r"'ILSVRC2012_val_00000001.JPEG two'"),
    ("a.JPEG 1\nb.JPEG 7\n", r"val.txt: line 2: expected a label in 0-2 \(synsets.txt lists 3 synsets\), found 7"),
    ("a.JPEG 1\n\xff\xfe.JPEG 0\n".encode("latin-1"), r"val.txt: expected UTF-8 text, found a byte 0xff at offset "
                                                      r"9"),
])
def test_ilsvrc_malformed_image_lists_are_named(ilsvrc, text, message):
    root, meta = ilsvrc
    _write(os.path.join(meta, "val.txt"), text)
    with pytest.raises(DatasetFormatError, match=r"^ILSVRCMeta: .*" + message + "$"):
        dataset.ILSVRC12Files(os.path.join(root, "trainstyle"), "val", meta_dir=meta)


def test_ilsvrc_malformed_synsets_are_named(ilsvrc):
    root, meta = ilsvrc
    _write(os.path.join(meta, "synsets.txt"), "n01440764\nn01443537 goldfish\n")
    with pytest.raises(DatasetFormatError, match=r"^ILSVRCMeta: .*synsets.txt: line 2: expected one synset id like "
                                                 r"'n01440764', found 'n01443537 goldfish'$"):
        dataset.ILSVRCMeta(meta).get_synset_1000()
    _write(os.path.join(meta, "synsets.txt"), b"\x00\x01\x02 binary")
    with pytest.raises(DatasetFormatError, match=r"synsets.txt: line 1: expected one synset id"):
        dataset.ILSVRC12Files(os.path.join(root, "trainstyle"), "val", meta_dir=meta)


@pytest.mark.parametrize("damage,message", [
    (lambda blob: blob[:-3], r"field 5 declaring 786432 bytes at offset 4, past the end of the file \(786433 "
                             r"bytes; truncated\)"),
    (lambda blob: b"\xff" * 12, r"a varint longer than 10 bytes at offset 0"),
    (lambda blob: b"\x08\xff", r"a varint running past the end of the file at offset 1 \(truncated\)"),
    (lambda blob: b"\x0f\x00", r"protobuf wire type 7 \(field 1\) at offset 0, which no BlobProto field uses"),
    (lambda blob: b"\x2a\x03abc", r"field 5 of 3 bytes, not a whole number of float32 values"),
    (lambda blob: b"\x08\x01", r"0 values"),
])
def test_ilsvrc_corrupt_mean_file_is_named(ilsvrc, damage, message):
    _, meta = ilsvrc
    values = np.arange(3 * 256 * 256, dtype="<f4")
    blob = b"\x2a" + _varint(values.nbytes) + values.tobytes()   # field 5, packed float32
    _write(os.path.join(meta, "imagenet_mean.binaryproto"), damage(blob))
    with pytest.raises(DatasetFormatError, match=r"^ILSVRCMeta: .*imagenet_mean.binaryproto: expected a caffe "
                                                 r"BlobProto of 3x256x256 float32 values, found " + message + "$"):
        dataset.ILSVRCMeta(meta).get_per_pixel_mean()


def _varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_tiny_imagenet_malformed_annotations_are_named(tmp_path):
    d, wnids = make_tiny_imagenet(str(tmp_path / "tiny"))
    annotations = os.path.join(d, "val", "val_annotations.txt")
    _write(annotations, "val_0.JPEG\t{}\t0\t0\t63\t63\nval_1.JPEG\n".format(wnids[0]))
    with pytest.raises(DatasetFormatError, match=r"^TinyImageNet: .*val_annotations.txt: line 2: expected "
                                                 r"'<image file> <wnid> \.\.\.', found 'val_1.JPEG'$"):
        dataset.TinyImageNet(d, "val")
    _write(annotations, "val_0.JPEG\tn99999999\t0\t0\t63\t63\n")
    with pytest.raises(DatasetFormatError, match=r"^TinyImageNet: .*val_annotations.txt: line 1: expected a wnid "
                                                 r"listed in .*wnids.txt, found 'n99999999'$"):
        dataset.TinyImageNet(d, "val")
    os.rename(os.path.join(d, "train", wnids[3]), os.path.join(d, "train", "moved"))
    with pytest.raises(FileNotFoundError, match=r"^TinyImageNet: expected the folder .*{}.images of class 3 "
                                                r"\(listed in wnids.txt\)$".format(wnids[3])):
        dataset.TinyImageNet(d, "train")


def test_places365_malformed_or_missing_list_is_named(tmp_path):
    d = make_places(str(tmp_path / "places"))
    _write(os.path.join(d, "train.txt"), b"train/bedroom/00000001.jpg\ntrain/\xff\xfe/1.jpg\n")
    with pytest.raises(DatasetFormatError, match=r"^Places365Standard: .*train.txt: expected UTF-8 text, found a "
                                                 r"byte 0xff at offset 33$"):
        dataset.Places365Standard(d, "train")
    _write(os.path.join(d, "train.txt"), "train/bedroom/00000001.jpg\nbedroom.jpg\n")
    with pytest.raises(DatasetFormatError, match=r"^Places365Standard: line 2 of .*train.txt should be a path like "
                                                 r"'train/<class>/<file>.jpg', got 'bedroom.jpg'$"):
        dataset.Places365Standard(d, "train")
    os.remove(os.path.join(d, "train.txt"))
    with pytest.raises(FileNotFoundError, match=r"^Places365Standard: the image list .*train.txt is missing$"):
        dataset.Places365Standard(d, "train")


def test_a_corrupt_image_is_named_and_a_missing_one_too(tmp_path):
    root = make_ilsvrc(str(tmp_path / "ilsvrc"))
    val = os.path.join(root, "original", "val")
    _write(os.path.join(val, "ILSVRC2012_val_00000002.JPEG"), b"GIF89a not really")
    ds = dataset.ILSVRC12(os.path.join(root, "original"), "val", meta_dir=os.path.join(root, "meta"), shuffle=False)
    ds.reset_state()
    with pytest.raises(OSError, match=r"^ILSVRC12: cannot decode the image file .*ILSVRC2012_val_00000002.JPEG "
                                      r"\(17 bytes, starting with b'GIF89a not reall'\): expected a complete image "
                                      r"in a format OpenCV reads \(JPEG, PNG, BMP, \.\.\.\)$"):
        list(ds)
    os.remove(os.path.join(val, "ILSVRC2012_val_00000002.JPEG"))
    with pytest.raises(FileNotFoundError, match=r"^ILSVRC12: the image file .*ILSVRC2012_val_00000002.JPEG is "
                                                r"missing$"):
        list(ds)
