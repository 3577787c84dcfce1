"""tensorpack's ``utils.viz`` and ``utils.palette`` at their paths: grids of images, boxes and
labels, a flow's images dumped to files, the interactive window (against a scripted OpenCV), and
the palette."""
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from inputpipe.dataflow import BatchData, DataFromList
from inputpipe.utils import viz
from inputpipe.utils.palette import PALETTE_RGB

cv2 = pytest.importorskip("cv2")


def patch(value, shape=(4, 6, 3)):
    return np.full(shape, value, np.uint8)


def test_importing_viz_and_palette_imports_no_opencv():
    code = "import sys, inputpipe.utils.viz, inputpipe.utils.palette; print('cv2' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, timeout=120,
                          check=True).stdout.strip() == b"False"


def test_stack_patches_lays_images_out_row_by_row_on_the_background():
    grid = viz.stack_patches([patch(10), patch(20), patch(30)], nr_row=2, nr_col=2, border=1)
    assert grid.shape == (9, 13, 3) and grid.dtype == np.uint8
    assert grid[0, 0].tolist() == [10] * 3 and grid[0, 7].tolist() == [20] * 3 and grid[5, 0].tolist() == [30] * 3
    assert grid[5, 7].tolist() == [255] * 3 and grid[4, 3].tolist() == [255] * 3 and grid[0, 6].tolist() == [255] * 3
    grey = viz.stack_patches(np.zeros((2, 4, 4), np.uint8), 1, 2, border=2, bgcolor=(0, 0, 255))
    assert grey.shape == (4, 10, 3) and grey[0, 4].tolist() == [0, 0, 255] and grey[0, 0].tolist() == [0, 0, 0]
    single = viz.stack_patches(np.zeros((2, 4, 4), np.uint8), 1, 2, border=0, bgcolor=9)
    assert single.shape == (4, 8, 1)
    assert viz.stack_patches([patch(1, (40, 60, 3))] * 2, 1, 2).shape == (40, 122, 3)    # border: 5% of 40
    with pytest.raises(ValueError, match="3 images do not fit in 1 rows x 2 columns"):
        viz.stack_patches([patch(1)] * 3, 1, 2)
    with pytest.raises(ValueError, match="different shapes; pass pad=True"):
        viz.stack_patches([patch(1), patch(1, (3, 3, 3))], 1, 2)
    with pytest.raises(ValueError, match="expected N images of HxW"):
        viz.stack_patches(np.zeros((2, 4, 4, 2), np.uint8), 1, 2)
    with pytest.raises(ValueError, match=r"expected N images of HxW.*\(N >= 1\)"):
        viz.stack_patches([], 1, 2, pad=True)
    with pytest.raises(ValueError, match=r"expected N images of HxW.*\(N >= 1\)"):
        viz.stack_patches(iter([]), 1, 2, pad=True)


def test_pad_centres_images_of_other_sizes_in_the_largest_cell():
    grid = viz.stack_patches([np.full((2, 2), 50, np.uint8), patch(90, (4, 3, 3))], 1, 2, pad=True, bgcolor=7,
                             border=0)
    assert grid.shape == (4, 6, 3)
    assert grid[:, :3, 0].tolist() == [[7, 7, 7], [50, 50, 7], [50, 50, 7], [7, 7, 7]]
    assert (grid[:, 3:] == 90).all()
    # any iterable of images, as before the empty list had its own message
    again = viz.stack_patches((p for p in [np.full((2, 2), 50, np.uint8), patch(90, (4, 3, 3))]), 1, 2, pad=True,
                              bgcolor=7, border=0)
    assert np.array_equal(again, grid)


def test_gen_stack_patches_yields_pages_and_a_partly_filled_last_one():
    pages = list(viz.gen_stack_patches([patch(i) for i in range(7)], nr_row=2, nr_col=2, border=0))
    assert [page.shape for page in pages] == [(8, 12, 3)] * 2 and pages[0] is not pages[1]
    assert pages[0][4, 6].tolist() == [3] * 3 and pages[1][4, 0].tolist() == [6] * 3
    assert pages[1][4, 6].tolist() == [255] * 3
    fitted = list(viz.gen_stack_patches([patch(0, (10, 10, 3))] * 7, border=0, max_width=25, max_height=30))
    assert [page.shape for page in fitted] == [(30, 20, 3)] * 2             # 3 rows x 2 columns fit


def test_the_canvas_finds_the_cell_under_a_pixel_of_a_wide_cell():
    grid = viz.Canvas(4, 10, 2, 3, 3, 2, 255)
    assert [grid.get_patchid_from_coord(x, y) for x, y in [(0, 0), (12, 0), (12, 6), (25, 7), (10, 0), (0, 4)]] \
        == [0, 1, 4, 5, None, None]
    clicks = []
    on_click = viz._cell_clicks(grid, np.arange(5), 0, 5, lambda item, index: clicks.append((item, index)))
    on_click(None, 25, 7)                   # cell 5: past the 5 images
    on_click(None, 12, 6)
    assert clicks == [(4, 4)]


def test_draw_boxes_draws_on_a_copy_with_labels_larger_boxes_first():
    image = np.zeros((50, 80), np.uint8)
    out = viz.draw_boxes(image, [[5, 5, 40, 30], [0, 0, 80, 50]], labels=["small", "whole"], color=(0, 0, 200))
    assert image.sum() == 0 and out.shape == (50, 80, 3) and out.dtype == np.uint8
    assert out[30, 20].tolist() == [0, 0, 200] and out[17, 40].tolist() == [0, 0, 200]       # edges of the small box
    assert out[20, 20].tolist() == [0, 0, 0]                                                 # inside it
    assert viz.draw_boxes(np.zeros((8, 8, 3), np.uint8), np.zeros((0, 4))).sum() == 0
    assert (viz.draw_boxes(image, [5, 5, 40, 30]) == viz.draw_boxes(image, [[5, 5, 40, 30]])).all()    # one box
    with pytest.raises(ValueError, match=r"expected boxes as N x 4 rows of x1, y1, x2, y2, got shape \(1, 5\)"):
        viz.draw_boxes(image, [[5, 5, 40, 30, 0.9]])                  # (a score column left on)
    with pytest.raises(ValueError, match="NaN or infinite"):
        viz.draw_boxes(image, [[5, np.nan, 40, 30]])
    with pytest.raises(ValueError, match="1 labels for 2 boxes"):
        viz.draw_boxes(image, [[0, 0, 1, 1], [0, 0, 2, 2]], labels=["a"])
    with pytest.raises(ValueError, match=r"inside the 80x50 image .* these are not: \[\[0, 0, 81, 10\]\]"):
        viz.draw_boxes(image, [[0, 0, 10, 10], [0, 0, 81, 10]])


def test_draw_text_keeps_the_label_inside_the_image():
    image = np.zeros((30, 40, 3), np.float32)
    out = viz.draw_text(image, (35, 2), "label", color=(255, 0, 0))
    assert out.dtype == np.uint8 and image.sum() == 0
    (width, _), _ = cv2.getTextSize("label", cv2.FONT_HERSHEY_SIMPLEX, 0.4, 1)
    columns = np.nonzero(out.any(axis=(0, 2)))[0]
    assert columns.max() < 40 and columns.min() >= 40 - width - 1


def test_dump_dataflow_images_writes_number_images_across_epochs(tmp_path):
    images = [[np.full((8, 10, 3), 20 * i, np.uint8)] for i in range(5)]
    flow = BatchData(DataFromList(images, shuffle=False), 2, remainder=True)
    taken = viz.dump_dataflow_images(flow, number=7, output_dir=str(tmp_path / "peek"), resize=(4, 6), flipRGB=True)
    assert taken == 7 and sorted(os.listdir(tmp_path / "peek")) == ["{:03d}.jpg".format(i) for i in range(1, 8)]
    assert cv2.imread(str(tmp_path / "peek" / "001.jpg")).shape == (4, 6, 3)
    assert abs(int(cv2.imread(str(tmp_path / "peek" / "007.jpg"))[0, 0, 0]) - 20) <= 2   # the 2nd epoch's second
    assert viz.dump_dataflow_images(DataFromList([], shuffle=False), batched=False, number=3) == 0
    with pytest.raises(ValueError, match="number must be >= 1"):
        viz.dump_dataflow_images(flow, number=0)


class ScriptedOpenCV(types.ModuleType):
    """An OpenCV whose window answers the given keys (and records the calls)."""

    EVENT_LBUTTONUP, EVENT_RBUTTONUP, INTER_CUBIC = 4, 5, 2
    error = RuntimeError

    def __init__(self, keys, clicks=()):
        super().__init__("cv2")
        self.keys, self.clicks, self.calls = list(keys), list(clicks), []

    def imshow(self, name, img):
        self.calls.append(("imshow", name, img.shape))

    def setMouseCallback(self, name, callback):
        for event, x, y in self.clicks:
            callback(event, x, y, 0, None)

    def waitKey(self, delay):
        return self.keys.pop(0)

    def destroyWindow(self, name):
        self.calls.append(("destroyWindow", name))

    def resize(self, img, size, fx, fy, interpolation):
        return np.zeros((int(img.shape[0] * fy), int(img.shape[1] * fx), 3), np.uint8)

    def imwrite(self, path, img):
        self.calls.append(("imwrite", path))


def test_interactive_imshow_answers_keys_and_clicks(monkeypatch):
    scripted = ScriptedOpenCV([225, ord("+"), ord("q")], clicks=[(4, 3, 2), (5, 1, 1)])
    monkeypatch.setitem(sys.modules, "cv2", scripted)
    left, right = [], []
    viz.interactive_imshow(np.zeros((10, 20, 3), np.uint8), lclick_cb=lambda img, x, y: left.append((x, y)),
                           rclick_cb=lambda img, x, y: right.append((x, y)))
    assert scripted.calls == [("imshow", viz.WINDOW_NAME, (10, 20, 3)), ("imshow", viz.WINDOW_NAME, (13, 26, 3)),
                              ("destroyWindow", viz.WINDOW_NAME)]
    assert left == [(3, 2), (3, 2)] and right == [(1, 1), (1, 1)]
    seen = []
    monkeypatch.setitem(sys.modules, "cv2", ScriptedOpenCV([ord("n")]))
    viz.interactive_imshow(np.zeros((2, 2, 3), np.uint8), key_cb_n=lambda img: seen.append(img.shape))
    assert seen == [(2, 2, 3)]
    with pytest.raises(SystemExit):
        monkeypatch.setitem(sys.modules, "cv2", ScriptedOpenCV([ord("x")]))
        viz.interactive_imshow(np.zeros((2, 2, 3), np.uint8))


def test_interactive_imshow_without_a_gui_says_which_opencv_to_install(monkeypatch):
    class Headless(ScriptedOpenCV):
        def imshow(self, name, img):
            raise RuntimeError("OpenCV(4.10.0) window.cpp:1301: error: (-2:Unspecified error)\n"
                               "The function is not implemented. Rebuild the library with GUI support")
    monkeypatch.setitem(sys.modules, "cv2", Headless([]))
    with pytest.raises(RuntimeError, match=r"cannot open a window \(The function is not implemented.*install "
                                           r"opencv-python \(not opencv-python-headless\)"):
        viz.interactive_imshow(np.zeros((2, 2, 3), np.uint8))


def test_missing_opencv_and_matplotlib_are_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(ImportError, match=r"draw_boxes needs OpenCV.*pip install \"inputpipe\[image\]\""):
        viz.draw_boxes(np.zeros((4, 4, 3), np.uint8), [[0, 0, 1, 1]])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"intensity_to_rgb needs matplotlib.*pip install \"inputpipe\[viz\]\""):
        viz.intensity_to_rgb(np.zeros((2, 2)))


def test_intensity_to_rgb_colours_a_map_with_a_colormap():
    pytest.importorskip("matplotlib")
    heat = viz.intensity_to_rgb(np.array([[0.0, 5.0], [10.0, 10.0]]), cmap="gray", normalize=True)
    assert heat.shape == (2, 2, 3) and heat.dtype == np.float32
    assert heat[0, 0].tolist() == [0.0] * 3 and heat[1, 0].tolist() == [255.0] * 3
    with pytest.raises(ValueError, match="expected a 2-D map"):
        viz.intensity_to_rgb(np.zeros((2, 2, 2)))


def test_the_palette_has_128_distinct_colours_black_first():
    assert PALETTE_RGB.shape == (128, 3) and PALETTE_RGB.dtype == np.int32
    assert PALETTE_RGB[0].tolist() == [0, 0, 0] and PALETTE_RGB.min() >= 0 and PALETTE_RGB.max() <= 255
    distances = np.sqrt(((PALETTE_RGB[:, None] - PALETTE_RGB[None]) ** 2).sum(-1))
    np.fill_diagonal(distances, np.inf)
    assert distances.min() >= 51
