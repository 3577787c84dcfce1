"""tensorpack's ``utils.viz`` at the same path: look at what a DataFlow makes.

- :func:`stack_patches` / :func:`gen_stack_patches` lay images out in a grid (one image, or one
  per page of a long list); :func:`dump_dataflow_images` writes a flow's images to files or shows
  them in such grids;
- :func:`draw_boxes` / :func:`draw_text` draw boxes and labels on a copy of an image;
- :func:`interactive_imshow` shows an image in a window and answers keys and clicks (it needs an
  OpenCV build with a GUI: ``opencv-python``, not ``-headless``);
- :func:`intensity_to_rgb` colours a 2-D map with a matplotlib colormap (matplotlib needed).

OpenCV is imported when a function needs it (the ``image`` extra), never on import.

Example::

    from inputpipe.utils.viz import draw_boxes, stack_patches
    grid = stack_patches([image_a, image_b, image_c, image_d], nr_row=2, nr_col=2)
    boxed = draw_boxes(image_a, [[10, 10, 60, 40]], labels=["cat"])
"""
import os
import sys
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .argtools import shape2d
from .develop import create_dummy_func  # noqa: F401  (tensorpack's utils.viz has these)
from .fs import mkdir_p  # noqa: F401
from .optional import import_cv2

__all__ = ["interactive_imshow", "stack_patches", "gen_stack_patches", "dump_dataflow_images", "intensity_to_rgb",
           "draw_boxes"]

#: The window :func:`interactive_imshow` opens.
WINDOW_NAME = "inputpipe_viz_window"
#: Colour (BGR) of boxes and label backgrounds when none is given.
DEFAULT_BOX_COLOR = (15, 128, 15)
Color = Union[int, Sequence[int]]


def interactive_imshow(img: np.ndarray, lclick_cb: Optional[Callable[[np.ndarray, int, int], Any]] = None,
                       rclick_cb: Optional[Callable[[np.ndarray, int, int], Any]] = None, **kwargs: Any) -> None:
    """Show ``img`` (BGR) in a window until a key is pressed: ``q`` closes the window, ``x`` exits
    the program, ``s`` saves the image to ``out.png``, ``+``/``=`` and ``-`` show it 1.3 times
    larger or smaller; ``key_cb_<key>=func`` in ``kwargs`` calls ``func(img)`` for that key
    instead. ``lclick_cb``/``rclick_cb`` are called as ``func(img, x, y)`` on a left/right click.

    Example::

        interactive_imshow(image, key_cb_n=lambda img: print("next"))
    """
    cv2 = import_cv2("interactive_imshow")
    while True:
        try:
            cv2.imshow(WINDOW_NAME, img)
        except cv2.error as err:
            raise RuntimeError("interactive_imshow: this OpenCV cannot open a window ({}); install opencv-python "
                               "(not opencv-python-headless), or save the image with cv2.imwrite".format(
                                   str(err).strip().splitlines()[-1])) from None

        def on_mouse(event: int, x: int, y: int, *_: Any, shown: np.ndarray = img) -> None:
            if event == cv2.EVENT_LBUTTONUP and lclick_cb is not None:
                lclick_cb(shown, x, y)
            elif event == cv2.EVENT_RBUTTONUP and rclick_cb is not None:
                rclick_cb(shown, x, y)
        cv2.setMouseCallback(WINDOW_NAME, on_mouse)
        code = cv2.waitKey(-1)
        while code >= 128:              # modifier keys alone
            code = cv2.waitKey(-1)
        key = chr(code & 0xFF)
        callback = kwargs.get("key_cb_" + key)
        if callback is not None:
            callback(img)
        elif key == "q":
            cv2.destroyWindow(WINDOW_NAME)
        elif key == "x":
            sys.exit()
        elif key == "s":
            cv2.imwrite("out.png", img)
        elif key in "+=-":
            factor = 0.7 if key == "-" else 1.3
            img = cv2.resize(img, None, fx=factor, fy=factor, interpolation=cv2.INTER_CUBIC)
            continue
        return


def _as_patch_array(patches: Any, component: str) -> np.ndarray:
    """``patches`` as an ``(N, H, W, C)`` array of one or three channels."""
    try:
        array = np.asarray(patches)
    except ValueError:
        array = np.asarray(patches, dtype=object)
    if array.dtype == object:
        raise ValueError("{}: the images have different shapes; pass pad=True to stack them (got {})".format(
            component, sorted({tuple(np.shape(p)) for p in patches})))
    if array.ndim == 3:
        array = array[..., np.newaxis]
    if array.ndim != 4 or array.shape[3] not in (1, 3) or len(array) == 0:
        raise ValueError("{}: expected N images of HxW or HxWx1 or HxWx3 (N >= 1), got an array of shape {}".format(
            component, array.shape))
    return array


def _padded(patches: Sequence[np.ndarray], bgcolor: Color) -> np.ndarray:
    """The images centred on ``bgcolor`` patches of the largest height and width, as BGR."""
    colour = (bgcolor,) * 3 if np.isscalar(bgcolor) else tuple(bgcolor)   # type: ignore[arg-type]
    images = []
    for patch in patches:
        patch = np.asarray(patch)
        if patch.ndim == 2:
            patch = patch[..., np.newaxis]
        images.append(np.repeat(patch, 3, axis=2) if patch.shape[2] == 1 else patch)
    if not images:                          # (refused by the caller with the count it expects)
        return np.empty((0, 0, 0, 3), np.uint8)
    height = max(p.shape[0] for p in images)
    width = max(p.shape[1] for p in images)
    out = np.empty((len(images), height, width, 3), dtype=images[0].dtype)
    out[...] = colour
    for slot, patch in zip(out, images):
        top, left = (height - patch.shape[0]) // 2, (width - patch.shape[1]) // 2
        slot[top:top + patch.shape[0], left:left + patch.shape[1]] = patch
    return out


class Canvas:
    """The grid behind :func:`stack_patches` (tensorpack's): a uint8 ``canvas`` of ``rows x cols``
    cells of ``height x width`` pixels, ``border`` pixels apart (default 5% of the smaller side),
    on ``bgcolor``; ``draw_patches`` fills it row by row.

    Example::

        grid = Canvas(32, 32, 2, 4, 3, border=2, bgcolor=255)
        image = grid.draw_patches(np.zeros((8, 32, 32, 3), np.uint8))
        index = grid.get_patchid_from_coord(40, 5)        # 1: the second cell of the first row
    """

    def __init__(self, height: int, width: int, rows: int, cols: int, channels: int, border: Optional[int],
                 bgcolor: Color):
        if rows < 1 or cols < 1:
            raise ValueError("stack_patches: nr_row and nr_col must be >= 1, got {} and {}".format(rows, cols))
        self.height, self.width, self.rows, self.cols = height, width, rows, cols
        self.border = int(0.05 * min(height, width)) if border is None else int(border)
        self.bgcolor = bgcolor
        self.channels = channels if np.isscalar(bgcolor) else 3
        self.canvas = np.zeros((rows * (height + self.border) - self.border,
                                cols * (width + self.border) - self.border, self.channels), np.uint8)

    def draw_patches(self, patches: np.ndarray) -> np.ndarray:
        """Fill the canvas with ``patches`` (an ``(N, height, width, C)`` array) and return it."""
        if len(patches) > self.rows * self.cols:
            raise ValueError("stack_patches: {} images do not fit in {} rows x {} columns".format(
                len(patches), self.rows, self.cols))
        if self.channels == 3 and patches.shape[3] == 1:
            patches = np.repeat(patches, 3, axis=3)
        self.canvas[...] = self.bgcolor
        for index, patch in enumerate(patches):
            row, col = divmod(index, self.cols)
            top, left = row * (self.height + self.border), col * (self.width + self.border)
            self.canvas[top:top + self.height, left:left + self.width] = patch
        return self.canvas

    def get_patchid_from_coord(self, x: int, y: int) -> Optional[int]:
        """The index of the cell under pixel (x, y), or None on a border."""
        col, x_in = divmod(x, self.width + self.border)
        row, y_in = divmod(y, self.height + self.border)
        if x_in >= self.width or y_in >= self.height or col >= self.cols or row >= self.rows:
            return None
        return row * self.cols + col


def stack_patches(patch_list: Any, nr_row: int, nr_col: int, border: Optional[int] = None, pad: bool = False,
                  bgcolor: Color = 255, viz: bool = False,
                  lclick_cb: Optional[Callable[[np.ndarray, int], Any]] = None) -> np.ndarray:
    """One uint8 image of the images in ``patch_list`` (N images of HxW or HxWxC, C 1 or 3, values
    in [0, 255]) in a grid of ``nr_row`` x ``nr_col`` cells filled row by row (at most that many
    images), ``border`` pixels apart (default 5% of the smaller side) on ``bgcolor`` (an int, or a
    BGR triple). ``pad=True`` takes images of different sizes, each centred in a cell of the
    largest. ``viz=True`` (or a ``lclick_cb(image, index)`` for clicks on a cell) shows the grid
    with :func:`interactive_imshow`.

    Example::

        grid = stack_patches(batch_of_images, nr_row=4, nr_col=8)
        cv2.imwrite("batch.png", grid)
    """
    patches = _as_patch_array(_padded(patch_list, bgcolor) if pad else patch_list, "stack_patches")
    grid = Canvas(patches.shape[1], patches.shape[2], nr_row, nr_col, patches.shape[3], border, bgcolor)
    canvas = grid.draw_patches(patches)
    if viz or lclick_cb is not None:
        interactive_imshow(canvas, lclick_cb=_cell_clicks(grid, patches, 0, len(patches), lclick_cb))
    return canvas


def _cell_clicks(grid: Canvas, patches: np.ndarray, start: int, end: int,
                 callback: Optional[Callable[[np.ndarray, int], Any]]) -> Optional[Callable[[np.ndarray, int, int],
                                                                                            None]]:
    if callback is None:
        return None

    def on_click(_: np.ndarray, x: int, y: int) -> None:
        cell = grid.get_patchid_from_coord(x, y)
        if cell is not None and start + cell < end:
            callback(patches[start + cell], start + cell)
    return on_click


def gen_stack_patches(patch_list: Any, nr_row: Optional[int] = None, nr_col: Optional[int] = None,
                      border: Optional[int] = None, max_width: int = 1000, max_height: int = 1000,
                      bgcolor: Color = 255, viz: bool = False,
                      lclick_cb: Optional[Callable[[np.ndarray, int], Any]] = None) -> Iterator[np.ndarray]:
    """:func:`stack_patches` page by page for a long list: yields a grid of ``nr_row`` x ``nr_col``
    images at a time (the last one partly filled); without them, as many rows and columns as fit
    in ``max_height`` x ``max_width`` pixels. Each page is a new array.

    Example::

        for page, grid in enumerate(gen_stack_patches(images, nr_row=10, nr_col=10)):
            cv2.imwrite("page{:02d}.png".format(page), grid)
    """
    patches = _as_patch_array(patch_list, "gen_stack_patches")
    height, width = patches.shape[1:3]
    space = int(0.05 * min(height, width)) if border is None else int(border)
    rows = nr_row if nr_row is not None else max(1, (max_height + space) // (height + space))
    cols = nr_col if nr_col is not None else max(1, (max_width + space) // (width + space))
    grid = Canvas(height, width, rows, cols, patches.shape[3], space, bgcolor)
    for start in range(0, len(patches), rows * cols):
        end = min(start + rows * cols, len(patches))
        canvas = grid.draw_patches(patches[start:end]).copy()
        if viz or lclick_cb is not None:
            interactive_imshow(canvas, lclick_cb=_cell_clicks(grid, patches, start, end, lclick_cb))
        yield canvas


def dump_dataflow_images(df: Any, index: int = 0, batched: bool = True, number: int = 1000,
                         output_dir: Optional[str] = None, scale: float = 1, resize: Any = None,
                         viz: Any = None, flipRGB: bool = False) -> int:
    """Write the first ``number`` images of a DataFlow to ``output_dir`` (``001.jpg``,
    ``002.jpg``, ...) and/or show them in grids of ``viz = (rows, cols)``; returns how many were
    taken. The images are component ``index`` of each datapoint (a batch of them with
    ``batched=True``), multiplied by ``scale``, resized to ``resize = (h, w)`` and turned
    RGB<->BGR with ``flipRGB``. The flow is reset once and read epoch after epoch until
    ``number`` images were taken (or an epoch gives none).

    Example::

        dump_dataflow_images(BatchData(df, 16), index=0, number=64, output_dir="peek")
    """
    cv2 = import_cv2("dump_dataflow_images")
    if number < 1:
        raise ValueError("dump_dataflow_images: number must be >= 1, got {!r}".format(number))
    if output_dir:
        os.makedirs(output_dir, exist_ok=True)
    grid = tuple(shape2d(viz)) if viz is not None else None
    size = tuple(shape2d(resize)) if resize is not None else None
    shown: List[np.ndarray] = []
    taken = 0
    df.reset_state()
    while taken < number:
        before = taken
        for dp in df:
            for img in (dp[index] if batched else [dp[index]]):
                img = np.asarray(img)
                if scale != 1:
                    img = img * scale
                if size is not None:
                    img = cv2.resize(img, (size[1], size[0]))      # (cv2 takes width, height)
                if flipRGB:
                    img = img[:, :, ::-1]
                taken += 1
                if output_dir:
                    cv2.imwrite(os.path.join(output_dir, "{:03d}.jpg".format(taken)), img)
                if grid is not None:
                    shown.append(img)
                    if len(shown) == grid[0] * grid[1]:
                        stack_patches(shown, nr_row=grid[0], nr_col=grid[1], viz=True)
                        shown = []
                if taken == number:
                    return taken
        if taken == before:                 # an empty epoch: no more to take
            break
    if grid is not None and shown:
        stack_patches(shown, nr_row=grid[0], nr_col=grid[1], viz=True)
    return taken


def intensity_to_rgb(intensity: np.ndarray, cmap: str = "cubehelix", normalize: bool = False) -> np.ndarray:
    """A 2-D map of intensities in [0, 1] (``normalize=True``: any range, stretched to it) coloured
    with the matplotlib colormap ``cmap``: an ``HxWx3`` float32 RGB image in [0, 255].

    Example::

        heat = intensity_to_rgb(saliency, normalize=True)[:, :, ::-1]    # BGR, for OpenCV
    """
    try:
        from matplotlib import colormaps
    except ImportError as err:
        raise ImportError("intensity_to_rgb needs matplotlib (>= 3.5), which cannot be imported ({}); install it "
                          "with: pip install \"inputpipe[viz]\"".format(err)) from None
    intensity = np.asarray(intensity, dtype=np.float64)
    if intensity.ndim != 2:
        raise ValueError("intensity_to_rgb: expected a 2-D map, got shape {}".format(intensity.shape))
    if normalize:
        low, high = intensity.min(), intensity.max()
        intensity = (intensity - low) / (high - low) if high > low else np.zeros_like(intensity)
    return (colormaps[cmap](intensity)[..., :3] * 255.0).astype(np.float32)


def draw_text(img: np.ndarray, pos: Tuple[float, float], text: str, color: Sequence[int],
              font_scale: float = 0.4) -> np.ndarray:
    """A uint8 copy of ``img`` with ``text`` in light grey on a ``color`` (BGR) label whose
    bottom-left corner is at ``pos = (x, y)``, moved inside the image where it would leave it.

    Example::

        labelled = draw_text(image, (12, 40), "person 0.93", color=(0, 128, 255))
    """
    cv2 = import_cv2("draw_text")
    img = np.array(img, dtype=np.uint8)
    font = cv2.FONT_HERSHEY_SIMPLEX
    (text_w, text_h), _ = cv2.getTextSize(text, font, font_scale, 1)
    x0 = max(0, min(int(pos[0]), img.shape[1] - text_w))
    y0 = max(int(pos[1]), int(1.3 * text_h))
    color = tuple(int(c) for c in color)
    cv2.rectangle(img, (x0, y0 - int(1.3 * text_h)), (x0 + text_w, y0), color, -1)
    cv2.putText(img, text, (x0, y0 - int(0.25 * text_h)), font, font_scale, (222, 222, 222), lineType=cv2.LINE_AA)
    return img


def draw_boxes(im: np.ndarray, boxes: Any, labels: Optional[Sequence[str]] = None,
               color: Optional[Sequence[int]] = None) -> np.ndarray:
    """A copy of ``im`` (BGR or grey, values in [0, 255]) with ``boxes`` (N x 4 rows of
    ``x1, y1, x2, y2`` pixels, inside the image) drawn in ``color`` (BGR, default green), the
    larger first, each with its label from ``labels`` at its top-left corner.

    Example::

        shown = draw_boxes(image, [[10, 20, 110, 90]], labels=["dog"])
    """
    cv2 = import_cv2("draw_boxes")
    given = np.asarray(boxes, dtype=np.float64)
    if given.size and not (given.shape == (4,) or (given.ndim == 2 and given.shape[1] == 4)):
        raise ValueError("draw_boxes: expected boxes as N x 4 rows of x1, y1, x2, y2, got shape {}".format(given.shape))
    if not np.isfinite(given).all():
        raise ValueError("draw_boxes: the boxes hold NaN or infinite coordinates")
    boxes = given.reshape(-1, 4).round().astype(np.int32)
    if labels is not None and len(labels) != len(boxes):
        raise ValueError("draw_boxes: {} labels for {} boxes".format(len(labels), len(boxes)))
    height, width = np.shape(im)[:2]
    if len(boxes):
        bad = (boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1]) | (boxes[:, :2] < 0).any(1) | \
            (boxes[:, 2] > width) | (boxes[:, 3] > height)
        if bad.any():
            raise ValueError("draw_boxes: boxes must be x1 <= x2, y1 <= y2 inside the {}x{} image (x from 0 to {}, "
                             "y to {}); these are not: {}".format(width, height, width, height,
                                                                   boxes[bad][:5].tolist()))
    out = np.array(im, dtype=np.uint8)
    if out.ndim == 2 or out.shape[2] == 1:
        out = cv2.cvtColor(out, cv2.COLOR_GRAY2BGR)
    color = tuple(int(c) for c in (DEFAULT_BOX_COLOR if color is None else color))
    areas = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    for i in np.argsort(-areas, kind="stable"):
        x1, y1, x2, y2 = (int(v) for v in boxes[i])
        if labels is not None:
            out = draw_text(out, (x1, y1), str(labels[i]), color=color)
        cv2.rectangle(out, (x1, y1), (x2, y2), color=color, thickness=1)
    return out
