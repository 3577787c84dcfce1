"""Every augmentor on images a few pixels wide (1x1, 1xN, Nx1), for many seeds, as pixels and as
encoded bytes (JPEG, PNG) where it reads them, and planned for the graph decoder where it can be:
each gives a non-empty image of finite values, or refuses with a ValueError/TypeError naming
itself and the shape it got; never an OpenCV error, a ZeroDivisionError or an empty image from
inside. GoogleNetRandomCropAndResize falls back to tensorpack's ResizeShortestEdge + CenterCrop
when no window of at least one pixel fits."""
import logging

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from inputpipe.dataflow import imgaug  # noqa: E402
from inputpipe.dataflow.imgaug.crop_plan import plan_crop  # noqa: E402
from test_imgaug_odd_inputs import AUGMENTORS, _ready  # noqa: E402

pytestmark = pytest.mark.timeout(120)

# The augmentors whose choices depend on the size, with the arguments that make them shrink,
# scale or turn a tiny image (name -> (factory, the name its errors carry)).
SIZE_SENSITIVE = {
    "GoogleNetRandomCropAndResize(224)": (lambda: imgaug.GoogleNetRandomCropAndResize(), "GoogleNetRandomCropAndResize"),
    "RandomResize(scale < 1)": (lambda: imgaug.RandomResize((0.3, 0.6), (0.3, 0.6)), "RandomResize"),
    "RandomResize(scale < 1, same ratio)": (lambda: imgaug.RandomResize((0.3, 0.6), aspect_ratio_thres=0),
                                            "RandomResize"),
    "RandomResize(pixels from 0)": (lambda: imgaug.RandomResize((0, 3), (0, 3), aspect_ratio_thres=0.5),
                                    "RandomResize"),
    "RotationAndCropValid(3)": (lambda: imgaug.RotationAndCropValid(3), "RotationAndCropValid"),
    "RotationAndCropValid(180, step 90)": (lambda: imgaug.RotationAndCropValid(180, step_deg=90),
                                           "RotationAndCropValid"),
    "ResizeShortestEdge(224)": (lambda: imgaug.ResizeShortestEdge(224), "ResizeShortestEdge"),
    "RandomCropRandomShape(1, 1)": (lambda: imgaug.RandomCropRandomShape(1, 1), "RandomCropRandomShape"),
    "RandomCutout((1, 3), (1, 3))": (lambda: imgaug.RandomCutout((1, 3), (1, 3)), "RandomCutout"),
    "Rotation(180)": (lambda: imgaug.Rotation(180), "Rotation"),
    "Shift(0.9, 0.9)": (lambda: imgaug.Shift(0.9, 0.9), "Shift"),
    "Affine(everything)": (lambda: imgaug.Affine(scale=(0.1, 3.0), translate_frac=(0.9, 0.9), rotate_max_deg=180,
                                                 shear=60), "Affine"),
    "GaussianDeform(1x1)": (lambda: imgaug.GaussianDeform([(0.5, 0.5)], (1, 1), sigma=0.2), "GaussianDeform"),
}
ALL = dict({name: (make, owner) for name, (make, owner, _) in AUGMENTORS.items()}, **SIZE_SENSITIVE)
SHAPES = [(1, 1, 3), (1, 2, 3), (2, 1, 3), (1, 9, 3), (9, 1, 3), (1, 1), (1, 9), (9, 1), (1, 1, 1), (1, 9, 4)]
SEEDS = range(12)


def _inputs(shape):
    pixels = np.random.RandomState(0).randint(0, 256, shape).astype(np.uint8)
    kinds = {"pixels": pixels, "float pixels": pixels.astype(np.float32)}
    if len(shape) == 3 and shape[2] == 3:
        kinds["jpeg bytes"] = cv2.imencode(".jpg", pixels)[1].tobytes()
        kinds["png bytes"] = cv2.imencode(".png", pixels)[1].tobytes()
    return kinds


def _owners(owner):
    return (owner,) if isinstance(owner, str) else owner


@pytest.fixture(autouse=True)
def quiet(caplog):
    caplog.set_level(logging.ERROR)      # GaussianDeform's and RandomResize's warnings


@pytest.mark.parametrize("name", list(ALL))
def test_tiny_images_work_or_the_error_names_the_augmentor_and_the_shape(name):
    make, owner = ALL[name]
    for shape in SHAPES:
        for kind, image in _inputs(shape).items():
            for seed in SEEDS:
                try:
                    out = _ready(make(), seed).augment(image)
                except (ValueError, TypeError) as err:
                    message = str(err)
                    assert message.split(":")[0] in _owners(owner), (kind, shape, seed, message)
                    assert str(tuple(shape)) in message, (kind, shape, seed, message)
                    continue
                assert isinstance(out, np.ndarray) and out.size > 0, (kind, shape, seed, getattr(out, "shape", out))
                assert out.ndim in (2, 3), (kind, shape, seed, out.shape)
                if out.dtype.kind == "f":
                    assert np.isfinite(out).all(), (kind, shape, seed)


@pytest.mark.parametrize("name", [name for name in ALL if getattr(ALL[name][0](), "reads_encoded", False)
                                  and name != "AugmentorList"])
def test_tiny_jpegs_are_planned_for_the_graph_decoder_or_refused_by_name(name):
    make, owner = ALL[name]
    for shape in SHAPES:
        if len(shape) != 3 or shape[2] != 3:
            continue
        data = _inputs(shape)["jpeg bytes"]
        for seed in SEEDS:
            try:
                plan = plan_crop([_ready(make(), seed)], data)
            except ValueError as err:
                assert str(err).split(":")[0] in _owners(owner) + ("plan_crop",), (shape, seed, str(err))
                assert "plan_crop" not in str(err).split(":")[0] or "does not choose" in str(err) or \
                    "only crops" in str(err), (shape, seed, str(err))
                continue
            y, x, h, w = plan.window
            assert 0 <= y and 0 <= x and h >= 1 and w >= 1 and y + h <= shape[0] and x + w <= shape[1], plan
            assert min(plan.size) >= 1, plan


@pytest.mark.parametrize("shape", [(1, 1, 3), (1, 2, 3), (2, 1, 3), (1, 1)])
def test_googlenet_crop_on_a_tiny_image_falls_back_to_tensorpacks_resize_and_center_crop(shape):
    pixels = np.random.RandomState(1).randint(0, 256, shape).astype(np.uint8)
    fallback = imgaug.AugmentorList([imgaug.ResizeShortestEdge(224), imgaug.CenterCrop(224)])
    expected = fallback.augment(pixels)
    for seed in range(40):
        out = _ready(imgaug.GoogleNetRandomCropAndResize(), seed).augment(pixels)
        assert out.shape == expected.shape == (224, 224) + shape[2:]
        if shape[:2] == (1, 1):                # no window of a pixel or more is ever drawn: always the fallback
            assert np.array_equal(out, expected)
    if len(shape) == 3:
        data = cv2.imencode(".png", pixels)[1].tobytes()
        for seed in range(40):
            assert np.array_equal(_ready(imgaug.GoogleNetRandomCropAndResize(), seed).augment(data),
                                  _ready(imgaug.GoogleNetRandomCropAndResize(), seed).augment(pixels))


def test_sizes_that_would_round_to_no_pixel_keep_one():
    for seed in range(20):
        out = _ready(imgaug.RandomResize((0.1, 0.2), aspect_ratio_thres=0), seed).augment(np.zeros((1, 30, 3), np.uint8))
        assert out.shape[0] == 1 and 3 <= out.shape[1] <= 6, out.shape
        turned = _ready(imgaug.RotationAndCropValid(40), seed).augment(np.arange(30, dtype=np.uint8).reshape(1, 30))
        assert turned.shape[0] == 1 and turned.shape[1] >= 1
    assert imgaug.RotationAndCropValid.largest_rotated_rect(30, 1, 0.0) == (30, 1)


def test_sizes_of_no_pixel_are_refused_when_the_augmentor_is_made():
    for make, message in [
            (lambda: imgaug.Resize((0, 4)), r"^Resize: shape must be at least \(1, 1\), got \(0, 4\)$"),
            (lambda: imgaug.ResizeShortestEdge(0), r"^ResizeShortestEdge: size must be >= 1 \(pixels\), got 0$"),
            (lambda: imgaug.GoogleNetRandomCropAndResize(target_shape=0),
             r"^GoogleNetRandomCropAndResize: target_shape must be an int >= 1 \(pixels\), got 0$"),
            (lambda: imgaug.ResizeTransform(4, 4, 0, 3, cv2.INTER_LINEAR),
             r"^ResizeTransform: the new size \(h, w\) must be at least \(1, 1\), got \(0, 3\)$")]:
        with pytest.raises(ValueError, match=message):
            make()


def test_an_empty_crop_of_encoded_bytes_is_called_empty_not_outside():
    data = cv2.imencode(".png", np.zeros((1, 1, 3), np.uint8))[1].tobytes()
    image = imgaug.EncodedImage(data, "MyCrop")
    with pytest.raises(ValueError, match=r"^MyCrop: the crop \(y0, x0, h, w\) = \(0, 0, 1, 0\) of the 1x1 image is "
                                         r"empty; an encoded image cannot become empty \(expected h and w >= 1\)$"):
        image.crop(0, 0, 1, 0)
    with pytest.raises(ValueError, match=r"^MyCrop: crop \(y0, x0, h, w\) = \(0, 1, 1, 1\) is outside the 1x1 image$"):
        image.crop(0, 1, 1, 1)


def test_a_resize_of_a_very_thin_image_past_the_pixel_limit_is_refused_before_any_allocation():
    """tensorpack's fallback (shortest edge to 224) makes a 1x100000 image 224 x 22400000: 5 GB."""
    from inputpipe.dataflow import image_limits
    thin = np.zeros((1, 100000, 3), np.uint8)
    for augmentor in (imgaug.GoogleNetRandomCropAndResize(), imgaug.ResizeShortestEdge(224)):
        with pytest.raises(image_limits.ImageTooLargeError,
                           match=r"^ResizeTransform: resizing an image of shape \(1, 100000\) \(h, w\) to "
                                 r"\(224, 22400000\) would make 5017600000 pixels, over the limit of 268435456"):
            _ready(augmentor, 0).augment(thin)
    assert imgaug.ResizeShortestEdge(224).augment(np.zeros((1, 300, 3), np.uint8)).shape == (224, 67200, 3)
