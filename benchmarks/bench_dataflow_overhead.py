"""DataFlow per-datapoint overhead: inputpipe vs tensorpack 0.11's dataflow, in the same run.

The pipeline is ``DataFromList`` (100k small datapoints: a float32 array of shape (4,) and a
python int) -> 5 x ``MapData`` (each builds a new datapoint) -> ``BatchData(64)``. The same map
functions run on both sides, so the difference is the library's own work per datapoint. Each
configuration is timed over several full epochs per library, alternating libraries, and the
best and median epoch times are compared: ratio = inputpipe time / tensorpack time (target
<= 1.0). The best epoch is the least disturbed by other processes on the machine.

    pip install -e ".[bench]" && python benchmarks/bench_dataflow_overhead.py

Prints a table and writes ``benchmarks/results/dataflow_overhead.json``.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from tabulate import tabulate  # noqa: E402

import inputpipe.dataflow as ip  # noqa: E402

BATCH_SIZE = 64
NUM_MAPS = 5
# numpy < 1.24 aliases of builtins that numpy 2 no longer has.
REMOVED_NUMPY_ALIASES = {"object": object, "bool": bool, "int": int, "float": float, "complex": complex, "str": str}


def import_tensorpack():
    """tensorpack.dataflow, and the workarounds this needed (a list of strings).

    tensorpack 0.11 imports TensorFlow and, in a few modules, numpy names removed in numpy 2
    (``np.object``, ``np.sctypes``). The pipeline measured here uses none of them; if the import
    itself fails on such a name, the missing alias is set on numpy before importing, and that is
    reported in the output.
    """
    workarounds = []
    for _ in range(3):
        try:
            import tensorpack.dataflow as tp
            return tp, workarounds
        except AttributeError as err:  # e.g. "module 'numpy' has no attribute 'object'"
            name = str(err).rsplit("'", 2)[-2]
            if name not in REMOVED_NUMPY_ALIASES:
                raise
            setattr(np, name, REMOVED_NUMPY_ALIASES[name])
            workarounds.append("set np.{0} = {0} before importing tensorpack".format(name))
            for module in [m for m in sys.modules if m.startswith("tensorpack")]:
                del sys.modules[module]
    raise RuntimeError("could not import tensorpack.dataflow: {}".format(workarounds))


def make_datapoints(n: int):
    rng = np.random.RandomState(0)
    return [[rng.rand(4).astype(np.float32), int(i % 10)] for i in range(n)]


def add_one(dp):
    return [dp[0], dp[1] + 1]


def build(lib, datapoints, shuffle: bool):
    df = lib.DataFromList(datapoints, shuffle=shuffle)
    for _ in range(NUM_MAPS):
        df = lib.MapData(df, add_one)
    df = lib.BatchData(df, BATCH_SIZE)
    df.reset_state()
    return df


def time_epoch(df) -> float:
    started = time.perf_counter()
    batches = 0
    for _ in df:
        batches += 1
    elapsed = time.perf_counter() - started
    assert batches == len(df), (batches, len(df))
    return elapsed


def check_same_output(ip_df, tp_df) -> None:
    """Both libraries produce the same values (label dtype differs: int64 here, int32 there)."""
    for mine, theirs in zip(ip_df, tp_df):
        np.testing.assert_array_equal(mine[0], theirs[0])
        np.testing.assert_array_equal(mine[1], theirs[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="datapoints per epoch")
    parser.add_argument("--repeats", type=int, default=9, help="timed epochs per library and configuration")
    args = parser.parse_args()

    tp, workarounds = import_tensorpack()
    for text in workarounds:
        print("workaround:", text)
    datapoints = make_datapoints(args.size)
    check_same_output(build(ip, datapoints, False), build(tp, datapoints, False))

    rows, results = [], []
    for shuffle in (False, True):
        flows = {"inputpipe": build(ip, datapoints, shuffle), "tensorpack": build(tp, datapoints, shuffle)}
        times = {name: [] for name in flows}
        for df in flows.values():
            time_epoch(df)  # warm-up epoch
        for _ in range(args.repeats):
            for name, df in flows.items():
                times[name].append(time_epoch(df))
        median = {name: statistics.median(t) for name, t in times.items()}
        best = {name: min(t) for name, t in times.items()}
        ratio_best = best["inputpipe"] / best["tensorpack"]
        ratio_median = median["inputpipe"] / median["tensorpack"]
        label = "DataFromList(shuffle={}) -> {} x MapData -> BatchData({})".format(shuffle, NUM_MAPS, BATCH_SIZE)
        rows.append([label,
                     "{:.3f}".format(best["inputpipe"]), "{:.3f}".format(best["tensorpack"]),
                     "{:.2f}".format(best["inputpipe"] / args.size * 1e6),
                     "{:.2f}".format(best["tensorpack"] / args.size * 1e6),
                     "{:.3f}".format(ratio_best), "{:.3f}".format(ratio_median)])
        results.append({"pipeline": label, "shuffle": shuffle, "seconds": times,
                        "median_seconds": median, "best_seconds": best,
                        "ratio_best": ratio_best, "ratio_median": ratio_median})

    headers = ["pipeline ({} datapoints/epoch)".format(args.size), "inputpipe s/epoch", "tensorpack s/epoch",
               "inputpipe µs/dp", "tensorpack µs/dp", "ratio (best)", "ratio (median)"]
    print(tabulate(rows, headers=headers, tablefmt="github"))
    print("times: best of {} epochs; ratio = inputpipe time / tensorpack time (target <= 1.0), of the "
          "best and of the median epoch".format(args.repeats))

    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", "dataflow_overhead.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({
            "benchmark": "dataflow_overhead",
            "command": "python benchmarks/bench_dataflow_overhead.py" + "".join(
                " {}".format(a) for a in sys.argv[1:]),
            "size": args.size, "batch_size": BATCH_SIZE, "num_maps": NUM_MAPS, "repeats": args.repeats,
            "tensorpack_workarounds": workarounds,
            "python": platform.python_version(), "numpy": np.__version__,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "results": results,
        }, f, indent=2)
    print("wrote", os.path.relpath(out, REPO))


if __name__ == "__main__":
    main()
