"""Make the tensorpack 0.11 dataset files that tests/test_tensorpack_files.py reads.

Run with the Python that has tensorpack 0.11 (here /opt/tpvenv/bin/python), from this directory:

    /opt/tpvenv/bin/python make.py

Each file holds the datapoints of ``datapoints()``; the tests rebuild the same list and compare.
Serializer choice follows tensorpack: TENSORPACK_SERIALIZE=msgpack (msgpack-numpy records) or
pickle (0.11's default), set before tensorpack is imported, so each serializer runs in its own
process.
"""
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def datapoints():
    """Eight small datapoints covering the component types tensorpack users store."""
    points = []
    for i in range(8):
        points.append([
            np.arange(12, dtype=np.float32).reshape(3, 4) * i,
            np.uint8(i) + np.arange(5, dtype=np.uint8),
            i,
            np.int64(-i),
            "label-{}".format(i),
            np.array(["ab", "", "héllo"[:i % 5]]),
            np.array([b"x\x00y", b""]),
            np.array(i * 0.5, dtype=np.float64),
            np.bool_(i % 2),
        ])
    return points


def main(kind):
    from tensorpack.dataflow import DataFromList, LMDBSerializer, NumpySerializer, TFRecordSerializer

    df = DataFromList(datapoints(), shuffle=False)
    if kind in ("msgpack", "pickle"):
        LMDBSerializer.save(df, os.path.join(HERE, "tp_{}.lmdb".format(kind)))
        TFRecordSerializer.save(df, os.path.join(HERE, "tp_{}.tfrecord".format(kind)))
    elif kind == "npz":
        # tensorpack 0.11's NumpySerializer.save calls np.object, which numpy >= 1.24 removed; this is
        # the file it writes (savez_compressed of an object array of the datapoints, pickled).
        try:
            NumpySerializer.save(df, os.path.join(HERE, "tp.npz"))
        except AttributeError:
            buffer = np.empty(len(datapoints()), dtype=object)
            buffer[:] = datapoints()
            np.savez_compressed(os.path.join(HERE, "tp.npz"), buffer=buffer)
    elif kind == "hdf5":
        from tensorpack.dataflow import HDF5Serializer
        numeric = DataFromList([[dp[0], dp[2]] for dp in datapoints()], shuffle=False)
        HDF5Serializer.save(numeric, os.path.join(HERE, "tp.h5"), ["images", "labels"])


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        for kind in ("msgpack", "pickle", "npz", "hdf5"):
            env = dict(os.environ, TENSORPACK_SERIALIZE=kind if kind in ("msgpack", "pickle") else "msgpack")
            subprocess.check_call([sys.executable, __file__, kind], env=env)
        for name in os.listdir(HERE):
            if name.endswith("-lock"):
                os.remove(os.path.join(HERE, name))
