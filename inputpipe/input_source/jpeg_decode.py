"""JpegDecodeInput: decode JPEG crops in the graph, in TensorFlow's threads, in front of StagingInput.

The wrapped source carries ``[jpeg, crop, ...]`` batches from
:class:`~inputpipe.dataflow.JpegCropWindows` (the JPEG bytes as ``tf.string`` and each one's crop
plan, chosen in Python by the augmentors); this source decodes only each crop window with
``tf.io.decode_and_crop_jpeg`` (at a DCT scale of 1/2, 1/4 or 1/8 when the window is at least
that many times the output size), resizes it (bilinear), mirrors it when planned, and gives
``[image, ...]``: one uint8 ``[batch, h, w, 3]`` image tensor (BGR by default, as OpenCV decodes)
in place of the two. The images of a batch are decoded in parallel by TensorFlow's inter-op
threads: no Python thread decodes and the GIL is never held. Wrapped by :class:`StagingInput`,
the decode of the next batch overlaps the current train step.

Its input signature is the model's (``image`` a ``[None, h, w, 3]`` uint8 spec at ``index``);
the wrapped source is set up with ``jpeg`` (string ``[None]``) and ``crop`` (int32 ``[None, 7]``)
in its place.

Example::

    ds = BatchData(JpegCropWindows(ILSVRC12(datadir, "train", encoded=True), augmentors), 64)
    source = StagingInput(JpegDecodeInput(QueueInput(ds)))
    source.setup([tf.TensorSpec([None, 224, 224, 3], tf.uint8, "image"),
                  tf.TensorSpec([None], tf.int64, "label")])
    image, label = source.get_input_tensors()
"""
from typing import Callable, List, Optional, Tuple

import tensorflow as tf

from ..dataflow.image_damage import decoding_mode
from ..utils.compat import map_fn, where
from .base import InputSource
from .errors import InputSourceError
from .proxy import ProxyInputSource

__all__ = ["JpegDecodeInput"]

_RATIOS = (1, 2, 4, 8)


def _decode_at(ratio: int, size: List[int], bgr: bool, dct_method: str,
               lenient: bool) -> Callable[[Tuple[tf.Tensor, tf.Tensor]], tf.Tensor]:
    """Decode one planned window at ``1/ratio``, resize it (bilinear, pixel centres as OpenCV's),
    mirror it when planned and put it in BGR order: uint8 ``size + [3]``, everything per image
    (while it is in the CPU's caches). ``lenient``: data that ends early decodes (the rest grey)."""
    damaged = {"try_recover_truncated": True, "acceptable_fraction": 0.0} if lenient else {}

    def decode(args: Tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        jpeg, crop = args
        y, x, h, w = crop[0], crop[1], crop[2], crop[3]
        if ratio == 1:
            image = tf.io.decode_and_crop_jpeg(jpeg, tf.stack([y, x, h, w]), channels=3, dct_method=dct_method,
                                               **damaged)
            resized = tf.image.resize(image, size, method="bilinear")
        else:
            # the decoded rows and columns start at the window's scaled corner rounded down:
            # sample the scaled window itself, sub-pixel exact (it is at least the output size)
            top, left = y // ratio, x // ratio
            rows, cols = (y + h + ratio - 1) // ratio - top, (x + w + ratio - 1) // ratio - left
            image = tf.io.decode_and_crop_jpeg(jpeg, tf.stack([top, left, rows, cols]), channels=3, ratio=ratio,
                                               dct_method=dct_method, **damaged)
            resized = tf.image.crop_and_resize(image[None],       # reads uint8: no cast of the whole part
                                               _box(y, x, h, w, ratio, rows, cols, size), [0], size, method="bilinear")[0]
        pixels = tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
        colours = [2] if bgr else []            # one reverse does the flip and the channel order
        return tf.cond(crop[6] > 0, lambda: tf.reverse(pixels, [1] + colours),
                       (lambda: tf.reverse(pixels, colours)) if colours else (lambda: pixels))
    return decode


def _decode_batch(jpeg: tf.Tensor, crop: tf.Tensor, size: List[int], bgr: bool, dct_method: str,
                  parallel: int, lenient: bool) -> tf.Tensor:
    """The planned crops of a batch, each decoded at the largest DCT ratio that keeps its window
    at least the output size: the batch is split by ratio, each part decoded with its ratio (a
    static attribute of the op) and the parts put back in order."""
    h, w = crop[:, 2], crop[:, 3]
    ratio_index = tf.zeros_like(h)
    for i, ratio in enumerate(_RATIOS[1:], start=1):
        ratio_index = where(tf.logical_and(h >= ratio * size[0], w >= ratio * size[1]), i, ratio_index)
    positions = tf.dynamic_partition(tf.range(tf.shape(jpeg)[0]), ratio_index, len(_RATIOS))
    jpegs = tf.dynamic_partition(jpeg, ratio_index, len(_RATIOS))
    crops = tf.dynamic_partition(crop, ratio_index, len(_RATIOS))
    parts = [map_fn(_decode_at(ratio, size, bgr, dct_method, lenient), (part_jpegs, part_crops),
                       fn_output_signature=tf.TensorSpec(size + [3], tf.uint8), parallel_iterations=parallel)
             for ratio, part_jpegs, part_crops in zip(_RATIOS, jpegs, crops)]
    return tf.dynamic_stitch(positions, parts)


def _box(y: tf.Tensor, x: tf.Tensor, h: tf.Tensor, w: tf.Tensor, ratio: int, rows: tf.Tensor, cols: tf.Tensor,
         size: List[int]) -> tf.Tensor:
    """``crop_and_resize``'s normalised box whose samples are cv2.resize's pixel centres of the
    window ``(y, x, h, w)`` (full-scale pixels) in the part decoded at ``1/ratio``."""
    def axis(start: tf.Tensor, length: tf.Tensor, decoded: tf.Tensor, out: int) -> Tuple[tf.Tensor, tf.Tensor]:
        step = tf.cast(length, tf.float32) / ratio / out
        offset = tf.cast(start, tf.float32) / ratio - tf.cast(start // ratio, tf.float32)
        first = 0.5 * step - 0.5 + offset
        span = tf.cast(tf.maximum(decoded - 1, 1), tf.float32)
        return first / span, (first + step * (out - 1)) / span

    y1, y2 = axis(y, h, rows, size[0])
    x1, x2 = axis(x, w, cols, size[1])
    return tf.stack([y1, x1, y2, x2])[None]


class JpegDecodeInput(ProxyInputSource):
    """Decode the JPEG crops planned by :class:`~inputpipe.dataflow.JpegCropWindows` in the
    graph (see the module docstring).

    Args:
        input: the source of ``[jpeg, crop, ...]`` batches (e.g. ``QueueInput``).
        index: where the image is in the model's signature (the jpeg and crop are there in the
            wrapped source's).
        bgr: give BGR images, as OpenCV and the augmentors in Python do (False: RGB).
        parallel: images decoded at once (``tf.map_fn``'s ``parallel_iterations``).
        dct_method: ``"INTEGER_ACCURATE"`` (libjpeg's accurate integer IDCT, OpenCV's choice)
            or ``"INTEGER_FAST"``.
        decoding: ``"lenient"`` decodes data that ends inside a window (the rest grey), as
            ``try_recover_truncated`` does; ``"strict"`` or ``"thorough"``: such data fails the
            step (``jpeg::Uncompress failed``). JpegCropWindows refuses damaged files before they
            get here unless it is lenient too (:mod:`~inputpipe.dataflow.image_damage`). None: the
            process' mode (:func:`~inputpipe.dataflow.image_damage.set_decoding`) at ``setup()``.

    Example::

        source = StagingInput(JpegDecodeInput(QueueInput(BatchData(JpegCropWindows(ds, augs), 64))))
    """

    def __init__(self, input: InputSource, index: int = 0, bgr: bool = True, parallel: int = 16,
                 dct_method: str = "INTEGER_ACCURATE", decoding: Optional[str] = None):
        super().__init__(input)
        self._index = int(index)
        self._bgr = bool(bgr)
        self._parallel = int(parallel)
        if dct_method not in ("INTEGER_ACCURATE", "INTEGER_FAST"):
            raise ValueError("JpegDecodeInput: dct_method must be 'INTEGER_ACCURATE' or 'INTEGER_FAST', got {!r}".format(
                dct_method))
        self._dct_method = dct_method
        self._decoding = None if decoding is None else decoding_mode("JpegDecodeInput", decoding)
        self._lenient = False
        self._out_size: Optional[List[int]] = None

    def _setup(self, specs: List[tf.TensorSpec]) -> None:
        if not 0 <= self._index < len(specs):
            raise InputSourceError("JpegDecodeInput: index {} is outside the signature of {} entries".format(
                self._index, len(specs)))
        image = specs[self._index]
        shape = image.shape
        if image.dtype != tf.uint8 or shape.rank != 4 or shape[3] != 3 or None in (shape[1], shape[2]):
            raise InputSourceError(
                "JpegDecodeInput: the signature's entry {} ({!r}) must be a uint8 image batch of a fixed size, "
                "[None, h, w, 3]; got {} {}".format(self._index, image.name, image.dtype.name, shape))
        self._out_size = [int(shape[1]), int(shape[2])]
        self._lenient = decoding_mode("JpegDecodeInput", self._decoding) == "lenient"
        wrapped = list(specs[:self._index]) + [
            tf.TensorSpec([None], tf.string, "{}_jpeg".format(image.name or "image")),
            tf.TensorSpec([None, 7], tf.int32, "{}_crop".format(image.name or "image"))] + list(specs[self._index + 1:])
        super()._setup(wrapped)

    def _get_input_tensors(self) -> List[tf.Tensor]:
        tensors = self._input.get_input_tensors()
        jpeg, crop = tensors[self._index], tensors[self._index + 1]
        size = self._out_size
        assert size is not None             # set by _setup, which get_input_tensors requires
        with tf.name_scope("decode_jpeg_crops"):
            sizes_match = tf.debugging.assert_equal(
                crop[:, 4:6], tf.constant([size], tf.int32), message="JpegDecodeInput: a crop was planned for "
                "another output size than the signature size {}x{}".format(*size))
            with tf.control_dependencies([sizes_match]):
                images = _decode_batch(jpeg, crop, size, self._bgr, self._dct_method, self._parallel, self._lenient)
            images.set_shape([None] + size + [3])
        return list(tensors[:self._index]) + [images] + list(tensors[self._index + 2:])
