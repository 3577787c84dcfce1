#!/usr/bin/env python
"""Train a ResNet in TF1 graph mode while a Python JPEG pipeline runs beside it.

The default run needs nothing downloaded: it draws a small image-classification dataset as JPEG
files into a cache folder (first run only), reads it the way ImageNet is read (file list ->
decode + random crop + flip + normalise in worker processes -> batches), feeds the batches into
the graph through QueueInput + StagingInput, trains a small CIFAR-style ResNet with momentum SGD,
and prints a summary: images/s, time per step, the share of the step spent waiting for input,
queue occupancy and whether training was input-bound.

    python examples/train_resnet.py                          # defaults: about 2 minutes on 2 cores
    python examples/train_resnet.py --data ~/imagenet/train --model resnet50 --image-size 224
    python examples/train_resnet.py --input feed             # the slow baseline, to compare
    python examples/train_resnet.py --lmdb                   # dump to LMDB once, train from it
    python examples/train_resnet.py --fake --input dummy     # no input cost at all

TensorBoard summaries (loss, images/s, queue occupancy) go to ``--logdir``.
"""
import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from typing import List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # run from a checkout without installing

import numpy as np  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

# TensorFlow is imported only where the graph is built: a bad dataset path is reported at once,
# and the zmq producer processes are forked before TensorFlow starts any thread.

from image_pipeline import (  # noqa: E402
    DatasetError, DropCorrupt, build_image_dataflow, close_dataflow, list_image_folder)
import synthetic_images  # noqa: E402

INPUTS = ("feed", "queue", "staging", "dataset", "zmq", "dummy")
log = logging.getLogger("train_resnet")


@dataclass
class RunConfig:
    """Everything the run uses, after defaults are filled in; printed at start."""

    model: str
    depth: int
    image_size: int
    batch_size: int
    steps: int
    num_classes: int
    data: str
    data_root: Optional[str]
    input: str
    workers: int
    learning_rate: float
    on_corrupt: str
    logdir: str

    def lines(self, model_name: str) -> List[str]:
        return [
            "model        {} on {}x{}x3 images, {} classes".format(model_name, self.image_size, self.image_size,
                                                                  self.num_classes),
            "data         {}".format(self.data),
            "input        {} ({} decode worker process{})".format(
                self.input, self.workers, "" if self.workers == 1 else "es"),
            "training     {} steps x batch {}, momentum SGD lr {}".format(
                self.steps, self.batch_size, self.learning_rate),
            "corrupt      {} (--on-corrupt)".format(
                "skip with a warning" if self.on_corrupt == "skip" else "stop with an error"),
            "logdir       {} (TensorBoard)".format(self.logdir),
        ]


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = p.add_argument_group("data (default: generated JPEG shapes, cached)")
    data.add_argument("--data", metavar="DIR", help="an ImageNet-style folder DIR/<class>/*.jpg")
    data.add_argument("--fake", action="store_true", help="in-memory random tensors instead of images")
    data.add_argument("--lmdb", nargs="?", const="", metavar="FILE",
                      help="dump the dataset (encoded JPEGs + labels) to this LMDB file once, then train "
                           "from it (default: a file in --cache-dir)")
    data.add_argument("--cache-dir", default=synthetic_images.default_cache_root(),
                      help="where the generated dataset is kept")
    data.add_argument("--images-per-class", type=int, default=300, help="generated dataset size")
    data.add_argument("--num-classes", type=int, default=10, help="classes of the generated dataset (2-10)")
    data.add_argument("--on-corrupt", choices=("skip", "fail"), default="skip",
                      help="a file that cannot be decoded is skipped with a warning, or stops the run")
    p.add_argument("--input", choices=INPUTS, default="staging",
                   help="InputSource: staging = QueueInput wrapped in StagingInput")
    p.add_argument("--workers", type=int, default=1,
                   help="decode worker processes (MultiProcessMapData; zmq: producer processes)")
    p.add_argument("--model", choices=("cifar", "resnet18", "resnet34", "resnet50"), default="cifar")
    p.add_argument("--depth", type=int, default=14, help="depth of the cifar variant (6n+2)")
    p.add_argument("--image-size", type=int, help="crop size (default 32 for cifar, 224 otherwise)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--lr", type=float, default=0.1, help="learning rate (momentum 0.9)")
    p.add_argument("--logdir", default=os.path.join(tempfile.gettempdir(), "train_resnet_logs"),
                   help="TensorBoard summaries")
    p.add_argument("--seed", type=int, help="make the data pipeline reproducible")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. for logs)")
    args = p.parse_args(argv)
    if args.fake and (args.data or args.lmdb is not None):
        p.error("--fake replaces the dataset; it cannot be combined with --data or --lmdb")
    for name in ("steps", "batch_size"):
        if getattr(args, name) < 1:
            p.error("--{} must be >= 1".format(name.replace("_", "-")))
    if args.workers < 0:
        p.error("--workers must be >= 0")
    if args.image_size is not None and args.image_size < 16:
        p.error("--image-size must be at least 16")
    if args.input == "zmq" and args.fake:
        p.error("--input zmq sends the image pipeline from producer processes; use it without --fake")
    return args


def configure(args: argparse.Namespace) -> RunConfig:
    """Fill in defaults that depend on other flags."""
    image_size = args.image_size or (32 if args.model == "cifar" else 224)
    if args.fake:
        root, data = None, "in-memory random tensors (--fake)"
    elif args.input == "dummy":
        root, data = None, "none: DummyConstantInput feeds constant zeros"
    elif args.data:
        root = os.path.abspath(os.path.expanduser(args.data))
        data = "JPEG folder " + root
    else:
        root = synthetic_dataset_dir(args, image_size)
        data = "generated JPEG shapes in " + root
    if args.lmdb is not None and not args.fake:
        data += ", read through LMDB"
    workers = args.workers if not (args.fake or args.input == "dummy") else 0
    return RunConfig(
        model=args.model, depth=args.depth, image_size=image_size, batch_size=args.batch_size,
        steps=args.steps, num_classes=args.num_classes, data=data, data_root=root, input=args.input, workers=workers,
        learning_rate=args.lr, on_corrupt=args.on_corrupt, logdir=os.path.abspath(args.logdir),
    )


def stored_size(crop_size: int) -> int:
    """Size of the generated images: a quarter larger than the crop, so random crops move."""
    return int(round(crop_size * 1.25))


def synthetic_dataset_dir(args: argparse.Namespace, image_size: int) -> str:
    name = "synthetic-v{}-{}c-{}x{}px".format(synthetic_images.GENERATOR_VERSION, args.num_classes,
                                              args.images_per_class, stored_size(image_size))
    return os.path.join(os.path.abspath(os.path.expanduser(args.cache_dir)), name)


def prepare_images(args: argparse.Namespace, cfg: RunConfig):
    """The image dataset as an ImageList (generated on first use); its class count wins."""
    if args.data:
        images = list_image_folder(cfg.data_root)
    else:
        root, size = cfg.data_root, stored_size(cfg.image_size)
        if not synthetic_images.is_complete(root, args.num_classes, args.images_per_class, size):
            print("generating {} x {} JPEG images into {} (first run only) ...".format(
                args.num_classes, args.images_per_class, root), flush=True)
            t0 = time.monotonic()
            synthetic_images.generate(root, args.num_classes, args.images_per_class, size)
            print("  done in {:.1f} s".format(time.monotonic() - t0), flush=True)
        images = list_image_folder(root)
    cfg.num_classes = len(images.class_names)
    if len(images) < cfg.batch_size:
        raise DatasetError("dataset folder {} has {} images, fewer than one batch of {} (lower --batch-size)".format(
            images.root, len(images), cfg.batch_size))
    return images


def lmdb_path(args: argparse.Namespace, images) -> str:
    """--lmdb FILE, or a file in the cache folder named after the dataset folder."""
    if args.lmdb:
        return os.path.abspath(os.path.expanduser(args.lmdb))
    if not args.data:
        return images.root + ".lmdb"
    tag = "{:08x}".format(zlib.crc32(images.root.encode("utf-8")))
    return os.path.join(os.path.abspath(os.path.expanduser(args.cache_dir)),
                        "{}-{}.lmdb".format(os.path.basename(images.root), tag))


def dump_lmdb(images, path: str) -> None:
    """Write ``[encoded bytes, label, path]`` records with LMDBSerializer, unless already there."""
    from inputpipe.dataflow import DataFromList, LMDBSerializer, MapData

    if os.path.exists(path):
        print("using the LMDB file {}".format(path), flush=True)
        return

    def read_file(dp):
        with open(dp[0], "rb") as f:
            return [np.frombuffer(f.read(), dtype=np.uint8), np.int32(dp[1]), dp[0]]

    print("dumping {} images to {} ...".format(len(images), path), flush=True)
    t0 = time.monotonic()
    LMDBSerializer.save(MapData(DataFromList(images.items(), shuffle=False), read_file), path)
    print("  done in {:.1f} s ({:.1f} MB)".format(time.monotonic() - t0, _size_mb(path)), flush=True)


def _size_mb(path: str) -> float:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)) / 1e6
    return os.path.getsize(path) / 1e6


# -- data -------------------------------------------------------------------------------------------
def build_dataflow(args: argparse.Namespace, cfg: RunConfig, images, drop: DropCorrupt):
    """The batched training DataFlow (file list or LMDB -> workers -> batches)."""
    if args.lmdb is None:
        return build_image_dataflow(images.items(), cfg.image_size, cfg.batch_size, num_proc=cfg.workers,
                                    on_corrupt=cfg.on_corrupt, drop=drop)
    from inputpipe.dataflow import LMDBSerializer

    path = lmdb_path(args, images)
    dump_lmdb(images, path)
    records = LMDBSerializer.load(path, shuffle=True)
    return build_image_dataflow(None, cfg.image_size, cfg.batch_size, num_proc=cfg.workers,
                                on_corrupt=cfg.on_corrupt, drop=drop, source=records)


def fake_dataflow(cfg: RunConfig):
    from inputpipe.dataflow import FakeData

    return FakeData([[cfg.batch_size, cfg.image_size, cfg.image_size, 3], [cfg.batch_size]], size=100,
                    random=False, dtype=["float32", "int32"], domain=[(-1.0, 1.0), (0, cfg.num_classes)])


def _produce(rank: int, endpoint: str, items, cfg: RunConfig, error_file: str) -> None:
    """A zmq producer process: decode, augment and batch in this process, push to the trainer.
    A dataset error (e.g. a corrupt image with --on-corrupt fail) is written to ``error_file``
    for the trainer to report as one line."""
    from inputpipe.dataflow import send_dataflow_zmq

    try:
        df = build_image_dataflow(items, cfg.image_size, cfg.batch_size, num_proc=0, on_corrupt=cfg.on_corrupt)
        send_dataflow_zmq(df, endpoint, hwm=4)
    except DatasetError as err:
        with open(error_file + ".partial", "w", encoding="utf-8") as f:
            f.write(str(err))
        os.rename(error_file + ".partial", error_file)
        sys.exit(2)


class Producers:
    """``cfg.workers`` (at least 1) producer processes pushing batches to ``endpoint``, and a
    watchdog thread: when one of them ends, it keeps the reason in ``error`` and closes the
    InputSource, so the training step waiting for data stops at once instead of hanging."""

    def __init__(self, cfg: RunConfig, items, endpoint: str, tmpdir: str):
        from inputpipe.utils.workers import WorkerProcesses

        count = max(1, cfg.workers)
        self._error_files = [os.path.join(tmpdir, "producer-{}.error".format(rank)) for rank in range(count)]
        self.processes = WorkerProcesses("train_resnet zmq producers", _produce,
                                         [(endpoint, items, cfg, f) for f in self._error_files])
        self.error: Optional[BaseException] = None
        self._watchdog = None

    def start(self) -> None:
        self.processes.start()

    def watch(self, source) -> None:
        from inputpipe.utils.concurrency import POLL_INTERVAL, StoppableThread

        def check():
            while not self._watchdog.wait_stopped(POLL_INTERVAL):
                for rank, proc in enumerate(self.processes.processes):
                    if proc.exitcode is not None:
                        self.error = self._describe(rank)
                        source.close()
                        return

        self._watchdog = StoppableThread(target=check, name="train_resnet-producer-watchdog")
        self._watchdog.start()

    def _describe(self, rank: int) -> BaseException:
        try:
            with open(self._error_files[rank], encoding="utf-8") as f:
                return DatasetError(f.read())
        except OSError:
            return self.processes.worker_error(rank)

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog.join(2)
        self.processes.close()


# -- graph ----------------------------------------------------------------------------------------
def make_input_source(cfg: RunConfig, df, endpoint: Optional[str]):
    import tensorflow as tf
    from inputpipe import input_source as inputs

    if cfg.input == "feed":
        return inputs.FeedInput(df)
    if cfg.input == "queue":
        return inputs.QueueInput(df)
    if cfg.input == "staging":
        return inputs.StagingInput(inputs.QueueInput(df), nr_stage=1)
    if cfg.input == "dataset":
        dataset = inputs.TFDatasetInput.dataflow_to_dataset(df, [tf.float32, tf.int32]).repeat().prefetch(4)
        return inputs.TFDatasetInput(dataset)
    if cfg.input == "zmq":
        return inputs.ZMQInput(endpoint, hwm=8, bind=True)
    return inputs.DummyConstantInput([[cfg.batch_size, cfg.image_size, cfg.image_size, 3], [cfg.batch_size]])


def tensorboard_hook(logdir: str, batch_size: int, rate: "tf.Tensor", every_n: int = 10):
    """A ``SessionRunHook`` writing every summary (loss, accuracy, images/s fed into ``rate``, and
    the InputSource's queue size and input wait) to ``logdir`` every ``every_n`` steps, fetched
    with the train step (no extra run)."""
    import tensorflow as tf

    v1 = tf.compat.v1

    class TensorBoardHook(v1.train.SessionRunHook):
        def begin(self):
            self.merged = v1.summary.merge_all()  # after the InputSource's hooks built theirs
            self.step = v1.train.get_global_step()
            self.writer = v1.summary.FileWriter(logdir, v1.get_default_graph())
            self.count, self.last_time, self.last_count = 0, None, 0

        def before_run(self, run_context):
            now = time.perf_counter()
            self.count += 1
            if self.last_time is None:  # the rate is measured from the start of the first step
                self.last_time, self.last_count = now, self.count
            if self.count % every_n or self.count == self.last_count:
                return None
            feeds = {rate: (self.count - self.last_count) * batch_size / (now - self.last_time)}
            self.last_time, self.last_count = now, self.count
            return v1.train.SessionRunArgs([self.merged, self.step], feed_dict=feeds)

        def after_run(self, run_context, run_values):
            if run_values.results is not None:
                summary, step = run_values.results
                self.writer.add_summary(summary, step)

        def end(self, session):
            self.writer.close()

    return TensorBoardHook()


def build_graph(cfg: RunConfig, source):
    import tensorflow as tf
    from resnet_model import ModelConfig, build_train_graph, count_parameters

    model_cfg = ModelConfig(cfg.model, num_classes=cfg.num_classes, depth=cfg.depth, learning_rate=cfg.learning_rate)
    source.setup([tf.TensorSpec([cfg.batch_size, cfg.image_size, cfg.image_size, 3], tf.float32, "images"),
                  tf.TensorSpec([cfg.batch_size], tf.int32, "labels")])
    images, labels = source.get_input_tensors()
    graph = build_train_graph(images, labels, model_cfg)
    with tf.name_scope("train"):
        tf.compat.v1.summary.scalar("loss", graph.loss)
        tf.compat.v1.summary.scalar("accuracy", graph.accuracy)
        rate = tf.compat.v1.placeholder_with_default(0.0, [], name="images_per_second_value")
        tf.compat.v1.summary.scalar("images_per_second", rate)
    return graph, rate, model_cfg.describe(), count_parameters()


# -- the run ----------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    cfg = configure(args)
    if args.seed is not None:
        from inputpipe.dataflow import seeding

        seeding.set_global_seed(args.seed)
    drop = DropCorrupt()
    images = None
    if not args.fake and cfg.input != "dummy":
        images = prepare_images(args, cfg)  # DatasetError here: bad path, empty, no classes
    producers, endpoint, df = None, None, None
    tmpdir = tempfile.mkdtemp(prefix="train_resnet-")
    try:
        if cfg.input == "zmq":
            endpoint = "ipc://" + os.path.join(tmpdir, "batches.sock")
            producers = Producers(cfg, images.items(), endpoint, tmpdir)
            producers.start()  # fork before TensorFlow builds anything
        elif cfg.input != "dummy":
            df = fake_dataflow(cfg) if args.fake else build_dataflow(args, cfg, images, drop)
        return train_and_report(args, cfg, df, endpoint, producers, drop)
    finally:
        if producers is not None:
            producers.close()
        if df is not None:
            close_dataflow(df)
        shutil.rmtree(tmpdir, ignore_errors=True)


def train_and_report(args, cfg: RunConfig, df, endpoint, producers, drop: DropCorrupt) -> int:
    import tensorflow as tf
    from inputpipe.train import train

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(args.seed if args.seed is not None else 0)
        source = make_input_source(cfg, df, endpoint)
        model, rate, model_name, params = build_graph(cfg, source)
    print("\n".join(["config:"] + ["  " + line for line in cfg.lines(model_name)]
                    + ["  parameters   {:,}".format(params)]), flush=True)
    losses: List[float] = []
    window = max(1, cfg.steps // 10)

    def record(step: int, values) -> None:
        losses.append(float(values["loss"]))
        if not np.isfinite(losses[-1]):
            raise FloatingPointError("the loss became {} at step {}; lower --lr".format(losses[-1], step + 1))
        if (step + 1) % window == 0:
            tqdm.write("step {:5d}  loss {:.3f}  (mean of the last {})".format(
                step + 1, float(np.mean(losses[-window:])), window))

    if producers is not None:
        producers.watch(source)
    summaries = tensorboard_hook(cfg.logdir, cfg.batch_size, rate, every_n=min(10, max(1, cfg.steps // 5)))
    try:
        summary = train(model.train_op, source, cfg.steps, fetches={"loss": model.loss, "acc": model.accuracy},
                        batch_size=cfg.batch_size, hooks=[summaries], progress=not args.no_progress,
                        callback=record)
    except Exception:
        if producers is not None and producers.error is not None:
            raise producers.error from None
        raise
    print(summary_table(cfg, summary, source, losses, drop, producers is not None), flush=True)
    return 0


def summary_table(cfg: RunConfig, summary, source, losses: List[float], drop: DropCorrupt, remote: bool) -> str:
    from tabulate import tabulate

    stats = source.stats.summary()
    step_ms = 1e3 * summary.seconds / max(1, summary.steps)
    input_bound = summary.stall_fraction >= source.stats.warn_fraction  # the library's own threshold
    tenth = max(1, len(losses) // 10)
    queue = "-" if summary.mean_queue_size is None else "{:.1f} batches (empty at {:.0f}% of steps)".format(
        summary.mean_queue_size, 100 * (stats.get("empty_queue_fraction") or 0.0))
    rows = [
        ["images/s", "{:.1f}".format(summary.samples_per_second or 0.0)],
        ["time per step", "{:.1f} ms".format(step_ms)],
        ["waiting for input", "{:.1f}% of step time ({:.1f} ms per step)".format(
            100 * summary.stall_fraction, stats["mean_wait_ms"])],
        ["queue occupancy (mean)", queue],
        ["input-bound", "yes: add --workers, use --lmdb, or a lighter pipeline" if input_bound else "no"],
        ["loss (first -> last {} steps)".format(tenth), "{:.3f} -> {:.3f}".format(
            float(np.mean(losses[:tenth])), float(np.mean(losses[-tenth:])))],
        ["corrupt images skipped", "counted in the producer processes" if remote else
         "{} ({} distinct files)".format(drop.skipped, len(drop.files))],
        ["steps x batch", "{} x {} in {:.1f} s".format(summary.steps, cfg.batch_size, summary.seconds)],
    ]
    return "\nsummary ({} input):\n{}".format(cfg.input, tabulate(rows, tablefmt="simple_outline"))


class _ReportedByExample(logging.Filter):
    """Drops the library's log records about dataset errors: the example reports those itself,
    as one line, when they reach the training loop."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(name in record.getMessage()
                       for name in ("CorruptImageError", "DatasetError", "DatasetFormatError"))


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_ReportedByExample())
    from inputpipe.dataflow import DatasetFormatError

    try:
        return run(args)
    except (DatasetError, DatasetFormatError, FloatingPointError) as err:
        print("error: {}".format(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a DatasetError raised in a worker arrives wrapped: find it
        cause = _dataset_error_in(err)
        if cause is None:
            raise
        print("error: {}".format(cause), file=sys.stderr)
        return 2


def _dataset_error_in(err: BaseException) -> Optional[str]:
    """The message of a DatasetError/CorruptImageError/DatasetFormatError somewhere in ``err``'s
    chain or text (errors from worker processes cross the process boundary as text)."""
    from inputpipe.dataflow import DatasetFormatError

    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, (DatasetError, DatasetFormatError)):
            return str(err)
        for line in str(err).splitlines()[::-1]:
            for name in ("CorruptImageError: ", "DatasetError: ", "DatasetFormatError: "):
                if name in line:
                    return line.split(name, 1)[1].strip()
        err = err.__cause__ or err.__context__
    return None


if __name__ == "__main__":
    sys.exit(main())
