"""The example's generated dataset and its image pipeline pieces (no TensorFlow needed)."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

import synthetic_images  # noqa: E402
from image_pipeline import (  # noqa: E402
    CORRUPT_LABEL, CorruptImageError, DatasetError, DecodeAndAugment, DropCorrupt, list_image_folder)

# a module-scoped fixture is made once: the module's tests run in one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_example_dataset")


def _digest(root):
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode())
            h.update(Path(path).read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic") / "shapes"
    return synthetic_images.generate(str(root), num_classes=4, images_per_class=5, image_size=24)


def test_generated_files_classes_and_manifest(small_dataset):
    classes = sorted(d for d in os.listdir(small_dataset) if os.path.isdir(os.path.join(small_dataset, d)))
    assert classes == sorted(["circle", "square", "triangle", "ring"])
    for name in classes:
        assert sorted(os.listdir(os.path.join(small_dataset, name))) == ["{:05d}.jpg".format(i) for i in range(5)]
    manifest = json.loads(Path(small_dataset, synthetic_images.MANIFEST).read_text())
    assert manifest["classes"] == ["circle", "square", "triangle", "ring"]
    assert manifest["images_per_class"] == 5 and manifest["image_size"] == 24
    assert synthetic_images.is_complete(small_dataset, 4, 5, 24)
    assert not synthetic_images.is_complete(small_dataset, 4, 6, 24)
    leftovers = [n for n in os.listdir(os.path.dirname(small_dataset)) if n.startswith(".partial-")]
    assert leftovers == []


def test_generated_images_are_jpeg_rgb_of_the_asked_size(small_dataset):
    from PIL import Image

    with Image.open(os.path.join(small_dataset, "ring", "00003.jpg")) as image:
        assert image.format == "JPEG"
        assert image.mode == "RGB"
        assert image.size == (24, 24)


def test_generation_is_deterministic(tmp_path, small_dataset):
    again = synthetic_images.generate(str(tmp_path / "again"), num_classes=4, images_per_class=5, image_size=24)
    assert _digest(again) == _digest(small_dataset)
    other_seed = synthetic_images.generate(str(tmp_path / "seed1"), num_classes=4, images_per_class=5,
                                           image_size=24, seed=1)
    assert _digest(other_seed) != _digest(small_dataset)


def test_draw_image_is_pure_and_classes_differ():
    a = synthetic_images.draw_image(3, 7, 32)
    assert a.shape == (32, 32, 3) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, synthetic_images.draw_image(3, 7, 32))
    assert not np.array_equal(a, synthetic_images.draw_image(3, 8, 32))
    assert len(synthetic_images.CLASSES) == 10


def test_class_count_is_checked():
    assert synthetic_images.class_names(2) == ["circle", "square"]
    with pytest.raises(ValueError, match="2 to 10 classes, asked for 11"):
        synthetic_images.class_names(11)


def test_ensure_dataset_reuses_a_finished_cache(tmp_path):
    root = str(tmp_path / "cache")
    synthetic_images.ensure_dataset(root, num_classes=2, images_per_class=2, image_size=16)
    marker = os.path.join(root, "circle", "00000.jpg")
    mtime = os.stat(marker).st_mtime_ns
    synthetic_images.ensure_dataset(root, num_classes=2, images_per_class=2, image_size=16)
    assert os.stat(marker).st_mtime_ns == mtime
    synthetic_images.ensure_dataset(root, num_classes=2, images_per_class=3, image_size=16)
    assert len(os.listdir(os.path.join(root, "circle"))) == 3


def test_list_image_folder_reads_classes_in_order(small_dataset):
    images = list_image_folder(small_dataset)
    assert images.class_names == ["circle", "ring", "square", "triangle"]
    assert len(images) == 20
    assert images.labels == [0] * 5 + [1] * 5 + [2] * 5 + [3] * 5
    assert images.items()[6] == [os.path.join(small_dataset, "ring", "00001.jpg"), 1]


@pytest.mark.parametrize("layout, message", [
    ("missing", "does not exist"),
    ("file", "is not a folder"),
    ("empty", "has no class folders"),
    ("no_images", "has 2 class folder(s) but no image files"),
    ("one_class", "has only one class folder (a)"),
])
def test_list_image_folder_errors(tmp_path, layout, message):
    root = tmp_path / "data"
    if layout == "file":
        root.write_text("x")
    elif layout != "missing":
        root.mkdir()
    if layout == "no_images":
        (root / "a").mkdir()
        (root / "b").mkdir()
        (root / "b" / "notes.txt").write_text("x")
    if layout == "one_class":
        (root / "a").mkdir()
        (root / "a" / "x.jpg").write_bytes(b"")
    with pytest.raises(DatasetError) as info:
        list_image_folder(str(root))
    assert message in str(info.value)
    assert str(root) in str(info.value)


def test_decode_and_augment_shapes_dtypes_and_normalisation(small_dataset):
    augment = DecodeAndAugment(crop_size=16)
    path = os.path.join(small_dataset, "square", "00000.jpg")
    image, label = augment([path, 2])
    assert image.shape == (16, 16, 3) and image.dtype == np.float32
    assert label == 2 and label.dtype == np.int32
    assert -3.0 < image.min() < image.max() < 3.0
    encoded = np.frombuffer(Path(path).read_bytes(), dtype=np.uint8)
    center = DecodeAndAugment(crop_size=16, training=False)
    np.testing.assert_array_equal(center([encoded, 2, path])[0], center([path, 2])[0])


def _crops(path, seed):
    from inputpipe.dataflow import seeding

    seeding.set_global_seed(seed)
    try:
        augment = DecodeAndAugment(crop_size=16)
        return [augment([path, 0])[0] for _ in range(4)]
    finally:
        seeding.set_global_seed(None)


def test_decode_and_augment_crops_are_reproducible_with_the_global_seed(small_dataset):
    path = os.path.join(small_dataset, "square", "00000.jpg")
    first, again, other = _crops(path, 5), _crops(path, 5), _crops(path, 6)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(first, other))


def test_decompression_bomb_is_a_corrupt_image(tmp_path, monkeypatch):
    from PIL import Image
    from inputpipe.dataflow import image_limits

    path = str(tmp_path / "bomb.png")
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(path)
    monkeypatch.setattr(image_limits, "MAX_IMAGE_PIXELS", 100)  # 64 x 64 is then more than the limit
    with pytest.raises(CorruptImageError, match=r"corrupt image file .*bomb.png: DecodeAndAugment: an encoded image "
                                                r"of \d+ bytes declares a 64x64 image \(4096 pixels\), more than the "
                                                r"limit of 100 pixels"):
        DecodeAndAugment(crop_size=16, on_corrupt="fail")([path, 0])
    assert int(DecodeAndAugment(crop_size=16)([path, 0])[1]) == CORRUPT_LABEL


def test_decode_and_augment_resizes_large_images(tmp_path):
    from PIL import Image

    path = str(tmp_path / "big.png")
    Image.fromarray(np.full((90, 120, 3), 200, np.uint8)).save(path)
    image, _ = DecodeAndAugment(crop_size=20)([path, 0])
    assert image.shape == (20, 20, 3)


def test_corrupt_image_fails_or_is_dropped_and_counted(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 definitely not a jpeg")
    with pytest.raises(CorruptImageError, match="corrupt image file .*bad.jpg"):
        DecodeAndAugment(crop_size=16, on_corrupt="fail")([str(bad), 0])
    marker = DecodeAndAugment(crop_size=16, on_corrupt="skip")([str(bad), 0])
    assert int(marker[1]) == CORRUPT_LABEL
    drop = DropCorrupt()
    assert drop(marker) is None
    good = [np.zeros((2, 2, 3), np.float32), np.int32(1)]
    assert drop(good) is good
    assert drop(marker) is None
    assert drop.skipped == 2
    assert drop.files == {str(bad)}
    with pytest.raises(ValueError, match="on_corrupt must be 'skip' or 'fail'"):
        DecodeAndAugment(16, on_corrupt="ignore")


def test_pipeline_modules_do_not_import_tensorflow():
    """Producer processes and the JPEG benchmark import them; TensorFlow would cost seconds."""
    code = ("import sys, image_pipeline, synthetic_images, train_data, run_report, train_resnet; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=str(EXAMPLES), capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
