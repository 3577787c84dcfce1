"""Make the pixel fixtures that tests/test_imgaug_photo_pixels.py compares inputpipe against.

Runs under tensorpack 0.11's environment, not inputpipe's:

    /opt/tpvenv/bin/python tests/data/imgaug_photo/make_fixtures.py

For every case (an augmentor constructor expression and an input image) it gives the augmentor
a RandomState with a fixed seed, augments the input a few times and stores the outputs, so the
test can give inputpipe's augmentor the same RandomState and expect the same pixels. Writes
fixtures.npz next to this script.
"""
import json
import os

import cv2
import numpy as np
from tensorpack.dataflow import imgaug

DRAWS = 2
HERE = os.path.dirname(os.path.abspath(__file__))

# ImageNet's PCA (fb.resnet.torch), as a tensorpack user passes it to Lighting.
EIGVAL = "np.asarray([0.2175, 0.0188, 0.0045]) * 255"
EIGVEC = "[[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]]"

CASES = [  # (constructor expression, input name)
    ("imgaug.Hue((0, 180), rgb=True)", "u8"),
    ("imgaug.Hue((0, 180), rgb=True)", "f32"),
    ("imgaug.Hue((-10, 10), rgb=False)", "u8"),
    ("imgaug.Brightness(30)", "u8"),
    ("imgaug.Brightness(30)", "f32"),
    ("imgaug.Brightness(300, clip=False)", "f32"),
    ("imgaug.Brightness(10)", "gray"),
    ("imgaug.BrightnessScale((0.5, 1.5))", "u8"),
    ("imgaug.BrightnessScale((0.5, 2.0), clip=False)", "f32"),
    ("imgaug.Contrast((0.5, 1.5))", "u8"),
    ("imgaug.Contrast((0.5, 1.5))", "f32"),
    ("imgaug.Contrast((0.5, 1.5), rgb=True)", "u8"),
    ("imgaug.Contrast((0.2, 2.0), rgb=False, clip=False)", "f32"),
    ("imgaug.Contrast((0.5, 1.5))", "gray"),
    ("imgaug.MeanVarianceNormalize()", "u8"),
    ("imgaug.MeanVarianceNormalize(all_channel=False)", "f32"),
    ("imgaug.GaussianBlur()", "u8"),
    ("imgaug.GaussianBlur((1, 4), (0.5, 2.0), symmetric=False)", "f32"),
    ("imgaug.GaussianBlur(3)", "gray1"),
    ("imgaug.Gamma()", "u8"),
    ("imgaug.Gamma((-0.3, 0.3))", "f32"),
    ("imgaug.Gamma()", "gray1"),
    ("imgaug.Clip(10, 200)", "wide"),
    ("imgaug.Clip()", "u8"),
    ("imgaug.Saturation()", "u8"),
    ("imgaug.Saturation(0.8, rgb=False, clip=False)", "f32"),
    ("imgaug.Lighting(0.1, {}, {})".format(EIGVAL, EIGVEC), "u8"),
    ("imgaug.Lighting(0.5, {}, {}, clip=False)".format(EIGVAL, EIGVEC), "f32"),
    ("imgaug.MinMaxNormalize()", "u8"),
    ("imgaug.MinMaxNormalize(-1, 1, all_channel=False)", "f32"),
    ("imgaug.JpegNoise()", "u8"),
    ("imgaug.JpegNoise((20, 30))", "f32"),
    ("imgaug.GaussianNoise()", "u8"),
    ("imgaug.GaussianNoise(5, clip=False)", "f32"),
    ("imgaug.GaussianNoise(3)", "gray"),
    ("imgaug.SaltPepperNoise()", "u8"),
    ("imgaug.SaltPepperNoise(0.2, 0.3)", "f32"),
    ("imgaug.ColorSpace(cv2.COLOR_BGR2HSV)", "u8"),
    ("imgaug.ColorSpace(cv2.COLOR_RGB2GRAY)", "u8"),
    ("imgaug.ColorSpace(cv2.COLOR_RGB2GRAY, keepdims=False)", "f32"),
    ("imgaug.ColorSpace(cv2.COLOR_BGR2Lab)", "f32"),
    ("imgaug.Grayscale()", "u8"),
    ("imgaug.Grayscale(rgb=True, keepshape=True)", "f32"),
    ("imgaug.Grayscale(keepdims=False)", "u8"),
    ("imgaug.ToUint8()", "wide"),
    ("imgaug.ToFloat32()", "u8"),
]

# Augmentor lists whose every augmentor gets its own seeded RandomState (see seed_tree).
CHAINS = [
    ("imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(target_shape=8), imgaug.RandomOrderAug(["
     "imgaug.BrightnessScale((0.6, 1.4), clip=False), imgaug.Contrast((0.6, 1.4), rgb=False, clip=False), "
     "imgaug.Saturation(0.4, rgb=False), imgaug.Lighting(0.1, ({})[::-1], np.asarray({})[::-1, ::-1])]), "
     "imgaug.Flip(horiz=True)])".format(EIGVAL, EIGVEC), "u8"),
    ("imgaug.AugmentorList([imgaug.ToFloat32(), imgaug.RandomOrderAug([imgaug.Hue((-20, 20)), "
     "imgaug.GaussianNoise(4), imgaug.Gamma((-0.2, 0.2))]), imgaug.GaussianBlur(2), imgaug.ToUint8()])", "u8"),
]


def seed_tree(aug, first_seed):
    """Give ``aug`` and every augmentor inside it (depth first) RandomState(first_seed + k)."""
    seed = first_seed
    pending = [aug]
    while pending:
        current = pending.pop(0)
        current.rng = np.random.RandomState(seed)
        seed += 1
        pending = list(getattr(current, "augmentors", None) or getattr(current, "aug_lists", None) or []) + pending
    return seed - first_seed


def make_inputs():
    """Small images with smooth structure plus noise (so blur, JPEG and contrast all do something)."""
    rng = np.random.RandomState(7)
    yy, xx = np.mgrid[0:10, 0:12]
    base = np.stack([xx * 20, yy * 25, (xx + yy) * 11], axis=2).astype(np.float64)
    u8 = np.clip(base + rng.randint(-30, 30, base.shape), 0, 255).astype(np.uint8)
    return {
        "u8": u8,
        "f32": u8.astype(np.float32) + rng.uniform(0, 1, u8.shape).astype(np.float32),
        "gray": u8[:, :, 1].copy(),
        "gray1": u8[:, :, 2:3].copy(),
        "wide": rng.uniform(-20, 280, u8.shape).astype(np.float32),
    }


def seed_of(index):
    return 1000 + index


def main():
    inputs = make_inputs()
    arrays = {"input_" + name: img for name, img in inputs.items()}
    for index, (expression, input_name) in enumerate(CASES):
        aug = eval(expression, {"imgaug": imgaug, "np": np, "cv2": cv2})
        aug.rng = np.random.RandomState(seed_of(index))
        for draw in range(DRAWS):
            arrays["case{}_draw{}".format(index, draw)] = aug.augment(inputs[input_name].copy())
    for index, (expression, input_name) in enumerate(CHAINS):
        aug = eval(expression, {"imgaug": imgaug, "np": np, "cv2": cv2})
        seed_tree(aug, 5000 + 100 * index)
        for draw in range(DRAWS * 2):
            arrays["chain{}_draw{}".format(index, draw)] = aug.augment(inputs[input_name].copy())
    arrays["cases"] = np.array(json.dumps({"cases": CASES, "draws": DRAWS, "seeds": [seed_of(i) for i in range(len(CASES))],
                                           "chains": CHAINS, "chain_draws": DRAWS * 2,
                                           "chain_seeds": [5000 + 100 * i for i in range(len(CHAINS))]}))
    out = os.path.join(HERE, "fixtures.npz")
    np.savez_compressed(out, **arrays)
    print("wrote", out, os.path.getsize(out), "bytes,", len(CASES), "cases")


if __name__ == "__main__":
    main()
