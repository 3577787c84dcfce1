"""Every augmentor exported by ``inputpipe.dataflow.imgaug`` on odd images: empty arrays, float16 /
int64 / bool / int8 / uint32 dtypes, 1, 2, 4 and 7 channels, 0-d, 1-d and 4-d arrays. Each either
works (geometric augmentors keep the dtype and the channels; dtypes and channel counts OpenCV does
not take go through a wider dtype, four channels at a time) or raises a ValueError/TypeError that
names the augmentor, the rule and the shape it got; never an OpenCV error, a ZeroDivisionError or
an IndexError from inside. The check is made once, before ``get_transform``, so it names the
augmentor also inside an ``AugmentorList``, a meta augmentor or an augmenting DataFlow.
"""
import inspect

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
from inputpipe.dataflow import AugmentImageComponent, DataFromList, imgaug  # noqa: E402
from imgaug_helpers import assert_same_pixels  # noqa: E402

EIGVAL = [55.0, 5.0, 1.0]
EIGVEC = [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]

# name -> (factory, the augmentor(s) its errors name, True when it only moves pixels)
AUGMENTORS = {
    "Flip": (lambda: imgaug.Flip(horiz=True, prob=1.0), "Flip", True),
    "Resize": (lambda: imgaug.Resize((4, 6)), "Resize", True),
    "RandomResize": (lambda: imgaug.RandomResize((0.8, 1.2), (0.8, 1.2)), "RandomResize", True),
    "ResizeShortestEdge": (lambda: imgaug.ResizeShortestEdge(4), "ResizeShortestEdge", True),
    "Transpose": (lambda: imgaug.Transpose(prob=1.0), "Transpose", True),
    "RandomCrop": (lambda: imgaug.RandomCrop((2, 3)), "RandomCrop", True),
    "CenterCrop": (lambda: imgaug.CenterCrop((2, 3)), "CenterCrop", True),
    "RandomCropRandomShape": (lambda: imgaug.RandomCropRandomShape(1, 1), "RandomCropRandomShape", True),
    "GoogleNetRandomCropAndResize": (lambda: imgaug.GoogleNetRandomCropAndResize(target_shape=4),
                                     "GoogleNetRandomCropAndResize", True),
    "RandomCutout": (lambda: imgaug.RandomCutout(1, 1), "RandomCutout", True),
    "CenterPaste": (lambda: imgaug.CenterPaste((12, 14)), "CenterPaste", True),
    "RandomPaste": (lambda: imgaug.RandomPaste((12, 14)), "RandomPaste", True),
    "Shift": (lambda: imgaug.Shift(0.2, 0.2), "Shift", True),
    "Rotation": (lambda: imgaug.Rotation(20), "Rotation", True),
    "RotationAndCropValid": (lambda: imgaug.RotationAndCropValid(20), "RotationAndCropValid", True),
    "Affine": (lambda: imgaug.Affine(scale=(0.9, 1.1), translate_frac=(0.1, 0.1), rotate_max_deg=10, shear=5),
               "Affine", True),
    "GaussianDeform": (lambda: imgaug.GaussianDeform([(0.2, 0.2), (0.7, 0.7)], (8, 10), sigma=0.2),
                       "GaussianDeform", False),
    "Hue": (lambda: imgaug.Hue((0, 180)), "Hue", False),
    "Brightness": (lambda: imgaug.Brightness(30), "Brightness", False),
    "BrightnessScale": (lambda: imgaug.BrightnessScale((0.6, 1.4)), "BrightnessScale", False),
    "Contrast": (lambda: imgaug.Contrast((0.6, 1.4)), "Contrast", False),
    "Contrast(rgb=True)": (lambda: imgaug.Contrast((0.6, 1.4), rgb=True), "Contrast", False),
    "MeanVarianceNormalize": (lambda: imgaug.MeanVarianceNormalize(), "MeanVarianceNormalize", False),
    "MeanVarianceNormalize(all_channel=False)": (lambda: imgaug.MeanVarianceNormalize(all_channel=False),
                                                 "MeanVarianceNormalize", False),
    "GaussianBlur": (lambda: imgaug.GaussianBlur((1, 3)), "GaussianBlur", False),
    "Gamma": (lambda: imgaug.Gamma(), "Gamma", False),
    "Clip": (lambda: imgaug.Clip(), "Clip", False),
    "Saturation": (lambda: imgaug.Saturation(), "Saturation", False),
    "Lighting": (lambda: imgaug.Lighting(0.1, EIGVAL, EIGVEC), "Lighting", False),
    "MinMaxNormalize": (lambda: imgaug.MinMaxNormalize(), "MinMaxNormalize", False),
    "MinMaxNormalize(all_channel=False)": (lambda: imgaug.MinMaxNormalize(all_channel=False), "MinMaxNormalize",
                                           False),
    "JpegNoise": (lambda: imgaug.JpegNoise(), "JpegNoise", False),
    "GaussianNoise": (lambda: imgaug.GaussianNoise(), "GaussianNoise", False),
    "SaltPepperNoise": (lambda: imgaug.SaltPepperNoise(), "SaltPepperNoise", False),
    "ColorSpace": (lambda: imgaug.ColorSpace(cv2.COLOR_BGR2HSV), "ColorSpace", False),
    "Grayscale": (lambda: imgaug.Grayscale(), "Grayscale", False),
    "ToUint8": (lambda: imgaug.ToUint8(), "ToUint8", False),
    "ToFloat32": (lambda: imgaug.ToFloat32(), "ToFloat32", False),
    "Identity": (lambda: imgaug.Identity(), "Identity", True),
    "MapImage": (lambda: imgaug.MapImage(lambda img: img), "MapImage", True),
    "RandomApplyAug": (lambda: imgaug.RandomApplyAug(imgaug.Resize((4, 6)), 1.0), "Resize", True),
    "RandomChooseAug": (lambda: imgaug.RandomChooseAug([imgaug.Rotation(10)]), "Rotation", True),
    "RandomOrderAug": (lambda: imgaug.RandomOrderAug([imgaug.Flip(vert=True, prob=1.0), imgaug.Shift(0.2)]),
                       ("Flip", "Shift"), True),
    "AugmentorList": (lambda: imgaug.AugmentorList([imgaug.ResizeShortestEdge(6), imgaug.CenterCrop(5)]),
                      ("AugmentorList", "ResizeShortestEdge", "CenterCrop"), True),
}

# What decides what these accept is the wrapped third-party library (tested with stand-ins in
# tests/test_imgaug_photo_external.py); the rest are the bases and their aliases.
NOT_SWEPT = {"IAAugmentor", "Albumentations", "ImageAugmentor", "Augmentor", "PhotometricAugmentor"}


def odd_inputs():
    rng = np.random.RandomState(0)
    return {
        "empty rows": np.zeros((0, 10, 3), np.uint8),
        "empty columns": np.zeros((8, 0, 3), np.uint8),
        "no channels": np.zeros((8, 10, 0), np.uint8),
        "empty HW": np.zeros((0, 0), np.uint8),
        "float16": rng.uniform(0, 255, (8, 10, 3)).astype(np.float16),
        "int64": rng.randint(0, 256, (8, 10, 3)).astype(np.int64),
        "bool": rng.rand(8, 10, 3) > 0.5,
        "int8": rng.randint(-128, 128, (8, 10, 3)).astype(np.int8),
        "uint32": rng.randint(0, 256, (8, 10, 3)).astype(np.uint32),
        "float16 HW": rng.uniform(0, 255, (8, 10)).astype(np.float16),
        "int64 HW": rng.randint(0, 256, (8, 10)).astype(np.int64),
        "bool HW": rng.rand(8, 10) > 0.5,
        "1 channel": rng.randint(0, 256, (8, 10, 1)).astype(np.uint8),
        "2 channels": rng.randint(0, 256, (8, 10, 2)).astype(np.uint8),
        "4 channels": rng.randint(0, 256, (8, 10, 4)).astype(np.uint8),
        "4 float channels": rng.uniform(0, 255, (8, 10, 4)).astype(np.float32),
        "7 channels": rng.uniform(0, 255, (8, 10, 7)).astype(np.float32),
        "0-d": np.array(5, np.uint8),
        "1-d": np.arange(10, dtype=np.uint8),
        "4-d": np.zeros((2, 8, 10, 3), np.uint8),
    }


def _ready(aug, seed=1):
    aug.reset_state()
    aug.rng = np.random.RandomState(seed)
    for inner in getattr(aug, "aug_lists", None) or getattr(aug, "augmentors", None) or [getattr(aug, "aug", None)]:
        if inner is not None:
            inner.rng = np.random.RandomState(seed)
    return aug


def test_every_exported_augmentor_is_swept():
    exported = {name for name in imgaug.__all__ if inspect.isclass(getattr(imgaug, name))
                and issubclass(getattr(imgaug, name), imgaug.ImageAugmentor)}
    swept = {type(make()).__name__ for make, _, _ in AUGMENTORS.values()}
    assert exported - NOT_SWEPT == swept


@pytest.mark.parametrize("name", list(AUGMENTORS))
def test_odd_images_work_or_the_error_names_the_augmentor_the_rule_and_the_image(name):
    make, owner, geometric = AUGMENTORS[name]
    outcomes = {}
    for kind, img in odd_inputs().items():
        original = img.copy()
        try:
            out = _ready(make()).augment(img)
        except (ValueError, TypeError) as err:
            message = str(err)
            assert message.split(":")[0] in ((owner,) if isinstance(owner, str) else owner), (kind, message)
            assert str(tuple(img.shape)) in message, (kind, message)
            if "expected a" in message and "image" in message:
                assert "dtype {}".format(img.dtype) in message, (kind, message)
            outcomes[kind] = "refused"
        else:
            assert isinstance(out, (np.ndarray, np.generic)), kind     # numpy ops give 0-d arrays as scalars
            if geometric:
                assert out.dtype == img.dtype and out.ndim == img.ndim, (kind, out.dtype, out.shape)
                assert out.shape[2:] == img.shape[2:], (kind, out.shape)
            outcomes[kind] = "works"
        np.testing.assert_array_equal(img, original)       # the input is never changed
    assert set(outcomes) == set(odd_inputs())


# What the sweep finds, spelled out for the cases that matter most.
WORKS_FOR_EVERY_DTYPE_AND_CHANNEL_COUNT = [
    "Flip", "Resize", "RandomResize", "ResizeShortestEdge", "Transpose", "RandomCrop", "CenterCrop",
    "RandomCropRandomShape", "GoogleNetRandomCropAndResize", "RandomCutout", "CenterPaste", "RandomPaste", "Shift",
    "Rotation", "RotationAndCropValid", "Affine", "GaussianBlur", "RandomApplyAug", "RandomChooseAug",
    "RandomOrderAug", "AugmentorList"]


@pytest.mark.parametrize("name", WORKS_FOR_EVERY_DTYPE_AND_CHANNEL_COUNT)
def test_geometric_augmentors_and_blur_take_any_dtype_and_channel_count(name):
    make, _, _ = AUGMENTORS[name]
    for kind in ("float16", "int64", "bool", "int8", "uint32", "float16 HW", "int64 HW", "bool HW", "1 channel",
                 "2 channels", "4 channels", "4 float channels", "7 channels"):
        img = odd_inputs()[kind]
        out = _ready(make()).augment(img)
        assert out.dtype == img.dtype and out.shape[2:] == img.shape[2:], (kind, out.dtype, out.shape)


@pytest.mark.parametrize("name,kinds", [
    ("Resize", ["empty rows", "empty columns", "no channels", "empty HW", "0-d", "1-d", "4-d"]),
    ("Flip", ["0-d", "1-d", "4-d"]),
    ("Transpose", ["0-d", "1-d", "4-d"]),
    ("Hue", ["bool", "float16 HW", "1 channel", "2 channels", "empty rows"]),
    ("JpegNoise", ["2 channels", "7 channels", "0-d", "empty columns"]),
    ("MinMaxNormalize(all_channel=False)", ["0-d", "1-d", "4-d"]),
])
def test_refusals_state_the_rule(name, kinds):
    make, owner, _ = AUGMENTORS[name]
    rules = {"Resize": "a non-empty HW or HWC image", "Flip": "an HW or HWC image", "Transpose": "an HW or HWC image",
             "Hue": "a non-empty HxWx3 or HxWx4 image of a numeric (not bool) dtype",
             "JpegNoise": "a non-empty HW, HxWx1, HxWx3 or HxWx4 image",
             "MinMaxNormalize(all_channel=False)": "an HW or HWC image"}
    for kind in kinds:
        img = odd_inputs()[kind]
        with pytest.raises(ValueError) as info:
            _ready(make()).augment(img)
        assert str(info.value) == "{}: expected {}, got an array of shape {} and dtype {}".format(
            owner, rules[name], img.shape, img.dtype)


def test_dtypes_opencv_does_not_take_are_computed_in_a_wider_one():
    rng = np.random.RandomState(2)
    labels = rng.randint(0, 2 ** 40, (8, 10)).astype(np.int64)     # beyond int32, where OpenCV casts to
    nearest = imgaug.ResizeTransform(8, 10, 16, 20, cv2.INTER_NEAREST)
    np.testing.assert_array_equal(nearest.apply_image(labels), np.repeat(np.repeat(labels, 2, 0), 2, 1))
    transposed = imgaug.Transpose(prob=1.0).augment(labels)
    assert transposed.dtype == np.int64 and np.array_equal(transposed, labels.T)
    linear = imgaug.ResizeTransform(8, 10, 5, 7, cv2.INTER_LINEAR)
    small = rng.randint(0, 1000, (8, 10)).astype(np.int64)
    np.testing.assert_array_equal(linear.apply_image(small),
                                  np.rint(cv2.resize(small.astype(np.float64), (7, 5))).astype(np.int64))
    half = rng.uniform(0, 255, (8, 10, 3)).astype(np.float16)
    np.testing.assert_array_equal(linear.apply_image(half),
                                  cv2.resize(half.astype(np.float32), (7, 5)).astype(np.float16))
    mask = rng.rand(8, 10) > 0.5
    np.testing.assert_array_equal(nearest.apply_image(mask), np.repeat(np.repeat(mask, 2, 0), 2, 1))
    signed = rng.randint(-128, 128, (8, 10)).astype(np.int8)
    np.testing.assert_array_equal(linear.apply_image(signed),
                                  cv2.resize(signed.astype(np.int16), (7, 5)).astype(np.int8))
    warp = imgaug.WarpAffineTransform(np.float32([[1, 0, 2], [0, 1, 1]]), (10, 8), interp=cv2.INTER_NEAREST)
    shifted = warp.apply_image(labels)
    assert shifted.dtype == np.int64 and np.array_equal(shifted[1:, 2:], labels[:-1, :-2])


def test_more_than_four_channels_are_done_four_at_a_time_with_the_same_pixels():
    img = np.random.RandomState(3).uniform(0, 255, (9, 11, 7)).astype(np.float32)
    for tfm in (imgaug.ResizeTransform(9, 11, 5, 6, cv2.INTER_AREA),
                imgaug.WarpAffineTransform(cv2.getRotationMatrix2D((5.0, 4.0), 30, 1.0), (11, 9))):
        out = tfm.apply_image(img)
        expected = np.stack([tfm.apply_image(img[:, :, k]) for k in range(7)], axis=2)
        # OpenCV 5.1 rounds a float warp of 4 channels and of 1 apart in the last bit
        assert_same_pixels(out, expected)
    blur = imgaug.GaussianBlur((2, 3))
    blurred = _ready(blur, 5).augment(img)
    assert blurred.shape == img.shape
    np.testing.assert_array_equal(blurred[:, :, 6], _ready(imgaug.GaussianBlur((2, 3)), 5).augment(img[:, :, 6]))


@pytest.mark.parametrize("make", [lambda: imgaug.Hue((0, 180)), lambda: imgaug.Saturation(),
                                  lambda: imgaug.Lighting(0.1, EIGVAL, EIGVEC),
                                  lambda: imgaug.Contrast((0.6, 1.4), rgb=False), lambda: imgaug.JpegNoise()],
                         ids=["Hue", "Saturation", "Lighting", "Contrast", "JpegNoise"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_colour_augmentors_change_the_colour_of_an_rgba_image_and_keep_its_alpha(make, dtype):
    rgba = np.random.RandomState(4).randint(0, 256, (8, 10, 4)).astype(dtype)
    out = _ready(make(), 7).augment(rgba)
    assert out.shape == rgba.shape and out.dtype == dtype
    np.testing.assert_array_equal(out[:, :, 3], rgba[:, :, 3])
    np.testing.assert_array_equal(out[:, :, :3], _ready(make(), 7).augment(rgba[:, :, :3].copy()))


def test_other_dtypes_of_colour_augmentors_go_through_float32():
    img = np.random.RandomState(5).randint(0, 256, (8, 10, 3))
    for make in (lambda: imgaug.Hue((10, 11)), lambda: imgaug.Saturation(0.3)):
        out = _ready(make(), 3).augment(img.astype(np.int64))
        assert out.dtype == np.int64
        reference = _ready(make(), 3).augment(img.astype(np.float32))
        np.testing.assert_array_equal(out, reference.astype(np.int64))
    as_half = _ready(imgaug.ColorSpace(cv2.COLOR_BGR2HSV)).augment(img.astype(np.float16))
    assert as_half.dtype == np.float16
    np.testing.assert_array_equal(as_half, cv2.cvtColor(img.astype(np.float16).astype(np.float32),
                                                        cv2.COLOR_BGR2HSV).astype(np.float16))
    with pytest.raises(ValueError, match=r"^ColorSpace: OpenCV's cvtColor cannot convert an array of shape \(8, 10, 3\) "
                                         r"and dtype int64 with mode 40: "):
        imgaug.ColorSpace(cv2.COLOR_BGR2HSV).augment(img.astype(np.int64))


def test_gamma_and_min_max_normalize_take_empty_and_scalar_arrays():
    gamma = _ready(imgaug.Gamma((0.5, 0.6)))
    assert gamma.augment(np.zeros((0, 4, 3), np.uint8)).shape == (0, 4, 3)
    scalar = _ready(imgaug.Gamma((0.5, 0.6))).augment(np.array(128, np.uint8))
    assert scalar == _ready(imgaug.Gamma((0.5, 0.6))).augment(np.full((1, 1), 128, np.uint8))[0, 0] != 128
    wide = np.random.RandomState(6).randint(0, 256, (5, 6, 9)).astype(np.uint8)
    out = _ready(imgaug.Gamma((0.5, 0.6)), 2).augment(wide)
    np.testing.assert_array_equal(out[:, :, :3], _ready(imgaug.Gamma((0.5, 0.6)), 2).augment(wide[:, :, :3].copy()))
    for all_channel in (True, False):
        empty = imgaug.MinMaxNormalize(all_channel=all_channel).augment(np.zeros((0, 4, 3), np.uint8))
        assert empty.shape == (0, 4, 3) and empty.dtype == np.float32


def test_the_error_names_the_augmentor_inside_lists_meta_augmentors_and_flows():
    empty = np.zeros((0, 6, 3), np.uint8)
    augs = imgaug.AugmentorList([imgaug.Flip(horiz=True), imgaug.Resize((4, 4))])
    augs.reset_state()
    with pytest.raises(ValueError, match=r"^Resize: expected a non-empty HW or HWC image, got an array of shape "
                                         r"\(0, 6, 3\) and dtype uint8$"):
        augs.augment(empty)
    lazily = imgaug.AugmentorList([imgaug.CenterCrop((0, 6)), imgaug.Rotation(10)])   # the crop makes it empty
    lazily.reset_state()
    with pytest.raises(ValueError, match=r"^Rotation: expected a non-empty HW or HWC image, got an array of shape "
                                         r"\(0, 6, 3\)"):
        lazily.augment(np.zeros((5, 6, 3), np.uint8))
    df = AugmentImageComponent(DataFromList([[np.zeros((4, 6, 2), np.uint8)]], shuffle=False),
                               [imgaug.RandomApplyAug(imgaug.Hue(), 1.0)])
    df.reset_state()
    with pytest.raises(ValueError, match=r"^Hue: expected a non-empty HxWx3 or HxWx4 image of a numeric \(not bool\) "
                                         r"dtype, got an array of shape \(4, 6, 2\) and dtype uint8$"):
        list(df)
    with pytest.raises(TypeError, match=r"^CenterCrop: expected an image as a numpy array \(HW or HWC\), got list$"):
        imgaug.CenterCrop(2).get_transform([[1, 2], [3, 4]])


def test_a_shape_only_placeholder_and_user_augmentors_are_not_refused():
    tfm = imgaug.CenterCrop(4).get_transform(imgaug.base.ImagePlaceholder(shape=(6, 8)))
    assert (tfm.y0, tfm.x0, tfm.h, tfm.w) == (1, 2, 4, 4)

    class AnyShape(imgaug.ImageAugmentor):       # no rule of its own: takes what it likes
        def get_transform(self, img):
            return imgaug.TransformFactory(name="negate", apply_image=lambda image: -image)

    assert AnyShape().augment(np.ones((2, 3, 4, 5))).shape == (2, 3, 4, 5)

    class Strict(imgaug.Flip):                   # inherits Flip's rule, also for its own get_transform
        def get_transform(self, img):
            return super().get_transform(img)

    with pytest.raises(ValueError, match=r"^Strict: expected an HW or HWC image, got an array of shape \(3,\)"):
        Strict(horiz=True).augment(np.zeros(3))
