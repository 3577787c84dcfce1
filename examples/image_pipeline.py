"""The example's JPEG data pipeline, read the way real users read ImageNet.

    file list  ->  decode + random crop + flip + normalise (worker processes)  ->  batches

* :func:`list_image_folder` reads an ImageNet-style folder ``<root>/<class>/*.jpg`` and turns
  every problem (missing path, not a folder, no class folders, no images) into one
  :class:`DatasetError` with a clear message.
* :class:`DecodeAndAugment` is the map function the workers run: inputpipe's augmentors resize
  the shorter side when needed, random crop, random horizontal flip (decoding only the crop of
  larger images), then normalise to float32. A file
  that cannot be decoded raises :class:`CorruptImageError` naming the file, or, with
  ``on_corrupt="skip"``, becomes a marker that :class:`DropCorrupt` (in the consuming process)
  counts, logs and drops.
* :func:`build_image_dataflow` puts them together with inputpipe's DataFlows.

This module does not import TensorFlow, so it also runs inside producer processes and in the
JPEG-pipeline benchmark.

Example::

    from image_pipeline import list_image_folder, build_image_dataflow
    images = list_image_folder("/data/imagenet/train")
    df = build_image_dataflow(images.items(), crop_size=224, batch_size=64, num_proc=2)
    df.reset_state()
    for batch_images, batch_labels in df:
        ...
"""
import logging
import os
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np

from inputpipe.dataflow import imgaug

try:
    import cv2  # noqa: F401  (the decoder; imported here so a missing one is said at once)
except ImportError as err:  # pragma: no cover - depends on the installation
    raise ImportError(
        "the example's image pipeline needs OpenCV: pip install -e \".[image]\" (or pip install "
        "opencv-python-headless)") from err

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
#: Per-channel mean and standard deviation used to normalise pixels (ImageNet statistics, 0..255).
PIXEL_MEAN = np.array([123.68, 116.78, 103.94], dtype=np.float32)
PIXEL_STD = np.array([58.40, 57.12, 57.38], dtype=np.float32)
#: The label a corrupt image's marker datapoint carries (``on_corrupt="skip"``).
CORRUPT_LABEL = -1

log = logging.getLogger("train_resnet")


class DatasetError(Exception):
    """The dataset cannot be used (bad path, no classes, no images); the message says why."""


class CorruptImageError(DatasetError):
    """An image file could not be decoded; the message names the file."""


@dataclass
class ImageList:
    """The files of an image-classification dataset and their integer labels."""

    root: str
    files: List[str]
    labels: List[int]
    class_names: List[str] = field(default_factory=list)

    def items(self) -> List[list]:
        """Datapoints ``[path, label]`` for ``DataFromList``."""
        return [[f, int(lab)] for f, lab in zip(self.files, self.labels)]

    def __len__(self) -> int:
        return len(self.files)


def list_image_folder(root: str, extensions: Sequence[str] = IMAGE_EXTENSIONS) -> ImageList:
    """Read ``<root>/<class>/<image>`` into an :class:`ImageList` (classes sorted by name)."""
    if not os.path.exists(root):
        raise DatasetError("dataset folder {} does not exist".format(root))
    if not os.path.isdir(root):
        raise DatasetError("dataset path {} is not a folder (expected <root>/<class>/*.jpg)".format(root))
    class_names = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith("."))
    if not class_names:
        raise DatasetError("dataset folder {} has no class folders (expected <root>/<class>/*.jpg)".format(root))
    files, labels = [], []
    for label, name in enumerate(class_names):
        class_dir = os.path.join(root, name)
        for fname in sorted(os.listdir(class_dir)):
            if fname.lower().endswith(tuple(extensions)):
                files.append(os.path.join(class_dir, fname))
                labels.append(label)
    if not files:
        raise DatasetError("dataset folder {} has {} class folder(s) but no image files ({})".format(
            root, len(class_names), ", ".join(extensions)))
    if len(class_names) < 2:
        raise DatasetError("dataset folder {} has only one class folder ({}); a classifier needs at least 2".format(
            root, class_names[0]))
    return ImageList(os.path.abspath(root), files, labels, class_names)


#: Crops at least this large decode only the crop (encoded bytes to the augmentors); smaller
#: images are decoded whole, which costs less than the per-image bookkeeping of a partial decode.
FUSED_DECODE_MIN_CROP = 96


def _read(source, name: str) -> np.ndarray:
    """The encoded bytes of a path or of ``np.uint8`` bytes, as a 1-d uint8 array."""
    if not isinstance(source, str):
        return np.ascontiguousarray(source, dtype=np.uint8).reshape(-1)
    try:
        return np.fromfile(source, np.uint8)
    except FileNotFoundError:
        raise DatasetError("image file {} disappeared while training".format(name)) from None


class DecodeAndAugment:
    """Map function ``[source, label(, name)] -> [image float32 HxWx3 RGB, label int32]``.

    ``source`` is a file path or the encoded bytes as a ``np.uint8`` array (LMDB records carry a
    third component, the original path, used in messages). Training augmentation with inputpipe's
    augmentors: resize the shorter side to ``round(crop_size * 1.25)`` (when it differs), random
    ``crop_size`` crop, random horizontal flip; then ``(pixel - mean) / std``. From crops of
    ``FUSED_DECODE_MIN_CROP`` pixels up the augmentors get the encoded bytes and decode only the
    crop (libjpeg-turbo's partial decode, see ``inputpipe.dataflow.imgaug.encoded``); smaller
    images are decoded whole with OpenCV. The augmentors' RNGs come from
    :func:`inputpipe.dataflow.seeding.new_rng` in each process, so worker processes never repeat
    each other's crops, and ``seeding.set_global_seed`` (``--seed``) makes the crops reproducible.
    ``extra_cost_ms`` makes every image take that much longer (a sleep: it stands for a slow
    read or heavier augmentation without taking a core from the model on a small machine).

    Example::

        augment = DecodeAndAugment(crop_size=32, on_corrupt="skip")
        image, label = augment(["cat/001.jpg", 3])
    """

    def __init__(self, crop_size: int, on_corrupt: str = "skip", training: bool = True, extra_cost_ms: float = 0.0):
        if on_corrupt not in ("skip", "fail"):
            raise ValueError("on_corrupt must be 'skip' or 'fail', got {!r}".format(on_corrupt))
        if extra_cost_ms < 0:
            raise ValueError("extra_cost_ms must be >= 0, got {}".format(extra_cost_ms))
        self.extra_cost = extra_cost_ms / 1e3
        self.crop_size = int(crop_size)
        self.resize_to = int(round(self.crop_size * 1.25))
        self.on_corrupt = on_corrupt
        self.training = training
        self.fused = self.crop_size >= FUSED_DECODE_MIN_CROP
        crop = imgaug.RandomCrop(self.crop_size) if training else imgaug.CenterCrop(self.crop_size)
        self.augmentors = imgaug.AugmentorList(
            [_ShorterSideTo(self.resize_to), crop] + ([imgaug.Flip(horiz=True)] if training else []))

    def __call__(self, dp):
        import cv2

        source, label = dp[0], dp[1]
        name = dp[2] if len(dp) > 2 else (source if isinstance(source, str) else "encoded image")
        try:
            data = _read(source, name)
            image = data if self.fused else _decode_whole(cv2, data)
            pixels = self.augmentors.augment(image)
        except (ValueError, OSError) as err:      # undecodable, truncated, or declaring too many pixels
            if self.on_corrupt == "fail":
                raise CorruptImageError("corrupt image file {}: {}".format(name, err)) from None
            return [np.frombuffer(str(name).encode("utf-8"), dtype=np.uint8).copy(), np.int32(CORRUPT_LABEL)]
        rgb = cv2.cvtColor(np.ascontiguousarray(pixels), cv2.COLOR_BGR2RGB)
        if self.extra_cost:
            time.sleep(self.extra_cost)
        return [(rgb - PIXEL_MEAN) / PIXEL_STD, np.int32(label)]


def _decode_whole(cv2, data: np.ndarray) -> np.ndarray:
    from inputpipe.dataflow.image_limits import check_image_bytes

    check_image_bytes("DecodeAndAugment", data)
    image = cv2.imdecode(data, cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError("OpenCV cannot decode these {} bytes as an image (they start with {!r})".format(
            data.size, data[:8].tobytes()))
    return image


class _ShorterSideTo(imgaug.ResizeShortestEdge):
    """``ResizeShortestEdge(size)`` when the shorter side differs, nothing otherwise (the stored
    images of the generated dataset already have it: no resize, and an encoded image stays
    encoded for the crop)."""

    def get_transform(self, img):
        if min(img.shape[:2]) == self.size:
            return imgaug.NoOpTransform()
        return super().get_transform(img)


class DropCorrupt:
    """Map function in the consuming process: drops the markers of corrupt images (returns None),
    logs a warning the first time each file is seen, and counts them: ``skipped`` (datapoints
    dropped, once per epoch for each bad file) and ``files`` (distinct bad files).

    Example::

        drop = DropCorrupt()
        df = MapData(df, drop)       # ... later: drop.skipped, len(drop.files)
    """

    def __init__(self):
        self.skipped = 0
        self.files = set()

    def __call__(self, dp):
        if int(dp[1]) != CORRUPT_LABEL:
            return dp
        self.skipped += 1
        name = np.asarray(dp[0], dtype=np.uint8).tobytes().decode("utf-8", "replace")
        if name not in self.files:
            self.files.add(name)
            log.warning("skipped corrupt image %s (pass --on-corrupt fail to stop instead)", name)
        return None


def build_image_dataflow(items, crop_size: int, batch_size: int, num_proc: int = 1, on_corrupt: str = "skip",
                         shuffle: bool = True, drop: Optional[DropCorrupt] = None, source=None,
                         extra_cost_ms: float = 0.0):
    """``DataFromList(items)`` (or ``source``) -> ``MultiProcessMapData(DecodeAndAugment)`` ->
    ``MapData(DropCorrupt)`` -> ``BatchData``; an infinite-epoch DataFlow of
    ``[images float32 [B, crop, crop, 3], labels int32 [B]]``.

    ``num_proc=0`` decodes in the thread that iterates the DataFlow (``MapData``), as the zmq
    producers do. ``extra_cost_ms``: see :class:`DecodeAndAugment`.
    """
    from inputpipe.dataflow import BatchData, DataFromList, MapData, MultiProcessMapData

    df = source if source is not None else DataFromList(items, shuffle=shuffle)
    augment = DecodeAndAugment(crop_size, on_corrupt=on_corrupt, extra_cost_ms=extra_cost_ms)
    if num_proc > 0:
        df = MultiProcessMapData(df, num_proc, augment, buffer_size=max(2 * batch_size, 64))
    else:
        df = MapData(df, augment)
    df = MapData(df, drop if drop is not None else DropCorrupt())
    return BatchData(df, batch_size, remainder=False)


def close_dataflow(df) -> None:
    """Close every DataFlow in a wrapper chain (``df``, ``df.ds``, ...) that has ``close()``:
    stops worker processes now instead of at garbage collection."""
    while df is not None:
        close = getattr(df, "close", None)
        if callable(close):
            close()
        df = getattr(df, "ds", None)
