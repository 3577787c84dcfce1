#!/usr/bin/env python
"""Train a ResNet in TF1 graph mode while a Python JPEG pipeline runs beside it, then show
what the InputSource is worth.

The default run needs nothing downloaded: it draws a small image-classification dataset as JPEG
files into a cache folder (first run only), reads it the way ImageNet is read (file list ->
decode + random crop + flip + normalise in worker processes -> batches), feeds the batches into
the graph through QueueInput + StagingInput, trains a small CIFAR-style ResNet with momentum SGD,
and prints a summary: images/s, time per step, how much of the step waited for input, queue
occupancy. Then it trains briefly with each of feed, queue, staging and dummy inputs (same
model, data and steps, a fresh graph each), with heavier data work per image, and prints one
table side by side: with data work D and a step T per batch, feed takes about D + T per step
and staging about max(D, T).

    python examples/train_resnet.py                          # defaults: about 2-3 minutes on 2 cores
    python examples/train_resnet.py --compare                # only the comparison (about 1 minute)
    python examples/train_resnet.py --data ~/imagenet/train --model resnet50 --no-compare
    python examples/train_resnet.py --lmdb                   # dump to LMDB once, train from it
    python examples/train_resnet.py --fake --input dummy     # no input cost at all

TensorBoard summaries (loss, images/s, queue occupancy) of the training run go to a new
timestamped folder under ``--logdir``, printed at start.
"""
import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:  # for annotations only: TensorFlow is imported where the graph is built (see below)
    import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # run from a checkout without installing

import numpy as np  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

# TensorFlow is imported only where the graph is built: a bad dataset path is reported at once,
# and the zmq producer processes are forked before TensorFlow starts any thread.

from image_pipeline import DatasetError, DropCorrupt, close_dataflow  # noqa: E402
from run_report import (  # noqa: E402
    RunNumbers, comparison_table, expectation, numbers_of, rates_note, summary_table, wait_note)
import synthetic_images  # noqa: E402
from train_data import (  # noqa: E402
    MissingDependency, Producers, build_dataflow, prepare_images, require_lmdb, synthetic_dataset_dir,
    time_batches)

INPUTS = ("feed", "queue", "staging", "dataset", "zmq", "dummy")
#: inputs the comparison can run (zmq needs producer processes of its own)
COMPARABLE = ("feed", "queue", "staging", "dataset", "dummy")
DEFAULT_COMPARE = "feed,queue,staging,dummy"
#: the comparison's extra data work per image: with the default flags it makes the data work per
#: batch (64 images) about as long as the train step on a 2-core CPU (~110 ms each)
COMPARE_EXTRA_COST_MS = 1.5


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
    reads_files: bool = True
    extra_cost_ms: float = 0.0
    compare: Optional[List[str]] = None
    compare_steps: int = 0
    compare_workers: int = 0
    compare_extra_cost_ms: float = 0.0

    def lines(self, model_name: str, training: bool = True) -> List[str]:
        lines = [
            "model        {} on {}x{}x3 images, {} classes".format(model_name, self.image_size, self.image_size,
                                                                  self.num_classes),
            "data         {}".format(self.data),
        ]
        if training:
            lines += [
                "input        {} ({}{})".format(
                    self.input, "constant zeros, no data work" if self.input == "dummy" else _workers_text(self.workers),
                    _extra_text(self.extra_cost_ms)),
                "training     {} steps x batch {}, momentum SGD lr {}".format(
                    self.steps, self.batch_size, self.learning_rate),
            ]
        if self.reads_files:
            lines.append("corrupt      {} (--on-corrupt)".format(
                "skip with a warning" if self.on_corrupt == "skip" else "stop with an error"))
        if training:
            lines.append("logdir       {} (TensorBoard)".format(self.logdir))
        if self.compare:
            reads_data = any(name != "dummy" for name in self.compare)
            lines.append("compare      {}: {} timed steps each{}{}".format(
                ", ".join(self.compare), self.compare_steps,
                _extra_text(self.compare_extra_cost_ms) if reads_data else "",
                " (--no-compare skips it)" if training else ""))
        return lines


def _workers_text(workers: int) -> str:
    if workers == 0:
        return "data work in the thread that reads the DataFlow"
    return "{} decode worker process{}".format(workers, "" if workers == 1 else "es")


def _extra_text(extra_cost_ms: float) -> str:
    return ", +{:g} ms per image (--extra-cost-ms)".format(extra_cost_ms) if extra_cost_ms else ""


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    # Each help text names its default itself, once (ArgumentDefaultsHelpFormatter would repeat
    # it, and print "default: None" for flags whose default depends on others).
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    data = p.add_argument_group("data (default: generated JPEG shapes, cached)")
    data.add_argument("--data", metavar="DIR", help="an ImageNet-style folder DIR/<class>/*.jpg")
    data.add_argument("--fake", action="store_true", help="in-memory random tensors instead of images")
    data.add_argument("--lmdb", nargs="?", const="", metavar="FILE",
                      help="dump the dataset (encoded JPEGs + labels) to this LMDB file once, then train "
                           "from it (FILE defaults to a file in --cache-dir)")
    data.add_argument("--cache-dir", metavar="DIR", default=synthetic_images.default_cache_root(),
                      help="where the generated dataset is kept (default: %(default)s)")
    data.add_argument("--images-per-class", metavar="N", type=int, default=300,
                      help="generated dataset size (default: %(default)s)")
    data.add_argument("--num-classes", metavar="N", type=int, default=10,
                      help="classes of the generated dataset, 2-10 (default: %(default)s)")
    data.add_argument("--on-corrupt", choices=("skip", "fail"), default="skip",
                      help="a file that cannot be decoded is skipped with a warning, or stops the run "
                           "(default: %(default)s)")
    p.add_argument("--input", choices=INPUTS, default="staging",
                   help="InputSource of the training run (default: %(default)s = QueueInput wrapped in "
                        "StagingInput)")
    p.add_argument("--workers", metavar="N", type=int,
                   help="decode worker processes, MultiProcessMapData; zmq: producer processes (default: 1 "
                        "for training; 0 for the comparison, so that only the InputSource overlaps the data "
                        "work with the step)")
    p.add_argument("--extra-cost-ms", metavar="MS", type=float,
                   help="extra data work per image, a sleep standing for a slow read or heavy augmentation "
                        "(default: 0 for training, {:g} for the comparison)".format(COMPARE_EXTRA_COST_MS))
    p.add_argument("--model", choices=("cifar", "resnet18", "resnet34", "resnet50"), default="cifar",
                   help="the network (default: %(default)s)")
    p.add_argument("--depth", metavar="N", type=int, default=14,
                   help="depth of the cifar variant, 6n+2 (default: %(default)s)")
    p.add_argument("--image-size", metavar="PX", type=int, help="crop size (default: 32 for cifar, 224 otherwise)")
    p.add_argument("--batch-size", metavar="N", type=int, default=64, help="(default: %(default)s)")
    p.add_argument("--steps", metavar="N", type=int, default=600,
                   help="steps of the training run (default: %(default)s)")
    p.add_argument("--lr", type=float, default=0.1, help="learning rate, momentum 0.9 (default: %(default)s)")
    p.add_argument("--logdir", metavar="DIR", default=os.path.join(tempfile.gettempdir(), "train_resnet_logs"),
                   help="TensorBoard summaries go to a new timestamped folder in DIR (default: %(default)s)")
    p.add_argument("--seed", type=int,
                   help="make the data pipeline reproducible (the comparison's runs always use one seed: 0 unless given)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    compare = p.add_argument_group("comparison of InputSources (default: after the training run)")
    compare.add_argument("--compare", nargs="?", const=DEFAULT_COMPARE, metavar="LIST",
                         help="run only the comparison, of these inputs (LIST defaults to {}; any of {})".format(
                             DEFAULT_COMPARE, ", ".join(COMPARABLE)))
    compare.add_argument("--no-compare", action="store_true", help="skip the comparison after the training run")
    compare.add_argument("--compare-steps", metavar="N", type=int, default=40,
                         help="timed steps per input, after the warm-up steps (default: %(default)s)")
    args = p.parse_args(argv)
    if args.fake and (args.data or args.lmdb is not None):
        p.error("--fake replaces the dataset; it cannot be combined with --data or --lmdb")
    for name in ("steps", "batch_size", "compare_steps"):
        if getattr(args, name) < 1:
            p.error("--{} must be >= 1".format(name.replace("_", "-")))
    if args.workers is not None and args.workers < 0:
        p.error("--workers must be >= 0")
    if args.extra_cost_ms is not None and args.extra_cost_ms < 0:
        p.error("--extra-cost-ms must be >= 0")
    if args.image_size is not None and args.image_size < 16:
        p.error("--image-size must be at least 16")
    if args.input == "zmq" and args.fake:
        p.error("--input zmq sends the image pipeline from producer processes; use it without --fake")
    if args.compare is not None and args.no_compare:
        p.error("--compare runs only the comparison; it cannot be combined with --no-compare")
    if args.compare is not None:
        names = [n.strip() for n in args.compare.split(",") if n.strip()]
        wrong = [n for n in names if n not in COMPARABLE]
        if not names or wrong or len(set(names)) != len(names):
            p.error("--compare takes a comma-separated list of distinct inputs out of {}, got {!r}".format(
                ", ".join(COMPARABLE), args.compare))
        args.compare = ",".join(names)
    return args


def configure(args: argparse.Namespace) -> RunConfig:
    """Fill in defaults that depend on other flags."""
    image_size = args.image_size or (32 if args.model == "cifar" else 224)
    training = args.compare is None
    compare = None if args.no_compare else (args.compare or DEFAULT_COMPARE).split(",")
    needs_data = (training and args.input != "dummy") or any(name != "dummy" for name in compare or [])
    if args.fake:
        root, data = None, "in-memory random tensors (--fake)"
    elif not needs_data:
        root, data = None, "none: DummyConstantInput feeds constant zeros"
    elif args.data:
        root = os.path.abspath(os.path.expanduser(args.data))
        data = "JPEG folder " + root
    else:
        root = synthetic_dataset_dir(args, image_size)
        data = "generated JPEG shapes in " + root
    if args.lmdb is not None and root is not None:
        data += ", read through LMDB"
    if args.input == "zmq":
        workers = 1 if args.workers is None else args.workers
    else:
        workers = 0 if args.fake or args.input == "dummy" else (1 if args.workers is None else args.workers)
    return RunConfig(
        model=args.model, depth=args.depth, image_size=image_size, batch_size=args.batch_size,
        steps=args.steps, num_classes=args.num_classes, data=data, data_root=root, input=args.input, workers=workers,
        learning_rate=args.lr, on_corrupt=args.on_corrupt, logdir=run_logdir(args.logdir, args.input),
        reads_files=root is not None, extra_cost_ms=args.extra_cost_ms or 0.0,
        compare=compare, compare_steps=args.compare_steps,
        compare_workers=0 if args.workers is None or args.fake else args.workers,
        compare_extra_cost_ms=COMPARE_EXTRA_COST_MS if args.extra_cost_ms is None else args.extra_cost_ms,
    )


def run_logdir(base: str, label: str) -> str:
    """A new folder name under ``base`` for one run's summaries: ``<date>-<time>-<label>``."""
    base = os.path.abspath(os.path.expanduser(base))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, n = os.path.join(base, "{}-{}".format(stamp, label)), 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(base, "{}-{}-{}".format(stamp, label, n))
    return path


# -- graph ----------------------------------------------------------------------------------------
def make_input_source(name: str, cfg: RunConfig, df, endpoint: Optional[str]):
    import tensorflow as tf
    from inputpipe import input_source as inputs

    if name == "feed":
        return inputs.FeedInput(df)
    if name == "queue":
        return inputs.QueueInput(df)
    if name == "staging":
        return inputs.StagingInput(inputs.QueueInput(df), nr_stage=1)
    if name == "dataset":
        dataset = inputs.TFDatasetInput.dataflow_to_dataset(df, [tf.float32, tf.int32]).repeat().prefetch(4)
        return inputs.TFDatasetInput(dataset)
    if name == "zmq":
        return inputs.ZMQInput(endpoint, hwm=8, bind=True)
    return inputs.DummyConstantInput([[cfg.batch_size, cfg.image_size, cfg.image_size, 3], [cfg.batch_size]])


def tensorboard_hook(logdir: str, batch_size: int, rate: "tf.Tensor", every_n: int = 10):
    """A ``SessionRunHook`` writing every summary (loss, accuracy, images/s fed into ``rate``, the
    InputSource's queue size and input wait, and the worker count of each ``"auto"`` stage of its
    DataFlow, ``input/workers/<stage>``) to ``logdir`` every ``every_n`` steps, fetched with the
    train step (no extra run)."""
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


# -- the runs ---------------------------------------------------------------------------------------
@dataclass
class RunResult:
    """What one training run measured, for the tables."""

    numbers: RunNumbers
    total_seconds: float
    losses: List[float]
    warn_fraction: float
    queue: Optional[str]
    corrupt: Optional[str]


def run(args: argparse.Namespace) -> int:
    cfg = configure(args)
    if args.lmdb is not None and cfg.reads_files:
        require_lmdb()
    images = prepare_images(args, cfg) if cfg.data_root is not None else None  # DatasetError: bad path, ...
    printed = []

    def show_config(model_name: str, params: int) -> None:
        if not printed:
            printed.append(True)
            print("\n".join(["config:"] + ["  " + line for line in cfg.lines(model_name, training=not args.compare)]
                            + ["  parameters   {:,}".format(params)]), flush=True)

    if args.compare is None:
        window = max(1, cfg.steps // 10)

        def report_loss(step: int, losses: List[float]) -> None:
            if (step + 1) % window == 0:
                with tqdm.external_write_mode():
                    print("step {:5d}  loss {:.3f}  (mean of the last {})".format(
                        step + 1, float(np.mean(losses[-window:])), window), flush=True)

        result = train_run(args, cfg, images, cfg.input, workers=cfg.workers, extra_cost_ms=cfg.extra_cost_ms,
                           seed=args.seed, steps=cfg.steps, logdir=cfg.logdir, on_step=report_loss,
                           on_built=show_config)
        print(summary_table(result.numbers, result.total_seconds, result.losses, warn_fraction=result.warn_fraction,
                            queue=result.queue, corrupt=result.corrupt), flush=True)
    if cfg.compare:
        compare_inputs(args, cfg, images, show_config)
    return 0


def compare_inputs(args: argparse.Namespace, cfg: RunConfig, images, show_config) -> None:
    """Train ``cfg.compare_steps`` timed steps with each input of ``cfg.compare`` (same model,
    data, seed and steps; a fresh graph each) and print one table side by side."""
    if args.compare is None:
        print("\ncomparing the inputs {} (--no-compare skips this) ...".format(", ".join(cfg.compare)), flush=True)
    data_ms = None
    if any(name != "dummy" for name in cfg.compare):
        df = build_dataflow(args, cfg, images, DropCorrupt(), cfg.compare_workers, cfg.compare_extra_cost_ms)
        try:
            data_ms = time_batches(df)
        finally:
            close_dataflow(df)
    runs = []
    for i, name in enumerate(cfg.compare):
        _ReportedByExample.comparing = True
        try:
            result = train_run(args, cfg, images, name, workers=cfg.compare_workers,
                               extra_cost_ms=cfg.compare_extra_cost_ms, seed=0 if args.seed is None else args.seed,
                               timed_steps=cfg.compare_steps, on_built=show_config)
        finally:
            _ReportedByExample.comparing = False
        runs.append(result.numbers)
        print("compare {}/{}: {:8s} {:.1f} ms per step".format(i + 1, len(cfg.compare), name,
                                                             result.numbers.ms_per_step), flush=True)
    print("\ninputs compared: the same model, data, seed and steps, a fresh graph each; {}".format(
        rates_note(runs[0], "each timed over")))
    if data_ms is not None:
        where = ("in the thread that reads the DataFlow" if not cfg.compare_workers else
                 "in {} worker process{}".format(cfg.compare_workers, "" if cfg.compare_workers == 1 else "es"))
        print("data work: {}{}, {} (--workers {})".format(
            "fake batches" if args.fake else "decode + augment", _extra_text(cfg.compare_extra_cost_ms), where,
            cfg.compare_workers))
    print(comparison_table(runs))
    for line in expectation(runs, data_ms) + wait_note(runs):
        print("  " + line)
    sys.stdout.flush()


def train_run(args: argparse.Namespace, cfg: RunConfig, images, input_name: str, *, workers: int,
              extra_cost_ms: float, seed: Optional[int], steps: Optional[int] = None,
              timed_steps: Optional[int] = None, logdir: Optional[str] = None, on_step=None,
              on_built=None) -> RunResult:
    """One training run with ``input_name`` on a fresh graph: ``steps`` in all, or ``timed_steps``
    after the source's warm-up steps. ``seed`` (if not None) fixes the data pipeline's order and
    crops; the graph's initial weights are seeded with it (or 0). ``on_step(step, losses)`` after
    every step; ``on_built(model name, parameter count)`` once the graph is built; TensorBoard
    summaries to ``logdir``."""
    if seed is not None:
        from inputpipe.dataflow import seeding

        seeding.set_global_seed(seed)
    drop = DropCorrupt()
    producers, endpoint, df = None, None, None
    tmpdir = tempfile.mkdtemp(prefix="train_resnet-")
    try:
        if input_name == "zmq":
            endpoint = "ipc://" + os.path.join(tmpdir, "batches.sock")
            producers = Producers(cfg, images.items(), endpoint, tmpdir)
            producers.start()  # fork before TensorFlow builds anything
        elif input_name != "dummy":
            df = build_dataflow(args, cfg, images, drop, workers, extra_cost_ms)
        return _train(args, cfg, input_name, df, endpoint, producers, drop, seed, steps, timed_steps, logdir,
                      on_step, on_built)
    finally:
        if producers is not None:
            producers.close()
        if df is not None:
            close_dataflow(df)
        shutil.rmtree(tmpdir, ignore_errors=True)


def _train(args, cfg: RunConfig, input_name: str, df, endpoint, producers, drop: DropCorrupt, seed, steps,
           timed_steps, logdir, on_step, on_built) -> RunResult:
    import tensorflow as tf
    from inputpipe.train import train

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(seed if seed is not None else 0)
        source = make_input_source(input_name, cfg, df, endpoint)
        model, rate, model_name, params = build_graph(cfg, source)
    if on_built is not None:
        on_built(model_name, params)
    if steps is None:
        steps = timed_steps + source.stats.warmup_steps
    losses: List[float] = []

    def record(step: int, values) -> None:
        losses.append(float(values["loss"]))
        if not np.isfinite(losses[-1]):
            raise FloatingPointError("the loss became {} at step {}; lower --lr".format(losses[-1], step + 1))
        if on_step is not None:
            on_step(step, losses)

    if producers is not None:
        producers.watch(source)
    hooks = [] if logdir is None else [tensorboard_hook(logdir, cfg.batch_size, rate, every_n=min(10, max(1, steps // 5)))]
    try:
        summary = train(model.train_op, source, steps, fetches={"loss": model.loss, "acc": model.accuracy},
                        batch_size=cfg.batch_size, hooks=hooks, progress=not args.no_progress, callback=record)
    except Exception:
        if producers is not None and producers.error is not None:
            raise producers.error from None
        raise
    stats = source.stats.summary()
    queue = None
    if summary.mean_queue_size is not None:
        queue = "{:.1f} batches (empty at {:.0f}% of steps)".format(
            summary.mean_queue_size, 100 * (stats.get("empty_queue_fraction") or 0.0))
    corrupt = None
    if producers is not None:
        corrupt = "counted in the producer processes"
    elif cfg.reads_files and input_name != "dummy":
        corrupt = "{} ({} distinct files)".format(drop.skipped, len(drop.files))
    return RunResult(numbers_of(input_name, summary, stats, cfg.batch_size), summary.total_seconds, losses,
                     source.stats.warn_fraction, queue, corrupt)


class _ReportedByExample(logging.Filter):
    """Drops the library's log records about dataset errors: the example reports those itself,
    as one line, when they reach the training loop. While ``comparing`` is set, it also drops the
    library's "training is input-bound" warnings: the comparison makes the data slow on purpose
    and its table shows the wait."""

    comparing = False

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.comparing and "training is input-bound" in message:
            return False
        return not any(name in message for name in ("CorruptImageError", "DatasetError", "DatasetFormatError"))


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_ReportedByExample())
    from inputpipe.dataflow import DatasetFormatError

    try:
        return run(args)
    except (DatasetError, DatasetFormatError, FloatingPointError, MissingDependency) as err:
        print("error: {}".format(_dataset_error_in(err) or err), file=sys.stderr)
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
    """The one-line message of a DatasetError/CorruptImageError/DatasetFormatError somewhere in
    ``err``'s chain or text (errors from worker processes cross the process boundary as text, and
    arrive as a WorkerError that is also an instance of the original class)."""
    from inputpipe.dataflow import DatasetFormatError

    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, (DatasetError, DatasetFormatError)) and "\n" not in str(err).strip():
            return str(err)
        for line in str(err).splitlines()[::-1]:
            for name in ("CorruptImageError: ", "DatasetError: ", "DatasetFormatError: "):
                if name in line:
                    return line.split(name, 1)[1].strip()
        err = err.__cause__ or err.__context__
    return None


if __name__ == "__main__":
    sys.exit(main())
