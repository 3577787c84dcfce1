"""A pixel limit for image files, checked from the header before anything is decoded.

A PNG of a few hundred bytes can declare a 100000x100000 image in its header; OpenCV would then
try to allocate tens of GB to decode it. Everywhere inputpipe decodes an image file
(:class:`~inputpipe.dataflow.ImageFromFile` and the dataset readers that read JPEGs), it first
reads the width and height the file declares (PNG ``IHDR``, JPEG ``SOF``, BMP header: a few small
reads, no decoding) and refuses a file above :data:`MAX_IMAGE_PIXELS` with an
:class:`ImageTooLargeError` naming the file, the declared size and the limit.

The limit is ``2 ** 28`` pixels (268 million, e.g. 16384x16384) unless the environment variable
``INPUTPIPE_MAX_IMAGE_PIXELS`` sets another at import (so it also reaches spawned worker
processes); set ``image_limits.MAX_IMAGE_PIXELS`` at run time to change it in this process and the
workers it forks, or to None to turn the check off. Files in other formats (TIFF, WebP, ...) are
left to OpenCV's own limit, the environment variable ``OPENCV_IO_MAX_IMAGE_PIXELS`` (default
``2 ** 30``), which OpenCV reads once, at its first decode.

Example::

    from inputpipe.dataflow import image_limits
    image_limits.MAX_IMAGE_PIXELS = 2 ** 30            # allow larger images in this process
    size = image_limits.declared_image_size("photo.png")   # (width, height), or None
    image_limits.check_image_file("ImageFromFile", "photo.png")

Decoding encoded bytes yourself (``cv2.imdecode`` in a map function)? :func:`check_image_bytes`
applies the same limit to them. (``imgaug.JpegNoise`` decodes only what it just encoded from an
image in memory, so it needs no check.)
"""
import os
import struct
from typing import Any, Optional, Tuple, Union

import numpy as np

from ..utils.compat import Protocol

__all__ = ["MAX_IMAGE_PIXELS", "ImageTooLargeError", "declared_image_size", "check_image_file", "check_image_bytes"]

_ENVIRONMENT_VARIABLE = "INPUTPIPE_MAX_IMAGE_PIXELS"
_DEFAULT_MAX_IMAGE_PIXELS = 2 ** 28


def _limit_from_environment() -> Optional[int]:
    text = os.environ.get(_ENVIRONMENT_VARIABLE, "").strip()
    if not text:
        return _DEFAULT_MAX_IMAGE_PIXELS
    if text.lower() == "none":
        return None
    try:
        limit = int(text)
    except ValueError:
        limit = -1
    if limit <= 0:
        raise ValueError("{} must be a positive number of pixels or 'none', got {!r}".format(
            _ENVIRONMENT_VARIABLE, text))
    return limit


#: The most pixels (width x height) an image file may declare; None turns the check off.
MAX_IMAGE_PIXELS: Optional[int] = _limit_from_environment()


class ImageTooLargeError(ValueError):
    """An image file whose header declares more pixels than :data:`MAX_IMAGE_PIXELS`; the message
    names the component, the file, the declared size and the limit.

    Example::

        try:
            check_image_file("ImageFromFile", "bomb.png")
        except ImageTooLargeError as err:
            print(err)   # ImageFromFile: bomb.png declares a 100000x100000 image (10000000000 pixels), ...
    """


_JPEG_FRAME_MARKERS = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
_JPEG_MARKERS_WITHOUT_LENGTH = frozenset([0x01] + list(range(0xD0, 0xD8)))


class _Readable(Protocol):
    """What the header parsers read from: an open binary file, or :class:`_BytesReader`."""

    def seek(self, offset: int) -> Any: ...

    def read(self, count: int) -> bytes: ...


class _BytesReader:
    """Reads of a few header bytes from an in-memory buffer, without copying the whole buffer
    (``io.BytesIO`` would copy every byte of the image first)."""

    def __init__(self, view: memoryview):
        self._view, self._at = view, 0

    def seek(self, offset: int) -> int:
        self._at = offset
        return offset

    def read(self, count: int) -> bytes:
        start = min(self._at, len(self._view))
        self._at = start + count
        return bytes(self._view[start:self._at])


def _read_at(f: _Readable, offset: int, count: int) -> bytes:
    f.seek(offset)
    return f.read(count)


def _png_size(f: _Readable) -> Optional[Tuple[int, int]]:
    head = _read_at(f, 0, 24)
    if len(head) < 24 or head[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def _bmp_size(f: _Readable) -> Optional[Tuple[int, int]]:
    head = _read_at(f, 14, 12)
    if len(head) < 8:
        return None
    header_size = struct.unpack("<I", head[:4])[0]
    if header_size == 12:     # BITMAPCOREHEADER: 16-bit unsigned sizes
        width, height = struct.unpack("<HH", head[4:8])
        return width, height
    if len(head) < 12:
        return None
    width, height = struct.unpack("<ii", head[4:12])
    return abs(width), abs(height)       # a negative height means rows stored top-down


def _jpeg_size(f: _Readable) -> Optional[Tuple[int, int]]:
    """The size in the first frame header (SOFn), walking the marker segments before it."""
    at = 2
    while True:
        head = _read_at(f, at, 4)
        if len(head) < 2 or head[0] != 0xFF:
            return None
        marker = head[1]
        if marker == 0xFF:               # a fill byte before the marker
            at += 1
            continue
        if marker in _JPEG_MARKERS_WITHOUT_LENGTH:
            at += 2
            continue
        if marker in (0xD9, 0xDA) or len(head) < 4:   # end of image, or the scan: no frame header before
            return None
        if marker in _JPEG_FRAME_MARKERS:
            frame = _read_at(f, at + 4, 5)        # precision, height, width
            if len(frame) < 5:
                return None
            height, width = struct.unpack(">HH", frame[1:5])
            return width, height
        length = struct.unpack(">H", head[2:4])[0]
        if length < 2:
            return None
        at += 2 + length


def _declared_size(f: _Readable) -> Optional[Tuple[int, int]]:
    signature = _read_at(f, 0, 8)
    if signature == b"\x89PNG\r\n\x1a\n":
        return _png_size(f)
    if signature[:3] == b"\xff\xd8\xff":
        return _jpeg_size(f)
    if signature[:2] == b"BM":
        return _bmp_size(f)
    return None


def declared_image_size(source: Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, np.ndarray]
                        ) -> Optional[Tuple[int, int]]:
    """``(width, height)`` as the header of a PNG, JPEG or BMP image declares it (read without
    decoding), or None for another format or a header too damaged to say. ``source`` is a file
    path, or the encoded bytes (e.g. a uint8 array for ``cv2.imdecode``).

    Example::

        declared_image_size("photo.jpg")      # (500, 375)
    """
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return _declared_size(f)
    return _declared_size(_BytesReader(_bytes_view(source)))


def _bytes_view(data: Any) -> memoryview:
    """A flat byte view of bytes, a bytearray, a memoryview or a (uint8) numpy array."""
    return memoryview(data).cast("B")


def _refuse_above_the_limit(component: str, what: str, size: Optional[Tuple[int, int]]) -> None:
    limit = MAX_IMAGE_PIXELS
    if limit is not None and size is not None and size[0] * size[1] > limit:
        raise ImageTooLargeError(
            "{}: {} declares a {}x{} image ({} pixels), more than the limit of {} pixels; raise "
            "inputpipe.dataflow.image_limits.MAX_IMAGE_PIXELS (or the environment variable {}) if the image "
            "is trusted".format(component, what, size[0], size[1], size[0] * size[1], limit, _ENVIRONMENT_VARIABLE))


def check_image_file(component: str, path: str) -> None:
    """Raise an :class:`ImageTooLargeError` naming ``component`` when the image file ``path``
    declares more than :data:`MAX_IMAGE_PIXELS` pixels (nothing is decoded; a file that cannot be
    opened is left for the decoder to report)."""
    if MAX_IMAGE_PIXELS is None:
        return
    try:
        size = declared_image_size(path)
    except OSError:
        return
    _refuse_above_the_limit(component, path, size)


def check_image_bytes(component: str, data: Union[bytes, bytearray, memoryview, np.ndarray]
                      ) -> Optional[Tuple[int, int]]:
    """As :func:`check_image_file`, for encoded bytes about to be decoded (``cv2.imdecode``), e.g. in
    your own map function over an LMDB of JPEGs. Returns the declared ``(width, height)`` (None
    when the header does not say).

    Example::

        check_image_bytes("decode", jpeg_bytes)
        image = cv2.imdecode(np.frombuffer(jpeg_bytes, np.uint8), cv2.IMREAD_COLOR)
    """
    size = declared_image_size(data)
    if MAX_IMAGE_PIXELS is not None:
        _refuse_above_the_limit(component, "an encoded image of {} bytes".format(_bytes_view(data).nbytes), size)
    return size
