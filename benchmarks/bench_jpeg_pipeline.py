"""JPEG pipeline throughput: the example's data pipeline alone, inputpipe vs tf.data vs PyTorch's DataLoader.

Every pipeline does the same work per image: read the file, decode the JPEG, resize the shorter
side to ``round(crop * 1.25)`` when it differs (the stored sizes below make that a no-op), random
``crop x crop`` crop, random horizontal flip, ``(pixel - mean) / std`` in float32; then batches of
64 (``[64, crop, crop, 3] float32`` images, ``[64] int32`` labels).

- inputpipe, the example's ``DecodeAndAugment`` (``examples/image_pipeline.py``: OpenCV and
  inputpipe's augmentors since 0.3, Pillow before; the rows keep their old ``example`` names):
  ``DataFromList -> MultiProcessMapData -> BatchData`` (the example's pipeline) and
  ``MultiProcessMapAndBatchData`` (batches made inside the workers, as the DataLoader does).
- inputpipe, OpenCV decode: :class:`CvDecodeAndAugment` (``cv2.imdecode`` of the file bytes,
  ``IMREAD_COLOR``, BGR -> RGB, one OpenCV thread per process) in ``MultiProcessMapAndBatchData``.
- tf.data, TensorFlow's own ops: ``tf.io.read_file``, ``tf.io.decode_jpeg``,
  ``tf.image.random_crop``, ``tf.image.random_flip_left_right``, ``map`` with
  ``num_parallel_calls=AUTOTUNE``, ``batch``, ``prefetch(AUTOTUNE)``. It runs in a long-lived
  subprocess of this script (importing TensorFlow here would start its thread pools next to the
  other rows) that answers one request at a time and is idle otherwise. With N worker
  processes on the other rows, tf.data gets ``Options().threading.private_threadpool_size = N``,
  ``max_intra_op_parallelism = 1`` and TensorFlow's intra-/inter-op pools of 1 thread; its
  ``deterministic`` option is off (inputpipe's maps do not keep order either).
- PyTorch: a map-style ``Dataset`` running the example's ``DecodeAndAugment`` in a ``DataLoader``
  with N worker processes (left out, and said so, when torch is not installed).

Before anything is timed, every pipeline decodes batches of one file (the one whose colour
channels differ most) and must give the same shapes, dtypes and labels, values inside the
normalised pixel range and the same per-channel means (so a BGR/RGB mix-up fails the run).
The pipelines then take turns for ``--repeats`` rounds; the median round of each is reported,
with the CPU cores it kept busy (CPU time of the consuming process and its children, or of the
tf.data process, over the timed batches, divided by the wall time; needs psutil).
Two image sizes: the example's default (40 px files, 32 px crops) and a larger one (140 px
files, 112 px crops).

    pip install -e ".[bench]" && python benchmarks/bench_jpeg_pipeline.py
    python benchmarks/bench_jpeg_pipeline.py --quick      # a smoke run of every path

Prints a table with ratios and writes ``benchmarks/results/jpeg_pipeline.json`` (``--quick``:
a file in the temp directory).
"""
import argparse
import json
import os
import platform
import queue
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
sys.path[:0] = [os.path.join(REPO, "examples"), REPO]

from image_pipeline import (  # noqa: E402
    PIXEL_MEAN,
    PIXEL_STD,
    DecodeAndAugment,
    build_image_dataflow,
    close_dataflow,
    list_image_folder,
)

BATCH_SIZE = 64
SETTINGS = [  # (label, stored image size, crop size, images per class)
    ("40px JPEG -> 32px crop", 40, 32, 300),
    ("140px JPEG -> 112px crop", 140, 112, 100),
]
RESULT_PREFIX = "RESULT "
#: Largest difference of per-channel batch means (normalised units) between two pipelines.
MEAN_TOLERANCE = 0.1
PIXEL_LOW = (0.0 - PIXEL_MEAN) / PIXEL_STD
PIXEL_HIGH = (255.0 - PIXEL_MEAN) / PIXEL_STD

PIL_MAP_THEN_BATCH = "inputpipe MultiProcessMapData -> BatchData (example)"
PIL_MAP_AND_BATCH = "inputpipe MultiProcessMapAndBatchData (example)"
CV_MAP_AND_BATCH = "inputpipe MultiProcessMapAndBatchData (OpenCV)"
TF_DATA = "tf.data native"
TORCH = "torch DataLoader (example)"
INPUTPIPE_ROWS = (PIL_MAP_THEN_BATCH, PIL_MAP_AND_BATCH, CV_MAP_AND_BATCH)


# --------------------------------------------------------------------------- OpenCV decode

class CvDecodeAndAugment:
    """The example's ``DecodeAndAugment`` with OpenCV decoding: ``[path, label] -> [image, label]``.

    ``cv2.imdecode`` of the file's bytes (``IMREAD_COLOR``), BGR -> RGB, then the same resize,
    random crop, random flip and normalisation, with a per-process RNG from
    ``inputpipe.dataflow.seeding.new_rng``. Each process uses one OpenCV thread.
    """

    def __init__(self, crop_size: int):
        self.crop_size = int(crop_size)
        self.resize_to = int(round(self.crop_size * 1.25))
        self._rng = None
        self._pid = None

    def _start_in_this_process(self):
        from inputpipe.dataflow._image.opencv import import_cv2
        from inputpipe.dataflow.seeding import new_rng

        cv2 = import_cv2("the JPEG benchmark's OpenCV pipeline")
        cv2.setNumThreads(1)
        self._rng = new_rng(self)
        self._pid = os.getpid()
        return cv2

    def __call__(self, dp):
        cv2 = self._start_in_this_process() if self._pid != os.getpid() else sys.modules["cv2"]
        path, label = dp[0], dp[1]
        with open(path, "rb") as f:
            encoded = np.frombuffer(f.read(), np.uint8)
        image = cv2.imdecode(encoded, cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError("OpenCV could not decode {} as an image".format(path))
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        height, width = image.shape[:2]
        if min(width, height) != self.resize_to:
            scale = self.resize_to / min(width, height)
            width, height = max(self.resize_to, round(width * scale)), max(self.resize_to, round(height * scale))
            image = cv2.resize(image, (width, height), interpolation=cv2.INTER_LINEAR)
        c = self.crop_size
        top, left = self._rng.randint(0, height - c + 1), self._rng.randint(0, width - c + 1)
        pixels = image[top:top + c, left:left + c].astype(np.float32)
        if self._rng.rand() < 0.5:
            pixels = pixels[:, ::-1]
        return [(pixels - PIXEL_MEAN) / PIXEL_STD, np.int32(label)]


# --------------------------------------------------------------------------- pipelines in this process

def _endless_source(items):
    from inputpipe.dataflow import DataFromList, RepeatedData

    return RepeatedData(DataFromList(items, shuffle=True), -1)


def _iterate_dataflow(df):
    """Iterate ``df`` (reset first) and close every DataFlow of its chain afterwards."""
    df.reset_state()
    try:
        yield from df
    finally:
        close_dataflow(df)


def open_pil_map_then_batch(items, crop: int, procs: int):
    """The example's pipeline: DataFromList -> MultiProcessMapData -> BatchData."""
    return _iterate_dataflow(build_image_dataflow(None, crop_size=crop, batch_size=BATCH_SIZE, num_proc=procs,
                                                  source=_endless_source(items)))


def open_map_and_batch(make_map):
    def open_pipeline(items, crop: int, procs: int):
        from inputpipe.dataflow import MultiProcessMapAndBatchData

        return _iterate_dataflow(MultiProcessMapAndBatchData(_endless_source(items), procs, make_map(crop), BATCH_SIZE))
    return open_pipeline


class JpegDataset:
    """A map-style torch Dataset doing the example's decode + augment."""

    def __init__(self, items, crop: int):
        self.items = items
        self.augment = DecodeAndAugment(crop, on_corrupt="fail")

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        image, label = self.augment(self.items[index])
        return image, int(label)


def torch_missing():
    """Why the DataLoader row is left out, or None when torch can be imported."""
    try:
        import torch  # noqa: F401
    except ImportError as err:
        return "torch is not installed ({})".format(err)
    return None


def open_torch(items, crop: int, procs: int):
    """A DataLoader with ``procs`` workers and an endless random sampler (no epoch restarts)."""
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    torch.set_num_threads(1)
    dataset = JpegDataset(items, crop)
    sampler = RandomSampler(dataset, replacement=True, num_samples=1 << 40)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler, drop_last=True,
                        num_workers=procs, prefetch_factor=4)
    iterator = iter(loader)
    try:
        for images, labels in iterator:
            yield [images.numpy(), labels.numpy().astype(np.int32)]
    finally:
        iterator._shutdown_workers()


# --------------------------------------------------------------------------- timing and checks

def batch_summary(batch) -> dict:
    """Shapes, dtypes, value range, per-channel means and labels of one ``[images, labels]`` batch."""
    images, labels = np.asarray(batch[0]), np.asarray(batch[1])
    return {"images": [list(images.shape), str(images.dtype)], "labels": [list(labels.shape), str(labels.dtype)],
            "min": [float(v) for v in images.min(axis=(0, 1, 2))],
            "max": [float(v) for v in images.max(axis=(0, 1, 2))],
            "channel_means": [float(v) for v in images.mean(axis=(0, 1, 2))],
            "label_values": sorted(set(labels.tolist()))}


def expected_layout(crop: int) -> dict:
    return {"images": [[BATCH_SIZE, crop, crop, 3], "float32"], "labels": [[BATCH_SIZE], "int32"]}


def cpu_seconds(processes) -> float:
    """User + system CPU seconds used so far by ``processes`` (psutil.Process objects still alive)."""
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except Exception:  # psutil.NoSuchProcess: a worker that ended counts as nothing
            continue
        total += times.user + times.system
    return total


def time_batches(iterator, batches: int, warmup: int, crop: int) -> dict:
    """Images/s over ``batches`` batches after ``warmup``, and the CPU cores this process and its
    children kept busy meanwhile (None without psutil); checks the last batch's layout."""
    for _ in range(warmup):
        next(iterator)
    try:
        import psutil

        processes = [psutil.Process()] + psutil.Process().children(recursive=True)
    except ImportError:
        processes = None
    cpu_before = cpu_seconds(processes) if processes else 0.0
    start = time.perf_counter()
    for _ in range(batches - 1):
        next(iterator)
    last = next(iterator)
    elapsed = time.perf_counter() - start
    cores = (cpu_seconds(processes) - cpu_before) / elapsed if processes else None
    summary = batch_summary(last)
    layout = {key: summary[key] for key in ("images", "labels")}
    if layout != expected_layout(crop):
        raise AssertionError("a timed batch has layout {}, expected {}".format(layout, expected_layout(crop)))
    return {"images_per_s": batches * BATCH_SIZE / elapsed, "cores_busy": cores}


class LocalPipeline:
    """A pipeline run in this process: ``open(items, crop, procs)`` gives an iterator of batches."""

    def __init__(self, open_pipeline):
        self.open_pipeline = open_pipeline

    def _run(self, items, crop, procs, use):
        iterator = self.open_pipeline(items, crop, procs)
        try:
            return use(iterator)
        finally:
            iterator.close()

    def check(self, items, crop: int, procs: int) -> dict:
        return self._run(items, crop, procs, lambda it: batch_summary(next(it)))

    def measure(self, items, crop: int, procs: int, batches: int, warmup: int) -> dict:
        return self._run(items, crop, procs, lambda it: time_batches(it, batches, warmup, crop))

    def close(self):
        pass


# --------------------------------------------------------------------------- tf.data (in a subprocess)

def tf_dataset(files, labels, crop: int, threads: int):
    """tf.data's own ops doing the example's work, on ``threads`` private threads."""
    import tensorflow as tf

    resize_to = int(round(crop * 1.25))
    mean, std = tf.constant(PIXEL_MEAN), tf.constant(PIXEL_STD)

    def resize_shorter_side(image):
        shape = tf.shape(image)
        height, width = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
        scale = resize_to / tf.minimum(height, width)
        size = tf.maximum(resize_to, tf.cast(tf.round(tf.stack([height, width]) * scale), tf.int32))
        return tf.cast(tf.image.resize(image, size, method="bilinear"), tf.uint8)

    def decode_and_augment(path, label):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        shorter = tf.minimum(tf.shape(image)[0], tf.shape(image)[1])
        image = tf.cond(tf.equal(shorter, resize_to), lambda: image, lambda: resize_shorter_side(image))
        image = tf.image.random_flip_left_right(tf.image.random_crop(image, [crop, crop, 3]))
        return (tf.cast(image, tf.float32) - mean) / std, label

    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.threading.max_intra_op_parallelism = 1
    options.deterministic = False
    dataset = tf.data.Dataset.from_tensor_slices((files, np.asarray(labels, np.int32)))
    dataset = dataset.shuffle(len(files), reshuffle_each_iteration=True).repeat()
    dataset = dataset.map(decode_and_augment, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(BATCH_SIZE, drop_remainder=True).prefetch(tf.data.AUTOTUNE).with_options(options)


def serve_tf_data():
    """Answer requests (one JSON line each on stdin) with ``RESULT {json}`` lines on stdout."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            files, labels = [item[0] for item in request["items"]], [item[1] for item in request["items"]]
            iterator = iter(tf_dataset(files, labels, request["crop"], request["procs"]))
            if request["op"] == "check":
                answer = {"summary": batch_summary(next(iterator))}
            else:  # the timed loop takes the tensors as a TF model would; only the last batch is read as numpy
                answer = {"timing": time_batches(iterator, request["batches"], request["warmup"], request["crop"])}
            del iterator  # stops the dataset's threads before the next request
        except Exception:
            answer = {"error": traceback.format_exc()}
        print(RESULT_PREFIX + json.dumps(answer), flush=True)


class TfDataPipeline:
    """The long-lived tf.data subprocess; each answer is awaited at most ``timeout`` seconds."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.stderr = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-tf-data"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True, env=env)
        self.answers = queue.Queue()
        threading.Thread(target=self._read, name="tf.data answers", daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith(RESULT_PREFIX):
                self.answers.put(json.loads(line[len(RESULT_PREFIX):]))
        self.answers.put({"error": "the tf.data process ended (exit code {}); its stderr ends:\n{}".format(
            self.proc.wait(), self._stderr_tail())})

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        return "".join(self.stderr.readlines()[-20:])

    def _ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                answer = self.answers.get(timeout=1.0)
                break
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise RuntimeError("the tf.data process gave no answer to {!r} within {} s".format(
                        request["op"], self.timeout)) from None
        if "error" in answer:
            raise RuntimeError("the tf.data pipeline failed:\n" + answer["error"])
        return answer

    def check(self, items, crop: int, procs: int) -> dict:
        return self._ask({"op": "check", "items": items, "crop": crop, "procs": procs})["summary"]

    def measure(self, items, crop: int, procs: int, batches: int, warmup: int) -> dict:
        return self._ask({"op": "measure", "items": items, "crop": crop, "procs": procs,
                          "batches": batches, "warmup": warmup})["timing"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()


# --------------------------------------------------------------------------- verification

def most_colourful_item(items, limit: int = 100):
    """The item (of the first ``limit``) whose normalised per-channel means differ most, and that spread."""
    from PIL import Image

    best, best_spread = items[0], -1.0
    for item in items[:limit]:
        with Image.open(item[0]) as opened:
            pixels = np.asarray(opened.convert("RGB"), np.float32)
        means = (pixels.mean(axis=(0, 1)) - PIXEL_MEAN) / PIXEL_STD
        spread = float(means.max() - means.min())
        if spread > best_spread:
            best, best_spread = item, spread
    return best, best_spread


def verify(pipelines: dict, items, crop: int, procs: int) -> dict:
    """Every pipeline's batch of one file: same layout and labels, values in the normalised
    range, per-channel means within MEAN_TOLERANCE of the example's pipeline."""
    item, spread = most_colourful_item(items)
    summaries = {name: pipeline.check([list(item)], crop, procs) for name, pipeline in pipelines.items()}
    reference = summaries[PIL_MAP_AND_BATCH]
    problems = []
    for name, summary in summaries.items():
        layout = {key: summary[key] for key in ("images", "labels")}
        if layout != expected_layout(crop):
            problems.append("{}: layout {}, expected {}".format(name, layout, expected_layout(crop)))
        if summary["label_values"] != [item[1]]:
            problems.append("{}: labels {}, expected only {}".format(name, summary["label_values"], item[1]))
        below = np.asarray(summary["min"]) < PIXEL_LOW - 1e-3
        if np.any(below) or np.any(np.asarray(summary["max"]) > PIXEL_HIGH + 1e-3):
            problems.append("{}: values {}..{} outside the normalised range {}..{}".format(
                name, summary["min"], summary["max"], PIXEL_LOW.tolist(), PIXEL_HIGH.tolist()))
        gap = np.abs(np.asarray(summary["channel_means"]) - reference["channel_means"]).max()
        if gap > MEAN_TOLERANCE:
            problems.append("{}: per-channel means {} differ from {}'s {} by {:.3f} (> {})".format(
                name, np.round(summary["channel_means"], 3).tolist(), PIL_MAP_AND_BATCH,
                np.round(reference["channel_means"], 3).tolist(), gap, MEAN_TOLERANCE))
    if problems:
        raise AssertionError("the pipelines do not produce the same batches of {}:\n  {}".format(
            item[0], "\n  ".join(problems)))
    return {"file": item[0], "channel_spread": spread, "channel_order_checked": spread > 3 * MEAN_TOLERANCE,
            "channel_means": {name: s["channel_means"] for name, s in summaries.items()}}


# --------------------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=60, help="timed batches per measurement")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the pipelines take turns in each")
    parser.add_argument("--procs", type=int, nargs="+", default=None,
                        help="worker processes (tf.data: private threads); default 1 2 (--quick: 1)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for one tf.data answer")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small image set, 1 round, 3 batches")
    parser.add_argument("--out", default=None, help="JSON path (default results/jpeg_pipeline.json; --quick: temp)")
    parser.add_argument("--serve-tf-data", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_tf_data:
        return serve_tf_data()
    settings = SETTINGS
    if args.quick:
        args.batches, args.warmup, args.repeats, args.procs = 3, 1, 1, args.procs or [1]
        settings = [(label, stored, crop, 10) for label, stored, crop, _ in SETTINGS]
    args.procs = args.procs or [1, 2]
    out = args.out or (os.path.join(tempfile.gettempdir(), "jpeg_pipeline-quick.json") if args.quick
                       else os.path.join(HERE, "results", "jpeg_pipeline.json"))

    from tabulate import tabulate

    import synthetic_images

    pipelines = {PIL_MAP_THEN_BATCH: LocalPipeline(open_pil_map_then_batch),
                 PIL_MAP_AND_BATCH: LocalPipeline(open_map_and_batch(lambda crop: DecodeAndAugment(crop, "fail"))),
                 CV_MAP_AND_BATCH: LocalPipeline(open_map_and_batch(CvDecodeAndAugment)),
                 TF_DATA: TfDataPipeline(args.timeout)}
    missing_torch = torch_missing()
    if missing_torch:
        print("PyTorch's DataLoader left out:", missing_torch, flush=True)
    else:
        pipelines[TORCH] = LocalPipeline(open_torch)

    cache = os.path.join(tempfile.gettempdir(), "inputpipe-bench-jpeg")
    rows, records = [], []
    try:
        for label, stored, crop, per_class in settings:
            root = synthetic_images.ensure_dataset(
                os.path.join(cache, "{}px-{}".format(stored, per_class)), num_classes=10,
                images_per_class=per_class, image_size=stored)
            items = list_image_folder(root).items()
            for procs in args.procs:
                checked = verify(pipelines, items, crop, procs)
                print("{}, {} worker(s): all pipelines give the same batches of {} (channel order {})".format(
                    label, procs, os.path.relpath(checked["file"], root),
                    "checked" if checked["channel_order_checked"] else "NOT checked: grey image"), flush=True)
                runs = {name: [] for name in pipelines}
                cores = {name: [] for name in pipelines}
                for round_ in range(args.repeats):
                    for name, pipeline in pipelines.items():
                        timing = pipeline.measure(items, crop, procs, args.batches, args.warmup)
                        runs[name].append(timing["images_per_s"])
                        cores[name].append(timing["cores_busy"])
                        print("  round {} {}: {:,.0f} images/s".format(round_, name, runs[name][-1]), flush=True)
                median = {name: statistics.median(v) for name, v in runs.items()}
                median_cores = {name: None if None in v else statistics.median(v) for name, v in cores.items()}
                for name in pipelines:
                    rows.append([label, procs, name, "{:,.0f}".format(median[name]),
                                 "{:,.0f}-{:,.0f}".format(min(runs[name]), max(runs[name])),
                                 "-" if median_cores[name] is None else "{:.2f}".format(median_cores[name]),
                                 "{:.2f}x".format(median[name] / median[TF_DATA]),
                                 "{:.2f}x".format(median[name] / median[TORCH]) if TORCH in median else "-"])
                records.append({"setting": label, "stored_px": stored, "crop_px": crop, "workers": procs,
                                "verified": checked, "images_per_s_median": median, "images_per_s_runs": runs,
                                "cores_busy_median": median_cores, "cores_busy_runs": cores})
    finally:
        for pipeline in pipelines.values():
            pipeline.close()

    headers = ["setting (batch {})".format(BATCH_SIZE), "worker processes / tf.data threads", "pipeline",
               "images/s (median)", "min-max of rounds", "CPU cores busy", "/ tf.data native", "/ torch DataLoader"]
    print()
    print(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True,
                   colalign=("left", "right", "left") + ("right",) * 5))
    print("\ntf.data limited to the same cores by its options (private_threadpool_size = worker processes, "
          "max_intra_op_parallelism 1, TF intra/inter-op pools of 1), not by taskset. CPU cores busy: CPU time of "
          "the consuming process and its children (tf.data: its process) over the timed batches / wall time. "
          "{} round(s), {} timed batches each.{}".format(
              args.repeats, args.batches, " " + missing_torch + "." if missing_torch else ""))
    if args.quick:
        print("--quick: a smoke run of every path; 3 timed batches can come from the buffers, so these are "
              "not measurements")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"benchmark": "jpeg_pipeline", "quick": args.quick, "batch_size": BATCH_SIZE,
                   "batches": args.batches, "warmup": args.warmup, "repeats": args.repeats,
                   "tf_data_cores": "private_threadpool_size=workers, max_intra_op_parallelism=1, "
                                    "intra/inter-op threads 1, deterministic=False",
                   "torch_missing": missing_torch, "cpu_count": os.cpu_count(), "platform": platform.platform(),
                   "python": platform.python_version(), "results": records}, f, indent=1)
    print("\nwrote", out)


if __name__ == "__main__":
    main()
