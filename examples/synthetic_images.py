"""The example's default dataset: procedurally drawn image classes, written as JPEG files.

Nothing has to be downloaded. On first use :func:`ensure_dataset` draws ``images_per_class``
images of each of up to ten classes (filled shapes, outlines and patterns) with random colours,
position, scale, rotation and pixel noise, and writes them as JPEG files in the ImageNet folder
layout ``<root>/<class>/<index>.jpg`` (the same layout ``--data DIR`` reads). Later runs find
the finished cache and reuse it. Every image depends only on (seed, class, index), so two runs
with the same settings write byte-identical files.

Example::

    from synthetic_images import ensure_dataset
    root = ensure_dataset("/tmp/shapes", num_classes=10, images_per_class=200, image_size=40)
    # /tmp/shapes/circle/00000.jpg ... /tmp/shapes/checkerboard/00199.jpg
"""
import json
import math
import os
import shutil
import tempfile
from typing import Callable, Dict, List

import numpy as np

try:
    from PIL import Image, ImageDraw
except ImportError as err:  # pragma: no cover - depends on the installation
    raise ImportError(
        "the example's image dataset needs Pillow: pip install -e \".[image]\" (or pip install pillow)"
    ) from err

#: Bump when the drawing code changes, so old caches are not mistaken for new ones.
GENERATOR_VERSION = 1
MANIFEST = "manifest.json"


def _colour_pair(rng: np.random.RandomState):
    """A random foreground and background colour that differ clearly in brightness."""
    while True:
        fg = rng.randint(0, 256, size=3)
        bg = rng.randint(0, 256, size=3)
        if abs(int(fg.mean()) - int(bg.mean())) >= 60:
            return tuple(int(c) for c in fg), tuple(int(c) for c in bg)


def _rotated_polygon(cx: float, cy: float, radius: float, corners: int, angle: float):
    return [(cx + radius * math.cos(angle + 2 * math.pi * k / corners),
             cy + radius * math.sin(angle + 2 * math.pi * k / corners)) for k in range(corners)]


def _draw_circle(draw, rng, size, fg, cx, cy, r):
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fg)


def _draw_ring(draw, rng, size, fg, cx, cy, r):
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], outline=fg, width=max(2, int(r / 4)))


def _draw_square(draw, rng, size, fg, cx, cy, r):
    draw.polygon(_rotated_polygon(cx, cy, r * 1.2, 4, rng.uniform(0, math.pi / 2)), fill=fg)


def _draw_triangle(draw, rng, size, fg, cx, cy, r):
    draw.polygon(_rotated_polygon(cx, cy, r * 1.2, 3, rng.uniform(0, 2 * math.pi)), fill=fg)


def _draw_cross(draw, rng, size, fg, cx, cy, r):
    thickness = max(2, int(r / 2.5))
    draw.rectangle([cx - r, cy - thickness / 2, cx + r, cy + thickness / 2], fill=fg)
    draw.rectangle([cx - thickness / 2, cy - r, cx + thickness / 2, cy + r], fill=fg)


def _stripes(draw, size, fg, period, thickness, offset, direction):
    """Lines across the whole image: direction 'h', 'v', '/' or '\\'."""
    span = 2 * size
    for p in range(-span, span, period):
        p = p + offset
        if direction == "h":
            draw.rectangle([0, p, size, p + thickness - 1], fill=fg)
        elif direction == "v":
            draw.rectangle([p, 0, p + thickness - 1, size], fill=fg)
        elif direction == "/":
            draw.line([(p, 0), (p - size, size)], fill=fg, width=thickness)
        else:
            draw.line([(p, 0), (p + size, size)], fill=fg, width=thickness)


def _draw_hstripes(draw, rng, size, fg, cx, cy, r):
    period = rng.randint(max(4, size // 8), max(6, size // 4))
    _stripes(draw, size, fg, period, max(2, period // 2), rng.randint(period), "h")


def _draw_vstripes(draw, rng, size, fg, cx, cy, r):
    period = rng.randint(max(4, size // 8), max(6, size // 4))
    _stripes(draw, size, fg, period, max(2, period // 2), rng.randint(period), "v")


def _draw_diagonal(draw, rng, size, fg, cx, cy, r):
    period = rng.randint(max(5, size // 7), max(7, size // 4))
    _stripes(draw, size, fg, period, max(2, period // 2), rng.randint(period), "/" if rng.rand() < 0.5 else "\\")


def _draw_checkerboard(draw, rng, size, fg, cx, cy, r):
    cell = rng.randint(max(3, size // 10), max(5, size // 5))
    ox, oy = rng.randint(cell), rng.randint(cell)
    for i in range(-1, size // cell + 2):
        for j in range(-1, size // cell + 2):
            if (i + j) % 2 == 0:
                x, y = i * cell - ox, j * cell - oy
                draw.rectangle([x, y, x + cell - 1, y + cell - 1], fill=fg)


def _draw_dots(draw, rng, size, fg, cx, cy, r):
    spacing = rng.randint(max(5, size // 6), max(7, size // 4))
    radius = max(1, spacing // 4)
    ox, oy = rng.randint(spacing), rng.randint(spacing)
    for x in range(ox - spacing, size + spacing, spacing):
        for y in range(oy - spacing, size + spacing, spacing):
            draw.ellipse([x - radius, y - radius, x + radius, y + radius], fill=fg)


#: Class name -> drawing function, in label order.
CLASSES: Dict[str, Callable] = {
    "circle": _draw_circle,
    "square": _draw_square,
    "triangle": _draw_triangle,
    "ring": _draw_ring,
    "cross": _draw_cross,
    "horizontal_stripes": _draw_hstripes,
    "vertical_stripes": _draw_vstripes,
    "diagonal_stripes": _draw_diagonal,
    "checkerboard": _draw_checkerboard,
    "dots": _draw_dots,
}


def class_names(num_classes: int) -> List[str]:
    """The first ``num_classes`` class names (2..10), in label order."""
    if not 2 <= num_classes <= len(CLASSES):
        raise ValueError("the synthetic dataset has 2 to {} classes, asked for {}".format(len(CLASSES), num_classes))
    return list(CLASSES)[:num_classes]


def draw_image(label: int, index: int, image_size: int, seed: int = 0) -> np.ndarray:
    """One ``image_size`` x ``image_size`` RGB uint8 image of class ``label``; a pure function of
    its arguments."""
    name = list(CLASSES)[label]
    rng = np.random.RandomState(np.random.SeedSequence([seed, label, index]).generate_state(2))
    fg, bg = _colour_pair(rng)
    canvas = Image.new("RGB", (image_size, image_size), bg)
    draw = ImageDraw.Draw(canvas)
    radius = rng.uniform(0.2, 0.38) * image_size
    margin = radius * 0.8
    cx = rng.uniform(margin, image_size - margin)
    cy = rng.uniform(margin, image_size - margin)
    CLASSES[name](draw, rng, image_size, fg, cx, cy, radius)
    pixels = np.asarray(canvas, dtype=np.float32)
    pixels += rng.normal(0.0, rng.uniform(4.0, 16.0), size=pixels.shape)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _manifest(num_classes: int, images_per_class: int, image_size: int, seed: int) -> dict:
    return {
        "generator_version": GENERATOR_VERSION,
        "num_classes": num_classes,
        "images_per_class": images_per_class,
        "image_size": image_size,
        "seed": seed,
        "classes": class_names(num_classes),
    }


def is_complete(root: str, num_classes: int, images_per_class: int, image_size: int, seed: int = 0) -> bool:
    """True when ``root`` holds a finished dataset made with exactly these settings."""
    try:
        with open(os.path.join(root, MANIFEST), encoding="utf-8") as f:
            return json.load(f) == _manifest(num_classes, images_per_class, image_size, seed)
    except (OSError, ValueError):
        return False


def generate(root: str, num_classes: int = 10, images_per_class: int = 300, image_size: int = 40,
             seed: int = 0, quality: int = 90) -> str:
    """Write the dataset to ``root`` (replaced if it exists) and return ``root``.

    Files are written to a temporary sibling directory that is renamed into place at the end,
    so an interrupted run never leaves a half-written cache that looks finished.
    """
    names = class_names(num_classes)
    if images_per_class < 1:
        raise ValueError("images_per_class must be >= 1, got {}".format(images_per_class))
    if image_size < 16:
        raise ValueError("image_size must be >= 16 pixels, got {}".format(image_size))
    root = os.path.abspath(root)
    parent = os.path.dirname(root)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".partial-", dir=parent)
    try:
        for label, name in enumerate(names):
            class_dir = os.path.join(staging, name)
            os.makedirs(class_dir)
            for index in range(images_per_class):
                image = Image.fromarray(draw_image(label, index, image_size, seed))
                image.save(os.path.join(class_dir, "{:05d}.jpg".format(index)), format="JPEG", quality=quality)
        with open(os.path.join(staging, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(_manifest(num_classes, images_per_class, image_size, seed), f, indent=1)
        if os.path.exists(root):
            shutil.rmtree(root)
        os.rename(staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return root


def default_cache_root() -> str:
    """``$INPUTPIPE_CACHE`` or ``~/.cache/inputpipe``."""
    return os.environ.get("INPUTPIPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "inputpipe")


def ensure_dataset(root: str, num_classes: int = 10, images_per_class: int = 300, image_size: int = 40,
                   seed: int = 0) -> str:
    """Return ``root``, generating the dataset there first unless a finished one with the same
    settings is already present."""
    if not is_complete(root, num_classes, images_per_class, image_size, seed):
        generate(root, num_classes, images_per_class, image_size, seed)
    return root
