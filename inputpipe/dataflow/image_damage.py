"""Damaged image files: strict decoding by default, thorough or lenient decoding when asked.

A JPEG cut short still decodes: libjpeg fills the missing rows with grey and only warns. inputpipe
treats such files as errors wherever it decodes image bytes (the augmentors given encoded bytes,
:class:`~inputpipe.dataflow.JpegCropWindows` and :class:`~inputpipe.input_source.JpegDecodeInput`,
the dataset readers' ``encoded=True``). The decoding mode, :func:`set_decoding`, says how far:

- ``"strict"`` (the default): before decoding, :func:`check_image_structure` walks the file's
  structure (a few small reads, no decoding) and refuses no bytes at all; a JPEG whose marker
  segments run past its end, with bytes that are no marker where one must be (garbage after the
  start of image), a frame header declaring an empty image, no frame header or no scan before the
  end, or no end-of-image marker after the scan (the file was cut); a PNG whose chunks run past
  its end, without an ``IEND`` chunk, or whose ``IHDR`` declares an empty image. A warning of the
  JPEG decoder in what it decodes (premature end of data, corrupt data) is an error too. Not
  seen: corrupt entropy-coded data (flipped bits) in the rows after the part a crop decodes, where
  libjpeg has not read yet (it often notices corrupt data only at the end of the scan).
- ``"thorough"``: strict, and the entropy-coded data of every JPEG is read to its end (decoded at
  1/8 scale by libjpeg-turbo), so corrupt data anywhere in the file is an error whatever the
  crop; this costs about two thirds of a whole decode per image.
- ``"lenient"``: no checks; damaged files decode as far as the decoder can, the rest grey, as
  OpenCV 4 and TensorFlow's ``try_recover_truncated`` give them. Bytes that hold nothing
  (``b""``) are an error in every mode.

Each refusal is a :class:`DamagedImageError` (a ValueError) naming the component, the file when it
is known, and what was expected and found. The mode is set for the process and, through the
environment variable ``INPUTPIPE_DECODING``, for the worker processes started afterwards.

Example::

    from inputpipe.dataflow import image_damage
    image_damage.check_image_structure("my loader", open("photo.jpg", "rb").read(), "photo.jpg")
    image_damage.set_decoding("lenient")           # accept damaged files from now on, in every process
"""
import os
import struct
from typing import Any, Optional, Union

import numpy as np

__all__ = ["DamagedImageError", "check_image_structure", "set_decoding", "get_decoding", "DECODING_VARIABLE"]

#: The environment variable that sets the decoding mode in every process: strict, thorough or lenient.
DECODING_VARIABLE = "INPUTPIPE_DECODING"
_MODES = ("strict", "thorough", "lenient")

_JPEG_STANDALONE_MARKERS = frozenset([0x01] + list(range(0xD0, 0xD8)))         # TEM, RST0..RST7
_JPEG_FRAME_MARKERS = frozenset([0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF])
_JPEG_START, _JPEG_END, _JPEG_SCAN = b"\xff\xd8", b"\xff\xd9", 0xDA
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

Encoded = Union[bytes, bytearray, memoryview, np.ndarray]


class DamagedImageError(ValueError, OSError):
    """The bytes of an image file are damaged (cut short, corrupt) or empty; the message names the
    component, the file when known, and what was expected and found. A ValueError, as the
    augmentors' other refusals, and an OSError, as an image file that cannot be read (PIL's
    "image file is truncated" too)."""


def _mode_from_environment() -> str:
    value = os.environ.get(DECODING_VARIABLE, "").strip().lower() or "strict"
    if value not in _MODES:
        raise ValueError("{} must be one of {}, got {!r}".format(DECODING_VARIABLE, ", ".join(_MODES), value))
    return value


_mode = [_mode_from_environment()]


def set_decoding(mode: str) -> None:
    """Set how damaged image files are treated (see the module docstring): ``"strict"`` (the
    default), ``"thorough"`` or ``"lenient"``. Sets ``INPUTPIPE_DECODING`` too, so worker
    processes started afterwards, by any start method, decode the same way.

    Example::

        from inputpipe.dataflow import imgaug
        imgaug.set_decoding("lenient")     # before the flow starts its workers
    """
    if mode not in _MODES:
        raise ValueError("set_decoding: mode must be one of {}, got {!r}".format(_MODES, mode))
    _mode[0] = mode
    os.environ[DECODING_VARIABLE] = mode


def get_decoding() -> str:
    """The decoding mode now: ``"strict"``, ``"thorough"`` or ``"lenient"``."""
    return _mode[0]


def decoding_mode(component: str, mode: Optional[str]) -> str:
    """``mode`` checked (a ValueError naming ``component`` otherwise), or the process' mode when None."""
    if mode is None:
        return _mode[0]
    if mode not in _MODES:
        raise ValueError("{}: decoding must be one of {}, got {!r}".format(component, _MODES, mode))
    return mode


def _flat(data: Any) -> memoryview:
    """A flat byte view of bytes, a bytearray, a memoryview or a contiguous uint8 array."""
    return memoryview(data).cast("B")


def describe_bytes(component: str, data: Encoded, source: Optional[str] = None, kind: str = "image") -> str:
    """``"<component>: the <kind> file <source>"``, or, without a file name, the size and first
    bytes: the start of a message about ``data``."""
    if source is not None:
        return "{}: the {} file {}".format(component, kind, source)
    view = _flat(data)
    return "{}: the {} of {} bytes starting with {!r}".format(component, kind, view.nbytes, bytes(view[:8]))


def check_image_structure(component: str, data: Encoded, source: Optional[str] = None) -> None:
    """Raise a :class:`DamagedImageError` naming ``component`` (and ``source``, the file, when
    given) when ``data`` is empty, or is a JPEG or PNG whose structure is damaged (see the module
    docstring). Other formats are left to their decoder. Nothing is decoded: a JPEG's header
    segments are walked and its end-of-image marker looked for, a PNG's chunk headers are walked.
    """
    view = _flat(data)
    if view.nbytes == 0:
        raise DamagedImageError("{}: got 0 bytes; expected the bytes of an image file (JPEG, PNG, ...){}".format(
            component, "" if source is None else " ({} is empty)".format(source)))
    if bytes(view[:2]) == _JPEG_START:
        problem = _jpeg_problem(view)
        kind = "JPEG"
    elif bytes(view[:8]) == _PNG_SIGNATURE:
        problem = _png_problem(view)
        kind = "PNG"
    else:
        return
    if problem is not None:
        raise DamagedImageError("{} is damaged: {}".format(describe_bytes(component, data, source, kind), problem))


def _jpeg_problem(view: memoryview) -> Optional[str]:
    """What is wrong with the JPEG ``view`` (after its start-of-image marker), or None."""
    size, at, frame = view.nbytes, 2, False
    while True:
        if at >= size:
            return "it ends at byte {} before its first scan (SOS); expected more marker segments".format(size)
        if view[at] != 0xFF:
            return "byte {} is 0x{:02x} where a marker (0xff..) must be".format(at, view[at])
        while at < size and view[at] == 0xFF:          # fill bytes before a marker
            at += 1
        if at >= size:
            return "it ends at byte {} inside a marker; expected more marker segments".format(size)
        marker = view[at]
        at += 1
        if marker in _JPEG_STANDALONE_MARKERS:
            continue
        if marker in (0x00, 0xD8, 0xD9):
            return "marker 0x{:02x} at byte {} before the first scan (SOS); expected a marker segment".format(
                marker, at - 2)
        if at + 2 > size:
            return "it ends at byte {} inside the length of marker 0x{:02x}".format(size, marker)
        length = struct.unpack(">H", bytes(view[at:at + 2]))[0]
        if length < 2 or at + length > size:
            return "the segment of marker 0x{:02x} at byte {} declares {} bytes, {} are left".format(
                marker, at - 2, length, size - at)
        if marker in _JPEG_FRAME_MARKERS:
            if length < 7:
                return "the frame header (SOF) at byte {} has {} bytes, fewer than 7".format(at - 2, length)
            height, width = struct.unpack(">HH", bytes(view[at + 3:at + 7]))
            if height == 0 or width == 0:
                return "the frame header (SOF) declares an empty {}x{} image".format(width, height)
            frame = True
        if marker == _JPEG_SCAN:
            if not frame:
                return "its first scan (SOS) at byte {} comes before any frame header (SOF)".format(at - 2)
            return _jpeg_end_problem(view, at + length)
        at += length


def _jpeg_end_problem(view: memoryview, scan: int) -> Optional[str]:
    """None when an end-of-image marker follows the scan data starting at ``scan`` (data after it
    is allowed), else what is missing."""
    size = view.nbytes
    if bytes(view[size - 2:]) == _JPEG_END:
        return None
    if bytes(view[scan:]).rfind(_JPEG_END) >= 0:
        return None
    return "it has no end-of-image marker (EOI) after its scan data (it ends at byte {}): the file was cut " \
           "short".format(size)


def _png_problem(view: memoryview) -> Optional[str]:
    """What is wrong with the PNG ``view`` (after its signature), or None."""
    size, at, first = view.nbytes, 8, True
    while True:
        if at + 8 > size:
            return "it ends at byte {} without an IEND chunk; expected another chunk header".format(size)
        length, kind = struct.unpack(">I4s", bytes(view[at:at + 8]))
        if at + 12 + length > size:
            return "the {!r} chunk at byte {} declares {} bytes of data, {} are left".format(
                kind.decode("latin-1"), at, length, max(0, size - at - 12))
        if first:
            if kind != b"IHDR" or length < 8:
                return "its first chunk is {!r} of {} bytes, not the 13-byte IHDR".format(kind.decode("latin-1"), length)
            width, height = struct.unpack(">II", bytes(view[at + 8:at + 16]))
            if width == 0 or height == 0:
                return "its IHDR declares an empty {}x{} image".format(width, height)
            first = False
        if kind == b"IEND":
            return None
        at += 12 + length


def check_unless_lenient(component: str, data: Encoded, source: Optional[str] = None,
                         mode: Optional[str] = None) -> None:
    """:func:`check_image_structure` unless the decoding ``mode`` (the process' when None) is
    lenient; empty bytes are refused in every mode."""
    if (mode or _mode[0]) != "lenient" or _flat(data).nbytes == 0:
        check_image_structure(component, data, source)


def decoder_error(component: str, data: Encoded, err: Exception, source: Optional[str] = None) -> DamagedImageError:
    """The :class:`DamagedImageError` for libjpeg-turbo's failure ``err`` on the JPEG ``data``
    (from the file ``source`` when known)."""
    reason = str(err).replace("libjpeg-turbo could not decode the JPEG: ", "libjpeg-turbo: ")
    return DamagedImageError("{} is damaged: {}".format(describe_bytes(component, data, source, "JPEG"), reason))


def read_all_jpeg_data(component: str, data: Encoded, header: Any = None, source: Optional[str] = None) -> bool:
    """Read all of the JPEG ``data``'s entropy-coded data with libjpeg-turbo (``header``: its
    header when already read; ``source``: the file, when known), a warning of the decoder being a
    :class:`DamagedImageError`; False when libjpeg-turbo is not there (nothing was read)."""
    from .image_limits import MAX_IMAGE_PIXELS
    from ._image import turbojpeg as _turbojpeg

    tj = _turbojpeg.turbojpeg()
    if tj is None:
        return False
    try:
        tj.check(data, header=header, max_pixels=MAX_IMAGE_PIXELS or 0)
    except _turbojpeg.TurboJpegError as err:
        raise decoder_error(component, data, err, source) from None
    return True


def check_image_file_damage(component: str, path: str, data: Optional[np.ndarray] = None) -> None:
    """Refuse the damaged image file ``path`` (its bytes ``data`` when already read) by the
    decoding mode, naming ``component`` and the file: its structure unless decoding is lenient,
    and, when it is thorough, all of a JPEG's data. A file that cannot be opened is left to the
    decoder to report."""
    if data is None:
        try:
            if _mode[0] == "lenient" and os.path.getsize(path) > 0:
                return                     # only emptiness is refused: no need to read the file
            data = np.fromfile(path, np.uint8)
        except OSError:
            return
    check_unless_lenient(component, data, path)
    if _mode[0] == "thorough" and data[:2].tobytes() == _JPEG_START:
        read_all_jpeg_data(component, data, source=path)
