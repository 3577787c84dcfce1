"""Photometric, noise and colour-conversion augmentors: dtypes, shapes, random draws, errors,
the fixes over tensorpack 0.11, and tensorpack's own imgaug tests (the photometric parts) ported."""
import subprocess
import sys

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from inputpipe.dataflow import imgaug  # noqa: E402

EIGVAL = np.asarray([0.2175, 0.0188, 0.0045]) * 255
EIGVEC = [[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]


def seeded(aug, seed=0):
    aug.rng = np.random.RandomState(seed)
    return aug


def colour_image(dtype=np.uint8, shape=(12, 14, 3)):
    values = np.random.RandomState(3).randint(0, 256, shape)
    return values.astype(dtype)


# ------------------------------------------------------------------------- dtypes and shapes

KEEPS_DTYPE = [
    lambda: imgaug.Hue((-20, 20)),
    lambda: imgaug.Brightness(40),
    lambda: imgaug.BrightnessScale((0.5, 1.5)),
    lambda: imgaug.Contrast((0.5, 1.5)),
    lambda: imgaug.Contrast((0.5, 1.5), rgb=True),
    lambda: imgaug.GaussianBlur((1, 3)),
    lambda: imgaug.Gamma(),
    lambda: imgaug.Clip(),
    lambda: imgaug.Saturation(),
    lambda: imgaug.Lighting(0.1, EIGVAL, EIGVEC),
    lambda: imgaug.JpegNoise(),
    lambda: imgaug.GaussianNoise(3),
    lambda: imgaug.SaltPepperNoise(),
    lambda: imgaug.ColorSpace(cv2.COLOR_BGR2HSV),
]


@pytest.mark.parametrize("make", KEEPS_DTYPE, ids=lambda make: repr(make()))
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_augmentor_returns_the_dtype_and_shape_it_was_given(make, dtype):
    img = colour_image(dtype)
    out = seeded(make()).augment(img)
    assert out.dtype == dtype
    assert out.shape == img.shape


@pytest.mark.parametrize("make", [lambda: imgaug.MeanVarianceNormalize(), lambda: imgaug.MinMaxNormalize(),
                                  lambda: imgaug.MinMaxNormalize(all_channel=False), lambda: imgaug.ToFloat32()])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64])
def test_normalizers_and_to_float32_always_return_float32(make, dtype):
    out = make().augment(colour_image(dtype))
    assert out.dtype == np.float32 and out.shape == (12, 14, 3)


def test_uint8_results_are_clipped_and_truncated_like_tensorpack():
    img = np.array([[[10, 100, 250]]], np.uint8)
    out = imgaug.Brightness(20).augment_with_params(img, np.float32(10.7))
    assert out.tolist() == [[[20, 110, 255]]]           # 260.7 clipped to 255, 20.7 truncated to 20
    out = imgaug.Brightness(20).augment_with_params(img, np.float32(-15.5))
    assert out.tolist() == [[[0, 84, 234]]]


def test_clip_false_lets_float_images_leave_0_255_but_uint8_is_always_clipped():
    floats = np.array([[[10.0, 250.0]]], np.float32)
    assert imgaug.BrightnessScale((2, 3), clip=False).augment_with_params(floats, np.float32(2)).tolist() == [
        [[20.0, 500.0]]]
    assert imgaug.BrightnessScale((2, 3), clip=True).augment_with_params(floats, np.float32(2)).tolist() == [
        [[20.0, 255.0]]]
    ints = np.array([[[10, 250]]], np.uint8)
    assert imgaug.BrightnessScale((2, 3), clip=False).augment_with_params(ints, np.float32(2)).tolist() == [[[20, 255]]]


def test_to_uint8_clips_then_truncates():
    out = imgaug.ToUint8().augment(np.array([[-5.0, 0.9, 254.99, 300.0]], np.float32))
    assert out.dtype == np.uint8 and out.tolist() == [[0, 0, 254, 255]]


def test_clip_uses_its_range_and_keeps_dtype():
    out = imgaug.Clip(10, 20).augment(np.array([[5.5, 15.5, 25.5]], np.float32))
    assert out.dtype == np.float32 and out.tolist() == [[10.0, 15.5, 20.0]]


@pytest.mark.parametrize("keepdims,rgb,keepshape,shape", [(True, False, False, (12, 14, 1)), (False, False, False, (12, 14)),
                                                          (True, True, True, (12, 14, 3))])
def test_grayscale_shapes_and_channel_order(keepdims, rgb, keepshape, shape):
    img = colour_image()
    out = imgaug.Grayscale(keepdims=keepdims, rgb=rgb, keepshape=keepshape).augment(img)
    assert out.shape == shape and out.dtype == np.uint8
    expected = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY)
    np.testing.assert_array_equal(out.reshape(12, 14, -1)[:, :, 0], expected)
    if keepshape:
        assert (out[:, :, 0] == out[:, :, 1]).all() and (out[:, :, 1] == out[:, :, 2]).all()


def test_grayscale_rgb_and_bgr_differ_on_a_pure_red_image():
    red_rgb = np.zeros((2, 2, 3), np.uint8)
    red_rgb[..., 0] = 255
    assert imgaug.Grayscale(rgb=True).augment(red_rgb)[0, 0, 0] == 76     # 0.299 * 255
    assert imgaug.Grayscale(rgb=False).augment(red_rgb)[0, 0, 0] == 29    # read as blue: 0.114 * 255


def test_colorspace_keepdims_false_drops_the_channel_axis():
    out = imgaug.ColorSpace(cv2.COLOR_BGR2GRAY, keepdims=False).augment(colour_image())
    assert out.shape == (12, 14)


def test_hue_turns_red_into_green_by_a_third_of_a_turn():
    red = np.zeros((2, 2, 3), np.uint8)
    red[..., 0] = 255
    out = imgaug.Hue(rgb=True).augment_with_params(red, np.float32(60))      # 60 of 180 = 120 degrees
    assert out[0, 0].tolist() == [0, 255, 0]
    out = imgaug.Hue(rgb=False).augment_with_params(red, np.float32(60))     # red read as blue -> red channel
    assert out[0, 0].tolist() == [0, 0, 255]
    floats = imgaug.Hue(rgb=True).augment_with_params(red.astype(np.float32) / 255, np.float32(60))
    np.testing.assert_allclose(floats[0, 0], [0, 1, 0], atol=1e-6)


def test_contrast_keeps_the_mean_and_scales_the_spread():
    img = np.array([[[100.0], [200.0]]], np.float32)
    out = imgaug.Contrast((0.5, 1.5)).augment_with_params(img, np.float32(0.5))
    assert out.ravel().tolist() == [125.0, 175.0]


def test_lighting_adds_eigvec_times_alpha_times_eigval():
    img = np.full((2, 2, 3), 100.0, np.float32)
    alpha = np.array([0.1, -0.2, 0.3], np.float32)
    out = imgaug.Lighting(0.1, EIGVAL, EIGVEC, clip=False).augment_with_params(img, alpha)
    expected = 100 + np.asarray(EIGVEC) @ (alpha * EIGVAL)
    np.testing.assert_allclose(out[1, 1], expected, atol=1e-3)


def test_saturation_zero_gives_the_grey_image():
    img = colour_image(np.float32)
    out = imgaug.Saturation(0.5, rgb=True, clip=False).augment_with_params(img, np.float32(0.0))
    grey = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    for channel in range(3):
        np.testing.assert_allclose(out[:, :, channel], grey, atol=1e-4)


def test_mean_variance_normalize_per_channel():
    img = colour_image(np.float32) * np.array([1, 2, 0.5], np.float32)
    out = imgaug.MeanVarianceNormalize(all_channel=False).augment(img)
    np.testing.assert_allclose(out.mean(axis=(0, 1)), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(axis=(0, 1)), 1, atol=1e-5)


def test_min_max_normalize_maps_extremes_to_the_new_range():
    img = colour_image()
    out = imgaug.MinMaxNormalize(-1, 1, all_channel=False).augment(img)
    np.testing.assert_allclose(out.min(axis=(0, 1)), -1, atol=1e-6)
    np.testing.assert_allclose(out.max(axis=(0, 1)), 1, atol=1e-6)


def test_gamma_brightens_with_negative_gamma_and_keeps_the_ends():
    img = np.array([[0, 64, 255]], np.uint8)
    out = imgaug.Gamma().augment_with_params(img, np.float32(-0.5))        # exponent 2: darker
    assert out.tolist() == [[0, 16, 255]]
    out = imgaug.Gamma().augment_with_params(img, np.float32(1.0))         # exponent 0.5: brighter
    assert out.tolist() == [[0, 127, 255]]


def test_gaussian_blur_of_a_constant_image_is_constant_and_keeps_one_channel():
    img = np.full((9, 9, 1), 77, np.uint8)
    out = imgaug.GaussianBlur((1, 4), (0.5, 2.0)).augment(img)
    assert out.shape == (9, 9, 1) and (out == 77).all()


# ------------------------------------------------------------------------- fixes over tensorpack

def test_jpeg_noise_keeps_grey_images_grey():
    grey = colour_image(shape=(16, 16))
    assert seeded(imgaug.JpegNoise()).augment(grey).shape == (16, 16)
    assert seeded(imgaug.JpegNoise()).augment(grey[:, :, None]).shape == (16, 16, 1)


def test_jpeg_noise_at_quality_99_stays_close_and_low_quality_drifts_further():
    img = np.clip(np.add.outer(np.arange(32) * 6, np.arange(32) * 2), 0, 255).astype(np.uint8)
    img = np.repeat(img[:, :, None], 3, axis=2)
    close = imgaug.JpegNoise().augment_with_params(img, 99)
    far = imgaug.JpegNoise().augment_with_params(img, 5)
    err_close = np.abs(close.astype(int) - img).mean()
    err_far = np.abs(far.astype(int) - img).mean()
    assert err_close < 2 < err_far


def test_colorspace_keepdims_never_adds_an_axis_to_a_grey_input():
    grey = colour_image(shape=(5, 6))
    out = imgaug.ColorSpace(cv2.COLOR_GRAY2BGR).augment(grey)
    assert out.shape == (5, 6, 3)           # tensorpack: (5, 6, 3, 1)


def test_min_max_normalize_of_a_constant_image_is_min_not_nan():
    out = imgaug.MinMaxNormalize(3, 9).augment(np.full((2, 2, 3), 40, np.uint8))
    assert out.dtype == np.float32 and (out == 3).all()
    img = colour_image()
    img[:, :, 1] = 7
    out = imgaug.MinMaxNormalize(0, 1, all_channel=False).augment(img)
    assert (out[:, :, 1] == 0).all() and out[:, :, 0].max() == 1


@pytest.mark.parametrize("make", [lambda: imgaug.Hue((10, 20)), lambda: imgaug.Saturation(0.3)])
def test_float64_images_work_where_opencv_takes_float32_only(make):
    img = colour_image(np.float64)
    out = seeded(make()).augment(img)
    expected = seeded(make()).augment(img.astype(np.float32))
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, expected, atol=1e-3)


def test_salt_pepper_noise_leaves_its_input_unchanged():
    img = colour_image()
    before = img.copy()
    out = seeded(imgaug.SaltPepperNoise(0.3, 0.3)).augment(img)
    np.testing.assert_array_equal(img, before)
    assert (out != img).any()


# ------------------------------------------------------------------------- random draws

def test_brightness_draws_uniformly_from_minus_delta_to_delta():
    aug = seeded(imgaug.Brightness(20, clip=False), 1)
    img = np.full((1, 1), 100.0, np.float32)
    shifts = np.array([aug.augment(img)[0, 0] - 100 for _ in range(4000)])
    assert shifts.min() >= -20 and shifts.max() < 20
    assert shifts.min() < -19.5 and shifts.max() > 19.5
    assert abs(shifts.mean()) < 0.5 and abs(np.mean(np.abs(shifts)) - 10) < 0.5


@pytest.mark.parametrize("make,low,high", [
    (lambda: imgaug.BrightnessScale((0.6, 1.4)), 0.6, 1.4),
    (lambda: imgaug.Contrast((0.2, 1.8)), 0.2, 1.8),
    pytest.param(lambda: imgaug.Saturation(0.4), 0.6, 1.4, marks=pytest.mark.skipif(
        np.lib.NumpyVersion(np.__version__) < "2.0.0",
        reason="numpy 1 draws Saturation's factor in float64, as tensorpack does there (docs/migrating.md)")),
    (lambda: imgaug.Gamma((-0.3, 0.5)), -0.3, 0.5),
    (lambda: imgaug.Hue((-15, 15)), -15, 15),
])
def test_factors_are_drawn_from_their_range(make, low, high):
    aug = seeded(make(), 2)
    draws = np.array([aug._get_augment_params(None) for _ in range(3000)])
    assert draws.dtype == np.float32
    assert draws.min() >= low and draws.max() < high
    width = high - low
    assert draws.min() < low + 0.01 * width and draws.max() > high - 0.01 * width
    assert abs(draws.mean() - (low + high) / 2) < 0.02 * width


def test_jpeg_quality_is_drawn_from_low_up_to_but_not_including_high():
    aug = seeded(imgaug.JpegNoise((40, 100)), 3)
    qualities = {int(aug._get_augment_params(None)) for _ in range(3000)}
    assert qualities == set(range(40, 100))


def test_gaussian_blur_window_sizes_are_odd_and_follow_symmetric():
    aug = seeded(imgaug.GaussianBlur((0, 3)), 4)
    sizes = [aug._get_augment_params(None)[0] for _ in range(500)]
    assert {s for s, _ in sizes} == {1, 3, 5} and all(x == y for x, y in sizes)
    aug = seeded(imgaug.GaussianBlur(4, (1, 2), symmetric=False), 4)
    drawn = [aug._get_augment_params(None) for _ in range(500)]
    assert {s for (s, _), _ in drawn} == {1, 3, 5, 7}
    assert any(x != y for (x, y), _ in drawn) and all(1 <= s < 2 for _, sigmas in drawn for s in sigmas)


def test_salt_pepper_probabilities_are_respected():
    img = np.full((200, 200, 3), 128, np.uint8)
    out = seeded(imgaug.SaltPepperNoise(white_prob=0.1, black_prob=0.2), 5).augment(img)
    assert set(np.unique(out).tolist()) == {0, 128, 255}
    assert abs((out == 255).mean() - 0.1) < 0.005
    assert abs((out == 0).mean() - 0.2) < 0.005


def test_gaussian_noise_has_the_requested_sigma_per_element():
    out = seeded(imgaug.GaussianNoise(sigma=5, clip=False), 6).augment(np.zeros((200, 200, 3), np.float32))
    assert abs(out.mean()) < 0.05 and abs(out.std() - 5) < 0.05
    assert not np.array_equal(out[:, :, 0], out[:, :, 1])


def test_lighting_weights_have_the_requested_std():
    aug = seeded(imgaug.Lighting(0.1, EIGVAL, EIGVEC), 7)
    img = np.zeros((2, 2, 3), np.uint8)
    draws = np.array([aug._get_augment_params(img) for _ in range(4000)])
    assert draws.shape == (4000, 3) and draws.dtype == np.float32
    np.testing.assert_allclose(draws.std(axis=0), 0.1, rtol=0.05)


# ------------------------------------------------------------------------- errors

@pytest.mark.parametrize("make,message", [
    (lambda: imgaug.Brightness(0), "Brightness expects delta > 0, got 0"),
    (lambda: imgaug.Saturation(alpha=1.0), "Saturation expects alpha < 1, got 1.0"),
    (lambda: imgaug.SaltPepperNoise(0.6, 0.5), "SaltPepperNoise expects white_prob + black_prob <= 1, got 0.6 + 0.5"),
    (lambda: imgaug.Lighting(0.1, [1, 2], EIGVEC), "Lighting expects eigval of shape (3,) and eigvec of shape (3, 3), "
                                                    "got (2,) and (3, 3)"),
    (lambda: imgaug.Grayscale(keepdims=False, keepshape=True), "Grayscale(keepshape=True) needs keepdims=True"),
    (lambda: imgaug.GaussianBlur(sigma_range=1.0), "GaussianBlur expects sigma_range as a (low, high) pair, got 1.0"),
])
def test_bad_arguments_are_named(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert message in str(info.value)


@pytest.mark.parametrize("make", [lambda: imgaug.Lighting(0.1, EIGVAL, EIGVEC), lambda: imgaug.Saturation(),
                                  lambda: imgaug.Hue()])
def test_colour_augmentors_name_themselves_on_a_grey_image(make):
    aug = make()
    with pytest.raises(ValueError) as info:
        aug.augment(np.zeros((4, 5), np.uint8))
    assert str(info.value) == "{}: expected {}HxWx3 or HxWx4 image{}, got an array of shape (4, 5) and dtype uint8".format(
        type(aug).__name__, *(("an ", "") if isinstance(aug, imgaug.Lighting) else
                              ("a non-empty ", " of a numeric (not bool) dtype")))


def test_without_opencv_the_error_names_the_augmentor_and_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cv2", None)
    for make, name in [(imgaug.Hue, "Hue"), (lambda: imgaug.JpegNoise(), "JpegNoise"),
                       (lambda: imgaug.Grayscale(), "Grayscale"), (lambda: imgaug.Contrast((1, 2), rgb=True), "Contrast")]:
        with pytest.raises(ImportError) as info:
            make()
        message = str(info.value)
        assert message.startswith(name + " needs OpenCV") and 'pip install "inputpipe[image]"' in message
        assert "\n" not in message
    # the pure-numpy ones keep working
    out = seeded(imgaug.Brightness(5)).augment(np.zeros((2, 2, 3), np.uint8))
    assert out.shape == (2, 2, 3)


def test_importing_the_augmentors_imports_neither_opencv_nor_tensorflow():
    code = ("import sys, inputpipe.dataflow.imgaug.imgproc, inputpipe.dataflow.imgaug.noise, "
            "inputpipe.dataflow.imgaug.convert, inputpipe.dataflow.imgaug.external; "
            "print('cv2' in sys.modules, 'tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def test_repr_shows_the_arguments_that_differ_from_defaults():
    assert repr(imgaug.Brightness(30, clip=False)) == "imgaug.Brightness(delta=30, clip=False)"
    assert repr(imgaug.Grayscale(rgb=True)) == "imgaug.Grayscale(rgb=True)"
    assert repr(imgaug.Contrast((0.8, 1.2))) == "imgaug.Contrast(factor_range=(0.8, 1.2))"
    assert repr(imgaug.ToUint8()) == "imgaug.ToUint8()"


# ------------------------------------------------------------------------- tensorpack's imgaug_test.py, ported

def _random_image(shape=(20, 20)):
    return np.random.RandomState(11).rand(*shape).astype(np.float32)


class _OldStyleBrightness(imgaug.ImageAugmentor):
    """Written against the pre-0.10 API, as in tensorpack's test."""

    def __init__(self, delta, clip=True):
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, _):
        return self._rand_range(-self.delta, self.delta)

    def _augment(self, img, v):
        old_dtype = img.dtype
        img = img.astype(np.float32) + v
        if self.clip or old_dtype == np.uint8:
            img = np.clip(img, 0, 255)
        return img.astype(old_dtype)


def _augmentors(old_style):
    first = _OldStyleBrightness(0.5) if old_style else imgaug.Contrast((0.8, 1.2))
    augs = imgaug.AugmentorList([first, imgaug.Flip(horiz=True), imgaug.Resize((30, 30)), imgaug.SaltPepperNoise()])
    augs.reset_state()
    return augs


@pytest.mark.parametrize("old_style", [False, True])
def test_tensorpack_transform_usage(old_style):
    augs = _augmentors(old_style)
    img = _random_image()
    orig = img.copy()
    tfms = augs.get_transform(img)
    assert "SaltPepperNoise" in repr(augs) and "Resize" in repr(augs)
    out = tfms.apply_image(img)
    again = tfms.apply_image(orig)
    assert out.shape == (30, 30) and again.shape == (30, 30)
    np.testing.assert_allclose(out, again)
    coords = tfms.apply_coords(np.asarray([[0, 0], [10, 12]], dtype=np.float32))
    assert coords.shape == (2, 2)


@pytest.mark.parametrize("old_style", [False, True])
def test_tensorpack_legacy_usage(old_style):
    augs = _augmentors(old_style)
    img = _random_image()
    orig = img.copy()
    out, params = augs.augment_return_params(img)
    again = augs.augment_with_params(orig, params)
    assert again.shape == (30, 30)
    np.testing.assert_allclose(out, again)
    coords = augs.augment_coords(np.asarray([[0, 0], [10, 12]], dtype=np.float32), params)
    assert coords.shape == (2, 2)
