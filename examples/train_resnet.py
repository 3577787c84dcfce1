#!/usr/bin/env python
"""Train a ResNet in TF1 graph mode while a Python JPEG pipeline runs beside it.

The default run needs nothing downloaded: it draws a small image-classification dataset as JPEG
files into a cache folder (first run only), reads it the way ImageNet is read (file list ->
decode + random crop + flip + normalise in worker processes -> batches), feeds the batches into
the graph through QueueInput + StagingInput, trains a small CIFAR-style ResNet with momentum SGD,
and prints a summary: images/s, time per step, the share of the step spent waiting for input,
queue occupancy and whether training was input-bound.

    python examples/train_resnet.py                          # defaults: about 2-3 minutes on 2 cores
    python examples/train_resnet.py --data ~/imagenet/train --model resnet50 --image-size 224
    python examples/train_resnet.py --input feed             # the slow baseline, to compare
    python examples/train_resnet.py --lmdb                   # dump to LMDB once, train from it
    python examples/train_resnet.py --fake --input dummy     # no input cost at all

TensorBoard summaries (loss, images/s, queue occupancy) go to ``--logdir``.
"""
import argparse
import logging
import os
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

from image_pipeline import DatasetError, DropCorrupt, build_image_dataflow, list_image_folder  # noqa: E402
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
            "training     {} steps x batch {}, momentum SGD lr {}".format(self.steps, self.batch_size, self.learning_rate),
            "corrupt      {} ; TensorBoard logdir {}".format(
                "skip with a warning" if self.on_corrupt == "skip" else "stop with an error", self.logdir),
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
    p.add_argument("--steps", type=int, default=600)
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
    if args.input == "zmq" and args.fake:
        p.error("--input zmq sends the image pipeline from producer processes; use it without --fake")
    return args


def configure(args: argparse.Namespace) -> RunConfig:
    """Fill in defaults that depend on other flags."""
    image_size = args.image_size or (32 if args.model == "cifar" else 224)
    if image_size < 16:
        raise DatasetError("--image-size must be at least 16, got {}".format(image_size))
    if args.fake:
        root, data = None, "in-memory random tensors (--fake)"
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


def synthetic_dataset_dir(args: argparse.Namespace, image_size: int) -> str:
    stored = int(round(image_size * 1.25))
    name = "synthetic-v{}-{}c-{}x{}px".format(synthetic_images.GENERATOR_VERSION, args.num_classes,
                                              args.images_per_class, stored)
    return os.path.join(os.path.abspath(os.path.expanduser(args.cache_dir)), name)


def prepare_images(args: argparse.Namespace, cfg: RunConfig):
    """The image dataset as an ImageList (generated on first use); its class count wins."""
    if args.data:
        images = list_image_folder(cfg.data_root)
    else:
        root = cfg.data_root
        if not synthetic_images.is_complete(root, args.num_classes, args.images_per_class,
                                            int(round(cfg.image_size * 1.25))):
            print("generating {} x {} JPEG images into {} (first run only) ...".format(
                args.num_classes, args.images_per_class, root), flush=True)
            t0 = time.monotonic()
            synthetic_images.generate(root, args.num_classes, args.images_per_class, int(round(cfg.image_size * 1.25)))
            print("  done in {:.1f} s".format(time.monotonic() - t0), flush=True)
        images = list_image_folder(root)
    cfg.num_classes = len(images.class_names)
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
