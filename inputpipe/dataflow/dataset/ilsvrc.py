"""ILSVRC12 (the 1000-class ImageNet) and TinyImageNet from their JPEG directories, with the
caffe ILSVRC12 metadata (synsets, labels, image lists, mean image).

Example::

    from inputpipe.dataflow.dataset import ILSVRC12
    ds = ILSVRC12("/data/imagenet", "val", meta_dir="/data/ilsvrc_metadata", shuffle=False)
    ds.reset_state()
    image, label = next(iter(ds))      # uint8 (h, w, 3) BGR, int label in 0-999
"""
import os
import xml.etree.ElementTree as ElementTree
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...utils.logger import get_logger
from .._core.helpers import IndexedSource
from .._image.opencv import import_cv2
from ._checks import DatasetFormatError, format_error, read_text_lines
from .._formats.dataset_files import RemoteFile, extract_tar, fetch, get_dataset_path, read_color_image, read_encoded_image
# tensorpack's dataset.ilsvrc also has these (outside __all__): scripts import them from here
from ..base import RNGDataFlow  # noqa: F401
from ..tensorpack_helpers import download, get_caffe_pb, mkdir_p, timed_operation  # noqa: F401

__all__ = ["ILSVRCMeta", "ILSVRC12", "ILSVRC12Files", "TinyImageNet"]

logger = get_logger(__name__)

# Only the size of caffe's metadata archive is known (tensorpack records it); no checksum is published.
CAFFE_ILSVRC12_META = RemoteFile("caffe_ilsvrc12.tar.gz", ("http://dl.caffe.berkeleyvision.org/",), size=17858008)
#: tensorpack's name: (URL, size in bytes) of caffe's metadata archive.
CAFFE_ILSVRC12_URL = (CAFFE_ILSVRC12_META.urls[0], 17858008)
_META_FILES = ["synsets.txt", "synset_words.txt", "train.txt", "val.txt", "test.txt", "imagenet_mean.binaryproto"]


def _read_lines(path: str, component: str) -> List[str]:
    return read_text_lines(component, path, "the metadata file")


# --- caffe's BlobProto (imagenet_mean.binaryproto), read without caffe or protobuf -------------

_MAX_VARINT_BYTES = 10


class _MalformedBlob(ValueError):
    """What is wrong in a serialized BlobProto (the message completes 'found ...')."""


def _varint(buf: bytes, at: int) -> Tuple[int, int]:
    start, value, shift = at, 0, 0
    while True:
        if at >= len(buf):
            raise _MalformedBlob("a varint running past the end of the file at offset {} (truncated)".format(start))
        if at - start >= _MAX_VARINT_BYTES:
            raise _MalformedBlob("a varint longer than {} bytes at offset {}".format(_MAX_VARINT_BYTES, start))
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _past_the_end(field: int, size: int, at: int, buf: bytes) -> _MalformedBlob:
    return _MalformedBlob("field {} declaring {} bytes at offset {}, past the end of the file ({} bytes; "
                          "truncated)".format(field, size, at, len(buf)))


def _blob_proto_data(buf: bytes) -> np.ndarray:
    """The float32 ``data`` (field 5, packed or not) of a serialized caffe BlobProto; a
    ``_MalformedBlob`` saying what is wrong otherwise."""
    chunks: List[np.ndarray] = []
    at = 0
    while at < len(buf):
        start = at
        key, at = _varint(buf, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, at = _varint(buf, at)
            continue
        if wire == 2:
            size, at = _varint(buf, at)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
        else:
            raise _MalformedBlob("protobuf wire type {} (field {}) at offset {}, which no BlobProto field "
                                 "uses".format(wire, field, start))
        if at + size > len(buf):
            raise _past_the_end(field, size, at, buf)
        if field == 5 and wire in (2, 5):
            if size % 4:
                raise _MalformedBlob("field 5 of {} bytes, not a whole number of float32 values".format(size))
            chunks.append(np.frombuffer(buf, dtype="<f4", count=size // 4, offset=at))
        at += size
    return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)


class ILSVRCMeta:
    """The ILSVRC12 metadata of caffe's ``caffe_ilsvrc12.tar.gz``: ``synsets.txt`` (the label
    order), ``synset_words.txt``, the image lists ``train.txt`` / ``val.txt`` / ``test.txt``
    (lines ``<relative image path> <label>``) and ``imagenet_mean.binaryproto``.

    ``dir`` defaults to ``~/tensorpack_data/ilsvrc_metadata``; when it has no ``synsets.txt``
    the caffe archive is downloaded there (checked against its documented size) and unpacked.

    Example::

        meta = ILSVRCMeta("/data/ilsvrc_metadata")
        words = meta.get_synset_words_1000()        # {0: 'n01440764 tench, Tinca tinca', ...}
        files = meta.get_image_list("val")          # [('ILSVRC2012_val_00000001.JPEG', 65), ...]
    """

    def __init__(self, dir: Optional[str] = None):
        self.dir = os.path.expanduser(dir) if dir is not None else get_dataset_path("ilsvrc_metadata")
        os.makedirs(self.dir, exist_ok=True)
        if not os.path.isfile(os.path.join(self.dir, "synsets.txt")):
            self._download_caffe_meta()

    def _download_caffe_meta(self) -> None:
        path = fetch(CAFFE_ILSVRC12_META, self.dir, "ILSVRCMeta",
                     expected=[CAFFE_ILSVRC12_META.name + " (or its contents: " + ", ".join(_META_FILES) + ")"])
        extract_tar(path, self.dir, "ILSVRCMeta")

    def get_synset_words_1000(self) -> Dict[int, str]:
        """{label: line of synset_words.txt}, e.g. ``'n01440764 tench, Tinca tinca'``."""
        return dict(enumerate(_read_lines(os.path.join(self.dir, "synset_words.txt"), "ILSVRCMeta")))

    def get_synset_1000(self) -> Dict[int, str]:
        """{label: synset id}, e.g. ``{0: 'n01440764', ...}``."""
        path = os.path.join(self.dir, "synsets.txt")
        lines = _read_lines(path, "ILSVRCMeta")
        while lines and not lines[-1]:
            lines.pop()          # blank lines at the end name no synset
        for number, line in enumerate(lines, 1):
            if len(line.split()) != 1:
                raise format_error("ILSVRCMeta", path, "line {}: expected one synset id like 'n01440764', found "
                                                       "{!r}".format(number, line))
        return dict(enumerate(lines))

    def get_image_list(self, name: str, dir_structure: str = "original") -> List[Tuple[str, int]]:
        """``[(relative image path, label), ...]`` of ``name`` ('train', 'val' or 'test'), in the
        list file's order. With ``dir_structure='train'`` the val/test paths get their synset
        folder prepended (``n01440764/ILSVRC2012_val_00000293.JPEG``)."""
        if name not in ("train", "val", "test"):
            raise ValueError("ILSVRCMeta: name must be 'train', 'val' or 'test', got {!r}".format(name))
        if dir_structure not in ("original", "train"):
            raise ValueError("ILSVRCMeta: dir_structure must be 'original' or 'train', got {!r}".format(dir_structure))
        synsets = self.get_synset_1000()
        in_synset_folders = name != "train" and dir_structure != "original"
        fname = os.path.join(self.dir, name + ".txt")
        result = []
        for number, line in enumerate(_read_lines(fname, "ILSVRCMeta"), 1):
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise format_error("ILSVRCMeta", fname, "line {}: expected '<image path> <integer label>', found "
                                                        "{!r}".format(number, line))
            path, label = parts[0], int(parts[1])
            if label not in synsets:
                raise format_error("ILSVRCMeta", fname, "line {}: expected a label in 0-{} (synsets.txt lists {} "
                                                        "synsets), found {}".format(number, len(synsets) - 1,
                                                                                    len(synsets), label))
            if in_synset_folders:
                path = os.path.join(synsets[label], path)
            result.append((path, label))
        if not result:
            raise format_error("ILSVRCMeta", fname, "expected lines '<image path> <integer label>', found none")
        return result

    def get_per_pixel_mean(self, size: Optional[Tuple[int, int]] = None) -> np.ndarray:
        """caffe's ImageNet mean image: float32 (h, w, 3) BGR in [0, 255], (256, 256) unless
        ``size`` (h, w) is given (then resized with OpenCV). Read from ``imagenet_mean.binaryproto``
        without needing caffe."""
        path = os.path.join(self.dir, "imagenet_mean.binaryproto")
        if not os.path.isfile(path):
            raise FileNotFoundError("ILSVRCMeta: the mean image file {} is missing".format(path))
        with open(path, "rb") as f:
            buf = f.read()
        expected = "expected a caffe BlobProto of 3x256x256 float32 values, found "
        try:
            data = _blob_proto_data(buf)
        except _MalformedBlob as err:
            raise format_error("ILSVRCMeta", path, expected + str(err)) from None
        if data.size != 3 * 256 * 256:
            raise format_error("ILSVRCMeta", path, expected + "{} values".format(data.size))
        mean = np.transpose(data.reshape((3, 256, 256)), [1, 2, 0])
        if size is not None:
            mean = import_cv2("ILSVRCMeta.get_per_pixel_mean").resize(mean, tuple(size[::-1]))
        return mean

    @staticmethod
    def guess_dir_structure(dir: str) -> str:
        """'train' when the first entry (sorted) of ``dir`` is a synset folder (``n...``), else
        'original'."""
        entries = sorted(os.listdir(dir))
        if not entries:
            raise ValueError("ILSVRCMeta: cannot guess the directory structure of {}: it is empty".format(dir))
        first = entries[0]
        structure = "train" if first.startswith("n") and os.path.isdir(os.path.join(dir, first)) else "original"
        logger.info("ILSVRC12: assuming the directory %s has the '%s' structure", dir, structure)
        return structure


class ILSVRC12Files(IndexedSource):
    """Like :class:`ILSVRC12`, but the datapoints are ``[image file path, label]`` (decode them
    yourself, e.g. in parallel workers). Same arguments and checks.

    Example::

        ds = ILSVRC12Files("/data/imagenet", "train", meta_dir="/data/ilsvrc_metadata")
        ds.reset_state()
        path, label = next(iter(ds))
    """

    def __init__(self, dir: str, name: str, meta_dir: Optional[str] = None, shuffle: Optional[bool] = None,
                 dir_structure: Optional[str] = None):
        component = type(self).__name__
        if name not in ("train", "test", "val"):
            raise ValueError("{}: name must be 'train', 'val' or 'test', got {!r}".format(component, name))
        dir = os.path.expanduser(dir)
        self.full_dir = os.path.join(dir, name)
        self.name = name
        if not os.path.isdir(self.full_dir):
            raise FileNotFoundError("{}: expected the image directory {}".format(component, self.full_dir))
        if meta_dir is not None and not os.path.isdir(os.path.expanduser(meta_dir)):
            raise FileNotFoundError("{}: the metadata directory {} does not exist".format(component, meta_dir))
        self.shuffle = name == "train" if shuffle is None else shuffle
        if name == "train":
            dir_structure = "train"
        if dir_structure is None:
            dir_structure = ILSVRCMeta.guess_dir_structure(self.full_dir)
        self.imglist = ILSVRCMeta(meta_dir).get_image_list(name, dir_structure)
        for fname, _ in self.imglist[:10]:
            path = os.path.join(self.full_dir, fname)
            if not os.path.isfile(path):
                raise FileNotFoundError("{}: the image {} listed in the metadata is missing (dir_structure "
                                        "is '{}')".format(component, path, dir_structure))

    def __len__(self) -> int:
        return len(self.imglist)

    def _datapoint(self, k: int) -> List[Any]:
        fname, label = self.imglist[k]
        return [os.path.join(self.full_dir, fname), label]


def _box_of(xml_path: str) -> np.ndarray:
    """[xmin, ymin, xmax, ymax] (float32) of the first object of an ImageNet box annotation."""
    box = ElementTree.parse(xml_path).getroot().find("object/bndbox")
    values = [None if box is None else box.findtext(tag) for tag in ("xmin", "ymin", "xmax", "ymax")]
    if any(value is None for value in values):
        raise ValueError("{} has no complete object/bndbox".format(xml_path))
    return np.asarray([float(value) for value in values if value is not None], dtype="float32")


class ILSVRC12(ILSVRC12Files):
    """ILSVRC12: ``[image, label]``, image a uint8 (h, w, 3) BGR array read with OpenCV, label an
    int in 0-999 following caffe's ``synsets.txt`` (see :class:`ILSVRCMeta`).

    ``dir`` holds a folder ``name`` ('train', 'val' or 'test'). ``train/`` always has one folder
    per synset (``train/n02134418/n02134418_198.JPEG``). ``val/`` (and ``test/``) is either
    ``'original'`` (the images directly inside) or ``'train'`` (synset folders, like train);
    ``dir_structure=None`` guesses it from the directory. ``meta_dir`` is the
    :class:`ILSVRCMeta` directory. ``shuffle`` defaults to True for 'train'. Needs OpenCV.

    ``encoded=True`` (not in tensorpack) gives each image as the file's bytes (a 1-d uint8 array)
    instead of its pixels: the augmentors of :class:`~inputpipe.dataflow.AugmentImageComponent`
    then decode only the crop they need (see :mod:`inputpipe.dataflow.imgaug.encoded`), and
    parallel workers receive about a tenth of the bytes. The augmented images are the same BGR
    uint8 arrays.

    Example::

        ds = ILSVRC12("/data/imagenet", "train", meta_dir="/data/ilsvrc_metadata")
        ds.reset_state()
        for image, label in ds:
            ...
        fast = AugmentImageComponent(ILSVRC12("/data/imagenet", "train", encoded=True), augmentors)
    """

    def __init__(self, dir: str, name: str, meta_dir: Optional[str] = None, shuffle: Optional[bool] = None,
                 dir_structure: Optional[str] = None, encoded: bool = False):
        import_cv2(type(self).__name__)
        super().__init__(dir, name, meta_dir, shuffle, dir_structure)
        self.encoded = bool(encoded)

    def _datapoint(self, k: int) -> List[Any]:
        fname, label = super()._datapoint(k)
        if self.encoded:
            return [read_encoded_image(type(self).__name__, fname), label]
        return [read_color_image(type(self).__name__, fname), label]

    @staticmethod
    def get_training_bbox(bbox_dir: str, imglist: Sequence[Tuple[str, int]]) -> List[Optional[np.ndarray]]:
        """For every ``(path, label)`` of ``imglist``, the float32 box [xmin, ymin, xmax, ymax] of the
        first object in ``bbox_dir/<path with .xml>``, or None when it has no readable annotation."""
        boxes: List[Optional[np.ndarray]] = []
        for fname, _ in imglist:
            xml_path = os.path.join(bbox_dir, os.path.splitext(fname)[0] + ".xml")
            try:
                boxes.append(_box_of(xml_path))
            except (OSError, ElementTree.ParseError, ValueError):
                boxes.append(None)
        logger.info("ILSVRC12: %d/%d images have a bounding box", sum(b is not None for b in boxes), len(boxes))
        return boxes


class TinyImageNet(IndexedSource):
    """TinyImageNet (200 classes, 64x64 images): ``[image, label]``, image a uint8 (64, 64, 3) BGR
    array, label the index of its wnid in ``wnids.txt``.

    ``dir`` holds ``wnids.txt`` and the folders ``train/<wnid>/images/*.JPEG`` and
    ``val/images`` with ``val/val_annotations.txt``; ``name`` is 'train' or 'val' and
    ``shuffle`` defaults to True for 'train'. Training images are listed class by class, in
    sorted file-name order. Needs OpenCV.

    Example::

        ds = TinyImageNet("~/data/tiny-imagenet-200", "val", shuffle=False)
        ds.reset_state()
        image, label = next(iter(ds))
    """

    def __init__(self, dir: str, name: str, shuffle: Optional[bool] = None):
        component = type(self).__name__
        if name not in ("train", "val"):
            raise ValueError("{}: name must be 'train' or 'val', got {!r}".format(component, name))
        dir = os.path.expanduser(dir)
        if not os.path.isdir(dir):
            raise FileNotFoundError("{}: the dataset directory {} does not exist".format(component, dir))
        import_cv2(component)
        self.full_dir = os.path.join(dir, name)
        self.shuffle = name == "train" if shuffle is None else shuffle
        wnids = [line for line in _read_lines(os.path.join(dir, "wnids.txt"), component) if line]
        ids = {wnid: i for i, wnid in enumerate(wnids)}
        wnids_file = os.path.join(dir, "wnids.txt")
        if len(ids) != 200:
            raise DatasetFormatError("{}: {} should list 200 distinct wnids, it lists {}".format(
                component, wnids_file, len(ids)))
        self.imglist: List[Tuple[str, int]] = []
        if name == "train":
            for label, wnid in enumerate(wnids):
                images_dir = os.path.join(self.full_dir, wnid, "images")
                if not os.path.isdir(images_dir):
                    raise FileNotFoundError("{}: expected the folder {} of class {} (listed in wnids.txt)".format(
                        component, images_dir, label))
                for fname in sorted(os.listdir(images_dir)):
                    self.imglist.append((os.path.join(images_dir, fname), label))
        else:
            annotations = os.path.join(self.full_dir, "val_annotations.txt")
            for number, line in enumerate(_read_lines(annotations, component), 1):
                if not line:
                    continue
                fields = line.split()
                if len(fields) < 2:
                    raise format_error(component, annotations, "line {}: expected '<image file> <wnid> ...', found "
                                                               "{!r}".format(number, line))
                if fields[1] not in ids:
                    raise format_error(component, annotations, "line {}: expected a wnid listed in {}, found "
                                                               "{!r}".format(number, wnids_file, fields[1]))
                self.imglist.append((os.path.join(self.full_dir, "images", fields[0]), ids[fields[1]]))

    def __len__(self) -> int:
        return len(self.imglist)

    def _datapoint(self, k: int) -> List[Any]:
        fname, label = self.imglist[k]
        return [read_color_image(type(self).__name__, fname), label]
