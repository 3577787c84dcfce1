"""Image files that declare more pixels than ``image_limits.MAX_IMAGE_PIXELS`` are refused from their
header, before OpenCV decodes (and allocates) anything, wherever inputpipe decodes image files:
``ImageFromFile`` and the dataset readers (``read_color_image``)."""
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
from inputpipe.dataflow import ImageFromFile, dataset, image_limits  # noqa: E402
from inputpipe.dataflow.image_limits import ImageTooLargeError, check_image_bytes, declared_image_size  # noqa: E402
from test_dataset_readers import make_ilsvrc, make_places, no_network  # noqa: E402,F401 - no_network: autouse


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_declaring(width, height):
    """A valid-looking PNG of a few dozen bytes whose IHDR declares ``width`` x ``height`` RGB pixels."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(b"\x00" * 64))
            + _chunk(b"IEND", b""))


def jpeg_declaring(width, height, marker=0xC2):
    """SOI, a JFIF APP0 and a frame header (progressive by default) declaring ``width`` x ``height``."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    frame = b"\xff" + bytes([marker]) + struct.pack(">HBHHB", 17, 8, height, width, 3) + bytes(9)
    return b"\xff\xd8" + app0 + frame + b"\xff\xd9"


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


@pytest.fixture
def imread_calls(monkeypatch):
    """cv2.imread, recording the files it is asked to decode."""
    calls = []
    real = cv2.imread

    def recording(path, *args):
        calls.append(os.path.basename(path))
        return real(path, *args)

    monkeypatch.setattr(cv2, "imread", recording)
    return calls


def test_the_default_limit_passes_tensorpack_sized_images_and_refuses_bombs(tmp_path):
    assert image_limits.MAX_IMAGE_PIXELS == 2 ** 28
    image_limits.check_image_file("Test", _write(tmp_path / "big.png", png_declaring(16384, 16384)))   # 2**28: ok
    with pytest.raises(ImageTooLargeError):
        image_limits.check_image_file("Test", _write(tmp_path / "bomb.png", png_declaring(16384, 16385)))


def test_image_from_file_refuses_a_png_declaring_a_huge_image_before_decoding(tmp_path, imread_calls):
    bomb = _write(tmp_path / "bomb.png", png_declaring(100000, 100000))
    assert os.path.getsize(bomb) < 200
    small = str(tmp_path / "small.png")
    cv2.imwrite(small, np.zeros((4, 5, 3), np.uint8))
    df = ImageFromFile([small, bomb], shuffle=False)
    df.reset_state()
    with pytest.raises(ImageTooLargeError) as info:
        list(df)
    assert str(info.value) == (
        "ImageFromFile: {} declares a 100000x100000 image (10000000000 pixels), more than the limit of 268435456 "
        "pixels; raise inputpipe.dataflow.image_limits.MAX_IMAGE_PIXELS (or the environment variable "
        "INPUTPIPE_MAX_IMAGE_PIXELS) if the image is trusted".format(bomb))
    assert isinstance(info.value, ValueError)
    assert imread_calls == ["small.png"]          # the bomb never reached OpenCV


def test_dataset_readers_refuse_a_jpeg_declaring_a_huge_image_before_decoding(tmp_path, imread_calls):
    root = make_ilsvrc(str(tmp_path / "ilsvrc"))
    _write(os.path.join(root, "original", "val", "ILSVRC2012_val_00000002.JPEG"), jpeg_declaring(65535, 65535))
    ds = dataset.ILSVRC12(os.path.join(root, "original"), "val", meta_dir=os.path.join(root, "meta"), shuffle=False)
    ds.reset_state()
    with pytest.raises(ImageTooLargeError, match=r"^ILSVRC12: .*ILSVRC2012_val_00000002.JPEG declares a 65535x65535 "
                                                 r"image \(4294836225 pixels\), more than the limit of 268435456 "
                                                 r"pixels"):
        list(ds)
    assert imread_calls == ["ILSVRC2012_val_00000001.JPEG"]


def test_the_limit_is_settable_and_none_turns_it_off(tmp_path, monkeypatch):
    d = make_places(str(tmp_path / "places"))       # 6x4 images: 24 pixels
    monkeypatch.setattr(image_limits, "MAX_IMAGE_PIXELS", 23)
    ds = dataset.Places365Standard(d, "train", shuffle=False)
    ds.reset_state()
    with pytest.raises(ImageTooLargeError, match=r"^Places365Standard: .*00000001.jpg declares a 4x6 image \(24 "
                                                 r"pixels\), more than the limit of 23 pixels"):
        next(iter(ds))
    monkeypatch.setattr(image_limits, "MAX_IMAGE_PIXELS", 24)
    assert next(iter(ds))[0].shape == (6, 4, 3)
    png = str(tmp_path / "a.png")
    cv2.imwrite(png, np.zeros((30, 40), np.uint8))
    monkeypatch.setattr(image_limits, "MAX_IMAGE_PIXELS", 10)
    df = ImageFromFile([png], channel=1)
    df.reset_state()
    with pytest.raises(ImageTooLargeError, match=r"declares a 40x30 image \(1200 pixels\), more than the limit of 10"):
        list(df)
    monkeypatch.setattr(image_limits, "MAX_IMAGE_PIXELS", None)
    assert [dp[0].shape for dp in df] == [(30, 40, 1)]


def test_the_environment_variable_sets_the_limit_at_import():
    code = "from inputpipe.dataflow import image_limits; print(image_limits.MAX_IMAGE_PIXELS)"
    for value, expected in (("1000", "1000"), ("none", "None"), ("", str(2 ** 28))):
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, INPUTPIPE_MAX_IMAGE_PIXELS=value),
                             capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == expected, out.stderr
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, INPUTPIPE_MAX_IMAGE_PIXELS="-5"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "ValueError: INPUTPIPE_MAX_IMAGE_PIXELS must be a positive number of pixels or 'none', got '-5'" in out.stderr


@pytest.mark.parametrize("ext,params,shape", [
    (".png", [], (7, 9, 3)), (".png", [], (7, 9)), (".png", [], (300, 2, 4)),
    (".jpg", [], (7, 9, 3)), (".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1], (70, 90, 3)), (".jpg", [], (5, 8)),
    (".bmp", [], (7, 9, 3)), (".bmp", [], (6, 3)),
])
def test_declared_sizes_match_what_opencv_decodes(tmp_path, ext, params, shape):
    path = str(tmp_path / ("image" + ext))
    assert cv2.imwrite(path, np.random.RandomState(0).randint(0, 256, shape).astype(np.uint8), params)
    assert declared_image_size(path) == (shape[1], shape[0])
    assert cv2.imread(path, cv2.IMREAD_UNCHANGED).shape[:2] == shape[:2]


def test_jpeg_segments_before_the_frame_header_are_walked(tmp_path):
    path = str(tmp_path / "a.jpg")
    cv2.imwrite(path, np.zeros((11, 13, 3), np.uint8))
    with open(path, "rb") as f:
        data = f.read()
    exif = b"\xff\xe1" + struct.pack(">H", 2 + 3000) + b"Exif\x00\x00" + bytes(2994)    # a large APP1 (EXIF)
    comment = b"\xff\xfe" + struct.pack(">H", 7) + b"hello"
    data = data[:2] + b"\xff\xff" + exif + comment + data[2:]          # with fill bytes before a marker
    assert declared_image_size(_write(tmp_path / "b.jpg", data)) == (13, 11)
    assert cv2.imread(str(tmp_path / "b.jpg")).shape == (11, 13, 3)
    assert declared_image_size(_write(tmp_path / "sof0.jpg", jpeg_declaring(640, 480, 0xC0))) == (640, 480)


def test_other_or_damaged_files_are_left_to_the_decoder(tmp_path):
    tiff = str(tmp_path / "a.tiff")
    cv2.imwrite(tiff, np.zeros((3, 4, 3), np.uint8))
    assert declared_image_size(tiff) is None
    assert declared_image_size(_write(tmp_path / "cut.png", png_declaring(10, 10)[:20])) is None
    assert declared_image_size(_write(tmp_path / "cut.jpg", jpeg_declaring(10, 10)[:26])) is None
    assert declared_image_size(_write(tmp_path / "empty.jpg", b"")) is None
    image_limits.check_image_file("Test", str(tmp_path / "missing.png"))       # the decoder reports it
    df = ImageFromFile([str(tmp_path / "cut.png")])
    df.reset_state()
    with pytest.raises(OSError, match=r"^ImageFromFile: the PNG file .*cut.png is damaged: the 'IHDR' chunk at byte 8 "
                                      r"declares 13 bytes of data, 0 are left$"):      # image_damage names it
        list(df)


def test_encoded_bytes_are_checked_too_for_your_own_imdecode():
    ok, encoded = cv2.imencode(".jpg", np.zeros((12, 17, 3), np.uint8))
    assert ok and declared_image_size(encoded) == (17, 12)
    check_image_bytes("Decode", encoded)                       # a numpy array, as cv2.imdecode takes it
    check_image_bytes("Decode", encoded.tobytes())
    bomb = png_declaring(30000, 30000)
    for data in (bomb, bytearray(bomb), memoryview(bomb), np.frombuffer(bomb, np.uint8)):
        with pytest.raises(ImageTooLargeError, match=r"^Decode: an encoded image of {} bytes declares a 30000x30000 "
                                                     r"image \(900000000 pixels\), more than the limit of 268435456 "
                                                     r"pixels".format(len(bomb))):
            check_image_bytes("Decode", data)
    assert declared_image_size(b"not an image") is None
