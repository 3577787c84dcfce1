"""Migration: an ImageNet data pipeline written the way tensorpack's examples/ImageNetModels write it
(dataset.ILSVRC12 -> AugmentImageComponent(fbresnet_augmentor) -> worker processes -> BatchData),
with only the import changed, on a small generated ILSVRC12 directory.

The pipeline code below is the user's code: it names ``tensorpack``'s API through ``tp`` and ``imgaug``
(bound to inputpipe here, to tensorpack when this file runs as a script under tensorpack's
interpreter, which prints EXPECTED: the single-process training epoch tensorpack yields with the
same augmentor seeds)::

    /opt/tpvenv/bin/python tests/test_migration_imagenet.py
"""
import os

import cv2
import numpy as np
import pytest

if __name__ == "__main__":  # pragma: no cover
    os.environ["INPUTPIPE_TESTS_UNDER_TENSORPACK"] = "1"
from test_dataset_readers import fingerprint, make_ilsvrc  # noqa: E402

if __name__ == "__main__":  # pragma: no cover
    import tensorpack.dataflow as tp
    from tensorpack.dataflow import imgaug
else:
    import inputpipe.dataflow as tp
    from inputpipe.dataflow import imgaug

IMAGE_SIZE = 24     # 224 in the example; small images keep the test fast


# ---- user code, as in tensorpack's examples ---------------------------------------------------

class GoogleNetResize(imgaug.ImageAugmentor):
    """Random crop of 8-100% of the area and 3/4-4/3 aspect, resized to the target (old API:
    ``_augment(img, param)`` with the randomness inside, as older tensorpack examples wrote it)."""

    def __init__(self, crop_area_fraction=0.08, aspect_ratio_low=0.75, aspect_ratio_high=1.333,
                 target_shape=IMAGE_SIZE):
        self._init(locals())

    def _augment(self, img, _):
        h, w = img.shape[:2]
        area = h * w
        for _ in range(10):
            target_area = self.rng.uniform(self.crop_area_fraction, 1.0) * area
            aspect = self.rng.uniform(self.aspect_ratio_low, self.aspect_ratio_high)
            ww = int(np.sqrt(target_area * aspect) + 0.5)
            hh = int(np.sqrt(target_area / aspect) + 0.5)
            if self.rng.uniform() < 0.5:
                ww, hh = hh, ww
            if hh <= h and ww <= w:
                x1 = 0 if w == ww else self.rng.randint(0, w - ww)
                y1 = 0 if h == hh else self.rng.randint(0, h - hh)
                out = img[y1:y1 + hh, x1:x1 + ww]
                return cv2.resize(out, (self.target_shape, self.target_shape), interpolation=cv2.INTER_CUBIC)
        out = imgaug.ResizeShortestEdge(self.target_shape, interp=cv2.INTER_CUBIC).augment(img)
        return imgaug.CenterCrop(self.target_shape).augment(out)


class GoogleNetResizeNewAPI(imgaug.ImageAugmentor):
    """The same crop with the new API: ``get_transform`` draws the crop and returns transforms."""

    def __init__(self, crop_area_fraction=0.08, aspect_ratio_low=0.75, aspect_ratio_high=1.333,
                 target_shape=IMAGE_SIZE):
        self._init(locals())

    def get_transform(self, img):
        h, w = img.shape[:2]
        area = h * w
        for _ in range(10):
            target_area = self.rng.uniform(self.crop_area_fraction, 1.0) * area
            aspect = self.rng.uniform(self.aspect_ratio_low, self.aspect_ratio_high)
            ww = int(np.sqrt(target_area * aspect) + 0.5)
            hh = int(np.sqrt(target_area / aspect) + 0.5)
            if self.rng.uniform() < 0.5:
                ww, hh = hh, ww
            if hh <= h and ww <= w:
                x1 = 0 if w == ww else self.rng.randint(0, w - ww)
                y1 = 0 if h == hh else self.rng.randint(0, h - hh)
                return imgaug.TransformList([
                    imgaug.CropTransform(y1, x1, hh, ww),
                    imgaug.ResizeTransform(hh, ww, self.target_shape, self.target_shape, cv2.INTER_CUBIC)])
        return imgaug.ResizeTransform(h, w, self.target_shape, self.target_shape, cv2.INTER_CUBIC)


def fbresnet_augmentor(isTrain, crop=None):
    """The augmentors of fb.resnet.torch for BGR images in [0, 255] (tensorpack's example)."""
    interpolation = cv2.INTER_CUBIC
    if isTrain:
        return [
            crop if crop is not None else imgaug.GoogleNetRandomCropAndResize(
                target_shape=IMAGE_SIZE, interp=interpolation),
            imgaug.RandomOrderAug(
                [imgaug.BrightnessScale((0.6, 1.4), clip=False),
                 imgaug.Contrast((0.6, 1.4), rgb=False, clip=False),
                 imgaug.Saturation(0.4, rgb=False),
                 # rgb-bgr conversion for the constants copied from fb.resnet.torch
                 imgaug.Lighting(0.1,
                                 eigval=np.asarray([0.2175, 0.0188, 0.0045][::-1]) * 255.0,
                                 eigvec=np.array([[-0.5675, 0.7192, 0.4009],
                                                  [-0.5808, -0.0045, -0.8140],
                                                  [-0.5836, -0.6948, 0.4203]], dtype="float32")[::-1, ::-1])]),
            imgaug.Flip(horiz=True),
        ]
    return [imgaug.ResizeShortestEdge(int(IMAGE_SIZE * 256 / 224), interp=interpolation),
            imgaug.CenterCrop((IMAGE_SIZE, IMAGE_SIZE))]


def get_imagenet_dataflow(datadir, name, batch_size, augmentors, parallel, meta_dir):
    isTrain = name == "train"
    if isTrain:
        ds = tp.dataset.ILSVRC12(datadir, name, meta_dir=meta_dir, shuffle=True)
        ds = tp.AugmentImageComponent(ds, augmentors, copy=False)
        ds = tp.MultiProcessRunnerZMQ(ds, parallel)
        ds = tp.BatchData(ds, batch_size, remainder=False)
    else:
        ds = tp.dataset.ILSVRC12Files(datadir, name, meta_dir=meta_dir, shuffle=False)
        aug = imgaug.AugmentorList(augmentors)

        def mapf(dp):
            fname, cls = dp
            im = cv2.imread(fname, cv2.IMREAD_COLOR)
            im = aug.augment(im)
            return im, cls
        ds = tp.MultiThreadMapData(ds, parallel, mapf, buffer_size=2000, strict=True)
        ds = tp.BatchData(ds, batch_size, remainder=True)
        ds = tp.MultiProcessRunnerZMQ(ds, 1)
    return ds


# ---- end of user code -------------------------------------------------------------------------

def make_imagenet(root):
    """make_ilsvrc's layout with larger images (the crops need room)."""
    root = make_ilsvrc(root)
    rng = np.random.RandomState(3)
    for dirpath, _, files in os.walk(os.path.join(root, "original")):
        for fname in files:
            cv2.imwrite(os.path.join(dirpath, fname), rng.randint(0, 256, (30, 40, 3)).astype(np.uint8))
    return root


def single_process_training_epoch(root, crop, encoded=False):
    """The training pipeline without the worker processes, augmentors seeded, files in list order.

    The augmentors run in one stream over the datapoints (what tensorpack's AugmentImageComponent
    does): inputpipe's AugmentImageComponent gives each datapoint a seed of its own instead (so a
    restored pipeline repeats its augmentations), which the seeded stream here cannot match."""
    augs = fbresnet_augmentor(True, crop)
    ds = tp.dataset.ILSVRC12(os.path.join(root, "original"), "train", meta_dir=os.path.join(root, "meta"),
                             shuffle=False, **({"encoded": True} if encoded else {}))
    augmentor_list = tp.imgaug.AugmentorList(augs)
    ds = tp.MapDataComponent(ds, augmentor_list.augment)
    ds.reset_state()
    augmentor_list.reset_state()
    augmentor_list.rng = np.random.RandomState(99)
    for i, aug in enumerate(augs):
        aug.rng = np.random.RandomState(i)
        for j, inner in enumerate(getattr(aug, "aug_lists", [])):   # RandomOrderAug's augmentors
            inner.rng = np.random.RandomState(10 * i + j)
    return [dp for _ in range(2) for dp in ds]


CROPS = {"builtin": lambda: None, "old_api": GoogleNetResize, "new_api": GoogleNetResizeNewAPI}

# What tensorpack 0.11 yields for single_process_training_epoch (run this file with its interpreter).
# OpenCV picks its kernels by the CPU's vector instructions, and they do not all round alike
# (cv2.setUseOptimized(False) changes all three digests): the built-in crop's were recorded from
# tensorpack on the host the fixtures were first made on (the first) and on an AVX2-only AMD EPYC
# (the second, the same with OpenCV 4.10, 4.11, 4.14 and 5.1, numpy 2.3 and 2.4).
EXPECTED = {
    'builtin': ('c78c1b9a9ca01f9a118b', 'e79768362e2f225e86f5'),
    'new_api': ('bade7746d578ffff93f9',),
    'old_api': ('bade7746d578ffff93f9',),
}


# The pixels recorded from tensorpack were computed on numpy 2; on numpy 1 a few augmentors' scalar
# arithmetic runs in float64 instead (tensorpack's and inputpipe's alike, docs/migrating.md).
NUMPY_2_PIXELS = pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.0.0",
                                    reason="pixels recorded from tensorpack on numpy 2; numpy 1 rounds a few "
                                           "augmentors' float64 arithmetic differently, as tensorpack does there")


@NUMPY_2_PIXELS
@pytest.mark.parametrize("crop", sorted(CROPS))
def test_training_augmentation_matches_tensorpack(tmp_path, crop):
    root = make_imagenet(str(tmp_path / "imagenet"))
    got = single_process_training_epoch(root, CROPS[crop]())
    assert len(got) == 8
    assert [dp[1] for dp in got] == [1, 0, 2, 0] * 2
    assert all(dp[0].shape == (IMAGE_SIZE, IMAGE_SIZE, 3) for dp in got)
    assert fingerprint(got) in EXPECTED[crop]


@pytest.mark.parametrize("crop", ["builtin", "old_api"])
def test_training_pipeline_with_worker_processes(tmp_path, crop):
    root = make_imagenet(str(tmp_path / "imagenet"))
    ds = get_imagenet_dataflow(os.path.join(root, "original"), "train", 3, fbresnet_augmentor(True, CROPS[crop]()),
                               parallel=2, meta_dir=os.path.join(root, "meta"))
    ds.reset_state()
    assert len(ds) == 1   # an epoch of the runner is len(ILSVRC12) = 4 datapoints: one batch of 3
    try:
        batches = [batch for _ in range(3) for batch in ds]
    finally:
        ds.ds.close()
    assert len(batches) == 3
    for images, labels in batches:
        assert images.shape == (3, IMAGE_SIZE, IMAGE_SIZE, 3) and images.dtype == np.uint8
        assert labels.dtype == np.int64 and set(labels.tolist()) <= {0, 1, 2}


def test_validation_pipeline_gives_every_image_once(tmp_path):
    root = make_imagenet(str(tmp_path / "imagenet"))
    augs = fbresnet_augmentor(False)
    ds = get_imagenet_dataflow(os.path.join(root, "original"), "val", 2, augs, parallel=2,
                               meta_dir=os.path.join(root, "meta"))
    ds.reset_state()
    try:
        batches = list(ds)
    finally:
        ds.close()
    # threads finish in any order (as in tensorpack); strict=True makes it each image exactly once
    assert [len(b[1]) for b in batches] == [2, 1]
    got = {int(label): image for images, labels in batches for image, label in zip(images, labels)}
    assert sorted(got) == [0, 1, 2]
    reference = imgaug.AugmentorList(fbresnet_augmentor(False))
    for name, label in (("ILSVRC2012_val_00000001.JPEG", 2), ("ILSVRC2012_val_00000002.JPEG", 0),
                        ("ILSVRC2012_val_00000003.JPEG", 1)):
        expected = reference.augment(cv2.imread(os.path.join(root, "original", "val", name), cv2.IMREAD_COLOR))
        assert got[label].dtype == np.uint8 and got[label].shape == (IMAGE_SIZE, IMAGE_SIZE, 3)
        np.testing.assert_array_equal(got[label], expected)


def test_the_fast_recipe_changes_one_line_and_gives_the_same_training_images(tmp_path):
    """``ILSVRC12(..., encoded=True)``: the augmentors get the JPEG bytes and decode only the crop,
    with the same random draws (same crops, flips and colour jitter) as on the decoded pixels."""
    root = make_imagenet(str(tmp_path / "imagenet"))
    pixels = single_process_training_epoch(root, None)
    encoded = single_process_training_epoch(root, None, encoded=True)
    assert [dp[1] for dp in encoded] == [dp[1] for dp in pixels]
    for (fast, _), (slow, _) in zip(encoded, pixels):
        assert fast.shape == slow.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and fast.dtype == np.uint8
        assert np.abs(fast.astype(int) - slow).mean() < 1.5      # libjpeg's upsampling at the crop's edges


def test_the_validation_recipe_reads_bytes_instead_of_cv2_imread(tmp_path):
    root = make_imagenet(str(tmp_path / "imagenet"))
    aug = imgaug.AugmentorList(fbresnet_augmentor(False))
    ds = tp.dataset.ILSVRC12Files(os.path.join(root, "original"), "val", meta_dir=os.path.join(root, "meta"),
                                  shuffle=False)
    ds = tp.MapData(ds, lambda dp: [aug.augment(np.fromfile(dp[0], np.uint8)), dp[1]])   # was cv2.imread(dp[0])
    ds.reset_state()
    got = list(ds)
    assert [label for _, label in got] == [2, 0, 1]
    for (image, _), name in zip(got, ("ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000002.JPEG",
                                      "ILSVRC2012_val_00000003.JPEG")):
        expected = aug.augment(cv2.imread(os.path.join(root, "original", "val", name), cv2.IMREAD_COLOR))
        np.testing.assert_array_equal(image, expected)


if __name__ == "__main__":  # pragma: no cover
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = make_imagenet(os.path.join(tmp, "imagenet"))
        for key in sorted(CROPS):
            print("    {!r}: {!r},".format(key, fingerprint(single_process_training_epoch(root, CROPS[key]()))))
