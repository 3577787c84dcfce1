"""IPC bandwidth: large numpy batches from one worker process to the consumer, against memcpy.

Every loader moves the same 19.3 MB uint8 batch (128x224x224x3) from one worker process to the
consumer, which takes each batch and drops it (as a training loop does after feeding it). The
worker yields one preallocated batch over and over, so only the transfer is measured. Peers in
the same run: single-thread memcpy (``np.copyto`` into a preallocated array, the reference),
memcpy into two preallocated arrays in turn (the cache footprint of any zero-copy transport:
the consumer holds one batch while the next is written),
PyTorch's ``DataLoader`` (``batch_size=None``, one worker) and tensorpack 0.11's
``MultiProcessRunnerZMQ`` (one worker). Each loader is timed over ``--batches`` batches after a
warm-up; the loaders take turns for ``--repeats`` rounds and the best round of each is reported.

    pip install -e ".[bench]" && python benchmarks/bench_ipc.py

Prints a table and writes ``benchmarks/results/ipc.json``.

``--small`` measures the other end: what one small result costs to move. A map of two workers
over a trivial function gives ``--datapoints`` results of two ints, then of two ints and a
32x32x3 uint8 image (3 KiB), through inputpipe's process map and, in the same run, its thread
map, PyTorch's ``DataLoader`` (a map-style dataset, ``batch_size=None``, two workers) and
tensorpack's ``MultiProcessMapDataZMQ`` where installed. Reported: results per second, the
consumer process' CPU per result (all its threads: sending the tasks, waiting, decoding) and
the CPU of consumer and workers together per result; median of ``--repeats`` rounds in turn.
Writes ``benchmarks/results/ipc_small.json``.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
from tabulate import tabulate  # noqa: E402

from inputpipe.dataflow import DataFlow, MultiProcessRunnerZMQ  # noqa: E402
from memcpy_reference import copy_seconds  # noqa: E402

SHAPE = (128, 224, 224, 3)
WARMUP = 5


class SameBatch(DataFlow):
    """An endless flow of one preallocated uint8 batch (made in ``reset_state``, in the worker)."""

    def __init__(self, count):
        self.count = count
        self.batch = None

    def __len__(self):
        return self.count

    def reset_state(self):
        self.batch = np.random.RandomState(0).randint(0, 256, size=SHAPE, dtype=np.uint8)

    def __iter__(self):
        for _ in range(self.count):
            yield [self.batch]


def time_memcpy(batches):
    src = np.random.RandomState(0).randint(0, 256, size=SHAPE, dtype=np.uint8)
    return batches * copy_seconds([src], [np.empty_like(src)], batches, warmup=WARMUP)


def time_memcpy_two_buffers(batches):
    """memcpy into two destinations in turn: a zero-copy consumer holds one batch while the
    worker writes the next, so two buffers is the least any such transport cycles through."""
    src = np.random.RandomState(0).randint(0, 256, size=SHAPE, dtype=np.uint8)
    return batches * copy_seconds([src], [np.empty_like(src), np.empty_like(src)], batches, warmup=WARMUP)


def _time_iterator(iterator, batches):
    for _ in range(WARMUP):
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(iterator)
    elapsed = time.perf_counter() - start
    assert batch[0].shape == SHAPE
    return elapsed


def time_inputpipe(batches):
    df = MultiProcessRunnerZMQ(SameBatch(10 ** 9), num_proc=1)
    df.reset_state()
    with df:
        return _time_iterator(iter(df), batches)


def time_torch(batches):
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    class Batches(IterableDataset):
        def __iter__(self):
            batch = np.random.RandomState(0).randint(0, 256, size=SHAPE, dtype=np.uint8)
            while True:
                # a new tensor each time, as a real loader makes: yielding one tensor over and over
                # would be moved to shared memory once and then sent for free
                yield [torch.from_numpy(batch)]

    loader = DataLoader(Batches(), batch_size=None, num_workers=1)
    iterator = iter(loader)
    try:
        return _time_iterator(iterator, batches)
    finally:
        iterator._shutdown_workers()


def time_tensorpack(batches):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tensorpack.dataflow import DataFlow as TPDataFlow
        from tensorpack.dataflow import MultiProcessRunnerZMQ as TPRunner

    class TPBatches(TPDataFlow):
        def reset_state(self):
            self.batch = np.random.RandomState(0).randint(0, 256, size=SHAPE, dtype=np.uint8)

        def __iter__(self):
            while True:
                yield [self.batch]

    df = TPRunner(TPBatches(), num_proc=1, hwm=50)
    df.reset_state()
    try:
        return _time_iterator(iter(df), batches)
    finally:
        df.__del__()


# ------------------------------------------------------------------ --small: the cost of one result

IMAGE = np.zeros((32, 32, 3), np.uint8)


def small_result(dp):
    return [dp[0], 7]


def small_result_with_image(dp):
    return [dp[0], 7, IMAGE]


class Indexes(DataFlow):
    def __init__(self, count):
        self.count = count

    def __len__(self):
        return self.count

    def __iter__(self):
        for index in range(self.count):
            yield [index]


def _children_cpu():
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def _time_small(make_iterator, datapoints, close):
    """(results/s, consumer CPU s, consumer + workers CPU s) over ``datapoints`` results after a warm-up."""
    iterator = make_iterator()
    try:
        for _ in range(WARMUP * 100):
            next(iterator)
        workers, cpu, start = _children_cpu(), time.process_time(), time.perf_counter()
        for _ in range(datapoints):
            result = next(iterator)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        workers = _children_cpu() - workers
        assert len(result) >= 2
        return datapoints / elapsed, cpu, cpu + workers
    finally:
        close()


def small_inputpipe(kind, func, datapoints):
    from inputpipe.dataflow import MultiProcessMapData, MultiThreadMapData

    make = MultiProcessMapData if kind == "processes" else MultiThreadMapData
    df = make(Indexes(10 ** 9), 2, func)
    df.reset_state()
    return _time_small(lambda: iter(df), datapoints, df.close)


def small_torch(func, datapoints):
    from torch.utils.data import DataLoader, Dataset

    class Mapped(Dataset):
        def __len__(self):
            return 10 ** 9

        def __getitem__(self, index):
            return func([index])

    loader = iter(DataLoader(Mapped(), batch_size=None, num_workers=2))
    return _time_small(lambda: loader, datapoints, loader._shutdown_workers)


def small_tensorpack(func, datapoints):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from tensorpack.dataflow import DataFlow as TPDataFlow
        from tensorpack.dataflow import MultiProcessMapDataZMQ as TPMap

    class TPIndexes(TPDataFlow):
        def __iter__(self):
            index = 0
            while True:
                yield [index]
                index += 1

    df = TPMap(TPIndexes(), num_proc=2, map_func=func)
    df.reset_state()
    return _time_small(lambda: iter(df), datapoints, df.__del__)


def _installed(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def main_small(args):
    payloads = [("two ints", small_result), ("two ints + 3 KiB image", small_result_with_image)]
    loaders = [("inputpipe MultiProcessMapData (2 processes)", lambda f, n: small_inputpipe("processes", f, n)),
               ("inputpipe MultiThreadMapData (2 threads)", lambda f, n: small_inputpipe("threads", f, n))]
    if _installed("torch"):
        loaders.append(("PyTorch DataLoader (2 workers)", small_torch))
    if _installed("tensorpack"):
        loaders.append(("tensorpack MultiProcessMapDataZMQ (2 processes)", small_tensorpack))
    runs = {(payload, name): [] for payload, _ in payloads for name, _ in loaders}
    for round_ in range(args.repeats):
        for payload, func in payloads:
            for name, run in loaders:            # in turn: the host's load hits every loader alike
                rate, consumer, total = run(func, args.datapoints)
                runs[payload, name].append((rate, consumer / args.datapoints * 1e6, total / args.datapoints * 1e6))
                print("round {} {} / {}: {:.0f}/s, consumer {:.1f} us a result, with the workers {:.1f}".format(
                    round_, payload, name, *runs[payload, name][-1]), flush=True)
    rows, results = [], {}
    for payload, _ in payloads:
        ours = statistics.median(r[0] for r in runs[payload, loaders[0][0]])
        for name, _ in loaders:
            rates, consumer, total = zip(*runs[payload, name])
            median = statistics.median(rates)
            results.setdefault(payload, {})[name] = {
                "results_per_s": median, "rates": rates, "consumer_us_per_result": statistics.median(consumer),
                "total_us_per_result": statistics.median(total)}
            rows.append([payload, name, "{:,.0f} ({:,.0f}-{:,.0f})".format(median, min(rates), max(rates)),
                         "{:.0f}".format(statistics.median(consumer)), "{:.0f}".format(statistics.median(total)),
                         "{:.2f}".format(ours / median)])
    print()
    print(tabulate(rows, headers=["result", "loader", "results/s median (min-max)", "consumer CPU us/result",
                                  "all CPU us/result", "inputpipe processes / this"], tablefmt="github"))
    out = args.out or os.path.join(HERE, "results", "ipc_small.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"benchmark": "ipc_small", "datapoints": args.datapoints, "repeats": args.repeats,
                   "results": results, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                                   "python": platform.python_version()}}, f, indent=2)
    print("wrote", out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="the cost of one small result (see the module doc)")
    parser.add_argument("--datapoints", type=int, default=20000, help="--small: results timed per run")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.small:
        return main_small(args)
    args.out = args.out or os.path.join(HERE, "results", "ipc.json")

    nbytes = int(np.prod(SHAPE))
    loaders = [("memcpy (np.copyto, 1 thread)", time_memcpy),
               ("memcpy into 2 buffers in turn", time_memcpy_two_buffers),
               ("inputpipe MultiProcessRunnerZMQ", time_inputpipe),
               ("PyTorch DataLoader", time_torch),
               ("tensorpack MultiProcessRunnerZMQ", time_tensorpack)]
    best = {name: float("inf") for name, _ in loaders}
    for round_ in range(args.repeats):       # rounds interleave the loaders, so load from other
        for name, run in loaders:            # processes on the machine hits all of them alike
            best[name] = min(best[name], run(args.batches))
            print("round {} {}: {:.2f} GB/s".format(round_, name, nbytes * args.batches / best[name] / 1e9), flush=True)
    results = {name: nbytes * args.batches / seconds / 1e9 for name, seconds in best.items()}

    memcpy = results["memcpy (np.copyto, 1 thread)"]
    ours = results["inputpipe MultiProcessRunnerZMQ"]
    rows = [[name, "{:.2f}".format(gbps), "{:.2f}".format(gbps / memcpy), "{:.2f}".format(ours / gbps)]
            for name, gbps in results.items()]
    print()
    print(tabulate(rows, headers=["loader (1 worker, 19.3 MB batches)", "GB/s", "x memcpy", "inputpipe / this"],
                   tablefmt="github"))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "ipc", "batch_shape": SHAPE, "batch_bytes": nbytes, "batches": args.batches,
                   "repeats": args.repeats, "gb_per_s": results,
                   "ratios": {"inputpipe_vs_memcpy": ours / memcpy,
                              "inputpipe_vs_torch": ours / results["PyTorch DataLoader"],
                              "inputpipe_vs_tensorpack": ours / results["tensorpack MultiProcessRunnerZMQ"]},
                   "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                               "python": platform.python_version()}}, f, indent=2)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
