"""IAAugmentor and Albumentations, driven by small stand-ins with the third-party libraries' methods
(neither library is installed here)."""
import random
import sys
import types

import numpy as np
import pytest

from inputpipe.dataflow import imgaug, seeding


@pytest.fixture
def restore_seeding():
    """Put the process's seeding state (worker rank, global seed) back after a test that changes it."""
    rank, seed = seeding.worker_rank(), seeding.get_global_seed()
    yield
    seeding.enter_worker(rank, seed)


class _Keypoint:
    def __init__(self, x, y):
        self.x, self.y = x, y


class _KeypointsOnImage:
    def __init__(self, keypoints, shape):
        self.keypoints, self.shape = keypoints, shape


@pytest.fixture
def fake_imgaug_library(monkeypatch):
    """A module named ``imgaug`` with the two keypoint classes IAAugmentor uses."""
    module = types.ModuleType("imgaug")
    module.Keypoint, module.KeypointsOnImage = _Keypoint, _KeypointsOnImage
    monkeypatch.setitem(sys.modules, "imgaug", module)
    return module


class _FrozenShift:
    """What ``to_deterministic()`` returns: one drawn horizontal shift for images and keypoints."""

    def __init__(self, shift):
        self.shift = shift

    def augment_image(self, img):
        return np.roll(img, self.shift, axis=1)

    def augment_keypoints(self, keypoints_on_images):
        width = keypoints_on_images[0].shape[1]
        return [_KeypointsOnImage([_Keypoint((p.x + self.shift) % width, p.y) for p in kps.keypoints], kps.shape)
                for kps in keypoints_on_images]


class FakeIAAShift:
    """An imgaug-library augmenter: a random cyclic shift to the right by 0..width-1 pixels."""

    def __init__(self, seed=0):
        self.random_state = np.random.RandomState(seed)

    def to_deterministic(self):
        return _FrozenShift(int(self.random_state.randint(0, 1000)))

    def reseed(self, seed):
        self.random_state = np.random.RandomState(seed)

    def __repr__(self):
        return "FakeIAAShift()"


class FakeAlbumentationsRot90:
    """An albumentations transform: ``get_params()`` draws with Python's ``random`` like the library."""

    def get_params(self):
        return {"factor": random.randint(0, 3)}

    def apply(self, img, factor=0, **params):
        return np.ascontiguousarray(np.rot90(img, factor))

    def __repr__(self):
        return "FakeAlbumentationsRot90()"


def test_iaa_image_and_coordinates_move_together(fake_imgaug_library):
    aug = imgaug.IAAugmentor(FakeIAAShift())
    img = np.zeros((5, 1000), np.uint8)
    img[2, 10] = 255
    for _ in range(5):
        tfm = aug.get_transform(img)
        out = tfm.apply_image(img)
        (x, y), = tfm.apply_coords(np.array([[10.0, 2.0]]))
        assert out[int(y), int(x)] == 255 and (out == 255).sum() == 1
        assert tfm.img_shape == (5, 1000)


def test_iaa_each_transform_is_one_frozen_draw_and_draws_differ(fake_imgaug_library):
    aug = imgaug.IAAugmentor(FakeIAAShift())
    img = np.arange(1000, dtype=np.uint8).reshape(1, 1000)
    tfms = [aug.get_transform(img) for _ in range(4)]
    assert len({t.aug.shift for t in tfms}) == 4
    for tfm in tfms:
        np.testing.assert_array_equal(tfm.apply_image(img), tfm.apply_image(img))


def test_iaa_coordinates_without_the_library_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "imgaug", None)
    aug = imgaug.IAAugmentor(FakeIAAShift())
    tfm = aug.get_transform(np.zeros((4, 4), np.uint8))
    assert tfm.apply_image(np.ones((4, 4), np.uint8)).sum() == 16     # images need no import
    with pytest.raises(ImportError) as info:
        tfm.apply_coords(np.zeros((1, 2)))
    assert str(info.value).startswith("IAAugmentor's coordinate transform needs the 'imgaug' library: pip install imgaug")
    assert "\n" not in str(info.value)


def test_iaa_reset_state_reseeds_the_wrapped_augmenter_per_worker_and_repeats_with_a_global_seed(restore_seeding):
    def shifts_in_worker(rank):
        seeding.enter_worker(rank, 42)
        aug = imgaug.IAAugmentor(FakeIAAShift(seed=0))   # every worker starts from the same copy
        aug.reset_state()
        return [aug.get_transform(np.zeros((2, 2), np.uint8)).aug.shift for _ in range(5)]

    first, second = shifts_in_worker(0), shifts_in_worker(1)
    assert first != second
    assert shifts_in_worker(0) == first and shifts_in_worker(1) == second


def test_albumentations_applies_the_params_its_transform_draws():
    random.seed(3)
    aug = imgaug.Albumentations(FakeAlbumentationsRot90())
    img = np.arange(6, dtype=np.uint8).reshape(2, 3)
    seen = set()
    for _ in range(40):
        tfm = aug.get_transform(img)
        factor = tfm.param["factor"]
        seen.add(factor)
        np.testing.assert_array_equal(tfm.apply_image(img), np.rot90(img, factor))
    assert seen == {0, 1, 2, 3}
    assert repr(aug) == "imgaug.Albumentations(FakeAlbumentationsRot90())"
    assert repr(imgaug.IAAugmentor(FakeIAAShift())) == "imgaug.IAAugmentor(FakeIAAShift())"


def test_albumentations_transform_does_not_move_coordinates():
    tfm = imgaug.Albumentations(FakeAlbumentationsRot90()).get_transform(np.zeros((2, 2), np.uint8))
    with pytest.raises(NotImplementedError):
        tfm.apply_coords(np.zeros((1, 2)))


def test_wrappers_work_inside_an_augmentor_list(fake_imgaug_library):
    augs = imgaug.AugmentorList([imgaug.IAAugmentor(FakeIAAShift()), imgaug.Albumentations(FakeAlbumentationsRot90())])
    augs.reset_state()
    out = augs.augment(np.zeros((4, 4, 3), np.uint8))
    assert out.shape == (4, 4, 3)
