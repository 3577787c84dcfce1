"""Comparing augmented images across OpenCV releases, shared by the imgaug tests."""
import numpy as np


def assert_same_pixels(out, expected):
    """Integer images equal; float ones equal to within float32 rounding of OpenCV's arithmetic
    (a few units in the last place: relative 1e-5, and that much of the image's largest value):
    OpenCV's minor releases move the last bits of float warps (5.1 against 5.0: up to 5e-6
    relative; 4 channels warped at once against one at a time: 2e-7)."""
    assert out.shape == expected.shape and out.dtype == expected.dtype
    if np.issubdtype(expected.dtype, np.floating):
        scale = float(np.abs(expected).max()) if expected.size else 0.0
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * max(scale, 1e-3))
    else:
        np.testing.assert_array_equal(out, expected)
