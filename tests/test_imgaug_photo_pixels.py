"""The photometric, noise and conversion augmentors give tensorpack 0.11's pixels.

tests/data/imgaug_photo/make_fixtures.py ran each case under tensorpack with a RandomState of a
fixed seed; here inputpipe's augmentor gets a RandomState with the same seed, so it must draw the
same numbers and produce the same outputs: exactly for integer results, within 1e-4 for floats.
"""
import json
import os

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from inputpipe.dataflow import imgaug  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "data", "imgaug_photo", "fixtures.npz")


def _load():
    with np.load(FIXTURES) as data:
        arrays = {key: data[key] for key in data.files}
    meta = json.loads(str(arrays.pop("cases")))
    return arrays, meta


ARRAYS, META = _load()
CASES = [(index, expression, input_name) for index, (expression, input_name) in enumerate(META["cases"])]


def test_fixtures_cover_every_augmentor_of_the_family():
    named = {expression.split("(")[0].split(".")[1] for _, expression, _ in CASES}
    assert named == {"Hue", "Brightness", "BrightnessScale", "Contrast", "MeanVarianceNormalize", "GaussianBlur",
                     "Gamma", "Clip", "Saturation", "Lighting", "MinMaxNormalize", "JpegNoise", "GaussianNoise",
                     "SaltPepperNoise", "ColorSpace", "Grayscale", "ToUint8", "ToFloat32"}
    assert META["draws"] == 2 and len(CASES) == 46


@pytest.mark.parametrize("index,expression,input_name", CASES, ids=["{}-{}".format(e, i) for _, e, i in CASES])
def test_same_pixels_as_tensorpack(index, expression, input_name):
    aug = eval(expression, {"imgaug": imgaug, "np": np, "cv2": cv2})
    aug.rng = np.random.RandomState(META["seeds"][index])
    img = ARRAYS["input_" + input_name]
    before = img.copy()
    for draw in range(META["draws"]):
        expected = ARRAYS["case{}_draw{}".format(index, draw)]
        if expression.startswith("imgaug.MeanVarianceNormalize("):
            assert expected.dtype == np.float64      # tensorpack's; it documents float32, which inputpipe returns
            expected = expected.astype(np.float32)
        out = aug.augment(img)
        assert out.dtype == expected.dtype, (out.dtype, expected.dtype)
        assert out.shape == expected.shape, (out.shape, expected.shape)
        if np.issubdtype(expected.dtype, np.integer):
            np.testing.assert_array_equal(out, expected)
        else:
            np.testing.assert_allclose(out, expected, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(img, before)   # the input is left as it was


@pytest.mark.parametrize("index,expression,input_name", [c for c in CASES if "Normalize" not in c[1]
                                                         and "ColorSpace" not in c[1] and "Grayscale" not in c[1]
                                                         and "To" not in c[1] and "Clip" not in c[1]][:12])
def test_old_api_params_replay_the_same_pixels(index, expression, input_name):
    """augment_return_params / augment_with_params (the pre-0.10 calls) repeat the first draw."""
    aug = eval(expression, {"imgaug": imgaug, "np": np, "cv2": cv2})
    aug.rng = np.random.RandomState(META["seeds"][index])
    img = ARRAYS["input_" + input_name]
    out, params = aug.augment_return_params(img)
    again = aug.augment_with_params(img.copy(), params)
    expected = ARRAYS["case{}_draw0".format(index)]
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(again, out)


def seed_tree(aug, first_seed):
    """The fixture script's seeding: ``aug`` and every augmentor inside it, depth first, get
    RandomState(first_seed + k)."""
    seed = first_seed
    pending = [aug]
    while pending:
        current = pending.pop(0)
        current.rng = np.random.RandomState(seed)
        seed += 1
        pending = list(getattr(current, "augmentors", None) or getattr(current, "aug_lists", None) or []) + pending
    return seed - first_seed


# The pixels recorded from tensorpack were computed on numpy 2; on numpy 1 a few augmentors' scalar
# arithmetic runs in float64 instead (tensorpack's and inputpipe's alike, docs/migrating.md).
NUMPY_2_PIXELS = pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.0.0",
                                    reason="pixels recorded from tensorpack on numpy 2; numpy 1 rounds a few "
                                           "augmentors' float64 arithmetic differently, as tensorpack does there")
CHAINS = [pytest.param(index, expression, input_name, marks=NUMPY_2_PIXELS if index == 0 else ())   # fbresnet's
          for index, (expression, input_name) in enumerate(META["chains"])]


@pytest.mark.parametrize("index,expression,input_name", CHAINS, ids=["fbresnet", "float-chain"])
def test_augmentor_lists_with_random_order_give_tensorpack_pixels(index, expression, input_name):
    """The ResNet training recipe of the benchmark (crop, colour in random order, flip) and a chain
    through float32 and back: each augmentor seeded like tensorpack's, same images draw after draw."""
    aug = eval(expression, {"imgaug": imgaug, "np": np, "cv2": cv2})
    assert seed_tree(aug, META["chain_seeds"][index]) == 8      # the list, its 7 augmentors and sub-augmentors
    img = ARRAYS["input_" + input_name]
    for draw in range(META["chain_draws"]):
        expected = ARRAYS["chain{}_draw{}".format(index, draw)]
        out = aug.augment(img)
        assert out.dtype == expected.dtype and out.shape == expected.shape
        np.testing.assert_array_equal(out, expected)
