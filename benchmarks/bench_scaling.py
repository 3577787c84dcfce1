"""Scaling of a CPU-bound map over 1 and 2 worker processes, against PyTorch and tensorpack.

The map does about 5 ms of single-threaded numpy work per datapoint (calibrated at start) and
returns a small result, so the work, not the transfer, is measured. The first row splits the same
work over plain processes that transfer nothing: the ceiling this machine allows at the time of
the run (other load on a shared machine shows there first). Loaders, each with 1 and 2 worker
processes: inputpipe's ``MultiProcessMapData`` (``strict=True``), PyTorch's
``DataLoader`` (map-style dataset, ``batch_size=None``) and tensorpack 0.11's
``MultiProcessMapDataZMQ``. Each loader maps ``--datapoints`` datapoints after a warm-up; the
loaders take turns for ``--repeats`` rounds and the best round of each is reported. BLAS and
OpenMP threads are limited to one so that a worker uses one core.

    pip install -e ".[bench]" && python benchmarks/bench_scaling.py

Prints a table and writes ``benchmarks/results/scaling.json``.
"""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
from tabulate import tabulate  # noqa: E402

from inputpipe.dataflow import DataFlow, MultiProcessMapData  # noqa: E402

WORK = {"rounds": 1}
WARMUP = 10


def cpu_work(index):
    """About 5 ms of single-threaded numpy work; returns a small datapoint."""
    x = np.full((128, 128), (index % 7) / 7.0)
    for _ in range(WORK["rounds"]):
        x = np.sin(x) * 0.5 + np.cos(x) * 0.5
    return [index, float(x.sum())]


def calibrate(target_seconds=0.005):
    WORK["rounds"] = 1
    start = time.perf_counter()
    for i in range(20):
        cpu_work(i)
    per_round = (time.perf_counter() - start) / 20
    WORK["rounds"] = max(1, int(round(target_seconds / per_round)))
    start = time.perf_counter()
    for i in range(20):
        cpu_work(i)
    return (time.perf_counter() - start) / 20


class Indices(DataFlow):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield [i]


def map_datapoint(dp):
    return cpu_work(dp[0])


def _time(iterator, count):
    for _ in range(WARMUP):
        next(iterator)
    start = time.perf_counter()
    for _ in range(count - 1):
        next(iterator)
    last = next(iterator)
    elapsed = time.perf_counter() - start
    _check_mapped(last)
    return elapsed


def _check_mapped(datapoint):
    """A loader's output must be the map's result for its index: the work was really done."""
    index, value = int(datapoint[0]), float(datapoint[1])
    expected = cpu_work(index)[1]
    if value != expected:
        raise AssertionError("datapoint {} came back as {} but the map gives {}: the loader did not run the "
                             "same work".format(index, value, expected))


def _bare_worker(start_event, count, done):
    start_event.wait()
    for i in range(count):
        cpu_work(i)
    done.put(None)


def time_bare(workers, count):
    """The same work split over plain processes with no data transfer: the machine's ceiling."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    start_event, done = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_bare_worker, args=(start_event, count // workers, done)) for _ in range(workers)]
    for proc in procs:
        proc.start()
    begin = time.perf_counter()
    start_event.set()
    for _ in procs:
        done.get()
    elapsed = time.perf_counter() - begin
    for proc in procs:
        proc.join()
    return elapsed


def time_inputpipe(workers, count):
    df = MultiProcessMapData(Indices(10 ** 9), workers, map_datapoint, strict=True)
    df.reset_state()
    with df:
        return _time(iter(df), count)


def time_torch(workers, count):
    from torch.utils.data import DataLoader, Dataset

    class Work(Dataset):
        def __len__(self):
            return 10 ** 9

        def __getitem__(self, index):
            return cpu_work(index)

    iterator = iter(DataLoader(Work(), batch_size=None, num_workers=workers))
    try:
        return _time(iterator, count)
    finally:
        iterator._shutdown_workers()


def time_tensorpack(workers, count):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tensorpack.dataflow import DataFlow as TPDataFlow
        from tensorpack.dataflow import MultiProcessMapDataZMQ

    class TPIndices(TPDataFlow):
        def __iter__(self):
            i = 0
            while True:
                yield [i]
                i += 1

    df = MultiProcessMapDataZMQ(TPIndices(), workers, map_datapoint)
    df.reset_state()
    try:
        return _time(iter(df), count)
    finally:
        df.__del__()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datapoints", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "scaling.json"))
    args = parser.parse_args()

    per_datapoint = calibrate()
    print("map work: {:.2f} ms per datapoint in this process".format(per_datapoint * 1000))
    loaders = [("bare processes, no transfer (ceiling)", time_bare),
               ("inputpipe MultiProcessMapData", time_inputpipe), ("PyTorch DataLoader", time_torch),
               ("tensorpack MultiProcessMapDataZMQ", time_tensorpack)]
    best = {(name, w): float("inf") for name, _ in loaders for w in (1, 2)}
    for round_ in range(args.repeats):
        for workers in (1, 2):
            for name, run in loaders:
                best[name, workers] = min(best[name, workers], run(workers, args.datapoints))
                print("round {} {} x{}: {:.0f} datapoints/s".format(
                    round_, name, workers, args.datapoints / best[name, workers]), flush=True)
    rate = {key: args.datapoints / seconds for key, seconds in best.items()}
    ours = "inputpipe MultiProcessMapData"
    rows = []
    for name, _ in loaders:
        rows.append([name, "{:.0f}".format(rate[name, 1]), "{:.0f}".format(rate[name, 2]),
                     "{:.2f}".format(rate[name, 2] / rate[name, 1]),
                     "{:.2f}".format(rate[ours, 2] / rate[name, 2])])
    print()
    print(tabulate(rows, headers=["loader (~5 ms numpy map)", "1 proc (dp/s)", "2 procs (dp/s)",
                                  "2 vs 1 proc", "inputpipe / this (2 procs)"], tablefmt="github"))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "scaling", "map_ms_per_datapoint": per_datapoint * 1000,
                   "datapoints": args.datapoints, "repeats": args.repeats,
                   "datapoints_per_s": {"{} x{}".format(name, w): r for (name, w), r in rate.items()},
                   "speedup_2_vs_1": {name: rate[name, 2] / rate[name, 1] for name, _ in loaders},
                   "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                               "python": platform.python_version()}}, f, indent=2)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
