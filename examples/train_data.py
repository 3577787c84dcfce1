"""The data side of train_resnet.py: the dataset on disk (generated, a folder, or an LMDB file),
the batched DataFlow over it, and the zmq producer processes.

No TensorFlow import here: the producer processes are forked before TensorFlow starts.

Example::

    from train_data import build_dataflow, prepare_images
    images = prepare_images(args, cfg)              # generates the default dataset on first use
    df = build_dataflow(args, cfg, images, DropCorrupt(), workers=1)
"""
import argparse
import os
import sys
import time
import zlib
from typing import TYPE_CHECKING, Optional

import numpy as np

from image_pipeline import DatasetError, DropCorrupt, build_image_dataflow, list_image_folder
import synthetic_images

if TYPE_CHECKING:  # train_resnet imports this module; at run time RunConfig is only an annotation
    from train_resnet import RunConfig


class MissingDependency(Exception):
    """A flag needs a package that is not installed; the message says which extra to install."""


def require_lmdb() -> None:
    """``--lmdb`` needs the lmdb package; say which extra installs it before any work is done."""
    try:
        import lmdb  # noqa: F401
    except ImportError:
        raise MissingDependency('--lmdb needs the lmdb package: pip install "inputpipe[lmdb]"') from None


def stored_size(crop_size: int) -> int:
    """Size of the generated images: a quarter larger than the crop, so random crops move."""
    return int(round(crop_size * 1.25))


def synthetic_dataset_dir(args: argparse.Namespace, image_size: int) -> str:
    name = "synthetic-v{}-{}c-{}x{}px".format(synthetic_images.GENERATOR_VERSION, args.num_classes,
                                              args.images_per_class, stored_size(image_size))
    return os.path.join(os.path.abspath(os.path.expanduser(args.cache_dir)), name)


def prepare_images(args: argparse.Namespace, cfg: "RunConfig"):
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


def build_dataflow(args: argparse.Namespace, cfg: "RunConfig", images, drop: DropCorrupt, workers: int,
                   extra_cost_ms: float = 0.0):
    """The batched training DataFlow: file list or LMDB -> ``workers`` decode processes (0: in the
    thread that reads it) -> batches; ``--fake``: in-memory tensors. ``extra_cost_ms`` per image."""
    if args.fake:
        return fake_dataflow(cfg, extra_cost_ms)
    if args.lmdb is None:
        return build_image_dataflow(images.items(), cfg.image_size, cfg.batch_size, num_proc=workers,
                                    on_corrupt=cfg.on_corrupt, drop=drop, extra_cost_ms=extra_cost_ms)
    from inputpipe.dataflow import LMDBSerializer

    path = lmdb_path(args, images)
    dump_lmdb(images, path)
    records = LMDBSerializer.load(path, shuffle=True)
    return build_image_dataflow(None, cfg.image_size, cfg.batch_size, num_proc=workers,
                                on_corrupt=cfg.on_corrupt, drop=drop, source=records, extra_cost_ms=extra_cost_ms)


def fake_dataflow(cfg: "RunConfig", extra_cost_ms: float = 0.0):
    """Batches of constant random-looking tensors; ``extra_cost_ms`` per image is slept per batch."""
    from inputpipe.dataflow import FakeData, MapData

    df = FakeData([[cfg.batch_size, cfg.image_size, cfg.image_size, 3], [cfg.batch_size]], size=100,
                  random=False, dtype=["float32", "int32"], domain=[(-1.0, 1.0), (0, cfg.num_classes)])
    if not extra_cost_ms:
        return df
    batch_cost = extra_cost_ms * cfg.batch_size / 1e3

    def slow(dp):
        time.sleep(batch_cost)
        return dp

    return MapData(df, slow)


def time_batches(df, batches: int = 5) -> float:
    """Milliseconds per batch of ``df`` iterated alone in this thread (after one batch to start;
    epochs are restarted as the InputSources do)."""
    df.reset_state()

    def endless():
        while True:
            yield from df

    it = endless()
    next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    return 1e3 * (time.perf_counter() - start) / batches


def _produce(rank: int, endpoint: str, items, cfg: "RunConfig", error_file: str) -> None:
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

    def __init__(self, cfg: "RunConfig", items, endpoint: str, tmpdir: str):
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
