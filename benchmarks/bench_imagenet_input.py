"""ImageNet-sized JPEGs at the decoder's limit: inputpipe's paths against tf.data, DALI and tensorpack.

The work per image is the standard training input: read the file, decode the JPEG, Inception-style
random-resized crop to 224 x 224 (area 0.08-1, aspect 3/4-4/3, 10 attempts, then a centre crop),
random horizontal flip; batches of 64 uint8 images. Every pipeline gets two CPU cores:

- inputpipe, full decode: ``cv2.imdecode`` then ``AugmentorList([GoogleNetRandomCropAndResize(),
  Flip(horiz=True)])`` in ``MultiProcessMapAndBatchData(ds, 2, ...)`` (the documented way before 0.3);
- inputpipe, fused: the same with the file's bytes given to the augmentors (one changed line:
  ``np.fromfile`` instead of ``cv2.imdecode``): only the crop window is decoded, through
  libjpeg-turbo, at a DCT scale when the window is at least twice the target;
- inputpipe, fused, fast DCT: the same after ``imgaug.set_dct_method("fast")``, libjpeg's fast
  integer inverse DCT, which is what tf.data's ``decode_and_crop_jpeg`` uses by default (the
  ceiling of this row is its own single-thread cost);
- inputpipe, graph: ``JpegCropWindows`` plans the crops in Python, ``JpegDecodeInput`` decodes
  them with ``decode_and_crop_jpeg`` in TensorFlow's threads, ``StagingInput`` in front;
- tf.data's native pipeline: ``read_file -> sample_distorted_bounding_box -> decode_and_crop_jpeg
  -> resize -> random_flip_left_right``, ``map(num_parallel_calls=AUTOTUNE)`` on a private pool of
  2 threads, ``batch``, ``prefetch``;
- tensorpack 0.11 (its venv, ``--tensorpack-python``): its ``MultiProcessMapAndBatchDataZMQ``
  with the same OpenCV decode and its own augmentors;
- NVIDIA DALI, CPU only (its venv, ``--dali-python``): ``readers.file ->
  decoders.image_random_crop(device="cpu") -> resize -> flip``, 2 threads, ``device_id=None``;
- the ceiling: 2 cores / the single-thread cost of read + fused decode and crop + flip (and of
  the full decode), measured in this process.

Besides images per second, each run reports the CPU time per image of its whole process tree
(the pipeline's own threads and worker processes, from ``/proc``) while it was timed: how much
work each pipeline spends on an image, apart from how well it keeps the two cores busy.

Each measurement runs in a fresh subprocess (so no pipeline shares threads or caches with
another), warms up, then times ``--batches`` batches; every batch is fetched into numpy. The
pipelines take turns round after round, in an order that rotates, for ``--repeats`` rounds; the
table shows each one's median round and the spread (min-max), and the ratios of the medians. Two
sets of photo-like JPEG files (quality 90) are generated once and reused: 500x375 and 375x500
(about 60 KB, the size of ImageNet's), and 1024x768 / 768x1024, where the DCT scale matters.

    pip install -e ".[bench,jpeg]" && python benchmarks/bench_imagenet_input.py
    python benchmarks/bench_imagenet_input.py --quick          # a smoke run of every path

Writes ``benchmarks/results/imagenet_input.json`` (``--quick``: a file in the temp directory).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BATCH = 64
TARGET = 224
RESULT_PREFIX = "RESULT "
SETS = {  # name: (sizes (h, w) cycled over the files, number of files)
    "imagenet": ([(375, 500), (500, 375)], 512),
    "1024px": ([(768, 1024), (1024, 768)], 256),
}
PIPELINES = ["inputpipe full decode", "inputpipe fused", "inputpipe fused, fast DCT", "inputpipe graph", "tf.data",
             "tensorpack", "DALI CPU"]
#: Rows decoded with libjpeg's fast integer inverse DCT (tf.data's default): their own ceiling.
FAST_DCT = {"inputpipe fused, fast DCT"}


# ------------------------------------------------------------------------------------ the files

def photo_like(h, w, seed):
    """A photo-like BGR image: shapes with soft and sharp edges under 1/f texture and shading,
    plus a little sensor noise (q90 JPEGs of 500x375 come out near 60 KB)."""
    import cv2
    import numpy as np

    rng = np.random.RandomState(seed)
    image = np.empty((h, w, 3), np.float32)
    image[:] = rng.uniform(60, 190, 3)
    for _ in range(rng.randint(3, 7)):
        color = rng.uniform(20, 235, 3).tolist()
        cx, cy = int(rng.randint(0, w)), int(rng.randint(0, h))
        if rng.rand() < 0.6:
            cv2.ellipse(image, (cx, cy), (int(rng.randint(10, w // 3)), int(rng.randint(10, h // 3))),
                        float(rng.uniform(0, 180)), 0, 360, color, -1, cv2.LINE_AA)
        else:
            points = np.stack([rng.randint(0, w, 4), rng.randint(0, h, 4)], 1).astype(np.int32)
            cv2.fillPoly(image, [points], color, cv2.LINE_AA)
    for octave in range(1, 9):
        gh, gw = max(2, h >> (8 - octave)), max(2, w >> (8 - octave))
        mix = (rng.normal(0, 0.2, (3, 3)) + 0.5 + np.eye(3)).astype(np.float32)
        field = rng.normal(0, 1, (gh, gw, 3)).astype(np.float32) @ mix
        image += cv2.resize(field, (w, h), interpolation=cv2.INTER_CUBIC) * (36.0 / octave ** 1.25)
    image += rng.normal(0, 1.2, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def make_files(directory, name):
    """The set's JPEG files (made once); returns (paths, mean file size in bytes)."""
    import cv2

    sizes, count = SETS[name]
    folder = os.path.join(directory, name)
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(count):
        path = os.path.join(folder, "{:05d}.jpg".format(i))
        if not os.path.exists(path):
            h, w = sizes[i % len(sizes)]
            cv2.imwrite(path + ".tmp.jpg", photo_like(h, w, i), [cv2.IMWRITE_JPEG_QUALITY, 90])
            os.replace(path + ".tmp.jpg", path)
        paths.append(path)
    return paths, sum(os.path.getsize(p) for p in paths) / len(paths)


# ------------------------------------------------------------------------------------ the children

def _tree_cpu_seconds():
    """User + system CPU seconds of this process and every live descendant (and of the children
    they reaped), from /proc: the pipeline's threads and its worker processes."""
    ticks = os.sysconf("SC_CLK_TCK")
    parent_of, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/{}/stat".format(entry)) as f:
                text = f.read()
        except OSError:                       # the process ended meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()       # from field 3 (state) on
        parent_of[int(entry)] = int(fields[1])
        cpu[int(entry)] = sum(int(v) for v in fields[11:15]) / ticks   # utime stime cutime cstime
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        children = [pid for pid, parent in parent_of.items() if parent in frontier and pid not in tree]
        tree.update(children)
        frontier = children
    return sum(cpu.get(pid, 0.0) for pid in tree)


def _timed(batches, warmup, count):
    """Pull ``warmup`` then ``count`` batches from the iterator; the images per second of the
    timed ones, the CPU milliseconds of the process tree per image meanwhile, and a check of the
    last batch (shape, dtype, mean)."""
    for _ in range(warmup):
        next(batches)
    cpu = _tree_cpu_seconds()
    start = time.perf_counter()
    for _ in range(count):
        images = next(batches)
    seconds = time.perf_counter() - start
    cpu = _tree_cpu_seconds() - cpu
    return {"images_per_s": count * BATCH / seconds, "cpu_ms_per_image": 1e3 * cpu / (count * BATCH),
            "shape": list(images.shape), "dtype": str(images.dtype), "mean": float(images.mean())}


def _imagenet_augmentors(imgaug, cv2):
    return imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(target_shape=TARGET, interp=cv2.INTER_LINEAR),
                                 imgaug.Flip(horiz=True)])


class FullDecode:
    """read -> cv2.imdecode -> crop and flip (the documented way before 0.3)."""

    def __init__(self):
        import cv2
        from inputpipe.dataflow import imgaug

        self.augs = _imagenet_augmentors(imgaug, cv2)

    def __call__(self, dp):
        import cv2
        import numpy as np

        cv2.setNumThreads(1)
        return [self.augs.augment(cv2.imdecode(np.fromfile(dp[0], np.uint8), cv2.IMREAD_COLOR)), dp[1]]


class FusedDecode(FullDecode):
    """read -> the bytes to the augmentors: only the crop window is decoded."""

    def __call__(self, dp):
        import cv2
        import numpy as np

        cv2.setNumThreads(1)
        return [self.augs.augment(np.fromfile(dp[0], np.uint8)), dp[1]]


def child_inputpipe(paths, batches, warmup, fused):
    from inputpipe.dataflow import DataFromList, MultiProcessMapAndBatchData

    rows = [[p, i % 1000] for i, p in enumerate(paths)]
    flow = MultiProcessMapAndBatchData(DataFromList(rows, shuffle=True), 2, FusedDecode() if fused else FullDecode(),
                                       BATCH, buffer_size=8 * BATCH)
    flow.reset_state()
    try:
        def forever():
            while True:
                for images, _ in flow:
                    yield images
        return _timed(forever(), warmup, batches)
    finally:
        flow.close()


def child_graph(paths, batches, warmup):
    import cv2
    import numpy as np
    import tensorflow as tf
    from inputpipe.dataflow import BatchData, DataFromList, JpegCropWindows, MapData, imgaug
    from inputpipe.input_source import JpegDecodeInput, QueueInput, StagingInput, hooked_session

    tf.compat.v1.disable_eager_execution()
    rows = [[p, i % 1000] for i, p in enumerate(paths)]
    files = MapData(DataFromList(rows, shuffle=True), lambda dp: [np.fromfile(dp[0], np.uint8), dp[1]])
    flow = BatchData(JpegCropWindows(files, _imagenet_augmentors(imgaug, cv2)), BATCH)
    source = StagingInput(JpegDecodeInput(QueueInput(flow)), device="/cpu:0")
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=1)
    with tf.Graph().as_default():
        source.setup([tf.TensorSpec([None, TARGET, TARGET, 3], tf.uint8, "image"),
                      tf.TensorSpec([None], tf.int64, "label")])
        image, _ = source.get_input_tensors()
        with tf.compat.v1.Session(config=config) as sess, hooked_session(sess, source) as run:
            def forever():
                while True:
                    yield run(image)
            result = _timed(forever(), warmup, batches)
    source.close()
    return result


def child_tfdata(paths, batches, warmup):
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)

    def load(path):
        data = tf.io.read_file(path)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.image.extract_jpeg_shape(data), tf.zeros([0, 0, 4]), min_object_covered=0,
            aspect_ratio_range=[0.75, 1.333], area_range=[0.08, 1.0], max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        image = tf.io.decode_and_crop_jpeg(data, window, channels=3)
        image = tf.image.resize(image, [TARGET, TARGET], method="bilinear")
        image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
        return tf.image.random_flip_left_right(image)

    options = tf.data.Options()
    options.threading.private_threadpool_size = 2
    options.threading.max_intra_op_parallelism = 1
    options.deterministic = False
    dataset = (tf.data.Dataset.from_tensor_slices(paths).shuffle(len(paths)).repeat()
               .map(load, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH).prefetch(tf.data.AUTOTUNE)
               .with_options(options))
    return _timed(iter(dataset.as_numpy_iterator()), warmup, batches)


def child_tensorpack(paths, batches, warmup):
    import cv2
    import numpy as np
    from tensorpack.dataflow import DataFromList, MultiProcessMapAndBatchDataZMQ, imgaug

    augs = _imagenet_augmentors(imgaug, cv2)

    def decode(dp):
        cv2.setNumThreads(1)
        return [augs.augment(cv2.imdecode(np.fromfile(dp[0], np.uint8), cv2.IMREAD_COLOR)), dp[1]]

    rows = [[p, i % 1000] for i, p in enumerate(paths)]
    flow = MultiProcessMapAndBatchDataZMQ(DataFromList(rows, shuffle=True), 2, decode, BATCH, buffer_size=8 * BATCH)
    flow.reset_state()

    def forever():
        while True:
            for images, _ in flow:
                yield images
    return _timed(forever(), warmup, batches)


def child_dali(paths, batches, warmup):
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=None)
    def imagenet():
        jpegs, labels = fn.readers.file(files=paths, labels=list(range(len(paths))), random_shuffle=True,
                                        name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.BGR,
                                               random_area=[0.08, 1.0], random_aspect_ratio=[0.75, 1.333],
                                               num_attempts=10)
        images = fn.resize(images, resize_x=TARGET, resize_y=TARGET)
        images = fn.flip(images, horizontal=fn.random.coin_flip())
        return images, labels

    pipe = imagenet()
    pipe.build()

    def forever():
        import numpy as np

        while True:
            images, _ = pipe.run()
            yield np.stack([images.at(i) for i in range(len(images))])
    return _timed(forever(), warmup, batches)


def run_child(args):
    with open(args.paths) as f:
        paths = json.load(f)
    name = args.child
    if name == "inputpipe full decode":
        result = child_inputpipe(paths, args.batches, args.warmup, fused=False)
    elif name in ("inputpipe fused", "inputpipe fused, fast DCT"):
        if name in FAST_DCT:
            from inputpipe.dataflow import imgaug

            imgaug.set_dct_method("fast")          # before the workers fork
        result = child_inputpipe(paths, args.batches, args.warmup, fused=True)
    elif name == "inputpipe graph":
        result = child_graph(paths, args.batches, args.warmup)
    elif name == "tf.data":
        result = child_tfdata(paths, args.batches, args.warmup)
    elif name == "tensorpack":
        result = child_tensorpack(paths, args.batches, args.warmup)
    else:
        result = child_dali(paths, args.batches, args.warmup)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ------------------------------------------------------------------------------------ the driver

def interpreter_of(name, args):
    if name == "tensorpack":
        return args.tensorpack_python
    if name == "DALI CPU":
        return args.dali_python
    return sys.executable


def measure(name, paths_file, args):
    """One run of ``name`` in a fresh subprocess: its result dict, or {"error": why}."""
    python = interpreter_of(name, args)
    if not os.path.exists(python):
        return {"error": "{} not found (its environment is not installed)".format(python)}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, HERE]), TF_CPP_MIN_LOG_LEVEL="3",
               OMP_NUM_THREADS="1")
    command = [python, os.path.abspath(__file__), "--child", name, "--paths", paths_file,
               "--batches", str(args.batches), "--warmup", str(args.warmup)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 900 s"}
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return {"error": "exit {}: {}".format(done.returncode, done.stderr.strip().splitlines()[-1:] or "no output")}


def single_thread_costs(paths, count):
    """Seconds per image of read + decode and crop + flip in one thread: (fused, fused with the
    fast DCT, full decode), the files already in the page cache, the best of 3 alternating rounds."""
    import cv2
    from inputpipe.dataflow import imgaug

    cv2.setNumThreads(1)
    rows = [[p, 0] for p in paths[:count]]
    for dp in rows:                                 # the files in the page cache before any timing
        with open(dp[0], "rb") as f:
            f.read()
    decoders = ((FusedDecode(), "accurate"), (FusedDecode(), "fast"), (FullDecode(), "accurate"))
    best = [float("inf")] * len(decoders)
    for round_index in range(3):                    # the decoders take turns; the best round of each
        for index, (decoder, dct) in enumerate(decoders if round_index % 2 == 0 else decoders[::-1]):
            index = index if round_index % 2 == 0 else len(decoders) - 1 - index
            imgaug.set_dct_method(dct)
            for dp in rows[:8]:
                decoder(dp)
            start = time.perf_counter()
            for dp in rows:
                decoder(dp)
            best[index] = min(best[index], (time.perf_counter() - start) / len(rows))
    imgaug.set_dct_method("accurate")
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=24, help="timed batches of 64 per run")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--pipelines", nargs="+", default=PIPELINES, choices=PIPELINES)
    parser.add_argument("--files", default=os.path.join(tempfile.gettempdir(), "inputpipe-bench-imagenet"))
    parser.add_argument("--tensorpack-python", default=os.environ.get("TENSORPACK_PYTHON", "/opt/tpvenv/bin/python"))
    parser.add_argument("--dali-python", default=os.environ.get("DALI_PYTHON", "/opt/dalivenv/bin/python"))
    parser.add_argument("--quick", action="store_true", help="1 round of 3 batches: checks every path runs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--paths", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return run_child(args)
    if args.quick:
        args.repeats, args.batches, args.warmup = 1, 3, 1
    import numpy as np
    from tabulate import tabulate

    report = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
              "batch": BATCH, "target": TARGET, "repeats": args.repeats, "batches": args.batches, "sets": {}}
    for set_name in args.sets:
        paths, mean_bytes = make_files(args.files, set_name)
        paths_file = os.path.join(args.files, set_name + ".json")
        with open(paths_file, "w") as f:
            json.dump(paths, f)
        fused_cost, fast_cost, full_cost = single_thread_costs(paths, 64 if args.quick else 256)
        runs = {name: [] for name in args.pipelines}
        errors = {}
        for round_index in range(args.repeats):
            shift = round_index % len(args.pipelines)
            for name in args.pipelines[shift:] + args.pipelines[:shift]:
                if name in errors:
                    continue
                result = measure(name, paths_file, args)
                if "error" in result:
                    errors[name] = result["error"]
                    continue
                runs[name].append(result)
                print("{} round {}: {:<22} {:8.0f} images/s".format(set_name, round_index + 1, name,
                                                                       result["images_per_s"]), flush=True)
        medians = {name: statistics.median(r["images_per_s"] for r in rs) for name, rs in runs.items() if rs}
        ceiling = 2 / fused_cost
        fast_ceiling = 2 / fast_cost
        rows = []
        for name in args.pipelines:
            if name not in medians:
                rows.append([name, "not run: " + errors.get(name, "?"), "", "", "", "", "", ""])
                continue
            rates = [r["images_per_s"] for r in runs[name]]
            ratios = ["{:.2f}x".format(medians[name] / medians[peer]) if peer in medians else "-"
                      for peer in ("tf.data", "DALI CPU", "tensorpack")]
            rows.append([name, "{:.0f}".format(medians[name]), "{:.0f}-{:.0f}".format(min(rates), max(rates))]
                        + ratios + ["{:.2f}".format(medians[name] / (fast_ceiling if name in FAST_DCT else ceiling)),
                                    "{:.3f}".format(statistics.median(r["cpu_ms_per_image"] for r in runs[name]))])
        print("\n{}: {} files, {:.0f} KB each on average; batches of {} at {}x{}; 2 cores".format(
            set_name, len(paths), mean_bytes / 1e3, BATCH, TARGET, TARGET))
        print(tabulate(rows, headers=["pipeline", "images/s (median)", "spread", "vs tf.data", "vs DALI CPU",
                                      "vs tensorpack", "of ceiling", "CPU ms/image"]))
        print("ceiling: 2 cores / {:.2f} ms (read + fused decode and crop + flip, one thread) = {:.0f} images/s; "
              "full decode: {:.2f} ms = {:.0f} images/s".format(fused_cost * 1e3, ceiling, full_cost * 1e3,
                                                                2 / full_cost))
        print("fast DCT: {:.2f} ms = {:.0f} images/s (the ceiling of its row)".format(fast_cost * 1e3, fast_ceiling))
        report["sets"][set_name] = {
            "files": len(paths), "mean_file_bytes": mean_bytes, "runs": runs, "errors": errors, "medians": medians,
            "single_thread_seconds": {"fused": fused_cost, "fused_fast_dct": fast_cost, "full": full_cost},
            "ceiling_images_per_s": ceiling, "ceiling_fast_dct_images_per_s": fast_ceiling,
            "batch_check": {name: {k: rs[-1][k] for k in ("shape", "dtype", "mean")} for name, rs in runs.items() if rs},
        }
        for name, rs in runs.items():
            if rs and (rs[-1]["shape"] != [BATCH, TARGET, TARGET, 3] or rs[-1]["dtype"] != "uint8"
                       or not 20 < rs[-1]["mean"] < 235):
                print("WARNING: {} gave batches of {} {} mean {:.1f}".format(name, rs[-1]["shape"], rs[-1]["dtype"],
                                                                            rs[-1]["mean"]))
    path = os.path.join(tempfile.gettempdir() if args.quick else os.path.join(HERE, "results"), "imagenet_input.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=lambda o: o.tolist() if isinstance(o, np.ndarray) else str(o))
    print("wrote", path)


if __name__ == "__main__":
    main()
