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
"""
import argparse
import json
import os
import platform
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "ipc.json"))
    args = parser.parse_args()

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
