"""inputpipe's augmentors give tensorpack 0.11's pixels (fixtures made by tests/data/imgaug/make_fixtures.py).

Deterministic augmentors are compared directly; random ones with the same seeded RandomState
in both libraries, so they must draw their numbers in tensorpack's order. Coordinates match too,
except through rotations/affine warps, where inputpipe moves points with their pixels (see
test_warp_coords_follow_pixels in test_imgaug_core.py): there ours(p + 0.5) - 0.5 == tensorpack's(p).

The pixels are OpenCV's, and OpenCV 4 interpolates differently from OpenCV 5 (up to 5 levels in
rotations and affine warps, the last bit of float resizes), in tensorpack as in inputpipe: so the
fixtures were recorded from tensorpack once per OpenCV major (OpenCV 4.11 is what pip takes with
numpy 1.x on Python 3.9+, the TF 2.15 stack), and each run compares with its own OpenCV's: integer
images exactly, float ones to float32's rounding (OpenCV's minor releases move the last bits of
float warps: 5.1 against the fixtures' 5.0, up to 5e-6 relative: ``imgaug_helpers.assert_same_pixels``).
"""
import json
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
from inputpipe.dataflow import imgaug  # noqa: E402
from imgaug_helpers import assert_same_pixels  # noqa: E402

OPENCV_MAJOR = int(cv2.__version__.split(".")[0])
FIXTURES = np.load(Path(__file__).parent / "data" / "imgaug" / (
    "tensorpack_outputs.npz" if OPENCV_MAJOR >= 5 else "tensorpack_outputs_opencv{}.npz".format(OPENCV_MAJOR)))
CASES = json.loads(str(FIXTURES["cases"]))
WARPS = ("Rotation", "Affine")


def _run(expr, image_name, seed, points):
    aug = eval("imgaug." + expr, {"imgaug": imgaug, "cv2": cv2})
    if seed is not None:
        aug.rng = np.random.RandomState(seed)
    img = FIXTURES["image_" + image_name].copy()
    tfm = aug.get_transform(img)
    return tfm.apply_image(img), tfm, points


def test_fixture_covers_every_kind():
    assert len(CASES) == 104
    kinds = {expr.split("(")[0] for expr, _, _ in CASES}
    assert {"Resize", "ResizeShortestEdge", "CenterCrop", "Flip", "Transpose", "CenterPaste", "RandomCrop", "Shift",
            "Rotation", "RotationAndCropValid", "Affine", "GoogleNetRandomCropAndResize", "RandomResize",
            "RandomApplyAug", "RandomChooseAug", "RandomOrderAug", "AugmentorList", "Identity"} <= kinds


@pytest.mark.parametrize("index", range(len(CASES)), ids=["{}:{}:{}".format(*case) for case in CASES])
def test_same_pixels_as_tensorpack(index):
    expr, image_name, seed = CASES[index]
    out, tfm, _ = _run(expr, image_name, seed, None)
    expected = FIXTURES["out_{}".format(index)]
    assert_same_pixels(out, expected)


@pytest.mark.parametrize("index", [i for i in range(len(CASES)) if "coords_{}".format(i) in FIXTURES.files],
                         ids=lambda i: "{}:{}:{}".format(*CASES[i]))
def test_same_coords_as_tensorpack(index):
    expr, image_name, seed = CASES[index]
    out, tfm, _ = _run(expr, image_name, seed, None)
    expected = FIXTURES["coords_{}".format(index)]
    points = FIXTURES["points"].copy()
    if expr.startswith(WARPS):
        np.testing.assert_allclose(tfm.apply_coords(points + 0.5) - 0.5, expected, rtol=1e-5, atol=1e-4)
    else:
        np.testing.assert_allclose(tfm.apply_coords(points), expected, rtol=1e-6, atol=1e-5)
