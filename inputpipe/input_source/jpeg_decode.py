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
from typing import List, Optional, Tuple

import tensorflow as tf

from .base import InputSource
from .errors import InputSourceError
from .proxy import ProxyInputSource

__all__ = ["JpegDecodeInput"]

_RATIOS = (1, 2, 4, 8)


def _decode_one(jpeg: tf.Tensor, crop: tf.Tensor, size: List[int], bgr: bool, dct_method: str) -> tf.Tensor:
    """One planned crop: decode its window at the largest ratio that keeps it at least the
    output size, resize it (bilinear, pixel centres as OpenCV's), mirror it when planned."""
    y, x, h, w, flip = crop[0], crop[1], crop[2], crop[3], crop[6]
    ratio_index = tf.constant(0)
    for i, ratio in enumerate(_RATIOS[1:], start=1):
        fits = tf.logical_and(h >= ratio * size[0], w >= ratio * size[1])
        ratio_index = tf.where(fits, i, ratio_index)

    def decode_at(ratio: int):
        def decode() -> tf.Tensor:
            if ratio == 1:
                window = tf.stack([y, x, h, w])
                image = tf.io.decode_and_crop_jpeg(jpeg, window, channels=3, dct_method=dct_method)
                return tf.image.resize(image, size, method="bilinear")
            # the decoded rows and columns start at the window's scaled corner rounded down: sample
            # the scaled window itself, sub-pixel exact (it is at least the output size here)
            top, left = y // ratio, x // ratio
            rows, cols = (y + h + ratio - 1) // ratio - top, (x + w + ratio - 1) // ratio - left
            image = tf.io.decode_and_crop_jpeg(jpeg, tf.stack([top, left, rows, cols]), channels=3, ratio=ratio,
                                               dct_method=dct_method)
            return tf.image.crop_and_resize(tf.cast(image, tf.float32)[None], _box(y, x, h, w, ratio, rows, cols, size),
                                            [0], size, method="bilinear")[0]
        return decode

    resized = tf.switch_case(ratio_index, [decode_at(ratio) for ratio in _RATIOS])
    image = tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
    image = tf.cond(flip > 0, lambda: tf.reverse(image, [1]), lambda: image)
    return tf.reverse(image, [2]) if bgr else image


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

    Example::

        source = StagingInput(JpegDecodeInput(QueueInput(BatchData(JpegCropWindows(ds, augs), 64))))
    """

    def __init__(self, input: InputSource, index: int = 0, bgr: bool = True, parallel: int = 16,
                 dct_method: str = "INTEGER_ACCURATE"):
        super().__init__(input)
        self._index = int(index)
        self._bgr = bool(bgr)
        self._parallel = int(parallel)
        if dct_method not in ("INTEGER_ACCURATE", "INTEGER_FAST"):
            raise ValueError("JpegDecodeInput: dct_method must be 'INTEGER_ACCURATE' or 'INTEGER_FAST', got {!r}".format(
                dct_method))
        self._dct_method = dct_method
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
                images = tf.map_fn(lambda args: _decode_one(args[0], args[1], size, self._bgr, self._dct_method),
                                   (jpeg, crop), fn_output_signature=tf.TensorSpec(size + [3], tf.uint8),
                                   parallel_iterations=self._parallel)
        return list(tensors[:self._index]) + [images] + list(tensors[self._index + 2:])
