"""Encoded images: augmentors given JPEG bytes decode only the crop they need (partial decode and
DCT scaling through libjpeg-turbo), with the crops, flips and random draws of the pixel path."""
import logging

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from inputpipe.dataflow import AugmentImageComponent, DataFromList, MultiProcessMapData, imgaug  # noqa: E402
from inputpipe.dataflow._image import turbojpeg as _turbojpeg  # noqa: E402
from inputpipe.dataflow.imgaug import encoded  # noqa: E402
from inputpipe.dataflow.imgaug.encoded import EncodedImage, is_encoded  # noqa: E402

needs_turbojpeg = pytest.mark.skipif(_turbojpeg.turbojpeg() is None,
                                     reason='needs libjpeg-turbo (pip install "inputpipe[jpeg]")')


def photo(h, w, seed=0):
    """A photo-like image: smooth shapes and gradients plus fine texture, BGR uint8."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    image = np.stack([128 + 100 * np.sin(xx / (17 + 5 * c) + yy / (23 + 3 * c) + c) for c in range(3)], -1)
    for _ in range(12):
        cy, cx, r = rng.randint(0, h), rng.randint(0, w), rng.randint(5, max(6, min(h, w) // 4))
        image[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = rng.randint(0, 256, 3)
    image += rng.normal(0, 6, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def jpeg(image, quality=90):
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return data                         # a 1-d uint8 array, as np.fromfile(path, np.uint8) gives


def seeded(augs, seed):
    """The augmentor list with its RNGs seeded, the same way for two copies."""
    augs.reset_state()
    for i, aug in enumerate([augs] + list(augs.augmentors)):
        aug.rng.seed(seed + i)
    return augs


def imagenet_augs(target=224):
    return imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(target_shape=target), imgaug.Flip(horiz=True)])


@needs_turbojpeg
def test_a_decoded_window_has_opencvs_pixels_but_at_the_window_edges():
    data = jpeg(photo(375, 500)).tobytes()
    tj = _turbojpeg.turbojpeg()
    full = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert tj.header(data)[:2] == (375, 500)
    assert np.array_equal(tj.decode(data), full)
    for y, x, h, w in [(10, 20, 100, 150), (0, 0, 375, 500), (37, 33, 200, 301), (300, 450, 75, 50), (1, 499, 374, 1)]:
        window = tj.decode(data, (y, x, h, w)).astype(int)
        assert window.shape == (h, w, 3)
        difference = np.abs(window - full[y:y + h, x:x + w])
        assert difference.mean() < 0.05 and difference.max() <= 8
    half = tj.decode(data, (37, 33, 200, 301), scale=2)
    assert half.shape == (101, 151, 3)          # rows 18..118, columns 16..166 of the half-size image


@needs_turbojpeg
def test_encoded_bytes_get_the_same_crops_and_flips_as_the_pixels():
    images = [photo(375, 500, seed) for seed in range(3)] + [photo(500, 375, 7)]
    data = [jpeg(image) for image in images]
    pixels = [cv2.imdecode(d, cv2.IMREAD_COLOR) for d in data]
    from_bytes, from_pixels = seeded(imagenet_augs(), 5), seeded(imagenet_augs(), 5)
    for _ in range(10):
        for d, p in zip(data, pixels):
            a = from_bytes.augment(d)
            b = from_pixels.augment(p)
            assert a.shape == b.shape == (224, 224, 3) and a.dtype == np.uint8
            difference = np.abs(a.astype(int) - b)
            assert difference.mean() < 0.5, difference.mean()


def _windows(augmentor, images, draws):
    windows = []
    for _ in range(draws):
        for image in images:
            crop, _resize = augmentor.get_transform(image).tfms
            windows.append((crop.y0, crop.x0, crop.h, crop.w))
    return windows


@needs_turbojpeg
def test_crop_windows_follow_googlenet_random_crop_and_resize():
    scipy_stats = pytest.importorskip("scipy.stats")
    data = jpeg(photo(375, 500))
    pixels = cv2.imdecode(data, cv2.IMREAD_COLOR)
    # the same random numbers give the same windows ...
    a, b = imgaug.GoogleNetRandomCropAndResize(), imgaug.GoogleNetRandomCropAndResize()
    a.rng.seed(3)
    b.rng.seed(3)
    assert _windows(a, [EncodedImage(data)], 300) == _windows(b, [pixels], 300)
    # ... and independent draws have the same distribution of areas, aspects and positions
    a.rng.seed(11)
    b.rng.seed(12)
    from_bytes, from_pixels = np.array(_windows(a, [EncodedImage(data)], 2000)), np.array(_windows(b, [pixels], 2000))
    for column in (lambda w: w[:, 2] * w[:, 3] / (375 * 500), lambda w: w[:, 3] / w[:, 2],
                   lambda w: w[:, 0], lambda w: w[:, 1]):
        assert scipy_stats.ks_2samp(column(from_bytes), column(from_pixels)).pvalue > 0.001
    areas = from_bytes[:, 2] * from_bytes[:, 3] / (375 * 500)
    assert areas.min() >= 0.07 and areas.max() <= 1.0 and 0.4 < areas.mean() < 0.65


class _RecordingDecoder:
    def __init__(self, real):
        self.real, self.scales = real, []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def decode(self, data, window=None, scale=1, **kwargs):
        self.scales.append(scale)
        return self.real.decode(data, window, scale=scale, **kwargs)


@needs_turbojpeg
def test_a_window_at_least_twice_the_target_is_decoded_at_a_dct_scale(monkeypatch):
    recorder = _RecordingDecoder(_turbojpeg.turbojpeg())
    monkeypatch.setattr(_turbojpeg, "_loaded", [recorder])
    data = jpeg(photo(1024, 1024))
    pixels = cv2.imdecode(data, cv2.IMREAD_COLOR)
    for crop, target, scale in [((0, 0, 1024, 1024), 128, 8), ((100, 50, 600, 900), 224, 2),
                                ((10, 10, 500, 900), 224, 2), ((0, 0, 447, 447), 224, 1), ((0, 0, 1024, 512), 64, 8)]:
        recorder.scales.clear()
        tfm = imgaug.TransformList([imgaug.CropTransform(*crop), imgaug.ResizeTransform(crop[2], crop[3], target,
                                                                                         target, cv2.INTER_LINEAR)])
        fused = tfm.apply_image(EncodedImage(data))
        assert recorder.scales == [scale]
        reference = cv2.resize(pixels[crop[0]:crop[0] + crop[2], crop[1]:crop[1] + crop[3]], (target, target),
                               interpolation=cv2.INTER_AREA)
        assert fused.shape == (target, target, 3)
        assert np.abs(fused.astype(int) - reference).mean() < 4.0


@needs_turbojpeg
def test_per_datapoint_seeding_gives_the_same_images_in_worker_processes():
    data = [[jpeg(photo(375, 500, seed)), seed] for seed in range(6)]
    augs = imagenet_augs(64)

    def run(flow):
        flow.reset_state()
        try:
            return sorted((label, image.tobytes()) for image, label in flow)
        finally:
            flow.close()

    from inputpipe.dataflow import seeding

    def mapped(rows, workers):
        seeding.set_global_seed(123)
        return run(MultiProcessMapData(DataFromList(rows, shuffle=False), workers,
                                       lambda dp: [augs.augment(dp[0]), dp[1]], strict=True))

    try:
        two, one = mapped(data, 2), mapped(data, 1)
        pixels = mapped([[cv2.imdecode(image, cv2.IMREAD_COLOR), label] for image, label in data], 2)
    finally:
        seeding.set_global_seed(None)
    assert [label for label, _ in two] == list(range(6))
    assert two == one                                   # any number of workers: the same images
    for (_, fused), (_, decoded_whole) in zip(two, pixels):  # the same crops as decoding everything
        # windows of 128 px or more are decoded at a DCT scale, smoother than the bilinear resize
        difference = np.abs(np.frombuffer(fused, np.uint8).astype(int) - np.frombuffer(decoded_whole, np.uint8))
        assert difference.mean() < 4.0


def test_without_libjpeg_turbo_the_whole_image_is_decoded_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(_turbojpeg, "_loaded", [None])
    monkeypatch.setattr(encoded, "_warned_no_turbojpeg", [])
    data = jpeg(photo(375, 500))
    pixels = cv2.imdecode(data, cv2.IMREAD_COLOR)
    with caplog.at_level(logging.WARNING):
        outputs = [seeded(imagenet_augs(), 4).augment(data) for _ in range(3)]
    expected = seeded(imagenet_augs(), 4).augment(pixels)
    assert all(np.array_equal(out, expected) for out in outputs)     # OpenCV's pixels, the same crops
    warnings = [r.getMessage() for r in caplog.records if "TurboJPEG" in r.getMessage()]
    assert len(warnings) == 1 and 'pip install "inputpipe[jpeg]"' in warnings[0]


def _with_exif_orientation(data, orientation):
    """The JPEG with an APP1 Exif segment whose orientation tag is ``orientation``."""
    tiff = b"II*\x00" + (8).to_bytes(4, "little") + (1).to_bytes(2, "little")
    tiff += (0x0112).to_bytes(2, "little") + (3).to_bytes(2, "little") + (1).to_bytes(4, "little")
    tiff += orientation.to_bytes(2, "little") + b"\x00\x00" + (0).to_bytes(4, "little")
    segment = b"Exif\x00\x00" + tiff
    data = data.tobytes()
    return data[:2] + b"\xff\xe1" + (len(segment) + 2).to_bytes(2, "big") + segment + data[2:]


@pytest.mark.parametrize("orientation", [1, 6, 3])
def test_exif_orientation_gives_opencvs_turned_image(orientation):
    data = _with_exif_orientation(jpeg(photo(120, 200)), orientation)
    pixels = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    image = EncodedImage(data)
    assert image.shape == pixels.shape == ((200, 120, 3) if orientation == 6 else (120, 200, 3))
    assert np.abs(image.decode().astype(int) - pixels).mean() < 0.05


def test_png_and_grey_jpeg_bytes_decode_as_opencv_does():
    image = photo(60, 80)
    png = cv2.imencode(".png", image)[1]
    out = imgaug.CenterCrop(40).augment(png)
    assert np.array_equal(out, image[10:50, 20:60])
    grey = jpeg(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY))
    expected = cv2.imdecode(grey, cv2.IMREAD_COLOR)
    assert np.abs(imgaug.CenterCrop(40).augment(grey).astype(int) - expected[10:50, 20:60]).max() <= 1


def test_bytes_that_are_no_image_are_an_error_naming_the_augmentor_and_a_1d_array_stays_an_array():
    with pytest.raises(ValueError, match=r"Flip: OpenCV cannot decode these 12 bytes as an image"):
        imgaug.Flip(horiz=True).augment(b"not an image")
    assert not is_encoded(np.arange(10, dtype=np.uint8)) and is_encoded(jpeg(photo(8, 8)))
    with pytest.raises(ValueError, match=r"Flip: expected .* got an array of shape \(10,\)"):
        imgaug.Flip(horiz=True).augment(np.arange(10, dtype=np.uint8))
    imgaug.CenterCrop(8).augment(jpeg(photo(64, 64)))        # a decoder that read a header before ...
    for cut in (40, 150):                                      # ... does not report its size for these
        with pytest.raises(ValueError, match=r"^CenterCrop: the JPEG of {} bytes starting with .* is damaged: ".format(
                cut)):
            imgaug.CenterCrop(8).augment(jpeg(photo(64, 64)).tobytes()[:cut])


def test_augment_image_component_takes_encoded_components():
    images = [photo(90, 120, seed) for seed in range(3)]
    rows = [[jpeg(image), i] for i, image in enumerate(images)] + [[jpeg(images[0]).tobytes(), 9]]
    df = AugmentImageComponent(DataFromList(rows, shuffle=False), [imgaug.CenterCrop(64), imgaug.Resize(32)])
    df.reset_state()
    out = list(df)
    assert [label for _, label in out] == [0, 1, 2, 9]
    assert all(image.shape == (32, 32, 3) and image.dtype == np.uint8 for image, _ in out)
    # the 64x64 window is decoded at half size (twice the target), close to an area resize of it
    window = cv2.imdecode(jpeg(images[0]), cv2.IMREAD_COLOR)[13:77, 28:92]
    reference = cv2.resize(window, (32, 32), interpolation=cv2.INTER_AREA)
    assert np.abs(reference.astype(int) - out[0][0]).mean() < 4.0


@needs_turbojpeg
def test_a_decoder_that_failed_decodes_the_next_image_right():
    tj = _turbojpeg.turbojpeg()
    good = jpeg(photo(64, 80)).tobytes()
    expected = cv2.imdecode(np.frombuffer(good, np.uint8), cv2.IMREAD_COLOR)
    for bad in (good[:40], good[:150], b"\xff\xd8\xff" + b"junk" * 30):
        with pytest.raises(_turbojpeg.TurboJpegError):
            tj.header(bad)
        assert tj.header(good)[:2] == (64, 80)
        assert np.array_equal(tj.decode(good), expected)
    cut = good[:len(good) * 2 // 3]                   # a header, then data that ends early: a warning
    with pytest.raises(_turbojpeg.TurboJpegWarning, match="^libjpeg-turbo could not decode the JPEG: Premature end"):
        tj.decode(cut, header=tj.header(good))
    assert np.array_equal(tj.decode(good), expected)
    partial = tj.decode(cut, header=tj.header(good), strict=False)       # lenient: the rest is grey
    assert partial.shape == (64, 80, 3) and np.array_equal(tj.decode(good), expected)


def _window_of_decode(data, window, fast):
    tj = _turbojpeg.turbojpeg()
    return tj.decode(data, window, fast_dct=fast)


def _run_in_a_graph(tf, make):
    """The value of the tensor ``make()`` builds, computed in graph mode (TF 1.15 and TF 2 alike)."""
    with tf.Graph().as_default():
        tensor = make()
        with tf.compat.v1.Session() as sess:
            return sess.run(tensor)


@needs_turbojpeg
def test_the_fast_dct_gives_tensorflows_default_pixels_and_the_accurate_one_opencvs():
    tf = pytest.importorskip("tensorflow")
    data = jpeg(photo(375, 500, seed=3)).tobytes()
    full = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert np.array_equal(_window_of_decode(data, None, False), full)
    tf_default = _run_in_a_graph(tf, lambda: tf.io.decode_jpeg(data, channels=3))[:, :, ::-1]     # RGB -> BGR
    fast = _window_of_decode(data, None, True)
    assert np.array_equal(fast, tf_default)
    difference = np.abs(fast.astype(int) - full)
    assert 0 < difference.mean() < 2                   # a different transform, close to the accurate one
    window = (37, 48, 200, 301)                        # a window starting on the 16-px iMCU grid
    tf_window = _run_in_a_graph(tf, lambda: tf.io.decode_and_crop_jpeg(data, list(window), channels=3))[:, :, ::-1]
    assert np.array_equal(_window_of_decode(data, window, True)[1:-1, 1:-1], tf_window[1:-1, 1:-1])


@needs_turbojpeg
def test_set_dct_method_chooses_the_decode_of_augmentors_here_and_in_spawned_workers(monkeypatch):
    monkeypatch.setenv(encoded.DCT_METHOD_VARIABLE, "accurate")
    monkeypatch.setattr(encoded, "_dct_method", ["accurate"])
    data = jpeg(photo(375, 500, seed=4))
    augs = imgaug.AugmentorList([imgaug.CenterCrop(200), imgaug.Resize((200, 200))])
    accurate = augs.augment(data)
    assert imgaug.get_dct_method() == "accurate"
    imgaug.set_dct_method("fast")
    assert imgaug.get_dct_method() == "fast" and encoded.os.environ[encoded.DCT_METHOD_VARIABLE] == "fast"
    fast = augs.augment(data)
    assert not np.array_equal(fast, accurate) and np.abs(fast.astype(int) - accurate).mean() < 2
    assert np.array_equal(fast, _window_of_decode(data.tobytes(), (87, 150, 200, 200), True))
    df = MultiProcessMapData(DataFromList([[data]], shuffle=False), 1, _center_crop_200,
                             start_method="spawn")
    df.reset_state()
    with df:
        [in_worker] = next(iter(df))
    assert np.array_equal(in_worker, fast)
    with pytest.raises(ValueError, match=r"set_dct_method: method must be one of \('accurate', 'fast'\), got 'slow'"):
        imgaug.set_dct_method("slow")


def _center_crop_200(dp):
    return [imgaug.AugmentorList([imgaug.CenterCrop(200), imgaug.Resize((200, 200))]).augment(dp[0])]


def test_an_unknown_dct_method_in_the_environment_is_warned_about_and_accurate_used(monkeypatch, caplog):
    monkeypatch.setenv(encoded.DCT_METHOD_VARIABLE, "quick")
    with caplog.at_level(logging.WARNING):
        assert encoded._dct_from_environment() == "accurate"
    assert "INPUTPIPE_JPEG_DCT='quick' is not one of ('accurate', 'fast'); using 'accurate'" in caplog.text
    monkeypatch.setenv(encoded.DCT_METHOD_VARIABLE, "FAST")
    assert encoded._dct_from_environment() == "fast"


@needs_turbojpeg
def test_the_file_is_read_in_place_from_bytes_and_arrays_and_copied_from_anything_else():
    array = jpeg(photo(120, 160, seed=3))
    data = array.tobytes()
    window = (8, 24, 64, 96)
    expected = EncodedImage(data).crop(*window).decode()
    assert EncodedImage(data).data is data
    assert EncodedImage(array).data is array                     # np.fromfile's array: no copy
    for given in (array, bytearray(data), memoryview(data), array.reshape(1, -1), np.repeat(array, 2)[::2]):
        image = EncodedImage(given)
        assert image.shape == (120, 160, 3)
        assert np.array_equal(image.crop(*window).decode(), expected)
    copied = EncodedImage(bytearray(data))
    assert isinstance(copied.data, bytes)                        # a mutable buffer is copied once
    tj = _turbojpeg.turbojpeg()
    assert np.array_equal(tj.decode(memoryview(data), window), tj.decode(array, window))


def test_old_style_augmentors_and_transform_factories_get_the_pixels_of_bytes():
    class Invert(imgaug.ImageAugmentor):            # tensorpack < 0.10's interface: a TransformFactory
        def _get_augment_params(self, img):
            return 255

        def _augment(self, img, top):
            return top - img

    image = photo(24, 32)
    data = cv2.imencode(".png", image)[1].tobytes()
    assert np.array_equal(Invert().augment(data), 255 - image)
    negate = imgaug.TransformFactory(name="negate", apply_image=lambda img: 255 - img)
    assert np.array_equal(negate.apply_image(EncodedImage(data)), 255 - image)
    deform = imgaug.GaussianDeform([(0.5, 0.5)], (24, 32), sigma=0.2)
    deform.reset_state()
    assert deform.augment(data).shape == (24, 32, 3)
