"""Wire format speed: inputpipe.utils.serialize vs pickle protocol 5 and msgpack-numpy, in one run.

Two payloads:

- a batch: one uint8 array of shape (128, 224, 224, 3) (19.3 MB), as a worker sends it;
- small datapoints: a list of 1,000 datapoints ``[uint8 image (28, 28), int label, "name"]``,
  with random pixels and with flat ones (all 0: masks, padding, plain backgrounds; such bytes
  found a decoder's weak spot once, a search of the message's bytes that random ones end early).

Each codec encodes (dumps) and decodes (loads) each payload; the best of several repeats is
reported in GB/s and datapoints/s, with the ratio of the codec's time to inputpipe's ``dumps``/
``loads`` time (above 1.0: slower than inputpipe). Peers: ``pickle`` protocol 5 with in-band
buffers (one bytes object, as a single-frame socket or file needs), ``pickle`` protocol 5 with
out-of-band buffers (zero-copy, as multi-frame sockets use) and ``msgpack-numpy``. inputpipe is
measured as ``dumps``/``loads`` (one buffer) and ``dumps_frames``/``loads_frames`` (zero-copy
frames).

    pip install -e ".[bench]" && python benchmarks/bench_wire_format.py

Prints a table and writes ``benchmarks/results/wire_format.json``.
"""
import argparse
import gc
import json
import os
import pickle
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import msgpack  # noqa: E402
import numpy as np  # noqa: E402
from tabulate import tabulate  # noqa: E402

from inputpipe.utils import serialize  # noqa: E402


def make_payloads():
    rng = np.random.RandomState(0)
    batch = rng.randint(0, 256, size=(128, 224, 224, 3), dtype=np.uint8)
    small = [[rng.randint(0, 256, size=(28, 28), dtype=np.uint8), int(i % 10), "img%04d" % i]
             for i in range(1000)]
    flat = [[np.zeros((28, 28), np.uint8), int(i % 10), "img%04d" % i] for i in range(1000)]
    return {
        "batch 128x224x224x3 uint8": (batch, 1, batch.nbytes),
        "1,000 small datapoints": (small, len(small), sum(dp[0].nbytes for dp in small)),
        "1,000 small datapoints, flat images": (flat, len(flat), sum(dp[0].nbytes for dp in flat)),
    }


def pickle_oob_dumps(obj):
    buffers = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return [head] + [buf.raw() for buf in buffers]


def pickle_oob_loads(frames):
    return pickle.loads(frames[0], buffers=frames[1:])


def codecs():
    result = {
        "inputpipe dumps/loads": (serialize.dumps, serialize.loads),
        "inputpipe dumps_frames/loads_frames": (serialize.dumps_frames, serialize.loads_frames),
        "pickle 5 (in-band)": (lambda obj: pickle.dumps(obj, protocol=5), pickle.loads),
        "pickle 5 (out-of-band buffers)": (pickle_oob_dumps, pickle_oob_loads),
    }
    try:
        import msgpack_numpy
    except ImportError:
        print("msgpack-numpy is not installed (pip install -e '.[bench]'); skipping it", file=sys.stderr)
    else:
        result["msgpack-numpy"] = (
            lambda obj: msgpack.packb(obj, default=msgpack_numpy.encode, use_bin_type=True),
            lambda data: msgpack.unpackb(data, object_hook=msgpack_numpy.decode, raw=False),
        )
    return result


def best_time(fn, arg, min_seconds, repeats):
    """Best per-call time over ``repeats`` rounds, each calling ``fn`` for ~``min_seconds``."""
    fn(arg)
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn(arg)
        if time.perf_counter() - start >= min_seconds / 4 or calls >= 1 << 16:
            break
        calls *= 2
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        for _ in range(calls):
            fn(arg)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def check_round_trip(name, payload, decoded):
    first_in = payload if isinstance(payload, np.ndarray) else payload[0][0]
    first_out = decoded if isinstance(decoded, np.ndarray) else decoded[0][0]
    if not np.array_equal(first_in, first_out):
        raise AssertionError("{} did not round-trip the payload".format(name))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.3, help="time per repeat of one measurement")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "wire_format.json"))
    args = parser.parse_args()

    rows, records = [], []
    for payload_name, (payload, items, array_bytes) in make_payloads().items():
        reference = {}
        for codec_name, (dumps, loads) in codecs().items():
            encoded = dumps(payload)
            check_round_trip(codec_name, payload, loads(encoded))
            for op, fn, arg in (("dumps", dumps, payload), ("loads", loads, encoded)):
                seconds = best_time(fn, arg, args.seconds, args.repeats)
                reference.setdefault(op, seconds)  # the first codec is inputpipe dumps/loads
                record = {
                    "payload": payload_name, "codec": codec_name, "op": op, "seconds": seconds,
                    "gb_per_s": array_bytes / seconds / 1e9, "items_per_s": items / seconds,
                    "time_vs_inputpipe": seconds / reference[op],
                }
                records.append(record)
                rows.append([payload_name, codec_name, op, "%.3f" % (seconds * 1e3), "%.2f" % record["gb_per_s"],
                             "{:,.0f}".format(record["items_per_s"]), "%.3g" % record["time_vs_inputpipe"]])
    headers = ["payload", "codec", "op", "ms/call", "GB/s", "items/s", "time / inputpipe"]
    print(tabulate(rows, headers=headers, tablefmt="github"))

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({
            "benchmark": "wire_format",
            "command": "python benchmarks/bench_wire_format.py",
            "machine": {"python": platform.python_version(), "numpy": np.__version__,
                        "msgpack": ".".join(map(str, msgpack.version)), "cpus": os.cpu_count(),
                        "platform": platform.platform()},
            "results": records,
        }, f, indent=2)
    print("wrote", os.path.relpath(args.out))


if __name__ == "__main__":
    main()
