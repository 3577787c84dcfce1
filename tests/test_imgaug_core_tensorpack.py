"""tensorpack 0.11's imgaug unit tests (dataflow/imgaug/imgaug_test.py), rewritten for inputpipe.

Its four tests run a list of augmentors with the new call (get_transform) and the old calls
(augment_return_params / augment_with_params / augment_coords), once with new-style augmentors
and once with old-style ones (_get_augment_params/_augment). Here the photometric members of
its lists (Contrast, SaltPepperNoise) are replaced by small stand-ins, so only this package's
core is exercised (tests/test_imgaug_photometric.py ports the photometric side), and the checks
also assert the coordinates.
"""
import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
from inputpipe.dataflow.imgaug import AugmentorList, Flip, ImageAugmentor, PhotometricAugmentor, Resize  # noqa: E402


def _rand_image(shape=(20, 20)):
    return np.random.RandomState(3).rand(*shape).astype("float32")


class ScaleContrast(PhotometricAugmentor):
    """Stand-in for Contrast: a random factor around the mean."""

    def __init__(self, factor_range):
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, _):
        return self._rand_range(*self.factor_range)

    def _augment(self, img, factor):
        mean = img.mean()
        return (img - mean) * factor + mean


class SaltPepper(PhotometricAugmentor):
    """Stand-in for SaltPepperNoise: random pixels set to 0 or 1."""

    def _get_augment_params(self, img):
        return self.rng.rand(*img.shape)

    def _augment(self, img, noise):
        img = img.copy()
        img[noise < 0.05] = 0
        img[noise > 0.95] = 1
        return img


class LegacyBrightness(ImageAugmentor):
    def __init__(self, delta, clip=True):
        super().__init__()
        assert delta > 0
        self._init(locals())

    def _get_augment_params(self, _):
        return self._rand_range(-self.delta, self.delta)

    def _augment(self, img, v):
        old_dtype = img.dtype
        img = img.astype("float32") + v
        if self.clip or old_dtype == np.uint8:
            img = np.clip(img, 0, 255)
        return img.astype(old_dtype)


class LegacyFlip(ImageAugmentor):
    def __init__(self, horiz=False, vert=False, prob=0.5):
        super().__init__()
        if horiz and vert:
            raise ValueError("Cannot do both horiz and vert")
        if horiz:
            self.code = 1
        elif vert:
            self.code = 0
        else:
            raise ValueError("one of horiz or vert must be True")
        self._init(locals())

    def _get_augment_params(self, img):
        h, w = img.shape[:2]
        return self._rand_range() < self.prob, h, w

    def _augment(self, img, param):
        do, _, _ = param
        if not do:
            return img
        out = cv2.flip(img, self.code)
        return out[:, :, np.newaxis] if img.ndim == 3 and out.ndim == 2 else out

    def _augment_coords(self, coords, param):
        do, h, w = param
        if do:
            if self.code == 0:
                coords[:, 1] = h - coords[:, 1]
            else:
                coords[:, 0] = w - coords[:, 0]
        return coords


def _new_augs():
    return AugmentorList([ScaleContrast((0.8, 1.2)), Flip(horiz=True), Resize((30, 30)), SaltPepper()])


def _legacy_augs():
    return AugmentorList([LegacyBrightness(0.5), LegacyFlip(horiz=True), Resize((30, 30)), SaltPepper()])


COORDS = [[0.0, 0.0], [10.0, 12.0]]


def _expected_coords(flipped):
    return [[(20 - x if flipped else x) * 1.5, y * 1.5] for x, y in COORDS]


def _was_flipped(tfms):
    """Whether the list's flip (new or old style) flipped: ask its transform where x=1 went."""
    return tfms.tfms[1].apply_coords(np.array([[1.0, 0.0]]))[0, 0] == 19.0


@pytest.mark.parametrize("make", [_new_augs, _legacy_augs], ids=["new_augs", "legacy_augs"])
def test_new_usage(make):
    augmentors = make()
    img = _rand_image()
    orig = img.copy()
    tfms = augmentors.get_transform(img)
    assert "LazyTransform(get_transform=" in repr(tfms)
    new_img = tfms.apply_image(img)
    assert "LazyTransform" not in repr(tfms)          # made by the first apply
    new_img2 = tfms.apply_image(orig)
    assert np.allclose(new_img, new_img2) and new_img2.shape == (30, 30)
    coords = tfms.apply_coords(np.asarray(COORDS, dtype="float32"))
    assert coords.tolist() in (_expected_coords(True), _expected_coords(False))
    assert coords.tolist() == _expected_coords(_was_flipped(tfms))


@pytest.mark.parametrize("make", [_new_augs, _legacy_augs], ids=["new_augs", "legacy_augs"])
def test_legacy_usage(make):
    augmentors = make()
    img = _rand_image()
    orig = img.copy()
    new_img, tfms = augmentors.augment_return_params(img)
    new_img2 = augmentors.augment_with_params(orig, tfms)
    assert np.allclose(new_img, new_img2) and new_img2.shape == (30, 30)
    coords = augmentors.augment_coords(np.asarray(COORDS, dtype="float32"), tfms)
    assert coords.tolist() == _expected_coords(_was_flipped(tfms))


def test_printing_shows_the_lists():
    text = str(_legacy_augs())
    assert text.startswith("imgaug.AugmentorList([\n  imgaug.LegacyBrightness(delta=0.5),\n")
    assert "imgaug.Resize(shape=(30, 30))" in text


class _ImageWithMask:
    """A third-party pre-0.10 augmentor's input: not an array, an image with its mask."""

    def __init__(self, img, mask):
        self.img, self.mask = img, mask


class _FlipBoth(ImageAugmentor):
    def _get_augment_params(self, meta):
        return meta.img.shape[1]

    def _augment(self, meta, width):
        return meta.img[:, ::-1], meta.mask[:, ::-1]

    def _augment_coords(self, coords, width):
        coords[:, 0] = width - coords[:, 0]
        return coords


def test_old_style_augmentors_may_take_any_object_through_augment_return_params():
    # as in tensorpack: augment_return_params does not require an array (pose-estimation code
    # passes an object holding the image, its mask and the joints), augment() does
    meta = _ImageWithMask(np.arange(6).reshape(2, 3), np.arange(6).reshape(2, 3) * 10)
    (img, mask), params = _FlipBoth().augment_return_params(meta)
    assert img.tolist() == [[2, 1, 0], [5, 4, 3]] and mask.tolist() == [[20, 10, 0], [50, 40, 30]]
    assert _FlipBoth().augment_coords(np.array([[1.0, 0.0]]), params).tolist() == [[2.0, 0.0]]
    with pytest.raises(TypeError, match="_FlipBoth: expected an image as a numpy array"):
        _FlipBoth().augment(meta)
