"""Migration: a detection pipeline in the style of tensorpack's examples/FasterRCNN/data.py (boxes through
``get_transform`` / ``apply_coords``, simplified), and a pre-0.9 DataFlow subclass (``get_data()`` /
``size()`` only) fed to BatchData and QueueInput, with only the import changed.
"""
import itertools
import os

import cv2
import numpy as np
import tensorflow as tf

from inputpipe.dataflow import (
    AugmentImageCoordinates, BatchData, DataFromList, MapData, MultiProcessMapData, RNGDataFlow, imgaug,
)
from inputpipe.input_source import QueueInput


# ---- user code, as in tensorpack's examples/FasterRCNN (common.py and data.py) ------------------

class CustomResize(imgaug.ImageAugmentor):
    """Resize the shorter edge to a size drawn from ``short_edge_length``, the longer edge at most
    ``max_size`` (new API: returns a ResizeTransform)."""

    def __init__(self, short_edge_length, max_size, interp=cv2.INTER_LINEAR):
        super().__init__()
        if isinstance(short_edge_length, int):
            short_edge_length = (short_edge_length, short_edge_length)
        self._init(locals())

    def get_transform(self, img):
        h, w = img.shape[:2]
        size = self.rng.randint(self.short_edge_length[0], self.short_edge_length[1] + 1)
        scale = size * 1.0 / min(h, w)
        if h < w:
            newh, neww = size, scale * w
        else:
            newh, neww = scale * h, size
        if max(newh, neww) > self.max_size:
            scale = self.max_size * 1.0 / max(newh, neww)
            newh, neww = newh * scale, neww * scale
        neww, newh = int(neww + 0.5), int(newh + 0.5)
        return imgaug.ResizeTransform(h, w, newh, neww, self.interp)


def box_to_point8(boxes):
    """(N, 4) boxes x1y1x2y2 -> (4N, 2) corner points."""
    b = boxes[:, [0, 1, 2, 3, 0, 3, 2, 1]]
    return b.reshape((-1, 2))


def point8_to_box(points):
    """(4N, 2) corner points -> (N, 4) boxes around them."""
    p = points.reshape((-1, 4, 2))
    minxy = p.min(axis=1)
    maxxy = p.max(axis=1)
    return np.concatenate((minxy, maxxy), axis=1)


def get_train_dataflow(roidbs, num_proc=0, short_edge=(8, 8), max_size=20):
    ds = DataFromList(roidbs, shuffle=True)
    aug = imgaug.AugmentorList([CustomResize(short_edge, max_size), imgaug.Flip(horiz=True)])

    def preprocess(roidb):
        fname, boxes, klass = roidb["file_name"], roidb["boxes"], roidb["class"]
        boxes = np.copy(boxes)
        im = cv2.imread(fname, cv2.IMREAD_COLOR)
        assert im is not None, fname
        im = im.astype("float32")
        tfms = aug.get_transform(im)
        im = tfms.apply_image(im)
        points = box_to_point8(boxes)
        points = tfms.apply_coords(points)
        boxes = point8_to_box(points)
        return {"image": im, "gt_boxes": boxes, "gt_labels": klass, "file_name": fname}

    if num_proc:
        return MultiProcessMapData(ds, num_proc, preprocess)
    return MapData(ds, preprocess)


# ---- end of user code -------------------------------------------------------------------------

def make_roidbs(directory, count=4):
    rng = np.random.RandomState(0)
    roidbs = []
    for i in range(count):
        fname = os.path.join(directory, "img%d.png" % i)
        cv2.imwrite(fname, rng.randint(0, 256, (4, 10, 3)).astype(np.uint8))
        roidbs.append({"file_name": fname, "boxes": np.array([[1.0, 0.0, 3.0, 2.0], [5.0, 1.0, 10.0, 4.0]], "float32"),
                       "class": np.array([1, i + 2], "int32")})
    return roidbs


def expected_boxes(flipped):
    # images of 4x10 resized to 8x20 (short edge 8, long edge 20): coordinates scale by 2; a
    # horizontal flip then maps x to 20 - x
    boxes = np.array([[2.0, 0.0, 6.0, 4.0], [10.0, 2.0, 20.0, 8.0]], "float32")
    if flipped:
        boxes[:, [0, 2]] = 20 - boxes[:, [2, 0]]
    return boxes


def check_datapoint(dp):
    image = cv2.imread(dp["file_name"], cv2.IMREAD_COLOR).astype("float32")
    resized = cv2.resize(image, (20, 8), interpolation=cv2.INTER_LINEAR)
    flipped = not np.array_equal(dp["image"], resized)
    if flipped:
        np.testing.assert_array_equal(dp["image"], resized[:, ::-1])
    assert dp["image"].shape == (8, 20, 3) and dp["image"].dtype == np.float32
    np.testing.assert_allclose(dp["gt_boxes"], expected_boxes(flipped), atol=1e-4)
    return flipped


def test_detection_boxes_follow_the_image_transform(tmp_path):
    roidbs = make_roidbs(str(tmp_path))
    ds = get_train_dataflow(roidbs)
    ds.reset_state()
    flips = []
    for _ in range(5):
        got = list(ds)
        assert sorted(dp["gt_labels"][1] for dp in got) == [2, 3, 4, 5]
        flips += [check_datapoint(dp) for dp in got]
    assert True in flips and False in flips   # 20 fair coin flips: both sides come up


def test_detection_pipeline_in_worker_processes(tmp_path):
    roidbs = make_roidbs(str(tmp_path))
    ds = get_train_dataflow(roidbs, num_proc=2)
    ds.reset_state()
    try:
        stream = list(itertools.islice(ds, 12))
    finally:
        ds.close()
    # strict=False (tensorpack's default): as in tensorpack, one iterator streams the source's
    # passes without end (len() is still one pass), so the trainer counts steps
    assert len(ds) == 4 and len(stream) == 12
    for dp in stream:
        assert dp["gt_labels"][1] in (2, 3, 4, 5)
        check_datapoint(dp)


def test_boxes_through_augment_image_coordinates(tmp_path):
    roidbs = make_roidbs(str(tmp_path), count=2)
    source = DataFromList([[cv2.imread(r["file_name"]), box_to_point8(r["boxes"])] for r in roidbs], shuffle=False)
    ds = AugmentImageCoordinates(source, [CustomResize(8, 20), imgaug.Flip(horiz=True, prob=1.0)])
    ds.reset_state()
    for image, points in ds:
        assert image.shape == (8, 20, 3) and image.dtype == np.uint8
        np.testing.assert_allclose(point8_to_box(points), expected_boxes(True), atol=1e-4)


# ---- a DataFlow written for tensorpack before 0.9 ---------------------------------------------

class OldStyleData(RNGDataFlow):
    """Only the pre-0.9 methods: get_data() and size()."""

    def __init__(self, n):
        self.n = n

    def size(self):
        return self.n

    def get_data(self):
        for i in range(self.n):
            yield [np.full((2,), i, np.float32), i]


def test_pre_0_9_dataflow_through_batch_data_and_queue_input():
    df = BatchData(OldStyleData(7), 3, remainder=True)
    assert df.size() == len(df) == 3
    df.reset_state()
    assert [b[1].tolist() for b in df.get_data()] == [[0, 1, 2], [3, 4, 5], [6]]
    source = QueueInput(BatchData(OldStyleData(7), 3, remainder=True), infinite=False)
    graph = tf.Graph()
    with graph.as_default():
        source.setup([tf.TensorSpec((None, 2), tf.float32, "x"), tf.TensorSpec((None,), tf.int64, "y")])
        x, y = source.get_input_tensors()
        got = []
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=source.get_hooks()) as sess:
            while not sess.should_stop():
                got.append(sess.run([x, y]))
    assert [g[1].tolist() for g in got] == [[0, 1, 2], [3, 4, 5], [6]]
    assert got[2][0].tolist() == [[6.0, 6.0]]
