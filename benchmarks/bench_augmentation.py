"""Augmentation throughput: ResNet training augmentation of JPEG files, inputpipe vs tensorpack 0.11 vs PIL.

The work per image is the fb.resnet.torch / tensorpack ImageNet training recipe: read a JPEG file
(256x256), decode it, ``GoogleNetRandomCropAndResize`` to 224x224, colour augmentation
(``RandomOrderAug`` of ``BrightnessScale``, ``Contrast``, ``Saturation`` and ``Lighting``), a
random horizontal ``Flip``, and a uint8 (or, with ``--output float32``, float32) image out.

- inputpipe: OpenCV decoding and ``inputpipe.dataflow.imgaug``, in ``MultiProcessMapData``.
- tensorpack 0.11: the same code with ``tensorpack.dataflow.imgaug`` (the same augmentor list,
  built by the same function: the APIs agree), in its ``MultiProcessMapDataZMQ``. It runs in
  tensorpack's own environment (``--tensorpack-python``, default ``/opt/tpvenv/bin/python``): one
  long-lived subprocess of this script answers one measurement request at a time.
- PIL, torchvision style: PIL decoding, RandomResizedCrop (crop box + bilinear resize),
  ColorJitter(0.4, 0.4, 0.4) in random order with ``ImageEnhance``, horizontal flip, and the same
  PCA lighting in numpy; in a PyTorch ``DataLoader`` when torch is installed, else a
  ``multiprocessing`` pool.

Every loader runs with 0 (the map called in the main process), 1 and 2 worker processes; the
loaders take turns for ``--repeats`` rounds and the median round of each is reported. Each
process uses one OpenCV thread, so worker counts compare like with like.

    python benchmarks/bench_augmentation.py            # the real run (a few minutes)
    python benchmarks/bench_augmentation.py --quick    # a smoke test of every path (seconds)

Prints a table with ratios and writes ``benchmarks/results/augmentation.json``.
"""
import argparse
import itertools
import json
import math
import os
import platform
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TARGET = 224
STORED = 256
RESULT_PREFIX = "RESULT "

# fb.resnet.torch's ImageNet PCA, RGB order (eigenvectors are the columns).
EIGVAL_RGB = np.asarray([0.2175, 0.0188, 0.0045], np.float32)
EIGVEC_RGB = np.asarray([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]],
                        np.float32)


# --------------------------------------------------------------------------- the work per image

def fbresnet_augmentors(imgaug, output: str):
    """tensorpack's ImageNet training augmentors for BGR uint8 images, built from ``imgaug``
    (inputpipe's or tensorpack's module: they take the same arguments)."""
    augs = [
        imgaug.GoogleNetRandomCropAndResize(target_shape=TARGET),
        imgaug.RandomOrderAug([
            imgaug.BrightnessScale((0.6, 1.4), clip=False),
            imgaug.Contrast((0.6, 1.4), rgb=False, clip=False),
            imgaug.Saturation(0.4, rgb=False),
            imgaug.Lighting(0.1, eigval=EIGVAL_RGB[::-1] * 255.0, eigvec=EIGVEC_RGB[::-1, ::-1]),
        ]),
        imgaug.Flip(horiz=True),
    ]
    if output == "float32":
        augs.append(imgaug.ToFloat32())
    return augs


class DecodeAndAugment:
    """``[path, label] -> [image, label]``: OpenCV decoding, then the augmentor list of ``imgaug``."""

    def __init__(self, imgaug, output: str):
        self.augmentors = imgaug.AugmentorList(fbresnet_augmentors(imgaug, output))
        self._pid = None

    def __call__(self, dp):
        import cv2

        if self._pid != os.getpid():
            cv2.setNumThreads(1)
            self._pid = os.getpid()
        path, label = dp
        with open(path, "rb") as f:
            img = cv2.imdecode(np.frombuffer(f.read(), np.uint8), cv2.IMREAD_COLOR)
        return [self.augmentors.augment(img), label]


class PilDecodeAndAugment:
    """The same recipe written torchvision-style with PIL (RGB) and numpy; Python's ``random``
    module (reseeded in every forked child by CPython) draws the parameters."""

    def __init__(self, output: str):
        self.output = output
        self.shift_basis = EIGVEC_RGB * (EIGVAL_RGB * 255.0)   # column j scaled by eigval j

    def _crop_box(self, width, height):
        area = width * height
        for _ in range(10):
            target = area * random.uniform(0.08, 1.0)
            ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            w, h = int(round(math.sqrt(target * ratio))), int(round(math.sqrt(target / ratio)))
            if 0 < w <= width and 0 < h <= height:
                x, y = random.randint(0, width - w), random.randint(0, height - h)
                return x, y, x + w, y + h
        side = min(width, height)
        x, y = (width - side) // 2, (height - side) // 2
        return x, y, x + side, y + side

    def __call__(self, dp):
        from PIL import Image, ImageEnhance

        path, label = dp
        with Image.open(path) as opened:
            img = opened.convert("RGB")
        img = img.resize((TARGET, TARGET), Image.BILINEAR, box=self._crop_box(*img.size))
        jitters = [ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color]
        random.shuffle(jitters)
        for enhancer in jitters:
            img = enhancer(img).enhance(random.uniform(0.6, 1.4))
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        alpha = np.asarray([random.gauss(0, 0.1) for _ in range(3)], np.float32)
        out = np.asarray(img, np.float32) + self.shift_basis @ alpha
        out = np.clip(out, 0, 255)
        return [out.astype(np.uint8) if self.output == "uint8" else out, label]


# --------------------------------------------------------------------------- timing

def _check(dp, output):
    image = dp[0]
    dtype = str(image.dtype).replace("torch.", "")   # the DataLoader hands numpy arrays over as tensors
    if tuple(image.shape) != (TARGET, TARGET, 3) or dtype != output:
        raise AssertionError("a loader produced an image of shape {} and dtype {}, expected ({t}, {t}, 3) {}".format(
            tuple(image.shape), image.dtype, output, t=TARGET))


def _images_per_s(iterator, warmup: int, count: int, output: str) -> float:
    for _ in range(warmup):
        next(iterator)
    start = time.perf_counter()
    for _ in range(count - 1):
        next(iterator)
    last = next(iterator)
    elapsed = time.perf_counter() - start
    _check(last, output)
    return count / elapsed


def _endless(items):
    """The file list, reshuffled every pass."""
    items = list(items)
    while True:
        random.shuffle(items)
        yield from items


def _in_process(func, items, warmup, count, output):
    return _images_per_s(map(func, _endless(items)), warmup, count, output)


def measure_inputpipe(items, procs, warmup, count, output):
    from inputpipe.dataflow import DataFromList, MultiProcessMapData, RepeatedData, imgaug

    func = DecodeAndAugment(imgaug, output)
    if procs == 0:
        return _in_process(func, items, warmup, count, output)
    df = MultiProcessMapData(RepeatedData(DataFromList(items, shuffle=True), -1), procs, func, buffer_size=200)
    df.reset_state()
    with df:
        return _images_per_s(iter(df), warmup, count, output)


def measure_tensorpack(items, procs, warmup, count, output):
    """Runs under tensorpack's Python (see ``serve_tensorpack``)."""
    from tensorpack.dataflow import DataFromList, MultiProcessMapDataZMQ, RepeatedData, imgaug

    func = DecodeAndAugment(imgaug, output)
    if procs == 0:
        return _in_process(func, items, warmup, count, output)
    df = MultiProcessMapDataZMQ(RepeatedData(DataFromList(items, shuffle=True), -1), procs, func, buffer_size=200)
    df.reset_state()
    try:
        return _images_per_s(iter(df), warmup, count, output)
    finally:
        df.__del__()


def pil_runner() -> str:
    try:
        import torch  # noqa: F401
        return "torch DataLoader"
    except ImportError:
        return "multiprocessing.Pool"


def measure_pil(items, procs, warmup, count, output):
    func = PilDecodeAndAugment(output)
    if procs == 0:
        return _in_process(func, items, warmup, count, output)
    if pil_runner() == "torch DataLoader":
        import torch
        from torch.utils.data import DataLoader, IterableDataset

        torch.set_num_threads(1)

        class Files(IterableDataset):
            def __iter__(self):
                return map(func, _endless(items))

        iterator = iter(DataLoader(Files(), batch_size=None, num_workers=procs, prefetch_factor=8))
        try:
            return _images_per_s(iterator, warmup, count, output)
        finally:
            iterator._shutdown_workers()
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(procs) as pool:
        tasks = itertools.islice(_endless(items), warmup + count)
        return _images_per_s(pool.imap(func, tasks, chunksize=4), warmup, count, output)


# --------------------------------------------------------------------------- tensorpack's subprocess

def serve_tensorpack():
    """Answer measurement requests (one JSON line each on stdin) with ``RESULT {json}`` lines."""
    for line in sys.stdin:
        request = json.loads(line)
        try:
            rate = measure_tensorpack([tuple(item) for item in request["items"]], request["procs"],
                                      request["warmup"], request["count"], request["output"])
            answer = {"images_per_s": rate}
        except Exception:
            answer = {"error": traceback.format_exc()}
        print(RESULT_PREFIX + json.dumps(answer), flush=True)


class TensorpackPeer:
    """The long-lived tensorpack subprocess; ``measure`` waits at most ``timeout`` seconds."""

    def __init__(self, python: str, timeout: float):
        self.timeout = timeout
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        self.proc = subprocess.Popen([python, os.path.abspath(__file__), "--serve-tensorpack"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith(RESULT_PREFIX):
                self.lines.put(json.loads(line[len(RESULT_PREFIX):]))
        self.lines.put({"error": "tensorpack's process ended (exit code {})".format(self.proc.wait())})

    def measure(self, items, procs, warmup, count, output):
        request = {"items": items, "procs": procs, "warmup": warmup, "count": count, "output": output}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        try:
            answer = self.lines.get(timeout=self.timeout)
        except queue.Empty:
            raise RuntimeError("tensorpack gave no answer within {} s".format(self.timeout)) from None
        if "error" in answer:
            raise RuntimeError("tensorpack failed:\n" + answer["error"])
        return answer["images_per_s"]

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --------------------------------------------------------------------------- main

def list_files(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    return [(os.path.join(root, name, f), label) for label, name in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, name))) if f.endswith(".jpg")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=600, help="timed images per measurement")
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the loaders take turns in each")
    parser.add_argument("--procs", type=int, nargs="+", default=[0, 1, 2], help="worker processes (0: in-process)")
    parser.add_argument("--files", type=int, default=200, help="JPEG files to generate and cycle through")
    parser.add_argument("--output", choices=["uint8", "float32"], default="uint8")
    parser.add_argument("--tensorpack-python", default=os.environ.get("TENSORPACK_PYTHON", "/opt/tpvenv/bin/python"))
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for one tensorpack measurement")
    parser.add_argument("--quick", action="store_true", help="a smoke test: few images, one round, 1 process")
    parser.add_argument("--out", default=None, help="JSON path (default results/augmentation.json; --quick: a temp file)")
    parser.add_argument("--serve-tensorpack", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_tensorpack:
        return serve_tensorpack()
    if args.quick:
        args.images, args.warmup, args.repeats, args.procs, args.files = 12, 3, 1, [1], 20
    out = args.out or (os.path.join(tempfile.gettempdir(), "augmentation-quick.json") if args.quick
                       else os.path.join(HERE, "results", "augmentation.json"))

    sys.path[:0] = [os.path.join(REPO, "examples"), REPO]
    from tabulate import tabulate

    import synthetic_images

    per_class = max(1, args.files // 10)
    root = synthetic_images.ensure_dataset(os.path.join(tempfile.gettempdir(), "inputpipe-bench-augment",
                                                        "{}px-{}".format(STORED, per_class)),
                                           num_classes=10, images_per_class=per_class, image_size=STORED)
    items = list_files(root)

    peers = {"inputpipe": measure_inputpipe, "PIL ({})".format(pil_runner()): measure_pil}
    tensorpack, tensorpack_missing = None, None
    if os.path.exists(args.tensorpack_python):
        tensorpack = TensorpackPeer(args.tensorpack_python, args.timeout)
        peers["tensorpack 0.11"] = tensorpack.measure
    else:
        tensorpack_missing = "no tensorpack Python at {}".format(args.tensorpack_python)
        print("tensorpack left out:", tensorpack_missing)
    runs = {(name, procs): [] for name in peers for procs in args.procs}
    try:
        for round_ in range(args.repeats):
            for procs in args.procs:
                for name, measure in peers.items():
                    rate = measure([list(item) for item in items], procs, args.warmup, args.images, args.output)
                    runs[name, procs].append(rate)
                    print("round {} {} x{}: {:.0f} images/s".format(round_, name, procs, rate), flush=True)
    finally:
        if tensorpack is not None:
            tensorpack.close()

    median = {key: statistics.median(values) for key, values in runs.items()}
    names = list(peers)
    rows = []
    for procs in args.procs:
        row = [procs] + ["{:.0f}".format(median[name, procs]) for name in names]
        row += ["{:.2f}x".format(median["inputpipe", procs] / median[name, procs]) for name in names[1:]]
        rows.append(row)
    headers = (["worker processes"] + ["{} (images/s)".format(name) for name in names]
               + ["inputpipe / {}".format(name) for name in names[1:]])
    print()
    print("ResNet training augmentation, {}px JPEG -> {}x{} {}, median of {} rounds".format(
        STORED, TARGET, TARGET, args.output, args.repeats))
    print(tabulate(rows, headers=headers, tablefmt="github"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"benchmark": "augmentation", "quick": args.quick, "stored_px": STORED, "target_px": TARGET,
                   "output": args.output, "files": len(items), "images": args.images, "warmup": args.warmup,
                   "repeats": args.repeats, "tensorpack_missing": tensorpack_missing,
                   "images_per_s_median": {"{} x{}".format(n, p): v for (n, p), v in median.items()},
                   "images_per_s_runs": {"{} x{}".format(n, p): v for (n, p), v in runs.items()},
                   "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                               "python": platform.python_version()}}, f, indent=1)
    print("\nwrote", out)


if __name__ == "__main__":
    main()
