"""Ray actors vs worker processes: RayMapData against MultiProcessMapData with the same workers.

Three questions, each answered with the same number N of workers (processes, or actors of a local
Ray instance with N CPUs) for both engines, taking turns for ``--repeats`` rounds (best round):

1. Per-datapoint cost of the engine: an identity map of a tiny datapoint, one datapoint per call
   (``RayMapData`` / ``MultiProcessMapData``) and ``--batch-sizes`` datapoints per call
   (``RayMapAndBatchData`` / ``MultiProcessMapAndBatchData``): the cost that batching in the
   actors amortises. Also the consumer's CPU time per datapoint (what the trainer pays to
   receive), which bounds one trainer's intake whatever the number of actors.
2. The CPU-bound map of ``bench_scaling.py`` (about 5 ms of numpy per datapoint).
3. The JPEG pipeline of ``bench_jpeg_pipeline.py`` (Pillow decode, crop, flip, normalise; 64
   images a batch, batched in the workers), at 32 px and 112 px crops; the consumer's CPU time
   per batch says what one trainer host can receive.

    pip install -e ".[bench,ray]" && python benchmarks/bench_ray.py
    python benchmarks/bench_ray.py --quick      # a smoke run of every path (not a measurement)

Prints tables with ratios (Ray / processes) and writes ``benchmarks/results/ray.json``
(``--quick``: a file in the temp directory).
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(REPO, "examples"), REPO]

import numpy as np  # noqa: E402

import bench_scaling  # noqa: E402
from inputpipe.dataflow import (  # noqa: E402
    DataFromList, MultiProcessMapAndBatchData, MultiProcessMapData, RepeatedData,
)
from inputpipe.dataflow.ray import RayMapAndBatchData, RayMapData, start_local_ray  # noqa: E402

BATCH_SIZE = 64
JPEG_SETTINGS = [("40px JPEG -> 32px crop", 40, 32, 300), ("140px JPEG -> 112px crop", 140, 112, 100)]


def identity(dp):
    return dp


class CpuMap:
    """bench_scaling's calibrated numpy work; carries the calibration into Ray's actors."""

    def __init__(self, rounds: int):
        self.rounds = rounds

    def __call__(self, dp):
        bench_scaling.WORK["rounds"] = self.rounds
        return bench_scaling.cpu_work(dp[0])


def _endless(items):
    return RepeatedData(DataFromList(items, shuffle=False), -1)


def open_flow(engine: str, source, workers: int, func, batch_size):
    """A parallel map of ``source`` on ``engine`` ("ray" or "processes"), batched in the workers
    when ``batch_size`` is not None."""
    if batch_size is None:
        cls = RayMapData if engine == "ray" else MultiProcessMapData
        return cls(source, workers, func, strict=True)
    cls = RayMapAndBatchData if engine == "ray" else MultiProcessMapAndBatchData
    return cls(source, workers, func, batch_size, strict=True)


def measure(engine: str, source, workers: int, func, batch_size, calls: int, warmup: int) -> dict:
    """Wall and consumer CPU seconds per call (one datapoint, or one batch) over ``calls`` calls."""
    df = open_flow(engine, source, workers, func, batch_size)
    df.reset_state()
    with df:
        iterator = iter(df)
        for _ in range(warmup):
            next(iterator)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            last = next(iterator)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        iterator.close()
    return {"wall_s_per_call": wall / calls, "consumer_cpu_s_per_call": cpu / calls, "last": last}


def best_of(rounds: list) -> dict:
    return min(rounds, key=lambda r: r["wall_s_per_call"])


def run_overhead(args, workers: int) -> list:
    items = [[np.int64(i)] for i in range(10000)]
    rows = []
    for batch_size in [None] + args.batch_sizes:
        per_call = 1 if batch_size is None else batch_size
        calls = max(3, args.datapoints // per_call)
        best = {}
        for engine in ("processes", "ray"):
            best[engine] = best_of([measure(engine, _endless(items), workers, identity, batch_size, calls, 3)
                                    for _ in range(args.repeats)])
        rows.append({"datapoints_per_call": per_call, **{
            "{}_us_per_datapoint".format(e): best[e]["wall_s_per_call"] / per_call * 1e6 for e in best}, **{
            "{}_consumer_cpu_us_per_datapoint".format(e): best[e]["consumer_cpu_s_per_call"] / per_call * 1e6
            for e in best}})
    return rows


def run_cpu_map(args, workers: int) -> dict:
    per_datapoint = bench_scaling.calibrate()
    func = CpuMap(bench_scaling.WORK["rounds"])
    best = {}
    for engine in ("processes", "ray"):
        rounds = [measure(engine, bench_scaling.Indices(10 ** 9), workers, func, None, args.cpu_datapoints, 5)
                  for _ in range(args.repeats)]
        best[engine] = best_of(rounds)
        bench_scaling._check_mapped(best[engine]["last"])
    return {"map_ms_per_datapoint": per_datapoint * 1e3,
            **{"{}_datapoints_per_s".format(e): 1 / best[e]["wall_s_per_call"] for e in best}}


def run_jpeg(args, workers: int) -> list:
    import synthetic_images
    from image_pipeline import DecodeAndAugment, list_image_folder

    cache = os.path.join(tempfile.gettempdir(), "inputpipe-bench-jpeg")
    rows = []
    for label, stored, crop, per_class in args.jpeg_settings:
        root = synthetic_images.ensure_dataset(os.path.join(cache, "{}px-{}".format(stored, per_class)),
                                               num_classes=10, images_per_class=per_class, image_size=stored)
        items = list_image_folder(root).items()
        best = {}
        for engine in ("processes", "ray"):
            best[engine] = best_of([measure(engine, _endless(items), workers, DecodeAndAugment(crop, "fail"),
                                            BATCH_SIZE, args.batches, 2) for _ in range(args.repeats)])
            images, labels = best[engine]["last"]
            assert images.shape == (BATCH_SIZE, crop, crop, 3) and images.dtype == np.float32, images.shape
            assert labels.shape == (BATCH_SIZE,), labels.shape
        rows.append({"setting": label, "batch_mb": BATCH_SIZE * crop * crop * 3 * 4 / 1e6, **{
            "{}_images_per_s".format(e): BATCH_SIZE / best[e]["wall_s_per_call"] for e in best}, **{
            "{}_consumer_cpu_ms_per_batch".format(e): best[e]["consumer_cpu_s_per_call"] * 1e3 for e in best}})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="processes / actors (Ray gets this many CPUs)")
    parser.add_argument("--datapoints", type=int, default=4000, help="datapoints per overhead measurement")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--cpu-datapoints", type=int, default=600)
    parser.add_argument("--batches", type=int, default=30, help="timed JPEG batches per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny counts, 1 round")
    parser.add_argument("--out", default=None, help="JSON path (default results/ray.json; --quick: temp)")
    args = parser.parse_args()
    args.jpeg_settings = JPEG_SETTINGS
    if args.quick:
        args.datapoints, args.batch_sizes, args.cpu_datapoints, args.batches, args.repeats = 200, [16], 20, 2, 1
        args.jpeg_settings = [(label, stored, crop, 10) for label, stored, crop, _ in JPEG_SETTINGS]
    out = args.out or (os.path.join(tempfile.gettempdir(), "ray-quick.json") if args.quick
                       else os.path.join(HERE, "results", "ray.json"))

    import ray
    from tabulate import tabulate

    start_local_ray(num_cpus=args.workers)     # one instance for every Ray row, started before timing
    try:
        overhead = run_overhead(args, args.workers)
        cpu = run_cpu_map(args, args.workers)
        jpeg = run_jpeg(args, args.workers)
    finally:
        ray.shutdown()

    n = args.workers
    print()
    print(tabulate([[r["datapoints_per_call"], "{:.0f}".format(r["processes_us_per_datapoint"]),
                     "{:.0f}".format(r["ray_us_per_datapoint"]),
                     "{:.1f}".format(r["ray_us_per_datapoint"] / r["processes_us_per_datapoint"]),
                     "{:.0f}".format(r["processes_consumer_cpu_us_per_datapoint"]),
                     "{:.0f}".format(r["ray_consumer_cpu_us_per_datapoint"])] for r in overhead],
                   headers=["datapoints per call (x{} workers)".format(n), "processes us/dp", "Ray us/dp",
                            "Ray / processes", "processes consumer CPU us/dp", "Ray consumer CPU us/dp"],
                   tablefmt="github"))
    print()
    print(tabulate([["~{:.1f} ms numpy map, x{}".format(cpu["map_ms_per_datapoint"], n),
                     "{:.0f}".format(cpu["processes_datapoints_per_s"]), "{:.0f}".format(cpu["ray_datapoints_per_s"]),
                     "{:.2f}".format(cpu["ray_datapoints_per_s"] / cpu["processes_datapoints_per_s"])]],
                   headers=["CPU-bound map", "processes dp/s", "Ray dp/s", "Ray / processes"], tablefmt="github"))
    print()
    print(tabulate([[r["setting"] + ", x{}".format(n), "{:.0f}".format(r["processes_images_per_s"]),
                     "{:.0f}".format(r["ray_images_per_s"]),
                     "{:.2f}".format(r["ray_images_per_s"] / r["processes_images_per_s"]),
                     "{:.2f}".format(r["processes_consumer_cpu_ms_per_batch"]),
                     "{:.2f}".format(r["ray_consumer_cpu_ms_per_batch"])] for r in jpeg],
                   headers=["JPEG pipeline, batches of 64 made in the workers", "processes img/s", "Ray img/s",
                            "Ray / processes", "processes consumer CPU ms/batch", "Ray consumer CPU ms/batch"],
                   tablefmt="github"))
    if args.quick:
        print("\n--quick: a smoke run of every path; these numbers are not measurements")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"benchmark": "ray", "quick": args.quick, "workers": n, "overhead": overhead, "cpu_map": cpu,
                   "jpeg": jpeg, "ray_version": ray.__version__,
                   "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                               "python": platform.python_version()}}, f, indent=2)
    print("wrote", out)


if __name__ == "__main__":
    main()
