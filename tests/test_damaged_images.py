"""Damaged image bytes never pass as pixels: a JPEG cut short, with garbage where a marker must be,
bad segment lengths, an empty frame, a truncated PNG, empty bytes; and corrupt data the decoder
warns about. Strict by default on the fused path (augmentors given bytes) and the graph path
(JpegCropWindows / JpegDecodeInput); ``"thorough"`` reads every JPEG to its end; ``"lenient"``
decodes what it can, as OpenCV 4 and tf.data's ``try_recover_truncated`` do."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

cv2 = pytest.importorskip("cv2")

from inputpipe.dataflow import (AugmentImageComponent, BatchData, DataFromList, JpegCropWindows,  # noqa: E402
                                image_damage, imgaug)
from inputpipe.dataflow.image_damage import DamagedImageError  # noqa: E402
from inputpipe.dataflow._image import turbojpeg as _turbojpeg  # noqa: E402
from inputpipe.dataflow.imgaug.encoded import EncodedImage  # noqa: E402
from inputpipe.input_source import JpegDecodeInput, QueueInput, hooked_session  # noqa: E402
from test_imgaug_encoded import imagenet_augs, jpeg, photo, seeded, _with_exif_orientation  # noqa: E402

pytestmark = pytest.mark.timeout(60)
needs_turbojpeg = pytest.mark.skipif(_turbojpeg.turbojpeg() is None,
                                     reason='needs libjpeg-turbo (pip install "inputpipe[jpeg]")')
GOOD = jpeg(photo(375, 500)).tobytes()
SCAN = GOOD.index(b"\xff\xda")


@pytest.fixture(autouse=True)
def strict_by_default(monkeypatch):
    """Every test starts in the default mode, and leaves the process and the environment as it was
    (set first so that monkeypatch records the variable's absence too: a delenv of an absent variable
    records nothing, and the mode a test set leaked into later tests' subprocesses)."""
    monkeypatch.setenv(image_damage.DECODING_VARIABLE, "strict")
    monkeypatch.delenv(image_damage.DECODING_VARIABLE)
    monkeypatch.setattr(image_damage, "_mode", ["strict"])


def corrupt(data, at, count=40):
    """``data`` with ``count`` bytes of its scan from ``at`` scrambled (its markers intact: the
    decoder only notices at the end of the scan)."""
    out = bytearray(data)
    for i in range(at, at + count):
        out[i] = (out[i] * 7 + 13) & 0xFF
    return bytes(out).replace(b"\xff\xd9", b"\xfe\xd9")[:-2] + b"\xff\xd9"


def damaged_message(component, data, problem):
    return r"^{}: the JPEG of {} bytes starting with .* is damaged: {}".format(component, len(data), problem)


CUTS = {
    "half": len(GOOD) // 2,
    "in the scan's first bytes": SCAN + 40,
    "just before the end marker": len(GOOD) - 2,
    "one byte of the end marker": len(GOOD) - 1,
}


@pytest.mark.parametrize("cut", list(CUTS))
@pytest.mark.parametrize("augmentors", ["googlenet", "top crop", "resize"])
def test_a_jpeg_cut_short_anywhere_in_its_scan_is_an_error_whatever_the_crop(cut, augmentors):
    data = GOOD[:CUTS[cut]]
    augs = {"googlenet": imagenet_augs(), "top crop": imgaug.AugmentorList([imgaug.Resize((375, 500)),
                                                                            imgaug.RandomCrop((16, 16))]),
            "resize": imgaug.AugmentorList([imgaug.Resize(64)])}[augmentors]
    for seed in range(3):
        with pytest.raises(DamagedImageError, match=damaged_message(
                "AugmentorList", data, r"it has no end-of-image marker \(EOI\) after its scan data \(it ends at byte "
                "{}\\): the file was cut short$".format(len(data)))):
            seeded(augs, seed).augment(data)
    # the pixels OpenCV and tf.data would refuse or grey out never come: as an array too, in a flow
    flow = AugmentImageComponent(DataFromList([[np.frombuffer(data, np.uint8), 1]], shuffle=False), augs)
    flow.reset_state()
    with pytest.raises(DamagedImageError, match=r"^AugmentImageComponent \(component 0\): the JPEG of"):
        list(flow)


def test_empty_bytes_are_a_clear_error_in_every_mode():
    for mode in ("strict", "thorough", "lenient"):
        image_damage.set_decoding(mode)
        for empty in (b"", bytearray(), memoryview(b"")):
            with pytest.raises(DamagedImageError, match=r"^GoogleNetRandomCropAndResize: got 0 bytes; expected the "
                                                        r"bytes of an image file \(JPEG, PNG, \.\.\.\)$"):
                imgaug.GoogleNetRandomCropAndResize().augment(empty)
        with pytest.raises(DamagedImageError, match=r"^JpegCropWindows \(component 0\): got 0 bytes"):
            _plans([b""], mode)


def _png(h=60, w=80):
    return cv2.imencode(".png", photo(h, w))[1].tobytes()


def _sof(data):
    return data.index(b"\xff\xc0")


SIBLINGS = {
    "garbage after the start of image": (b"\xff\xd8garbage" + GOOD[2:], "JPEG",
                                         r"byte 2 is 0x67 where a marker \(0xff\.\.\) must be$"),
    "a segment longer than the file": (GOOD[:2] + b"\xff\xe0\xff\xf0" + GOOD[6:60], "JPEG",
                                       r"the segment of marker 0xe0 at byte 2 declares 65520 bytes, 56 are left$"),
    "a segment length below 2": (GOOD[:4] + b"\x00\x01" + GOOD[6:], "JPEG",
                                 r"the segment of marker 0xe0 at byte 2 declares 1 bytes"),
    "an empty frame": (GOOD[:_sof(GOOD) + 5] + b"\x00\x00" + GOOD[_sof(GOOD) + 7:], "JPEG",
                       r"the frame header \(SOF\) declares an empty 500x0 image$"),
    "the end marker before any scan": (GOOD[:20] + b"\xff\xd9", "JPEG",
                                       r"marker 0xd9 at byte 20 before the first scan \(SOS\)"),
    "only the start of image": (GOOD[:2], "JPEG", r"it ends at byte 2 before its first scan \(SOS\)"),
    "cut inside a marker": (GOOD[:3], "JPEG", r"it ends at byte 3 inside a marker"),
    "a png cut in half": (_png()[:len(_png()) // 2], "PNG", r"the 'IDAT' chunk at byte \d+ declares \d+ bytes of data"),
    "a png without its end chunk": (_png()[:-12], "PNG", r"it ends at byte \d+ without an IEND chunk"),
    "a png of an empty image": (_png()[:16] + b"\x00\x00\x00\x00" + _png()[20:], "PNG",
                                r"its IHDR declares an empty 0x60 image$"),
}


@pytest.mark.parametrize("name", list(SIBLINGS))
def test_other_damage_is_named_on_the_fused_and_the_graph_path(name):
    data, kind, problem = SIBLINGS[name]
    pattern = r"^{{}}: the {} of {} bytes starting with .* is damaged: {}".format(kind, len(data), problem)
    with pytest.raises(DamagedImageError, match=pattern.format("Resize")):
        imgaug.Resize(32).augment(data)
    if kind == "JPEG":
        with pytest.raises(DamagedImageError, match=pattern.format(r"JpegCropWindows \(component 0\)")):
            _plans([data], "strict")


def test_good_files_with_data_after_their_end_and_fill_bytes_before_markers_pass():
    for data in (GOOD + b"\x00" * 100, GOOD + b"trailer", GOOD[:2] + b"\xff\xff" + GOOD[2:], _png() + b"x"):
        image_damage.check_image_structure("check", data)
        assert imgaug.CenterCrop(32).augment(data).shape == (32, 32, 3)


@needs_turbojpeg
def test_corrupt_data_the_decoder_warns_about_in_what_it_decodes_is_an_error():
    data = corrupt(GOOD, (SCAN + len(GOOD)) // 2)
    assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) is not None     # OpenCV gives pixels
    with pytest.raises(DamagedImageError, match=damaged_message("Resize", data, "libjpeg-turbo: Corrupt JPEG data")):
        imgaug.Resize(64).augment(data)                 # the whole scan is decoded: libjpeg warns at its end
    # above the damage the decoded rows are the file's own, and strict mode gives them
    top = EncodedImage(data, "top").crop(0, 0, 40, 500).decode()
    assert np.array_equal(top, EncodedImage(GOOD, "top").crop(0, 0, 40, 500).decode())
    image_damage.set_decoding("thorough")                # read to the end: refused whatever the crop
    with pytest.raises(DamagedImageError, match=damaged_message("top", data, "libjpeg-turbo: Corrupt JPEG data")):
        EncodedImage(data, "top").crop(0, 0, 40, 500).decode()


@needs_turbojpeg
def test_an_exif_turned_jpeg_that_opencv_decodes_whole_is_checked_by_libjpeg_turbo():
    turned = _with_exif_orientation(jpeg(photo(120, 200)), 6)
    data = corrupt(turned, turned.index(b"\xff\xda") + 100)
    assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) is not None
    with pytest.raises(DamagedImageError, match=damaged_message("Flip", data, "libjpeg-turbo: Corrupt JPEG data")):
        imgaug.Flip(horiz=True).augment(data)


def test_lenient_decoding_gives_what_the_decoder_can_and_reaches_new_workers_through_the_environment():
    data = GOOD[:len(GOOD) // 2]
    image_damage.set_decoding("lenient")
    assert os.environ[image_damage.DECODING_VARIABLE] == "lenient" and imgaug.get_decoding() == "lenient"
    out = imgaug.Resize((375, 500)).augment(data)
    assert out.shape == (375, 500, 3)
    grey = (np.abs(out.astype(int) - 128) <= 1).all(axis=2)
    assert grey[-60:].all() and not grey[:100].all()      # the rows after the cut are libjpeg's grey
    assert _plans([data], None)[0][0].tolist()[:4] == [0, 0, 375, 500]
    child = subprocess.run([sys.executable, "-c", "from inputpipe.dataflow import image_damage; "
                            "print(image_damage.get_decoding())"], capture_output=True, text=True, timeout=30)
    assert child.stdout == "lenient\n"                    # a worker started now decodes the same way
    with pytest.raises(ValueError, match=r"^set_decoding: mode must be one of \('strict', 'thorough', 'lenient'\), "
                                         r"got 'loose'$"):
        imgaug.set_decoding("loose")


def _plans(jpegs, decoding):
    flow = JpegCropWindows(DataFromList([[data, i] for i, data in enumerate(jpegs)], shuffle=False),
                           [imgaug.Resize(64)], decoding=decoding)
    flow.reset_state()
    return [dp[1:] for dp in flow]


def _decode_in_graph(rows, decoding):
    source = JpegDecodeInput(QueueInput(BatchData(DataFromList(rows, shuffle=False), len(rows)), infinite=False),
                             decoding=decoding)
    with tf.Graph().as_default():
        source.setup([tf.TensorSpec([None, 64, 64, 3], tf.uint8, "image"), tf.TensorSpec([None], tf.int64, "label")])
        image, _ = source.get_input_tensors()
        with tf.compat.v1.Session() as sess, hooked_session(sess, source) as run:
            return run(image)


def test_the_graph_path_refuses_a_cut_jpeg_in_python_and_decodes_it_leniently_only_when_asked():
    data = GOOD[:len(GOOD) // 2]
    with pytest.raises(DamagedImageError, match=damaged_message(r"JpegCropWindows \(component 0\)", data,
                                                                r"it has no end-of-image marker")):
        _plans([data], None)
    rows = [[data, crop, label] for crop, label in _plans([data], "lenient")]
    with pytest.raises(tf.errors.InvalidArgumentError,          # TF 2's words, then TF 1.15's
                       match="jpeg::Uncompress failed|Invalid JPEG data or crop window"):
        _decode_in_graph(rows, "strict")           # TensorFlow's own decoder refuses what it reaches
    images = _decode_in_graph(rows, "lenient")
    assert images.shape == (1, 64, 64, 3)
    assert (np.abs(images[0, -8:].astype(int) - 128) <= 1).all()
    image_damage.set_decoding("lenient")           # the process' mode is the default of both
    assert _decode_in_graph([[data] + _plans([data], None)[0]], None).shape == (1, 64, 64, 3)


@needs_turbojpeg
def test_thorough_decoding_refuses_corrupt_data_before_it_reaches_tensorflows_decoder():
    data = corrupt(GOOD, (SCAN + len(GOOD)) // 2)
    rows = [[data, crop, label] for crop, label in _plans([data], "strict")]    # the structure is intact
    assert _decode_in_graph(rows, "strict").shape == (1, 64, 64, 3)             # TensorFlow decodes it
    with pytest.raises(DamagedImageError, match=damaged_message(r"JpegCropWindows \(component 0\)", data,
                                                                "libjpeg-turbo: Corrupt JPEG data")):
        _plans([data], "thorough")
    assert len(_plans([GOOD], "thorough")) == 1
    with pytest.raises(ValueError, match=r"^JpegCropWindows: decoding must be one of \('strict', 'thorough', "
                                         r"'lenient'\), got 'fast'$"):
        _plans([GOOD], "fast")


@pytest.mark.parametrize("encoded", [True, False])
def test_a_dataset_reader_names_the_damaged_file(tmp_path, encoded):
    from inputpipe.dataflow import dataset
    from test_dataset_readers import make_ilsvrc

    root = make_ilsvrc(str(tmp_path / "ilsvrc"))
    path = os.path.join(root, "original", "val", "ILSVRC2012_val_00000002.JPEG")
    with open(path, "wb") as f:
        f.write(GOOD[:len(GOOD) // 2])
    ds = dataset.ILSVRC12(os.path.join(root, "original"), "val", meta_dir=os.path.join(root, "meta"), shuffle=False,
                          encoded=encoded)
    ds.reset_state()
    with pytest.raises(DamagedImageError, match=r"^ILSVRC12: the JPEG file {} is damaged: it has no end-of-image "
                                                r"marker \(EOI\)".format(path)) as info:
        list(ds)
    assert isinstance(info.value, OSError) and isinstance(info.value, ValueError)
    image_damage.set_decoding("lenient")
    ds.reset_state()
    assert len(list(ds)) == len(ds)


def test_image_from_file_names_the_damaged_file_and_reads_it_leniently_when_asked(tmp_path):
    from inputpipe.dataflow import ImageFromFile

    good, cut, empty = (str(tmp_path / name) for name in ("good.jpg", "cut.jpg", "empty.png"))
    for path, data in ((good, GOOD), (cut, GOOD[:SCAN + 500]), (empty, b"")):
        with open(path, "wb") as f:
            f.write(data)
    for path, problem in ((cut, r"the JPEG file {} is damaged: it has no end-of-image marker".format(cut)),
                          (empty, r"got 0 bytes; expected the bytes of an image file \(JPEG, PNG, \.\.\.\) \({} is "
                                  r"empty\)".format(empty))):
        flow = ImageFromFile([good, path])
        flow.reset_state()
        with pytest.raises(DamagedImageError, match="^ImageFromFile: " + problem):
            list(flow)
    image_damage.set_decoding("lenient")
    flow = ImageFromFile([good, cut])
    flow.reset_state()
    assert [dp[0].shape for dp in flow] == [(375, 500, 3)] * 2
