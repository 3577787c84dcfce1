"""Encoded images (JPEG bytes) that augmentors crop and resize before decoding.

Give an augmentor, an :class:`~inputpipe.dataflow.imgaug.AugmentorList` or
:class:`~inputpipe.dataflow.AugmentImageComponent` the bytes of an image file instead of its
pixels (``bytes``, or a 1-d ``uint8`` array such as ``np.fromfile(path, np.uint8)``), and the
image is decoded as late as the augmentors allow, and only as much as they need:

- augmentors that choose from the image's size alone (``GoogleNetRandomCropAndResize``,
  ``RandomCrop``, ``CenterCrop``, ``Resize``, ``ResizeShortestEdge``, ``Flip``, ...) draw their
  parameters from the size in the file's header, with the same random numbers as for the pixels;
- a crop only narrows the window to decode; a resize after it decodes just that window's rows and
  columns (libjpeg-turbo's partial decode), and, when the window is at least twice the target
  size, at 1/2, 1/4 or 1/8 scale inside the inverse DCT, then crops exactly and resizes;
- any other augmentor gets the decoded pixels, decoded once.

The result is what the same augmentors give on ``cv2.imdecode(bytes, cv2.IMREAD_COLOR)``: the same
crop windows and flips (the random draws are identical), pixels equal up to libjpeg's upsampling at
the window's edges and, where the DCT scale was used, the difference between that downscale and a
resize of all pixels.

Damaged files are errors (a :class:`~inputpipe.dataflow.image_damage.DamagedImageError`), not
grey pixels: empty bytes, a JPEG or PNG cut short or with a damaged structure, and a warning of
libjpeg-turbo in what it decodes; :func:`~inputpipe.dataflow.image_damage.set_decoding` chooses
``"thorough"`` (every JPEG's data read to its end) or ``"lenient"`` decoding (see
:mod:`~inputpipe.dataflow.image_damage`).

The partial decode needs libjpeg-turbo's TurboJPEG library (``pip install "inputpipe[jpeg]"``).
Without it, images are decoded whole with OpenCV, with one warning. PNG and other formats are
always decoded whole. A JPEG that OpenCV would turn by its EXIF orientation, or whose colours
libjpeg-turbo cannot give as BGR (CMYK), is decoded by OpenCV too, so the pixels stay OpenCV's.

Example::

    import cv2
    import numpy as np
    from inputpipe.dataflow import imgaug

    augs = imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(), imgaug.Flip(horiz=True)])
    encoded = cv2.imencode(".jpg", np.zeros((375, 500, 3), np.uint8))[1]     # a 1-d uint8 array
    image = augs.augment(encoded)             # (224, 224, 3) uint8, BGR; only the crop decoded
"""
import os
import struct
from typing import Any, Optional, Tuple

import numpy as np

from ...utils.logger import get_logger
from ..image_damage import DamagedImageError, check_unless_lenient, decoder_error, get_decoding, read_all_jpeg_data
from .._image import turbojpeg as _turbojpeg
from .._image.opencv import import_cv2

__all__ = ["EncodedImage", "is_encoded", "as_encoded", "decoded", "set_dct_method", "get_dct_method"]

logger = get_logger(__name__)

#: The environment variable that chooses the inverse DCT of the partial decode in every process
#: (worker processes started by any method inherit it): ``accurate`` (default) or ``fast``.
DCT_METHOD_VARIABLE = "INPUTPIPE_JPEG_DCT"
_DCT_METHODS = ("accurate", "fast")


def _dct_from_environment() -> str:
    value = os.environ.get(DCT_METHOD_VARIABLE, "accurate").strip().lower() or "accurate"
    if value not in _DCT_METHODS:
        logger.warning("%s=%r is not one of %s; using 'accurate'", DCT_METHOD_VARIABLE, value, _DCT_METHODS)
        return "accurate"
    return value


_dct_method = [_dct_from_environment()]


def set_dct_method(method: str) -> None:
    """Choose the inverse DCT of the partial JPEG decode: ``"accurate"`` (the default: libjpeg's
    JDCT_ISLOW, the pixels of ``cv2.imdecode``) or ``"fast"`` (JDCT_IFAST, what TensorFlow's
    ``decode_jpeg``/``decode_and_crop_jpeg`` use by default: TensorFlow's pixels, within about 1
    level of the accurate ones on average, and about 2% less decode time). Sets
    ``INPUTPIPE_JPEG_DCT`` too, so worker processes started afterwards, by any start method, use it.

    Example::

        from inputpipe.dataflow import imgaug
        imgaug.set_dct_method("fast")       # before the flow starts its workers
    """
    if method not in _DCT_METHODS:
        raise ValueError("set_dct_method: method must be one of {}, got {!r}".format(_DCT_METHODS, method))
    _dct_method[0] = method
    os.environ[DCT_METHOD_VARIABLE] = method


def get_dct_method() -> str:
    """The inverse DCT the partial decode uses now: ``"accurate"`` or ``"fast"``."""
    return _dct_method[0]

_JPEG_START = b"\xff\xd8\xff"
_warned_no_turbojpeg: list = []


#: How the files OpenCV decodes begin (JPEG, PNG, BMP, GIF, TIFF, WebP's RIFF, JPEG 2000, PNM, ...).
_FILE_STARTS = (_JPEG_START, b"\x89PNG\r\n\x1a\n", b"BM", b"GIF8", b"II*\x00", b"MM\x00*", b"RIFF",
                b"\x00\x00\x00\x0cjP", b"\xff\x4f\xff\x51", b"P1", b"P2", b"P3", b"P4", b"P5", b"P6", b"#?RADIANCE",
                b"\x76\x2f\x31\x01")


def is_encoded(value: Any) -> bool:
    """Whether ``value`` is the bytes of an image file rather than pixels: ``bytes``,
    ``bytearray``, ``memoryview``, an :class:`EncodedImage`, or a 1-d ``uint8`` array that starts
    as an image file does (pixels are never 1-d; a 1-d array that is no file stays an array, which
    augmentors refuse by its shape)."""
    if isinstance(value, np.ndarray):
        return value.ndim == 1 and value.dtype == np.uint8 and value[:12].tobytes().startswith(_FILE_STARTS)
    return isinstance(value, (bytes, bytearray, memoryview, EncodedImage))


def as_encoded(value: Any, component: str = "imgaug", grey: bool = False) -> "EncodedImage":
    """``value`` (see :func:`is_encoded`) as an :class:`EncodedImage`."""
    if isinstance(value, EncodedImage):
        return value
    return EncodedImage(value, component=component, grey=grey)


def decoded(image: Any) -> Any:
    """The pixels of ``image`` if it is an :class:`EncodedImage`, else ``image`` itself."""
    return image.decode() if isinstance(image, EncodedImage) else image


class EncodedImage:
    """An image file's bytes standing in for its pixels until an augmentor needs them.

    It has the ``shape`` (``(h, w, 3)``, or ``(h, w)`` with ``grey``), ``ndim`` and ``dtype``
    (uint8) of the pixels it stands for, so augmentors that choose from the size work on it as on
    the pixels. :meth:`crop` narrows the window to decode; :meth:`resized` decodes the window at
    the best DCT scale for the target size and resizes; :meth:`decode` gives the window's pixels
    (decoded once, then kept). See the module docstring.

    Example::

        image = EncodedImage(open("photo.jpg", "rb").read())
        image.shape                            # (375, 500, 3): from the header
        part = image.crop(10, 20, 100, 150)    # nothing decoded yet
        pixels = part.resized(56, 56)          # rows 10..109, columns 20..169 decoded at 1/2
    """

    __slots__ = ("data", "component", "grey", "_mode", "_header", "_window", "_pixels", "_full")

    def __init__(self, data: Any, component: str = "imgaug", grey: bool = False):
        # bytes, and a flat uint8 array (np.fromfile's), are read in place: no copy of the file
        if isinstance(data, np.ndarray) and not _is_flat_uint8(data):
            data = data.tobytes()
        self.data = data if isinstance(data, bytes) or _is_flat_uint8(data) else bytes(data)
        self.component = component
        self.grey = grey
        self._mode = get_decoding()                      # strict, thorough or lenient (image_damage)
        self._pixels: Optional[np.ndarray] = None
        self._full: Optional[np.ndarray] = None          # a whole-image decode by OpenCV, when used
        self._header = self._read_header()
        self._window = (0, 0, self._height(), self._width())

    # ---------------------------------------------------------------------------- the header

    def _read_header(self) -> Optional[_turbojpeg.JpegHeader]:
        """libjpeg-turbo's header of a JPEG it can decode as OpenCV would; otherwise None, and
        the whole image is decoded by OpenCV now (for its size). Damaged data is refused first
        (unless decoding is lenient)."""
        from ..image_limits import check_image_bytes

        check_unless_lenient(self.component, self.data, mode=self._mode)
        declared = check_image_bytes(self.component, self.data)
        view = memoryview(self.data)
        is_jpeg = view[:len(_JPEG_START)] == _JPEG_START
        tj = _turbojpeg.turbojpeg() if is_jpeg else None
        if tj is None and is_jpeg and not _warned_no_turbojpeg:
            _warned_no_turbojpeg.append(True)
            logger.warning("%s: libjpeg-turbo's TurboJPEG library was not found, so JPEGs are decoded whole "
                           "instead of only the crop they need (slower); pip install \"inputpipe[jpeg]\"",
                           self.component)
        if tj is not None:
            try:
                header = tj.header(self.data, declared)
            except _turbojpeg.TurboJpegError:
                header = None
            if header is not None and header.height > 0 and header.width > 0 and header.precision == 8:
                partial = header.colorspace not in (3, 4) and _exif_orientation(view) in (None, 1)
                if self._mode == "thorough" or (self._mode == "strict" and not partial):
                    read_all_jpeg_data(self.component, self.data, header)   # OpenCV ignores libjpeg's warnings
                if partial:
                    return header
        self._full = self._decode_with_opencv()
        return None

    def _height(self) -> int:
        return self._header.height if self._header is not None else self._full.shape[0]    # type: ignore[union-attr]

    def _width(self) -> int:
        return self._header.width if self._header is not None else self._full.shape[1]     # type: ignore[union-attr]

    def _decode_with_opencv(self) -> np.ndarray:
        cv2 = import_cv2(self.component)
        flag = cv2.IMREAD_GRAYSCALE if self.grey else cv2.IMREAD_COLOR
        pixels = cv2.imdecode(np.frombuffer(self.data, np.uint8), flag)
        if pixels is None:
            raise DamagedImageError("{}: OpenCV cannot decode these {} bytes as an image (they start with {!r}): "
                                    "expected a complete image file in a format OpenCV reads".format(
                                        self.component, len(self.data), bytes(memoryview(self.data)[:16])))
        return pixels

    # ---------------------------------------------------------------------------- like an array

    @property
    def shape(self) -> Tuple[int, ...]:
        _, _, h, w = self._window
        return (h, w) if self.grey else (h, w, 3)

    @property
    def ndim(self) -> int:
        return 2 if self.grey else 3

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def __repr__(self) -> str:
        return "EncodedImage({} bytes, window (y, x, h, w) = {} of {}x{})".format(
            len(self.data), self._window, self._height(), self._width())

    # ---------------------------------------------------------------------------- cropping and decoding

    def crop(self, y0: int, x0: int, h: int, w: int) -> "EncodedImage":
        """The ``h x w`` window at ``(y0, x0)`` of this one, still encoded."""
        y, x, height, width = self._window
        if h <= 0 or w <= 0:
            raise ValueError("{}: the crop (y0, x0, h, w) = {} of the {}x{} image is empty; an encoded image "
                             "cannot become empty (expected h and w >= 1)".format(self.component, (y0, x0, h, w),
                                                                                  height, width))
        if y0 < 0 or x0 < 0 or y0 + h > height or x0 + w > width:
            raise ValueError("{}: crop (y0, x0, h, w) = {} is outside the {}x{} image".format(
                self.component, (y0, x0, h, w), height, width))
        out = EncodedImage.__new__(EncodedImage)
        out.data, out.component, out.grey, out._mode, out._header, out._full = (
            self.data, self.component, self.grey, self._mode, self._header, self._full)
        out._window, out._pixels = (y + y0, x + x0, h, w), None
        return out

    def decode(self) -> np.ndarray:
        """The window's pixels (BGR uint8, or greyscale), decoded on the first call."""
        if self._pixels is None:
            self._pixels = self._decode_window(1)
        return self._pixels

    def _decode_window(self, scale: int) -> np.ndarray:
        y, x, h, w = self._window
        if self._header is None:
            return self._full[y:y + h, x:x + w]           # type: ignore[index]
        from ..image_limits import MAX_IMAGE_PIXELS

        tj = _turbojpeg.turbojpeg()
        assert tj is not None                            # a header means the library was there
        try:
            return tj.decode(self.data, self._window, scale=scale, grey=self.grey, header=self._header,
                             max_pixels=MAX_IMAGE_PIXELS or 0, fast_dct=_dct_method[0] == "fast",
                             strict=self._mode != "lenient")
        except _turbojpeg.TurboJpegError as err:
            raise decoder_error(self.component, self.data, err) from None

    def resized(self, new_h: int, new_w: int, interp: int) -> np.ndarray:
        """The window resized to ``new_h x new_w`` (OpenCV interpolation ``interp``), decoded at
        the smallest DCT scale (1/8, 1/4, 1/2) that keeps it at least the target size."""
        cv2 = import_cv2(self.component)
        y, x, h, w = self._window
        scale = 1
        if self._header is not None and self._pixels is None:
            for candidate in (8, 4, 2):
                if h >= candidate * new_h and w >= candidate * new_w:
                    scale = candidate
                    break
        if scale == 1:
            return cv2.resize(self.decode(), (new_w, new_h), interpolation=interp)
        # The decoded part starts at the window's scaled corner rounded down; sample the scaled
        # window itself, sub-pixel exact, as cv2.resize samples a window of the full image.
        part = self._decode_window(scale)
        fx, fy = w / scale / new_w, h / scale / new_h
        left, top = x / scale - x // scale, y / scale - y // scale
        to_source = np.array([[fx, 0.0, 0.5 * fx - 0.5 + left], [0.0, fy, 0.5 * fy - 0.5 + top]])
        return cv2.warpAffine(part, to_source, (new_w, new_h), flags=_warp_interpolation(cv2, interp) |
                              cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REPLICATE)


def _is_flat_uint8(data: Any) -> bool:
    return isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1 and data.flags.c_contiguous


def _warp_interpolation(cv2: Any, interp: int) -> int:
    """``interp`` for cv2.warpAffine, which has no area interpolation (after the DCT scale the
    window is less than twice the target, where linear is what area gives)."""
    return cv2.INTER_LINEAR if interp == cv2.INTER_AREA else interp


def _exif_orientation(data: memoryview) -> Optional[int]:
    """The EXIF orientation tag (1..8) of a JPEG, None when it has none (OpenCV turns the image by
    it when it is not 1)."""
    pos = 2
    end = len(data)
    while pos + 4 <= end and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker in (0xD9, 0xDA):                   # end of image, start of scan: no more headers
            return None
        length = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        if marker == 0xE1 and bytes(data[pos + 4:pos + 10]) == b"Exif\x00\x00":
            return _tiff_orientation(data[pos + 10:pos + 2 + length])
        pos += 2 + length
    return None


def _tiff_orientation(tiff: memoryview) -> Optional[int]:
    if len(tiff) < 8 or bytes(tiff[:2]) not in (b"II", b"MM"):
        return None
    order = "<" if bytes(tiff[:2]) == b"II" else ">"
    offset = struct.unpack(order + "I", tiff[4:8])[0]
    if offset + 2 > len(tiff):
        return None
    count = struct.unpack(order + "H", tiff[offset:offset + 2])[0]
    for i in range(count):
        entry = offset + 2 + 12 * i
        if entry + 12 > len(tiff):
            return None
        tag, kind = struct.unpack(order + "HH", tiff[entry:entry + 4])
        if tag == 0x0112 and kind == 3:
            return struct.unpack(order + "H", tiff[entry + 8:entry + 10])[0]
    return None
