"""A small ctypes binding to libjpeg-turbo's TurboJPEG 3 API: decode a window of a JPEG, at a
DCT scale, without decoding the rest.

The library comes from the ``jpeg`` extra (``pip install "inputpipe[jpeg]"``: the ``turbojpeg``
wheel, which ships ``libturbojpeg``), from ``$INPUTPIPE_TURBOJPEG`` (a path to a
``libturbojpeg.so`` of version 3 or later), or from the system. :func:`turbojpeg` returns None
when none of them is there (callers then decode the whole image with OpenCV).

libjpeg-turbo decodes a window by skipping the rows above it (their entropy data is still read,
not transformed into pixels), stopping after its last row, and transforming only the columns of
the iMCUs that contain it (:meth:`TurboJpeg.decode` widens the window to the iMCU grid and crops
the rest in numpy). A scale of 1/2, 1/4 or 1/8 makes the inverse DCT produce fewer pixels.

Each thread gets its own decompressor (a TurboJPEG handle is not thread-safe); ctypes releases
the GIL during every call, so threads decode in parallel.

Example::

    tj = turbojpeg()
    if tj is not None:
        header = tj.header(data)                     # height, width, ...
        window = tj.decode(data, (10, 20, 100, 150), scale=2)   # rows 10.., cols 20.., at 1/2
"""
import ctypes
import ctypes.util
import os
import threading
from typing import NamedTuple, Optional, Tuple, Union

import numpy as np

from ...utils.compat import distribution_files
from ...utils.logger import get_logger

__all__ = ["turbojpeg", "TurboJpeg", "JpegHeader", "TurboJpegError", "TurboJpegWarning"]

logger = get_logger(__name__)

#: What :meth:`TurboJpeg.header` and :meth:`TurboJpeg.decode` read: the file's bytes, or an array
#: or buffer over them (read in place, not copied).
Encoded = Union[bytes, bytearray, memoryview, np.ndarray]

_TJINIT_DECOMPRESS = 1
_TJPARAM_STOPONWARNING = 0
_TJPARAM_SUBSAMP = 4
_TJPARAM_JPEGWIDTH = 5
_TJPARAM_JPEGHEIGHT = 6
_TJPARAM_PRECISION = 7
_TJPARAM_COLORSPACE = 8
_TJPARAM_FASTDCT = 10
_TJPARAM_MAXPIXELS = 24
_TJERR_FATAL = 1
_TJPF_BGR, _TJPF_GRAY, _TJPF_CMYK = 1, 6, 11
_TJCS_CMYK, _TJCS_YCCK = 3, 4
#: iMCU width and height (pixels at full scale) of each TJSAMP_* subsampling, 444 .. 441
_IMCU_WIDTH = (8, 16, 16, 8, 8, 32, 8)
_IMCU_HEIGHT = (8, 8, 16, 8, 16, 8, 32)
#: The DCT scales :meth:`TurboJpeg.decode` uses: 1/1, 1/2, 1/4, 1/8.
SCALES = (1, 2, 4, 8)


class TurboJpegError(ValueError):
    """libjpeg-turbo could not decode the data (a ValueError, as OpenCV's failures become here)."""


class TurboJpegWarning(TurboJpegError):
    """libjpeg-turbo warned while decoding (premature end of data, corrupt data): the data is
    damaged; with ``strict=False`` the decode goes on instead (the rest grey)."""


class JpegHeader(NamedTuple):
    """What a JPEG's header says."""

    height: int
    width: int
    #: TJSAMP_* (0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0, 3 = grey, ...; -1 unknown)
    subsampling: int
    #: TJCS_* (0 RGB, 1 YCbCr, 2 grey, 3 CMYK, 4 YCCK)
    colorspace: int
    precision: int

    @property
    def imcu(self) -> Tuple[int, int]:
        """(height, width) of the iMCU grid in pixels at full scale (8 x 8 when unknown)."""
        if 0 <= self.subsampling < len(_IMCU_WIDTH):
            return _IMCU_HEIGHT[self.subsampling], _IMCU_WIDTH[self.subsampling]
        return 8, 8


class _Region(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int), ("w", ctypes.c_int), ("h", ctypes.c_int)]


class _Scaling(ctypes.Structure):
    _fields_ = [("num", ctypes.c_int), ("denom", ctypes.c_int)]


class TurboJpeg:
    """Decoder of whole JPEGs or windows of them, through one loaded ``libturbojpeg`` (see the
    module docstring). Use :func:`turbojpeg` to get the process' instance.

    Example::

        tj = TurboJpeg("/usr/lib/x86_64-linux-gnu/libturbojpeg.so.0")
        image = tj.decode(data)                      # BGR, like cv2.imdecode(data, IMREAD_COLOR)
    """

    def __init__(self, path: str):
        lib = ctypes.CDLL(path)
        self.path = path
        self._init = _function(lib, "tj3Init", ctypes.c_void_p, [ctypes.c_int])
        self._destroy = _function(lib, "tj3Destroy", None, [ctypes.c_void_p])
        self._set = _function(lib, "tj3Set", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int])
        self._get = _function(lib, "tj3Get", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int])
        self._header = _function(lib, "tj3DecompressHeader", ctypes.c_int,
                                 [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t])
        self._scale = _function(lib, "tj3SetScalingFactor", ctypes.c_int, [ctypes.c_void_p, _Scaling])
        self._crop = _function(lib, "tj3SetCroppingRegion", ctypes.c_int, [ctypes.c_void_p, _Region])
        self._decompress = _function(lib, "tj3Decompress8", ctypes.c_int,
                                     [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                      ctypes.c_int, ctypes.c_int])
        self._error_text = _function(lib, "tj3GetErrorStr", ctypes.c_char_p, [ctypes.c_void_p])
        self._error_code = _function(lib, "tj3GetErrorCode", ctypes.c_int, [ctypes.c_void_p])
        self._local = threading.local()

    def _handle(self) -> int:
        handle = getattr(self._local, "handle", None)
        if handle is None:
            handle = self._init(_TJINIT_DECOMPRESS)
            if not handle:
                raise MemoryError("libturbojpeg could not make a decompressor")
            self._local.handle = handle
            self._local.finalizer = _HandleCloser(self._destroy, handle)
        return handle

    def _fail(self, handle: int, what: str) -> TurboJpegError:
        error = TurboJpegError("libjpeg-turbo could not {}: {}".format(
            what, (self._error_text(handle) or b"unknown error").decode("utf-8", "replace")))
        self._renew()
        return error

    def _renew(self) -> None:
        """Drop this thread's decompressor: one that failed may fail the next image too, so the
        next call makes a new one."""
        self._local.handle = None
        self._local.finalizer = None          # destroys the old handle

    def header(self, data: Encoded, declared: Optional[Tuple[int, int]] = None) -> JpegHeader:
        """The header of ``data`` (a TurboJpegError when it is no JPEG libjpeg-turbo can read).

        libjpeg-turbo reads a header that ends early with only a warning, and then reports the
        previous image's size; the size is therefore checked against the frame header (SOF)
        found in ``data`` itself (``declared``: its ``(width, height)`` when already read)."""
        from ..image_limits import declared_image_size

        handle = self._handle()
        buffer = _uint8(data)
        if self._header(handle, buffer.ctypes.data, buffer.size) != 0:
            raise self._fail(handle, "read the JPEG header")
        get = self._get
        header = JpegHeader(get(handle, _TJPARAM_JPEGHEIGHT), get(handle, _TJPARAM_JPEGWIDTH),
                            get(handle, _TJPARAM_SUBSAMP), get(handle, _TJPARAM_COLORSPACE),
                            get(handle, _TJPARAM_PRECISION))
        if (declared or declared_image_size(data)) != (header.width, header.height):
            self._renew()
            raise TurboJpegError("libjpeg-turbo could not read the JPEG header: the data ends before the frame "
                                 "header or does not match it")
        return header

    def decode(self, data: Encoded, window: Optional[Tuple[int, int, int, int]] = None, scale: int = 1,
               grey: bool = False, header: Optional[JpegHeader] = None, max_pixels: int = 0,
               fast_dct: bool = False, strict: bool = True) -> np.ndarray:
        """Decode ``data`` to a BGR (or, with ``grey``, single-channel) uint8 array.

        ``window``: ``(y, x, h, w)`` in full-scale pixels; only that part is decoded and
        returned, at ``1/scale`` (``scale`` in :data:`SCALES`): rows ``y // scale`` to
        ``ceil((y + h) / scale)`` of the scaled image, likewise for columns. ``max_pixels`` (0:
        none) refuses images whose header declares more pixels. ``fast_dct``: libjpeg's fast
        integer inverse DCT (JDCT_IFAST, TensorFlow's default) instead of the accurate one
        (JDCT_ISLOW, OpenCV's). ``strict``: a warning of the decoder (damaged data: premature end,
        corrupt data) stops it with a :class:`TurboJpegWarning`; otherwise the decode goes on,
        libjpeg filling what it could not decode with grey."""
        if scale not in SCALES:
            raise ValueError("TurboJpeg.decode: scale must be one of {}, got {!r}".format(SCALES, scale))
        handle = self._handle()
        buffer = _uint8(data)
        if header is None:
            header = self.header(buffer)
        elif self._header(handle, buffer.ctypes.data, buffer.size) != 0:
            raise self._fail(handle, "read the JPEG header")
        self._set(handle, _TJPARAM_MAXPIXELS, max(0, min(int(max_pixels), 2 ** 31 - 1)))
        self._set(handle, _TJPARAM_FASTDCT, 1 if fast_dct else 0)
        self._set(handle, _TJPARAM_STOPONWARNING, 1 if strict else 0)
        if self._scale(handle, _Scaling(1, scale)) != 0:
            raise self._fail(handle, "set the scale 1/{}".format(scale))
        full_h, full_w = -(-header.height // scale), -(-header.width // scale)
        if window is None:
            top, left, bottom, right = 0, 0, full_h, full_w
        else:
            y, x, h, w = window
            if h <= 0 or w <= 0 or y < 0 or x < 0 or y + h > header.height or x + w > header.width:
                raise ValueError("TurboJpeg.decode: window (y, x, h, w) = {} is not inside the {}x{} "
                                 "image".format(tuple(window), header.height, header.width))
            top, left = y // scale, x // scale
            bottom, right = min(full_h, -(-(y + h) // scale)), min(full_w, -(-(x + w) // scale))
        imcu_w = header.imcu[1] // scale if header.imcu[1] >= scale else 1
        start = left - left % max(1, imcu_w)            # the region starts on the iMCU grid
        region = _Region(start, top, right - start, bottom - top)
        if (region.x, region.y, region.w, region.h) != (0, 0, full_w, full_h):
            if self._crop(handle, region) != 0:
                raise self._fail(handle, "set the decoded region {}".format((top, start, region.h, region.w)))
        else:
            self._crop(handle, _Region(0, 0, 0, 0))
        channels, pixel_format = (1, _TJPF_GRAY) if grey else (3, _TJPF_BGR)
        if grey and header.colorspace in (_TJCS_CMYK, _TJCS_YCCK):
            channels, pixel_format = 4, _TJPF_CMYK       # libjpeg turns no CMYK into grey
        out = np.empty((region.h, region.w, channels), np.uint8)
        status = self._decompress(handle, buffer.ctypes.data, buffer.size, out.ctypes.data, region.w * channels,
                                  pixel_format)
        if status != 0:
            fatal = self._error_code(handle) == _TJERR_FATAL
            if fatal or strict:
                error = self._fail(handle, "decode the JPEG")
                raise error if fatal else TurboJpegWarning(str(error))
            self._renew()       # a warning (e.g. data ends early: the rest is grey, as OpenCV
                                # gives it) keeps the pixels, not the decompressor
        out = out[:, left - start:] if left != start else out
        return out if not grey else out[:, :, 0]

    def check(self, data: Encoded, header: Optional[JpegHeader] = None, max_pixels: int = 0) -> None:
        """Decode all of ``data``'s entropy-coded data (at 1/8 scale, in grey: little more than
        reading it) and raise a :class:`TurboJpegWarning` at the first warning of the decoder, a
        :class:`TurboJpegError` when it cannot decode it at all.

        Example::

            tj.check(open("photo.jpg", "rb").read())      # raises if the file is damaged
        """
        self.decode(data, scale=8, grey=True, header=header, max_pixels=max_pixels, strict=True)


class _HandleCloser:
    """Destroys a thread's TurboJPEG handle when the thread's local storage goes."""

    def __init__(self, destroy, handle: int):
        self._destroy, self._handle = destroy, handle

    def __del__(self):
        self._destroy(self._handle)


def _uint8(data: Encoded) -> np.ndarray:
    """``data`` as a flat uint8 array over the same memory (no copy; a copy only of an array that
    is not contiguous), whose address goes to libjpeg-turbo."""
    array = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    if array.dtype != np.uint8 or array.ndim != 1 or not array.flags.c_contiguous:
        array = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return array


def _function(lib, name: str, restype, argtypes):
    function = getattr(lib, name)
    function.restype, function.argtypes = restype, argtypes
    return function


def _candidates():
    """Paths of libturbojpeg to try: $INPUTPIPE_TURBOJPEG, the ``turbojpeg`` wheel's copy, the
    system's."""
    given = os.environ.get("INPUTPIPE_TURBOJPEG")
    if given:
        yield given
        return
    for entry in distribution_files("turbojpeg"):
        if "libturbojpeg" in entry.name:
            yield str(entry.locate())
    found = ctypes.util.find_library("turbojpeg")
    if found:
        yield found


_loaded: list = []
_load_lock = threading.Lock()


def turbojpeg() -> Optional[TurboJpeg]:
    """The process' TurboJPEG 3 decoder, or None when no libturbojpeg of version 3 is found."""
    if _loaded:
        return _loaded[0]
    with _load_lock:
        if not _loaded:
            decoder = None
            for path in _candidates():
                try:
                    decoder = TurboJpeg(path)
                    break
                except (OSError, AttributeError) as err:      # missing file, or a version 2 library
                    logger.debug("libturbojpeg at %s cannot be used: %s", path, err)
            _loaded.append(decoder)
    return _loaded[0]
