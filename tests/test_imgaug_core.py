"""The augmentor protocol (old and new API), the geometric augmentors, coordinates, errors and OpenCV as an extra."""
import inspect
import re
import subprocess
import sys

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
from inputpipe.dataflow import imgaug  # noqa: E402
from inputpipe.dataflow.imgaug import base, crop, deform, geometry, meta, misc, paste, transform  # noqa: E402

MY_MODULES = [base, transform, meta, misc, crop, paste, geometry, deform]

TENSORPACK_NAMES = [  # tensorpack 0.11's ``imgaug`` namespace (each module's __all__)
    "Augmentor", "ImageAugmentor", "AugmentorList", "PhotometricAugmentor", "ColorSpace", "Grayscale", "ToUint8",
    "ToFloat32", "RandomCrop", "CenterCrop", "RandomCropRandomShape", "GoogleNetRandomCropAndResize", "RandomCutout",
    "IAAugmentor", "Albumentations", "Shift", "Rotation", "RotationAndCropValid", "Affine", "Hue", "Brightness",
    "BrightnessScale", "Contrast", "MeanVarianceNormalize", "GaussianBlur", "Gamma", "Clip", "Saturation", "Lighting",
    "MinMaxNormalize", "RandomChooseAug", "MapImage", "Identity", "RandomApplyAug", "RandomOrderAug", "Flip",
    "Resize", "RandomResize", "ResizeShortestEdge", "Transpose", "JpegNoise", "GaussianNoise", "SaltPepperNoise",
    "CenterPaste", "BackgroundFiller", "ConstantBackgroundFiller", "RandomPaste", "Transform", "ResizeTransform",
    "CropTransform", "FlipTransform", "TransformList", "TransformFactory",
]


def _marked(shape, y, x, dtype=np.uint8):
    img = np.zeros(shape, dtype)
    img[y, x] = 255
    return img


def _brightest(img):
    flat = img if img.ndim == 2 else img.max(axis=2)
    return np.unravel_index(np.argmax(flat), flat.shape)


def _seeded(aug, seed):
    aug.rng = np.random.RandomState(seed)
    return aug


# ----------------------------------------------------------------------------------- names and docs

def test_every_tensorpack_name_and_module_path_exists():
    missing = [name for name in TENSORPACK_NAMES if not hasattr(imgaug, name)]
    assert missing == []
    assert set(TENSORPACK_NAMES) <= set(imgaug.__all__)
    assert imgaug.Augmentor is imgaug.ImageAugmentor
    assert transform.TransformAugmentorBase is imgaug.ImageAugmentor
    for module, names in [(transform, ["WarpAffineTransform", "TransposeTransform", "NoOpTransform",
                                       "PhotometricTransform", "LazyTransform", "BaseTransform"]),
                          (base, ["ImagePlaceholder"]), (deform, ["GaussianDeform", "GaussianMap", "np_sample"])]:
        assert all(hasattr(module, name) for name in names)


def _examples(module):
    objects = [module] + [obj for _, obj in inspect.getmembers(module) if getattr(obj, "__module__", None)
                          == module.__name__ and (inspect.isclass(obj) or inspect.isfunction(obj))]
    for obj in objects:
        doc = inspect.getdoc(obj) or ""
        match = re.search(r"Example::\n\n((?:    .*\n|\n)+)", doc + "\n")
        if match:
            yield "{}.{}".format(module.__name__, getattr(obj, "__name__", "")), \
                "\n".join(line[4:] for line in match.group(1).splitlines())


EXAMPLES = [example for module in MY_MODULES for example in _examples(module)]


def test_every_public_class_has_an_example():
    documented = {name.rsplit(".", 1)[1] for name, _ in EXAMPLES}
    for module in MY_MODULES:
        for name in module.__all__:
            cls = getattr(module, name)
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and cls.__name__ == name:
                assert name in documented, "{}.{} has no Example".format(module.__name__, name)


@pytest.mark.parametrize("name,code", EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_docstring_example_runs(name, code):
    exec(compile(code, name, "exec"), {})


# ----------------------------------------------------------------------------------- OpenCV as an extra

def test_import_without_opencv_and_a_one_line_error_when_building():
    code = """
import sys
sys.modules["cv2"] = None
from inputpipe.dataflow import imgaug
aug = imgaug.Flip(horiz=True, prob=1.0)      # needs no OpenCV
assert aug.augment(__import__("numpy").arange(3).reshape(1, 3)).tolist() == [[2, 1, 0]]
try:
    imgaug.Resize(4)
except ImportError as err:
    print(err)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Resize needs OpenCV")
    assert lines[0].endswith('install it with: pip install "inputpipe[image]"')


@pytest.mark.parametrize("build", [lambda: imgaug.Resize(4), lambda: imgaug.ResizeShortestEdge(4),
                                   lambda: imgaug.RandomResize((0.5, 1.0), aspect_ratio_thres=0),
                                   lambda: imgaug.Transpose(), lambda: imgaug.Shift(0.1, 0.1),
                                   lambda: imgaug.Rotation(10), lambda: imgaug.RotationAndCropValid(10),
                                   lambda: imgaug.Affine(), lambda: imgaug.GoogleNetRandomCropAndResize(),
                                   lambda: imgaug.ResizeTransform(2, 2, 1, 1, 1),
                                   lambda: imgaug.WarpAffineTransform(np.eye(2, 3), (2, 2))])
def test_augmentors_needing_opencv_say_how_to_install_it(monkeypatch, build):
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(ImportError, match=r'needs OpenCV.*pip install "inputpipe\[image\]"$'):
        build()


def test_flag_constants_equal_opencv():
    from inputpipe.dataflow._image import opencv as _cv2

    for name in ["INTER_NEAREST", "INTER_LINEAR", "INTER_CUBIC", "INTER_AREA", "INTER_LANCZOS4", "BORDER_CONSTANT",
                 "BORDER_REPLICATE", "BORDER_REFLECT", "BORDER_WRAP", "BORDER_REFLECT_101"]:
        assert getattr(_cv2, name) == getattr(cv2, name), name


# ----------------------------------------------------------------------------------- the protocol

class Doubler(imgaug.ImageAugmentor):
    """New style."""

    def __init__(self, factor=2.0, name="d"):
        super().__init__()
        self._init(locals())

    def get_transform(self, img):
        return imgaug.PhotometricTransform(lambda im: im * self.factor, "double")


class LegacyShift(imgaug.ImageAugmentor):
    """Old style with coordinates: shift right by a random whole number of pixels (wrapping)."""

    def __init__(self, max_shift):
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, img):
        return int(self.rng.randint(1, self.max_shift + 1)), img.shape[1]

    def _augment(self, img, params):
        return np.roll(img, params[0], axis=1)

    def _augment_coords(self, coords, params):
        shift, width = params
        coords[:, 0] = (coords[:, 0] + shift) % width
        return coords


class LegacyAddRandom(imgaug.ImageAugmentor):
    """Old style without coordinates."""

    def __init__(self, delta):
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, _):
        return self._rand_range(-self.delta, self.delta)

    def _augment(self, img, value):
        return img + value


def test_init_stores_arguments_and_repr_shows_those_not_default():
    aug = Doubler(3.0)
    assert aug.factor == 3.0 and aug.name == "d"
    assert not hasattr(aug, "self") and not hasattr(aug, "__class__ ") and "__class__" not in vars(aug)
    assert repr(aug) == "imgaug.Doubler(factor=3.0)"
    assert str(imgaug.Flip(horiz=True, prob=1.0)) == "imgaug.Flip(horiz=True, prob=1.0)"
    assert repr(imgaug.Rotation(10)) == "imgaug.Rotation(max_deg=10)"
    assert repr(imgaug.AugmentorList([imgaug.Identity(), Doubler()])) == \
        "imgaug.AugmentorList([\n  imgaug.Identity(),\n  imgaug.Doubler()])"


def test_rand_range_matches_tensorpacks_formula():
    aug = _seeded(Doubler(), 5)
    got = [aug._rand_range(), aug._rand_range(3), aug._rand_range(-2, 2), aug._rand_range(0, 1, (2,))]
    rs = np.random.RandomState(5)
    want = [rs.uniform(0, 1.0, []), rs.uniform(0, 3, []), rs.uniform(-2, 2, []), rs.uniform(0, 1, (2,))]
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_array_equal(g, np.asarray(w).astype(np.float32))


def test_new_style_answers_the_old_calls():
    aug = Doubler()
    img = np.full((2, 3), 2.0, np.float32)
    out, params = aug.augment_return_params(img)
    assert out.tolist() == [[4.0] * 3] * 2
    assert isinstance(params, imgaug.Transform)
    assert aug.augment_with_params(np.ones((1, 1)), params).tolist() == [[2.0]]
    assert aug.augment_coords(np.array([[1.0, 2.0]]), params).tolist() == [[1.0, 2.0]]


def test_old_style_answers_get_transform_and_the_old_calls():
    aug = _seeded(LegacyShift(3), 0)
    img = np.arange(10, dtype=np.float32).reshape(1, 10)
    tfm = aug.get_transform(img)
    out = tfm.apply_image(img)
    shift = int(np.argmax(out == 0))
    assert 1 <= shift <= 3 and out.tolist() == [np.roll(img[0], shift).tolist()]
    assert tfm.apply_coords(np.array([[9.0, 0.0]])).tolist() == [[(9.0 + shift) % 10, 0.0]]
    assert "LegacyConversion -- imgaug.LegacyShift(max_shift=3)" in repr(tfm)
    # old calls, params from augment_return_params
    out2, params = aug.augment_return_params(img)
    assert np.array_equal(aug.augment_with_params(img, params), out2)
    # old calls with the raw params an old-style _get_augment_params returns (pre-0.10 code)
    assert aug.augment_with_params(img, (2, 10)).tolist() == [np.roll(img[0], 2).tolist()]
    assert aug.augment_coords(np.array([[9.0, 1.0]]), (2, 10)).tolist() == [[1.0, 1.0]]


def test_old_style_without_coords_leaves_coordinates_unchanged():
    tfm = LegacyAddRandom(0.5).get_transform(np.zeros((2, 2), np.float32))
    assert tfm.apply_coords(np.array([[1.0, 1.5]])).tolist() == [[1.0, 1.5]]


class ShortEdgeTo(transform.TransformAugmentorBase):
    """tensorpack 0.9's style (FasterRCNN's CustomResize): _get_augment_params returns a Transform,
    there is no _augment."""

    def __init__(self, size):
        self._init(locals())

    def _get_augment_params(self, img):
        h, w = img.shape[:2]
        scale = self.size / min(h, w)
        return transform.ResizeTransform(h, w, int(h * scale + 0.5), int(w * scale + 0.5), cv2.INTER_NEAREST)


def test_an_old_augmentor_that_draws_a_transform_needs_no_augment_method():
    aug = imgaug.AugmentorList([ShortEdgeTo(5), imgaug.Flip(horiz=True, prob=1.0)])
    img = np.arange(20 * 10, dtype=np.float32).reshape(20, 10)
    out, params = aug.augment_return_params(img)
    assert out.shape == (10, 5)
    assert np.array_equal(out, cv2.resize(img, (5, 10), interpolation=cv2.INTER_NEAREST)[:, ::-1])
    # the box corners follow: x scales by 0.5 then flips in a width of 5, y scales by 0.5
    assert aug.augment_coords(np.array([[2.0, 4.0]], np.float32), params).tolist() == [[4.0, 2.0]]


def test_an_old_augmentor_whose_params_are_no_transform_needs_augment():
    class ParamsOnly(imgaug.ImageAugmentor):
        def _get_augment_params(self, img):
            return 3

    with pytest.raises(NotImplementedError, match=r"ParamsOnly._get_augment_params returned a int, not a Transform, "
                                                  r"and ParamsOnly has no _augment\(img, params\) to apply it"):
        ParamsOnly().augment(np.zeros((2, 2)))


def test_an_augmentor_with_neither_api_says_so():
    class Nothing(imgaug.ImageAugmentor):
        pass

    with pytest.raises(NotImplementedError, match="Nothing implements neither get_transform"):
        Nothing().augment(np.zeros((2, 2)))


def test_old_and_new_style_mixed_in_one_list_both_ways():
    augs = imgaug.AugmentorList([LegacyShift(3), imgaug.Flip(horiz=True, prob=1.0), LegacyAddRandom(0.5),
                                 imgaug.Resize((2, 20), interp=cv2.INTER_NEAREST)])
    augs.reset_state()
    img = np.arange(10, dtype=np.float32).reshape(1, 10)
    tfm = augs.get_transform(img)
    out = tfm.apply_image(img.copy())
    assert out.shape == (2, 20)
    assert np.array_equal(tfm.apply_image(img.copy()), out)     # deterministic once made
    # the old calls give the same as the transform they return
    out2, params = augs.augment_return_params(img.copy())
    assert np.array_equal(augs.augment_with_params(img.copy(), params), out2)
    # coordinates: pixel x=0's centre moves with the roll, the flip and the resize
    shift = int(np.argmax(params.tfms[0].apply_image(img) == 0))
    moved = augs.augment_coords(np.array([[0.5, 0.5]]), params)
    assert moved.tolist() == [[(10 - (0.5 + shift)) * 2, 1.0]]


def test_lazy_transforms_need_an_image_first():
    tfm = imgaug.AugmentorList([imgaug.Identity(), imgaug.CenterCrop(1)]).get_transform(np.zeros((3, 3)))
    with pytest.raises(RuntimeError, match="apply_coords called before apply_image"):
        tfm.apply_coords(np.zeros((1, 2)))
    tfm.apply_image(np.zeros((3, 3)))
    assert tfm.apply_coords(np.array([[1.5, 1.5]])).tolist() == [[0.5, 0.5]]


def test_photometric_augmentor_wraps_the_old_methods():
    class Add(imgaug.PhotometricAugmentor):
        def __init__(self):
            super().__init__()

        def _get_augment_params(self, img):
            return self.rng.randint(1, 100)

        def _augment(self, img, value):
            return img + value

    aug = Add()
    tfm = aug.get_transform(np.zeros(2))
    first = tfm.apply_image(np.zeros(2))
    assert isinstance(tfm, imgaug.PhotometricTransform) and 1 <= first[0] <= 99
    assert np.array_equal(tfm.apply_image(np.zeros(2)), first)
    assert repr(tfm) == "imgaug.PhotometricTransform(from imgaug.Add())"


def test_transform_list_arithmetic_and_missing_methods():
    crop_, flip = imgaug.CropTransform(0, 0, 1, 1), imgaug.FlipTransform(1, 1)
    joined = crop_ + imgaug.TransformList([flip])
    assert isinstance(joined, imgaug.TransformList) and joined.tfms == [crop_, flip]
    joined += crop_
    assert len(joined.tfms) == 3
    with pytest.raises(NotImplementedError, match="CropTransform does not implement apply_mask"):
        crop_.apply_mask(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="expected Transform objects"):
        imgaug.TransformList([crop_, "flip"])
    with pytest.raises(KeyError, match="expected apply_\\* functions"):
        imgaug.TransformFactory(name="x", image=lambda img: img)


def test_bad_inputs_name_the_component():
    with pytest.raises(ValueError, match=r"RandomCrop: crop of \(h, w\) = \(5, 5\) does not fit in an image of "
                                         r"shape \(4, 6, 3\)"):
        imgaug.RandomCrop(5).augment(np.zeros((4, 6, 3), np.uint8))
    with pytest.raises(ValueError, match=r"CenterCrop: crop of \(h, w\) = \(2, 7\) does not fit"):
        imgaug.CenterCrop((2, 7)).augment(np.zeros((4, 6), np.uint8))
    with pytest.raises(ValueError, match=r"CenterPaste: an image of shape \(4, 6\) does not fit on a canvas of "
                                         r"\(h, w\) = \(3, 8\)"):
        imgaug.CenterPaste((3, 8)).augment(np.zeros((4, 6), np.uint8))
    with pytest.raises(TypeError, match="Flip: expected an image as a numpy array .* got list"):
        imgaug.Flip(horiz=True).augment([[1, 2]])
    with pytest.raises(ValueError, match=r"^AugmentorList: expected an HW or HWC image, got an array of shape \(2,\) "
                                         r"and dtype float64$"):
        imgaug.AugmentorList([imgaug.Identity()]).augment(np.zeros(2))
    with pytest.raises(ValueError, match="Flip: horiz and vert cannot both be True"):
        imgaug.Flip(horiz=True, vert=True)
    with pytest.raises(ValueError, match="Flip: one of horiz or vert must be True"):
        imgaug.Flip()
    with pytest.raises(ValueError, match="Rotation: step_deg needs max_deg == 180"):
        imgaug.Rotation(90, step_deg=45)
    with pytest.raises(ValueError, match=r"ResizeTransform: made for images of shape \(2, 3\)"):
        imgaug.ResizeTransform(2, 3, 4, 4, cv2.INTER_LINEAR).apply_image(np.zeros((3, 3)))
    with pytest.raises(TypeError, match="Resize: expected the params returned by augment_return_params"):
        imgaug.Resize(2).augment_with_params(np.zeros((3, 3)), (2, 2))
    with pytest.raises(ValueError, match="Affine: scale must be a tuple"):
        imgaug.Affine(scale=[0.9, 1.1])
    with pytest.raises(ValueError, match="RandomChooseAug: expected at least one augmentor"):
        imgaug.RandomChooseAug([])
    with pytest.raises(ValueError, match="Resize: expected a shape as an int or an \\(h, w\\) pair, got 'big'"):
        imgaug.Resize("big")
    with pytest.raises(ValueError, match="RandomResize: yrange is needed"):
        imgaug.RandomResize((0.5, 1.5))


# ----------------------------------------------------------------------------------- coordinates follow pixels

@pytest.mark.parametrize("make", [
    lambda: imgaug.Flip(horiz=True, prob=1.0), lambda: imgaug.Flip(vert=True, prob=1.0),
    lambda: imgaug.Transpose(prob=1.0), lambda: imgaug.RandomCrop((7, 9)), lambda: imgaug.CenterCrop((6, 10)),
    lambda: imgaug.CenterPaste((20, 21)), lambda: imgaug.RandomPaste((20, 21)),
    lambda: imgaug.Resize((26, 34), interp=cv2.INTER_NEAREST),
    lambda: imgaug.Rotation(180, step_deg=90, interp=cv2.INTER_NEAREST),
    lambda: imgaug.Rotation(180, step_deg=90, center_range=(0.5, 0.5), interp=cv2.INTER_NEAREST),
    lambda: imgaug.Shift(0.3, 0.3, border=cv2.BORDER_CONSTANT),
    lambda: imgaug.RotationAndCropValid(180, step_deg=90, interp=cv2.INTER_NEAREST),
    lambda: imgaug.AugmentorList([imgaug.RandomCrop(9), imgaug.Flip(horiz=True, prob=1.0),
                                  imgaug.Resize((18, 27), interp=cv2.INTER_NEAREST), imgaug.Transpose(prob=1.0)]),
], ids=["hflip", "vflip", "transpose", "randomcrop", "centercrop", "centerpaste", "randompaste", "resize",
        "rot90s", "rot90s-centre", "shift", "rotcropvalid", "list"])
def test_a_marked_pixels_coordinate_lands_on_the_marked_pixel(make):
    aug = make()
    for seed in range(8):
        _seeded(aug, seed)
        if isinstance(aug, imgaug.AugmentorList):
            for i, child in enumerate(aug.augmentors):
                _seeded(child, seed * 10 + i)
        y, x = 4 + seed % 3, 5 + seed % 4
        img = _marked((13, 17), y, x)
        tfm = aug.get_transform(img)
        out = tfm.apply_image(img)
        if out.max() == 0:          # shifted/rotated out of the picture
            continue
        got = tfm.apply_coords(np.array([[x + 0.5, y + 0.5]], np.float32))[0]
        scale = 2.0 if "Resize" in repr(aug) else 1.0        # a pixel becomes a 2x2 block (or 2x... with the list)
        oy, ox = _brightest(out)
        assert abs(got[0] - (ox + 0.5)) <= scale / 2 + 1e-4 and abs(got[1] - (oy + 0.5)) <= scale / 2 + 1e-4, \
            (seed, got, (ox, oy))


def test_warp_coords_follow_pixels_at_any_angle():
    # tensorpack maps (x, y) through the OpenCV matrix directly, which is off by up to 0.7 px for
    # continuous coordinates; inputpipe's points land on their pixel's centre.
    for seed in range(6):
        aug = _seeded(imgaug.Rotation(40, center_range=(0.4, 0.6), interp=cv2.INTER_NEAREST), seed)
        img = np.zeros((31, 31), np.float32)
        img[15, 15] = 1.0
        img[14:17, 14:17] += 0.1    # a blob, so nearest sampling keeps the peak
        tfm = aug.get_transform(img)
        got = tfm.apply_coords(np.array([[15.5, 15.5]]))[0]
        oy, ox = _brightest(tfm.apply_image(img))
        assert abs(got[0] - (ox + 0.5)) < 0.75 and abs(got[1] - (oy + 0.5)) < 0.75


def test_boxes_through_crop_flip_resize():
    # a box [x0, y0, x1, y1] around a filled rectangle stays around it
    img = np.zeros((40, 60), np.uint8)
    img[10:20, 30:45] = 255
    box = np.array([[30.0, 10.0], [45.0, 20.0]])
    augs = imgaug.AugmentorList([imgaug.RandomCrop((30, 50)), imgaug.Flip(horiz=True),
                                 imgaug.Resize((60, 100), interp=cv2.INTER_NEAREST)])
    for seed in range(10):
        augs.reset_state()
        for i, child in enumerate(augs.augmentors):
            _seeded(child, 100 * seed + i)
        tfm = augs.get_transform(img)
        out = tfm.apply_image(img)
        corners = tfm.apply_coords(box.copy())
        x0, x1 = sorted(corners[:, 0])
        y0, y1 = sorted(corners[:, 1])
        ys, xs = np.nonzero(out)
        assert (xs.min(), xs.max() + 1, ys.min(), ys.max() + 1) == (round(x0), round(x1), round(y0), round(y1))


# ----------------------------------------------------------------------------------- distributions

def test_flip_probability():
    aug = _seeded(imgaug.Flip(horiz=True, prob=0.3), 1)
    img = np.arange(4).reshape(2, 2)
    flips = sum(isinstance(aug.get_transform(img), imgaug.FlipTransform) for _ in range(4000))
    assert abs(flips - 1200) < 5 * np.sqrt(4000 * 0.3 * 0.7)


def test_random_crop_positions_are_uniform_and_reach_the_edges():
    aug = _seeded(imgaug.RandomCrop((3, 2)), 2)
    img = np.zeros((6, 5))
    counts = np.zeros((4, 4), int)
    for _ in range(3200):
        tfm = aug.get_transform(img)
        counts[tfm.y0, tfm.x0] += 1
    assert counts.min() > 200 - 5 * np.sqrt(200) and counts.max() < 200 + 5 * np.sqrt(200)


def test_random_crop_random_shape_reaches_the_bottom_right():
    # tensorpack draws the corner from [0, diff) and never crops the last row/column
    aug = _seeded(imgaug.RandomCropRandomShape(wmin=2, hmin=2, wmax=3, hmax=3), 3)
    img = np.zeros((5, 5))
    seen = set()
    for _ in range(2000):
        tfm = aug.get_transform(img)
        assert 2 <= tfm.h <= 3 and 2 <= tfm.w <= 3
        seen.add((tfm.y0 + tfm.h, tfm.x0 + tfm.w))
    assert (5, 5) in seen and {(h, w) for h in (2, 3, 4, 5) for w in (2, 3, 4, 5)} == seen


def test_googlenet_crop_windows_reach_the_bottom_right_edge():
    # tensorpack draws the corner from [0, w - ww) (none when equal): never the last row/column offset
    aug = _seeded(imgaug.GoogleNetRandomCropAndResize(crop_area_fraction=(0.5, 0.6), aspect_ratio_range=(1., 1.),
                                                     target_shape=4), 5)
    img = np.zeros((6, 6))
    windows = [aug.get_transform(img).tfms[0] for _ in range(3000)]
    ends = {(t.y0 + t.h, t.x0 + t.w) for t in windows}
    assert {(t.h, t.w) for t in windows} == {(4, 4), (5, 5)}         # sqrt(0.5..0.6 * 36) rounded
    assert (6, 6) in ends and {(y, x) for y in (4, 5, 6) for x in (4, 5, 6)} == ends
    assert {(t.y0, t.x0) for t in windows if t.h == 4} == {(y, x) for y in range(3) for x in range(3)}


def test_random_paste_reaches_every_position_including_a_canvas_of_the_same_size():
    aug = _seeded(imgaug.RandomPaste((4, 5), imgaug.ConstantBackgroundFiller(9)), 4)
    img = np.zeros((2, 2), np.uint8)
    tfms = [aug.get_transform(img) for _ in range(500)]
    assert {(t.y0, t.x0) for t in tfms} == {(y, x) for y in range(3) for x in range(4)}
    out = tfms[0].apply_image(img)
    assert out.dtype == np.uint8 and (out == 9).sum() == 16
    same = imgaug.RandomPaste((2, 2)).augment(np.ones((2, 2), np.uint8))
    assert same.tolist() == [[1, 1], [1, 1]]


def test_rotation_angles_cover_the_range():
    aug = _seeded(imgaug.Rotation(30, center_range=(0.5, 0.5)), 5)
    angles = []
    for _ in range(500):
        mat = aug.get_transform(np.zeros((9, 9))).mat
        angles.append(np.degrees(np.arctan2(mat[0, 1], mat[0, 0])))
    angles = np.array(angles)
    assert angles.min() >= -30 and angles.max() <= 30 and angles.min() < -27 and angles.max() > 27
    assert abs(angles.mean()) < 3


def test_random_choose_and_apply_probabilities():
    left, right = imgaug.Flip(horiz=True, prob=1.0), imgaug.Flip(vert=True, prob=1.0)
    choose = _seeded(imgaug.RandomChooseAug([(left, 0.25), (right, 0.75)]), 6)
    horiz = sum(choose.get_transform(np.zeros((2, 2))).horiz for _ in range(4000))
    assert abs(horiz - 1000) < 5 * np.sqrt(4000 * 0.25 * 0.75)
    apply = _seeded(imgaug.RandomApplyAug(left, 0.6), 7)
    applied = sum(isinstance(apply.get_transform(np.zeros((2, 2))), imgaug.FlipTransform) for _ in range(4000))
    assert abs(applied - 2400) < 5 * np.sqrt(4000 * 0.6 * 0.4)


def test_random_order_uses_every_order():
    augs = [imgaug.MapImage(lambda img, k=k: img * 10 + k) for k in range(3)]
    aug = _seeded(imgaug.RandomOrderAug(augs), 8)
    results = {int(aug.augment(np.zeros(1))[0]) for _ in range(300)}
    assert results == {12, 21, 102, 120, 201, 210}


def test_random_resize_keeps_the_aspect_ratio_within_the_threshold():
    aug = _seeded(imgaug.RandomResize((0.5, 1.5), (0.5, 1.5), aspect_ratio_thres=0.1), 9)
    for _ in range(200):
        tfm = aug.get_transform(np.zeros((40, 60)))
        assert 20 <= tfm.new_h <= 60 and 30 <= tfm.new_w <= 90
        assert abs(tfm.new_w / tfm.new_h - 1.5) / 1.5 < 0.1 + 1e-5


def test_random_cutout_with_ranges_and_the_input_is_untouched():
    # tensorpack passes the (low, high) tuple to randint as one argument and fails
    aug = _seeded(imgaug.RandomCutout((2, 4), (1, 3), fill=5), 10)
    img = np.zeros((6, 6), np.uint8)
    sizes = set()
    for _ in range(300):
        out = aug.augment(img)
        ys, xs = np.nonzero(out == 5)
        h, w = ys.max() - ys.min() + 1, xs.max() - xs.min() + 1
        assert len(ys) == h * w
        sizes.add((h, w))
    assert sizes == {(h, w) for h in (2, 3) for w in (1, 2)}
    assert not img.any()


def test_google_net_crop_ratio_and_area():
    aug = _seeded(imgaug.GoogleNetRandomCropAndResize(target_shape=16), 11)
    img = np.zeros((100, 100, 3), np.uint8)
    for _ in range(100):
        tfm = aug.get_transform(img)
        crop_t, resize_t = tfm.tfms
        assert isinstance(crop_t, imgaug.CropTransform) and (resize_t.new_h, resize_t.new_w) == (16, 16)
        area = crop_t.h * crop_t.w / 10000.0
        ratio = max(crop_t.h, crop_t.w) / min(crop_t.h, crop_t.w)
        assert 0.07 < area <= 1.0 and ratio < 1.333 * 1.1, (crop_t.h, crop_t.w)
        assert tfm.apply_image(img).shape == (16, 16, 3)


def test_gaussian_deform_any_channels_and_identity_without_offsets():
    img = np.random.RandomState(0).rand(8, 9).astype(np.float32)
    still = imgaug.GaussianDeform([(0.3, 0.3)], (8, 9), randrange=0)
    np.testing.assert_allclose(still.augment(img), img, atol=1e-6)
    np.testing.assert_allclose(still.augment(img[:, :, None].repeat(4, 2)), img[:, :, None].repeat(4, 2), atol=1e-6)
    moving = _seeded(imgaug.GaussianDeform([(0.3, 0.3), (0.7, 0.6)], (8, 9), sigma=0.3, randrange=2), 1)
    out = moving.augment(img)
    assert out.shape == (8, 9) and not np.allclose(out, img)
    with pytest.raises(ValueError, match=r"GaussianDeform: made for images of \(h, w\) = \(8, 9\)"):
        moving.augment(np.zeros((9, 9)))


def test_one_channel_images_keep_their_channel_axis():
    img = np.zeros((10, 12, 1), np.uint8)
    for aug in [imgaug.Resize((5, 6)), imgaug.ResizeShortestEdge(5), imgaug.Transpose(prob=1.0),
                imgaug.Rotation(20), imgaug.Shift(0.2, 0.2), imgaug.Affine(rotate_max_deg=10),
                imgaug.RotationAndCropValid(10), imgaug.GoogleNetRandomCropAndResize(target_shape=4),
                imgaug.CenterPaste((12, 14)), imgaug.RandomCrop(4), imgaug.Flip(vert=True)]:
        out = aug.augment(img)
        assert out.ndim == 3 and out.shape[2] == 1 and out.dtype == np.uint8, repr(aug)


def test_flips_give_contiguous_copies_with_the_mirrored_pixels():
    """OpenCV's flip: a contiguous array, fast to copy into a batch (a negative-stride view costs a
    hundred times more there); the values are numpy's mirror, for every dtype and channel count."""
    from inputpipe.dataflow.imgaug import FlipTransform

    for image in (np.arange(60, dtype=np.uint8).reshape(4, 5, 3), np.arange(20, dtype=np.float32).reshape(4, 5),
                  np.arange(40, dtype=np.int64).reshape(4, 5, 2), np.arange(120, dtype=np.uint8).reshape(4, 5, 6)):
        for horiz in (True, False):
            out = FlipTransform(4, 5, horiz).apply_image(image)
            expected = image[:, ::-1] if horiz else image[::-1]
            assert out.dtype == image.dtype and out.shape == image.shape
            np.testing.assert_array_equal(out, expected)
            if image.dtype.char in "BHhfd" and (image.ndim == 2 or image.shape[-1] <= 4):    # OpenCV's dtypes
                assert out.flags.c_contiguous and not np.shares_memory(out, image)
