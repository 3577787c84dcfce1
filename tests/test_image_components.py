"""AugmentImageComponent(s), AugmentImageCoordinates and ImageFromFile.

The pipelines in ``build_case`` run unchanged on tensorpack 0.11 and on inputpipe (the flows and
augmentors are passed in); EXPECTED holds tensorpack's outputs with the same augmentor seeds,
printed by running this file under tensorpack's interpreter::

    /opt/tpvenv/bin/python tests/test_image_components.py

tensorpack 0.11 crashes on numpy 2 in its coordinate check (``np.float``); for the coordinate
cases that check is patched to ``np.floating`` before tensorpack runs, so the values are
tensorpack's otherwise.
"""
import hashlib
import logging
import os

import numpy as np
import pytest

if __name__ != "__main__":
    import inputpipe.dataflow as flows
    from inputpipe.dataflow import (
        AugmentImageComponent, AugmentImageComponents, AugmentImageCoordinates, DataFromList, ImageFromFile,
        imgaug, seeding,
    )


def fingerprint(datapoints):
    """A digest of every component's type, dtype, shape and bytes (or python value), in order."""
    digest = hashlib.sha256()
    for dp in datapoints:
        values = [dp[k] for k in sorted(dp)] if isinstance(dp, dict) else dp
        digest.update(b"|dp")
        for value in values:
            if isinstance(value, (np.ndarray, np.generic)):
                array = np.ascontiguousarray(value)
                digest.update("{}{}{}".format(type(value).__name__, array.dtype.str, array.shape).encode())
                digest.update(array.tobytes())
            else:
                digest.update("{}:{!r}".format(type(value).__name__, value).encode())
    return digest.hexdigest()[:20]


def images(count=6, shape=(8, 10, 3), seed=0):
    rng = np.random.RandomState(seed)
    return [rng.randint(0, 256, shape).astype(np.uint8) for _ in range(count)]


def boxes_of(count=6, seed=1):
    rng = np.random.RandomState(seed)
    return [(rng.uniform(0, 8, (3, 2))).astype(np.float32) for _ in range(count)]


def seed_augmentors(augs):
    """Give the AugmentorList and each augmentor in it a RandomState(i), on either library."""
    augs.rng = np.random.RandomState(100)
    for i, aug in enumerate(augs.augmentors):
        aug.rng = np.random.RandomState(i)


def build_case(name, lib, flows):
    """The pipeline ``name`` with ``lib`` (an imgaug module) and ``flows`` (a dataflow module).

    The augmentors are deterministic: inputpipe's augmenting flows draw each datapoint's randomness
    from a seed of its own (derived from the flow's state, so a restored flow repeats it), which
    tensorpack's shared RNG stream cannot match; random draws are compared to tensorpack in the
    imgaug tests, and resumed exactly in tests/test_resume_flows_transforms.py."""
    imgs, boxes = images(), boxes_of()
    if name == "component":
        augs = lib.AugmentorList([lib.Flip(horiz=True, prob=1.0), lib.CenterCrop((4, 5))])
        df = flows.AugmentImageComponent(flows.DataFromList([[im, i] for i, im in enumerate(imgs)], shuffle=False),
                                         augs)
    elif name == "component_dict":
        augs = lib.AugmentorList([lib.Flip(vert=True, prob=1.0), lib.Resize((5, 4))])
        df = flows.AugmentImageComponent(flows.DataFromList([{"img": im, "label": i} for i, im in enumerate(imgs)],
                                                            shuffle=False), augs, index="img")
    elif name == "coordinates":
        augs = lib.AugmentorList([lib.Flip(horiz=True, prob=1.0), lib.CenterCrop((6, 7)), lib.Resize((12, 14))])
        df = flows.AugmentImageCoordinates(flows.DataFromList([[im, b] for im, b in zip(imgs, boxes)], shuffle=False),
                                           augs)
    elif name == "components":
        augs = lib.AugmentorList([lib.Flip(horiz=True, prob=1.0), lib.CenterCrop((6, 7)), lib.Flip(vert=True, prob=1.0)])
        masks = [im[:, :, 0].copy() for im in images(seed=5)]
        df = flows.AugmentImageComponents(
            flows.DataFromList([[im, m, b, "x"] for im, m, b in zip(imgs, masks, boxes)], shuffle=False), augs,
            index=(0, 1), coords_index=(2,))
    else:
        raise ValueError(name)
    return df, augs


CASES = ["component", "component_dict", "coordinates", "components"]


def run_case(name, lib, flows, epochs=2):
    df, augs = build_case(name, lib, flows)
    df.reset_state()
    seed_augmentors(augs)
    return [dp for _ in range(epochs) for dp in df]


def make_image_files(directory):
    """Three PNG files (lossless, so every decoder gives the same pixels): colour, grayscale, colour."""
    import cv2

    rng = np.random.RandomState(0)
    paths = []
    for i, shape in enumerate([(9, 12, 3), (9, 12), (7, 5, 3)]):
        path = os.path.join(directory, "img%d.png" % i)
        assert cv2.imwrite(path, rng.randint(0, 256, shape).astype(np.uint8))
        paths.append(path)
    return paths


def image_from_file_cases(flows, paths):
    out = {}
    for key, kwargs in (("rgb", {}), ("gray", {"channel": 1}), ("rgb_resized", {"resize": (6, 4)}),
                        ("gray_resized", {"channel": 1, "resize": 5})):
        df = flows.ImageFromFile(list(paths), **kwargs)
        df.reset_state()
        out[key] = fingerprint(list(df))
        out[key + "_shapes"] = [dp[0].shape for dp in df]
    df = flows.ImageFromFile(list(paths), shuffle=True)
    df.reset_state()
    df.rng = np.random.RandomState(3)
    out["shuffled"] = fingerprint([dp for _ in range(3) for dp in df])
    return out


# What tensorpack 0.11 yields (printed by running this file under its interpreter).
EXPECTED = {
    'component': '9b6fa1658612efbaff3f',
    'component_dict': '2ca3ece218176e9898e1',
    'coordinates': '16285a5d435db52b6b23',
    'components': '9259712ea3e3d5bcd3e1',
    'rgb': 'cc3dd616dd3b7d8193c2',
    'rgb_shapes': [(9, 12, 3), (9, 12, 3), (7, 5, 3)],
    'gray': '63b4d0e171282e2cbae2',
    'gray_shapes': [(9, 12, 1), (9, 12, 1), (7, 5, 1)],
    'rgb_resized': 'b7fe99a8f89682c2e51a',
    'rgb_resized_shapes': [(6, 4, 3), (6, 4, 3), (6, 4, 3)],
    'gray_resized': '09f0a167ff71c42b5d1c',
    'gray_resized_shapes': [(5, 5, 1), (5, 5, 1), (5, 5, 1)],
    'shuffled': 'a062cdb6726bd9957081',
}


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_augmented_datapoints_match_tensorpack(name):
    got = run_case(name, imgaug, flows)
    assert len(got) == 12
    assert fingerprint(got) == EXPECTED[name]


def test_one_transform_is_applied_to_image_mask_and_coordinates():
    image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    mask = image[:, :, 0].copy()
    points = np.array([[0.5, 1.5], [5.0, 0.0]], dtype=np.float32)
    df = AugmentImageComponents(DataFromList([(image, mask, points, 9)], shuffle=False),
                                [imgaug.Flip(horiz=True, prob=1.0)], index=(0, 1), coords_index=(2,))
    df.reset_state()
    out = list(df)
    assert len(out) == 1 and isinstance(out[0], list)   # a tuple datapoint comes out as a list
    got_image, got_mask, got_points, label = out[0]
    np.testing.assert_array_equal(got_image, image[:, ::-1])
    np.testing.assert_array_equal(got_mask, mask[:, ::-1])
    assert got_points.tolist() == [[5.5, 1.5], [1.0, 0.0]]
    assert label == 9
    np.testing.assert_array_equal(image[0, 0], [0, 1, 2])   # the input is untouched (copy=True)


def test_dict_datapoints_are_augmented_by_key():
    image = np.arange(2 * 3, dtype=np.uint8).reshape(2, 3)
    source = [{"image": image, "mask": image * 2, "points": np.array([[0.0, 1.0]], np.float32), "id": "a"}]
    df = AugmentImageComponents(DataFromList(source, shuffle=False), [imgaug.Flip(horiz=True, prob=1.0)],
                                index=("image", "mask"), coords_index=("points",))
    df.reset_state()
    [dp] = list(df)
    assert sorted(dp) == ["id", "image", "mask", "points"] and dp["id"] == "a"
    assert dp["image"].tolist() == [[2, 1, 0], [5, 4, 3]] and dp["mask"].tolist() == [[4, 2, 0], [10, 8, 6]]
    assert dp["points"].tolist() == [[3.0, 1.0]]
    assert source[0]["image"] is image and image.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_copy_protects_the_input_unless_turned_off():
    class AddOneInPlace(imgaug.ImageAugmentor):
        """An old-style augmentor that changes its input in place (allowed when copy=False)."""

        def _augment(self, img, _):
            img += 1
            return img

    source = [[np.zeros((2, 2), np.uint8)]]
    df = AugmentImageComponent(DataFromList(source, shuffle=False), [AddOneInPlace()])
    df.reset_state()
    assert [dp[0].tolist() for dp in df] == [[[1, 1], [1, 1]]]
    assert source[0][0].tolist() == [[0, 0], [0, 0]]
    df = AugmentImageComponent(DataFromList(source, shuffle=False), [AddOneInPlace()], copy=False)
    df.reset_state()
    list(df)
    assert source[0][0].tolist() == [[1, 1], [1, 1]]   # tensorpack's documented copy=False behaviour


def fail_on_odd():
    """A new-style augmentor that raises for images whose first pixel is odd."""
    class FailOnOdd(imgaug.ImageAugmentor):
        def get_transform(self, img):
            if int(img.flat[0]) % 2:
                raise ValueError("odd first pixel {}".format(int(img.flat[0])))
            return imgaug.NoOpTransform()

    return FailOnOdd()


def _numbered(count):
    return [[np.full((2, 2), i % 256, np.uint8), i] for i in range(count)]


@pytest.mark.parametrize("make", [
    lambda ds, catch: AugmentImageComponent(ds, [fail_on_odd()], catch_exceptions=catch),
    lambda ds, catch: AugmentImageComponents(ds, [fail_on_odd()], index=(0,), catch_exceptions=catch),
])
def test_caught_failures_skip_the_datapoint_with_rate_limited_warnings(make, caplog):
    df = make(DataFromList(_numbered(500), shuffle=False), True)
    df.reset_state()
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        labels = [dp[1] for dp in df]
    assert labels == [i for i in range(500) if i % 256 % 2 == 0]
    failures = 500 - len(labels)
    assert failures == 250
    warnings = [r for r in caplog.records if "skipped a datapoint whose augmentation failed" in r.getMessage()]
    # the first nine failures, then every hundredth (100, 200)
    assert len(warnings) == 11
    assert "(1 failure so far): ValueError: odd first pixel 1" in warnings[0].getMessage()
    assert "(200 failures so far)" in warnings[-1].getMessage()
    assert warnings[0].exc_info is not None
    df = make(DataFromList(_numbered(3), shuffle=False), False)
    df.reset_state()
    with pytest.raises(ValueError, match="odd first pixel 1"):
        list(df)


def test_a_transform_that_returns_none_drops_the_datapoint():
    df = AugmentImageComponent(DataFromList(_numbered(4), shuffle=False),
                               [imgaug.MapImage(lambda img: None if img.flat[0] == 2 else img)])
    df.reset_state()
    assert [dp[1] for dp in df] == [0, 1, 3]


def test_bad_components_are_errors_naming_the_component():
    image = np.zeros((4, 4, 3), np.uint8)
    df = AugmentImageCoordinates(DataFromList([[image, np.zeros((2, 2), np.int32)]], shuffle=False),
                                 [imgaug.Flip(horiz=True)])
    df.reset_state()
    with pytest.raises(ValueError, match=r"AugmentImageCoordinates: coordinates component 1 must be a floating point "
                                         r"array of shape \(N, 2\) with rows \(x, y\), got an array of shape \(2, 2\) "
                                         r"and dtype int32"):
        list(df)
    df = AugmentImageCoordinates(DataFromList([{"im": image, "pts": np.zeros((2, 3), np.float32)}], shuffle=False),
                                 [imgaug.Flip(horiz=True)], img_index="im", coords_index="pts")
    df.reset_state()
    with pytest.raises(ValueError, match=r"coordinates component 'pts' .* got an array of shape \(2, 3\)"):
        list(df)
    df = AugmentImageComponent(DataFromList([["not an image"]], shuffle=False), [imgaug.Flip(horiz=True)],
                               catch_exceptions=True)
    df.reset_state()
    with pytest.raises(TypeError, match=r"AugmentImageComponent \(component 0\): expected an image as a numpy "
                                        r"array \(HW or HWC\), got str"):
        list(df)   # checked before augmenting, so raised even with catch_exceptions (as in tensorpack)
    with pytest.raises(ValueError, match="AugmentImageComponents: index must name at least one image component"):
        AugmentImageComponents(DataFromList([[image]]), [imgaug.Flip(horiz=True)], index=())


def test_wrong_coordinates_with_catch_exceptions_skip_and_warn(caplog):
    image = np.zeros((4, 4, 3), np.uint8)
    df = AugmentImageCoordinates(DataFromList([[image, [[1.0, 2.0]]], [image, np.ones((1, 2), np.float64)]],
                                              shuffle=False), [imgaug.Flip(horiz=True, prob=1.0)],
                                 catch_exceptions=True)
    df.reset_state()
    with caplog.at_level(logging.WARNING, logger="inputpipe"):
        out = list(df)
    assert len(out) == 1 and out[0][1].tolist() == [[3.0, 1.0]]
    assert "got a list" in caplog.records[0].getMessage()


def test_reset_state_gives_the_augmentors_fresh_reproducible_rngs():
    def run():
        augs = [imgaug.Flip(horiz=True), imgaug.RandomCrop((4, 5)), imgaug.Brightness(20)]
        df = AugmentImageComponent(DataFromList([[im, i] for i, im in enumerate(images())], shuffle=False), augs)
        df.reset_state()
        return fingerprint(list(df))

    try:
        seeding.set_global_seed(11)
        first = run()
        seeding.set_global_seed(11)
        assert run() == first
        seeding.set_global_seed(12)
        assert run() != first
    finally:
        seeding.set_global_seed(None)


def test_augmentor_list_is_used_as_given():
    augs = imgaug.AugmentorList([imgaug.Flip(horiz=True)])
    assert AugmentImageComponent(DataFromList([[1]]), augs).augs is augs
    wrapped = AugmentImageCoordinates(DataFromList([[1]]), [imgaug.Flip(horiz=True)]).augs
    assert isinstance(wrapped, imgaug.AugmentorList) and len(wrapped.augmentors) == 1


def test_image_from_file_matches_tensorpack(tmp_path):
    paths = make_image_files(str(tmp_path))
    given = list(paths)
    got = image_from_file_cases(flows, paths)
    for key, value in got.items():
        if key == "shuffled":
            # inputpipe's shuffle is its own stream: epoch e is a permutation drawn from (base seed, e),
            # so a restored state repeats it (tensorpack shuffles its list in place, cumulatively);
            # tests/test_resume_flows_sources.py checks the epochs are permutations and resume exactly.
            continue
        assert value == EXPECTED[key], key
    assert paths == given   # tensorpack shuffles the caller's list in place; inputpipe shuffles its own copy
    df = ImageFromFile(paths)
    df.reset_state()
    first = next(iter(df))[0]
    assert first.flags["C_CONTIGUOUS"] and first.dtype == np.uint8 and len(df) == 3


def test_image_from_file_errors(tmp_path):
    with pytest.raises(ValueError, match="ImageFromFile: expected a non-empty list of image files, got an empty list"):
        ImageFromFile([])
    with pytest.raises(ValueError, match="ImageFromFile: channel must be 1 or 3, got 4"):
        ImageFromFile(["a.png"], channel=4)
    with pytest.raises(ValueError, match=r"ImageFromFile: expected a shape as an int or an \(h, w\) pair"):
        ImageFromFile(["a.png"], resize=(1, 2, 3))
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    df = ImageFromFile([str(bad)])
    df.reset_state()
    with pytest.raises(OSError, match=r"ImageFromFile: cannot read the image file '.*bad.png'"):
        list(df)


def test_missing_opencv_is_a_one_line_install_hint(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(ImportError, match=r'ImageFromFile needs OpenCV.*pip install "inputpipe\[image\]"'):
        ImageFromFile(["a.png"])


def test_importing_dataflow_imports_neither_opencv_nor_tensorflow():
    import subprocess
    import sys

    code = ("import sys, inputpipe.dataflow; "
            "print('cv2' in sys.modules, 'tensorflow' in sys.modules, 'inputpipe.dataflow.imgaug' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False", "False"], out.stderr


# --------------------------------------------------------------------------------------------
# Printing EXPECTED with tensorpack (run: /opt/tpvenv/bin/python tests/test_image_components.py)
# --------------------------------------------------------------------------------------------

def _print_tensorpack_expected():  # pragma: no cover - a tool, run under tensorpack's interpreter
    import tempfile

    import tensorpack.dataflow as tpflows
    import tensorpack.dataflow.image as tpimage
    from tensorpack.dataflow import imgaug as tpaug

    def validate_coords(coords):  # tensorpack's check with np.float (gone in numpy 2) as np.floating
        assert coords.ndim == 2, coords.ndim
        assert coords.shape[1] == 2, coords.shape
        assert np.issubdtype(coords.dtype, np.floating), coords.dtype

    tpimage.validate_coords = validate_coords
    out = {}
    for name in CASES:
        out[name] = fingerprint(run_case(name, tpaug, tpflows))
    with tempfile.TemporaryDirectory() as tmp:
        out.update(image_from_file_cases(tpflows, make_image_files(tmp)))
    for key, value in out.items():
        print("    {!r}: {!r},".format(key, value))


if __name__ == "__main__":  # pragma: no cover
    _print_tensorpack_expected()
