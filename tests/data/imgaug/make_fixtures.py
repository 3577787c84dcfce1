"""Make tensorpack_outputs.npz: tensorpack 0.11's augmentor outputs, for tests/test_imgaug_core_fixtures.py.

Run with the tensorpack side environment (not inputpipe's), once per OpenCV major:

    /opt/tpvenv/bin/python tests/data/imgaug/make_fixtures.py      # OpenCV 5: tensorpack_outputs.npz
    /tmp/tpci/bin/python tests/data/imgaug/make_fixtures.py        # OpenCV 4: tensorpack_outputs_opencv4.npz

(/tmp/tpci is made by ``.ci/tensorpack.sh install /tmp/tpci``: TF 2.15, numpy 1.x, OpenCV 4.11.)
OpenCV 4 and 5 interpolate differently in the last bit (resizes with INTER_LINEAR/INTER_CUBIC,
rotations and affine warps), and tensorpack's pixels are OpenCV's, so each major has its file:
the test compares with the one of the OpenCV it runs on.

Each case is (augmentor expression, image name, seed). The expression is evaluated with
``imgaug`` and ``cv2`` in scope, by this script under tensorpack and by the test under inputpipe.
With a seed, the augmentor's ``rng`` is replaced by ``numpy.random.RandomState(seed)`` before
drawing, so random augmentors that draw in tensorpack's order give the same pixels. The
transform is also applied to a few points (stored when tensorpack's transform has apply_coords).
"""
import json
import os
import sys

import cv2
import numpy as np
from tensorpack.dataflow import imgaug

HERE = os.path.dirname(os.path.abspath(__file__))
OPENCV_MAJOR = int(cv2.__version__.split(".")[0])
OUTPUT = os.path.join(HERE, "tensorpack_outputs.npz" if OPENCV_MAJOR >= 5 else
                      "tensorpack_outputs_opencv{}.npz".format(OPENCV_MAJOR))

# Points (x, y) in continuous image coordinates, inside a 13x17 image.
POINTS = np.array([[0.5, 0.5], [16.5, 0.5], [3.25, 9.75], [8.0, 6.0], [16.5, 12.5]], dtype=np.float32)

DETERMINISTIC = [
    ("Resize((7, 9))", ["rgb", "gray", "gray1", "float"]),
    ("Resize((20, 30), interp=cv2.INTER_CUBIC)", ["rgb", "float"]),
    ("Resize(10, interp=cv2.INTER_NEAREST)", ["gray1"]),
    ("Resize((6, 8), interp=cv2.INTER_AREA)", ["rgb"]),
    ("ResizeShortestEdge(8)", ["rgb", "gray", "gray1"]),
    ("ResizeShortestEdge(20, interp=cv2.INTER_CUBIC)", ["float"]),
    ("CenterCrop((6, 8))", ["rgb", "gray", "gray1", "float"]),
    ("CenterCrop(5)", ["rgb"]),
    ("Flip(horiz=True, prob=1.0)", ["rgb", "gray", "gray1", "float"]),
    ("Flip(vert=True, prob=1.0)", ["rgb", "gray1"]),
    ("Transpose(prob=1.0)", ["rgb", "gray", "gray1", "float"]),
    ("CenterPaste((20, 25))", ["rgb", "gray", "gray1", "float"]),
    ("CenterPaste((16, 20), imgaug.ConstantBackgroundFiller(7))", ["rgb", "gray"]),
    ("Identity()", ["rgb"]),
    ("AugmentorList([imgaug.ResizeShortestEdge(10), imgaug.CenterCrop(8), imgaug.Flip(horiz=True, prob=1.0)])",
     ["rgb", "gray1"]),
]

SEEDED = [
    ("RandomCrop((5, 7))", ["rgb", "gray"], [1, 2, 3]),
    ("Flip(horiz=True)", ["rgb"], [1, 2, 3, 4]),
    ("Transpose()", ["gray1"], [1, 2, 3]),
    ("Shift(0.2, 0.3)", ["rgb", "gray1"], [1, 2]),
    ("Shift(0.2, 0.3, border=cv2.BORDER_CONSTANT, border_value=5)", ["rgb"], [3]),
    ("Rotation(30)", ["rgb", "gray", "gray1", "float"], [1, 2]),
    ("Rotation(25, center_range=(0.3, 0.6), interp=cv2.INTER_NEAREST, border=cv2.BORDER_CONSTANT, "
     "border_value=9)", ["rgb"], [4]),
    ("Rotation(180, center_range=(0.5, 0.5), step_deg=90)", ["rgb"], [1, 2, 3, 4, 5]),
    ("RotationAndCropValid(30)", ["rgb", "gray1"], [1, 2]),
    ("RotationAndCropValid(180, step_deg=45)", ["rgb"], [1, 2, 3]),
    ("Affine(scale=(0.8, 1.2), translate_frac=(0.1, 0.2), rotate_max_deg=20, shear=10)", ["rgb", "gray1"], [1, 2]),
    ("Affine(rotate_max_deg=15, border=cv2.BORDER_REFLECT)", ["float"], [3]),
    ("GoogleNetRandomCropAndResize(target_shape=8)", ["rgb", "gray1"], [1, 2, 3]),
    ("GoogleNetRandomCropAndResize(crop_area_fraction=(0.95, 1.0), aspect_ratio_range=(3.0, 4.0), "
     "target_shape=8)", ["rgb"], [1]),
    ("RandomResize((0.5, 1.5), (0.5, 1.5))", ["rgb"], [1, 2]),
    ("RandomResize((8, 20), (8, 20), aspect_ratio_thres=0.3)", ["gray"], [1, 2]),
    ("RandomResize((0.5, 2.0), aspect_ratio_thres=0)", ["rgb"], [3]),
    ("RandomApplyAug(imgaug.Flip(horiz=True, prob=1.0), 0.5)", ["rgb"], [1, 2, 3, 4]),
    ("RandomChooseAug([imgaug.Flip(horiz=True, prob=1.0), imgaug.Flip(vert=True, prob=1.0)])", ["rgb"], [1, 2, 3]),
    ("RandomChooseAug([(imgaug.Flip(horiz=True, prob=1.0), 0.2), (imgaug.Transpose(prob=1.0), 0.8)])", ["gray"],
     [1, 2, 3]),
    ("RandomOrderAug([imgaug.CenterCrop((13, 13)), imgaug.Flip(vert=True, prob=1.0)])", ["rgb"], [1, 2]),
]


def _patch_rotation_matrix():
    """tensorpack's Affine passes 0-d float32 arrays as angle and scale, which OpenCV 5 rejects
    ("can not be safely parsed to 'double'"); convert them as older OpenCV did."""
    original = cv2.getRotationMatrix2D

    def get_rotation_matrix_2d(center, angle, scale):
        return original(tuple(float(c) for c in center), float(angle), float(scale))

    cv2.getRotationMatrix2D = get_rotation_matrix_2d


def make_images():
    rs = np.random.RandomState(0)
    rgb = rs.randint(0, 256, size=(13, 17, 3)).astype(np.uint8)
    return {"rgb": rgb, "gray": rgb[:, :, 0].copy(), "gray1": rgb[:, :, 1:2].copy(),
            "float": rs.rand(13, 17, 3).astype(np.float32)}


def main():
    _patch_rotation_matrix()
    images = make_images()
    arrays = {"image_" + name: img for name, img in images.items()}
    arrays["points"] = POINTS
    cases = []
    for expr, names in DETERMINISTIC:
        for name in names:
            cases.append((expr, name, None))
    for expr, names, seeds in SEEDED:
        for name in names:
            for seed in seeds:
                cases.append((expr, name, seed))
    for index, (expr, name, seed) in enumerate(cases):
        aug = eval("imgaug." + expr, {"imgaug": imgaug, "cv2": cv2})
        if seed is not None:
            aug.rng = np.random.RandomState(seed)
        img = images[name].copy()
        tfm = aug.get_transform(img)
        out = tfm.apply_image(img)
        arrays["out_{}".format(index)] = out
        try:
            arrays["coords_{}".format(index)] = tfm.apply_coords(POINTS.copy())
        except NotImplementedError:
            pass
    arrays["cases"] = np.array(json.dumps(cases))
    np.savez_compressed(OUTPUT, **arrays)
    print("{} cases, {} bytes -> {}".format(len(cases), os.path.getsize(OUTPUT), OUTPUT), file=sys.stderr)


if __name__ == "__main__":
    main()
