"""JPEG pipeline throughput: the example's data pipeline alone, inputpipe vs PyTorch's DataLoader.

Both sides do the same work per image, with the same code (``examples/image_pipeline.py``):
read the file, decode the JPEG with Pillow, random crop, random flip, normalise to float32;
then batch. inputpipe runs ``DataFromList -> MultiProcessMapData -> BatchData`` measured with
``TestDataSpeed``; PyTorch runs a map-style ``Dataset`` in a ``DataLoader`` with the same number
of worker processes (no torchvision: decoding is Pillow in ``__getitem__``); the DataLoader
batches inside its workers, so ``MultiProcessMapAndBatchData`` (which does the same) is shown
too. Each is measured ``--repeats`` times, interleaved, and the median reported. Two image sizes:
the example's default (40 px files, 32 px crops) and a larger one (140 px files, 112 px crops).

    pip install -e ".[bench]" && python benchmarks/bench_jpeg_pipeline.py

Prints a table with ratios and writes ``benchmarks/results/jpeg_pipeline.json``.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(REPO, "examples"), REPO]

from tabulate import tabulate  # noqa: E402

import synthetic_images  # noqa: E402
from image_pipeline import DecodeAndAugment, build_image_dataflow, close_dataflow, list_image_folder  # noqa: E402

BATCH_SIZE = 64
SETTINGS = [  # (label, stored image size, crop size, images per class)
    ("40px JPEG -> 32px crop", 40, 32, 300),
    ("140px JPEG -> 112px crop", 140, 112, 100),
]


def measure_inputpipe(items, crop: int, num_proc: int, batches: int, warmup: int) -> float:
    """Images/s of the example's pipeline (DataFromList -> MultiProcessMapData -> BatchData),
    timed by TestDataSpeed after ``warmup`` batches."""
    from inputpipe.dataflow import DataFromList, RepeatedData

    endless_files = RepeatedData(DataFromList(items, shuffle=True), -1)
    df = build_image_dataflow(None, crop_size=crop, batch_size=BATCH_SIZE, num_proc=num_proc, source=endless_files)
    return _time_batches(df, batches, warmup)


def measure_inputpipe_batching_in_workers(items, crop: int, num_proc: int, batches: int, warmup: int) -> float:
    """Images/s of MultiProcessMapAndBatchData: decode, augment and batch inside the workers
    (what the DataLoader does), so whole batches cross the process boundary."""
    from inputpipe.dataflow import DataFromList, MultiProcessMapAndBatchData, RepeatedData

    endless_files = RepeatedData(DataFromList(items, shuffle=True), -1)
    df = MultiProcessMapAndBatchData(endless_files, num_proc, DecodeAndAugment(crop, on_corrupt="fail"), BATCH_SIZE)
    return _time_batches(df, batches, warmup)


def _time_batches(df, batches: int, warmup: int) -> float:
    from inputpipe.dataflow import TestDataSpeed

    try:
        stats = TestDataSpeed(df, size=batches, warmup=warmup).start()
    finally:
        close_dataflow(df)
    assert stats["datapoints"] == batches, stats
    return stats["datapoints_per_sec"] * BATCH_SIZE


class JpegDataset:
    """A map-style torch Dataset doing the same decode + augment as the inputpipe side."""

    def __init__(self, items, crop: int):
        self.items = items
        self.augment = DecodeAndAugment(crop, on_corrupt="fail")

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        image, label = self.augment(self.items[index])
        return image, int(label)


def measure_torch(items, crop: int, num_workers: int, batches: int, warmup: int) -> float:
    """Images/s of a DataLoader over the same map, after ``warmup`` batches. An endless random
    sampler (like the endless file list on the inputpipe side) avoids epoch restarts."""
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    torch.set_num_threads(1)
    dataset = JpegDataset(items, crop)
    sampler = RandomSampler(dataset, replacement=True, num_samples=(warmup + batches + 8) * BATCH_SIZE)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler, drop_last=True,
                        num_workers=num_workers, prefetch_factor=4)
    iterator = iter(loader)
    try:
        for _ in range(warmup):
            next(iterator)
        t0 = time.perf_counter()
        for _ in range(batches):
            next(iterator)
        elapsed = time.perf_counter() - t0
    finally:
        del iterator  # shuts the worker processes down
    return batches * BATCH_SIZE / elapsed


MEASURES = {
    "MultiProcessMapData -> BatchData": measure_inputpipe,
    "MultiProcessMapAndBatchData": measure_inputpipe_batching_in_workers,
    "torch DataLoader": measure_torch,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=60, help="timed batches per measurement")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each; the median is reported")
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    cache = os.path.join(tempfile.gettempdir(), "inputpipe-bench-jpeg")
    rows, records = [], []
    for label, stored, crop, per_class in SETTINGS:
        root = synthetic_images.ensure_dataset(
            os.path.join(cache, "{}px-{}".format(stored, per_class)), num_classes=10,
            images_per_class=per_class, image_size=stored)
        items = list_image_folder(root).items()
        for procs in args.procs:
            runs = {name: [] for name in MEASURES}
            for _ in range(args.repeats):
                for name, measure in MEASURES.items():
                    runs[name].append(measure(items, crop, procs, args.batches, args.warmup))
            median = {name: statistics.median(v) for name, v in runs.items()}
            torch_speed = median["torch DataLoader"]
            rows.append([label, procs] + ["{:,.0f}".format(median[name]) for name in MEASURES] + [
                "{:.2f}x".format(median["MultiProcessMapData -> BatchData"] / torch_speed),
                "{:.2f}x".format(median["MultiProcessMapAndBatchData"] / torch_speed)])
            records.append({"setting": label, "stored_px": stored, "crop_px": crop, "workers": procs,
                            "images_per_s_median": median, "images_per_s_runs": runs})
            print(tabulate([rows[-1]], tablefmt="plain"), flush=True)

    headers = ["pipeline (batch {})".format(BATCH_SIZE), "worker processes",
               "MultiProcessMapData -> BatchData (images/s)", "MultiProcessMapAndBatchData (images/s)",
               "PyTorch DataLoader (images/s)", "MapData->BatchData / DataLoader", "MapAndBatch / DataLoader"]
    print()
    print(tabulate(rows, headers=headers, tablefmt="github"))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", "jpeg_pipeline.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"benchmark": "jpeg_pipeline", "batch_size": BATCH_SIZE, "batches": args.batches,
                   "repeats": args.repeats, "cpu_count": os.cpu_count(), "python": platform.python_version(),
                   "results": records}, f, indent=1)
    print("\nwrote", os.path.relpath(out, REPO))


if __name__ == "__main__":
    main()
