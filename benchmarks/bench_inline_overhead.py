"""What a datapoint costs the consumer's thread when a parallel map runs at 0 workers.

At 0 workers (``set_num_workers(0)``, or ``Autoscale(min_workers=0)`` choosing it) the consumer's
thread maps each task itself, seeded and numbered as a worker would (a process map also reseeds
numpy's and Python's global generators for each datapoint and puts the consumer's states back).
This measures that cost on a map that does almost nothing (``[index, 1]``), so that what is left
is the library's own work per datapoint (strict maps, whose epochs are exact and resumable, and
continuous ones), against:

- ``MapData`` (a serial map: the floor);
- PyTorch's ``DataLoader(num_workers=0)`` over a map-style dataset with ``batch_size=None`` (its
  main process maps; no collation), where PyTorch is installed.

Each setting runs ``--size`` datapoints per round after a warm-up, the settings taking turns for
``--repeats`` rounds; the table shows the median (min-max) microseconds per datapoint and the
ratios to ``MapData`` and to the DataLoader.

``--map large`` maps with bench_autotune.py's "large outputs (2 MiB)" function instead (0.3 ms
of Python, calibrated here, and a 2 MiB array): what the library costs beside a real map, whose
work leaves the caches cold for it; the table then adds the microseconds beyond ``MapData`` and
``MapData``'s rate over each setting's (bench_autotune's target for "auto" there is 0.95).

    pip install -e ".[bench]" && python benchmarks/bench_inline_overhead.py [--map large]

Writes ``benchmarks/results/inline_overhead.json`` (``inline_overhead_large.json``).
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

from tabulate import tabulate  # noqa: E402

import autotune_work  # noqa: E402
import inputpipe.dataflow as ip  # noqa: E402

WARMUP = 500


def tiny(dp):
    return [dp[0], 1]


MAPS = {"tiny": tiny, "large": autotune_work.large_output}


def calibrate_large():
    """bench_autotune's cost of the large map: 0.3 ms of its Python spin on this machine."""
    best = min(_timed_spin() for _ in range(5))
    autotune_work.CALIBRATION["spin_per_ms"] = 100000 / (best * 1e3)
    autotune_work.COST_MS["large"] = 0.3


def _timed_spin():
    started = time.perf_counter()
    autotune_work.spin(100000, 0)
    return time.perf_counter() - started


def inputpipe_settings(size, func=tiny):
    """name -> a function that builds the flow (over ``size`` datapoints after the warm-up),
    ready to iterate."""
    def source():
        return ip.DataFromList([[i] for i in range(size + WARMUP)], shuffle=False)

    def at_zero(cls, strict):
        def build():
            df = cls(source(), 1, func, strict=strict)
            df.reset_state()
            df.set_num_workers(0)
            return df
        return build

    def serial():
        df = ip.MapData(source(), func)
        df.reset_state()
        return df

    settings = {"MapData": serial}
    for cls in (ip.MultiProcessMapData, ip.MultiThreadMapData):
        for strict in (True, False):
            settings["{} at 0 workers, strict={}".format(cls.__name__, strict)] = at_zero(cls, strict)
    return settings


def dataloader_setting(size):
    try:
        import torch.utils.data as tud
    except ImportError:
        return {}

    class Indexed(tud.Dataset):
        def __len__(self):
            return size + WARMUP

        def __getitem__(self, index):
            return tiny([index])

    return {"DataLoader(num_workers=0)": lambda: tud.DataLoader(Indexed(), batch_size=None, num_workers=0)}


def us_per_datapoint(name, build, size):
    flow = build()
    iterator = iter(flow)
    for _ in range(WARMUP):
        next(iterator)
    started = time.perf_counter()
    for _ in range(size):
        last = next(iterator)
    elapsed = time.perf_counter() - started
    index, value = last                  # the map's own result came out (each setting keeps the order)
    if int(index) != WARMUP + size - 1 or (not hasattr(value, "nbytes") and int(value) != 1):
        raise RuntimeError("{}: the last datapoint was {!r}, expected index {}".format(name, last, WARMUP + size - 1))
    close = getattr(flow, "close", None)
    if close is not None:
        close()
    return elapsed / size * 1e6


def fresh_flow_per_round(settings, size, repeats):
    """name -> us per datapoint of each round, a new flow each round, the settings taking turns."""
    times = {name: [] for name in settings}
    names = list(settings)
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(us_per_datapoint(name, settings[name], size))
    return times


def alternate_in_one_process(settings, size, repeats):
    """name -> us per datapoint of each round: every flow built once and warmed up, then rounds
    of ``size`` datapoints taking turns (a map whose work disturbs the caches is compared where
    the host's drift between rounds is least)."""
    flows = {name: build() for name, build in settings.items()}
    iterators = {name: iter(flow) for name, flow in flows.items()}
    for iterator in iterators.values():
        for _ in range(WARMUP):
            next(iterator)
    times = {name: [] for name in settings}
    names = list(settings)
    reached = {}
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            iterator = iterators[name]
            started = time.perf_counter()
            for _ in range(size):
                last = next(iterator)
            times[name].append((time.perf_counter() - started) / size * 1e6)
            reached[name] = int(last[0])
            del last                     # (not held while the next setting runs)
    for name in iterators:
        if reached[name] != WARMUP + size * repeats - 1:     # each setting gave its datapoints in order
            raise RuntimeError("{}: the last datapoint was {}, expected {}".format(
                name, reached[name], WARMUP + size * repeats - 1))
        close = getattr(flows[name], "close", None)
        if close is not None:
            close()
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20000, help="datapoints timed per round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (the settings take turns)")
    parser.add_argument("--map", choices=sorted(MAPS), default="tiny",
                        help="tiny: [index, 1], a new flow per round; large: bench_autotune's 2 MiB map, each flow "
                             "built once, rounds alternating (default --size 200 --repeats 40 then)")
    args = parser.parse_args()
    large = args.map == "large"
    if large:
        calibrate_large()
        args.size, args.repeats = (200, 40) if (args.size, args.repeats) == (20000, 5) else (args.size, args.repeats)
    if large:
        times = alternate_in_one_process(inputpipe_settings(args.size * args.repeats, MAPS[args.map]),
                                         args.size, args.repeats)
    else:
        times = fresh_flow_per_round(dict(inputpipe_settings(args.size), **dataloader_setting(args.size)),
                                     args.size, args.repeats)
    names = list(times)
    median = {name: statistics.median(values) for name, values in times.items()}
    loader = median.get("DataLoader(num_workers=0)")
    serial = median["MapData"]
    if large:
        # (the fastest rounds too: on a noisy host the least disturbed round is nearest the cost)
        fastest = min(times["MapData"])
        rows = [[name, "{:.1f} ({:.1f}-{:.1f})".format(median[name], min(times[name]), max(times[name])),
                 "{:.1f}".format(median[name] - serial), "{:.3f}".format(serial / median[name]),
                 "{:.3f}".format(fastest / min(times[name]))] for name in names]
        headers = ["setting", "us per datapoint, median (min-max)", "us beyond MapData", "MapData's time / its",
                   "the same, fastest rounds"]
    else:
        rows = [[name, "{:.1f} ({:.1f}-{:.1f})".format(median[name], min(times[name]), max(times[name])),
                 "{:.1f}".format(median[name] / serial),
                 "{:.2f}".format(median[name] / loader) if loader else "-"] for name in names]
        headers = ["setting", "us per datapoint, median (min-max)", "/ MapData", "/ DataLoader"]
    print(tabulate(rows, headers=headers, tablefmt="github"))
    report = {"benchmark": "inline_overhead", "args": vars(args), "us_per_datapoint": times,
              "median_us_per_datapoint": median,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "load": os.getloadavg()}}
    path = os.path.join(HERE, "results", "inline_overhead{}.json".format("_large" if large else ""))
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print("wrote {}".format(path))


if __name__ == "__main__":
    main()
