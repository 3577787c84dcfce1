"""The work of bench_autotune.py's pipelines: map functions of fixed cost (calibrated by the
driver on an idle core and passed in, so contention shows up as lost throughput), each giving a
value the driver checks (the work was really done), and the consumers.

- ``spin``: pure-Python arithmetic that holds the GIL;
- ``time.sleep``: a wait (a read from network storage), the GIL released;
- an OpenCV blur: C code that releases the GIL;
- ``np.full`` of 2 MiB: a large output;
- a cost drawn per datapoint from a heavy-tailed (Pareto) law, the same for an index every run;
- a cost that changes with time: phases of the run (cheap, expensive, cheap).
"""
import math
import queue
import random
import threading
import time

import numpy as np

#: Iterations of spin() per ms and matmuls per ms on an idle core (calibrated by the driver).
CALIBRATION = {"spin_per_ms": 1.0, "matmul_per_ms": 1.0}
#: ms of work per call of each function (set from the pipeline, in the child, before any fork).
COST_MS = {}
#: The phases of a run whose cost changes: ``start`` (time.time() of the first phase's start, the
#: window's), ``seconds`` per phase and ``names`` of the phases in order (set in the child).
PHASES = {"start": 0.0, "seconds": 1.0, "names": ["cheap"]}
SLEEP_S = 0.005
LARGE_BYTES = 2 << 20
_IMAGE = np.random.default_rng(0).integers(0, 255, (256, 256, 3), dtype=np.uint8)


def spin(iterations, seed):
    """Fixed pure-Python CPU work (holds the GIL); the result depends on ``seed``."""
    total = int(seed)
    for i in range(iterations):
        total = (total * 31 + i) % 1000003
    return total


def iterations(name):
    return max(1, int(COST_MS[name] * CALIBRATION["spin_per_ms"]))


def slow(dp):
    return [dp[0], spin(iterations("slow"), dp[0])]


def cheap(dp):
    return [dp[0], spin(iterations("cheap"), dp[0])]


def io_like(dp):
    time.sleep(SLEEP_S)
    return [dp[0], spin(iterations("io_like"), dp[0])]


def expensive(dp):
    return [dp[0], spin(iterations("expensive"), dp[0])]


def first(dp):
    return [dp[0], spin(iterations("first"), dp[0])]


def second(dp):
    return [dp[0], spin(iterations("second"), dp[1])]


def fetch_and_decode(dp):
    """Waits (a read from network storage) then computes in Python: ``wait`` ms, ``cpu`` ms."""
    time.sleep(COST_MS["wait"] / 1000.0)
    return [dp[0], spin(iterations("cpu"), dp[0])]


def large_output(dp):
    """A little Python and a 2 MiB array (an image, a feature map)."""
    value = spin(iterations("large"), dp[0])
    return [dp[0], np.full(LARGE_BYTES, value % 251, np.uint8)]


def blur(dp):
    """An OpenCV filter (C code that releases the GIL) of ``blur_repeats`` passes."""
    import cv2

    image = _IMAGE
    for _ in range(int(COST_MS["blur_repeats"])):
        image = cv2.GaussianBlur(image, (9, 9), 0)
    return [dp[0], int(image[dp[0] % 256, 7, 0])]


def heavy_tail_ms(index):
    """The cost of datapoint ``index``: Pareto with shape 1.5 from ``tail_min`` ms, capped at
    ``tail_max`` ms (mean about 3 x the minimum); the same for an index every run."""
    draw = random.Random(index * 7919 + 17).random()
    return min(COST_MS["tail_max"], COST_MS["tail_min"] / (1.0 - draw) ** (1 / 1.5))


def heavy_tailed(dp):
    count = max(1, int(heavy_tail_ms(dp[0]) * CALIBRATION["spin_per_ms"]))
    return [dp[0], spin(count, dp[0])]


def phase_at(moment):
    """The name of the phase at ``moment`` (time.time()); the first before the start, the last after."""
    k = int(math.floor((moment - PHASES["start"]) / PHASES["seconds"]))
    return PHASES["names"][max(0, min(k, len(PHASES["names"]) - 1))]


def changing(dp):
    """Cheap (``cheap_cpu`` ms of Python after ``cheap_wait`` ms of waiting) or expensive
    (``dear_cpu`` ms of Python, no wait), by the phase of the run."""
    if phase_at(time.time()) == "expensive":
        return [dp[0], spin(iterations("dear_cpu"), dp[0])]
    time.sleep(COST_MS["cheap_wait"] / 1000.0)
    return [dp[0], spin(iterations("cheap_cpu"), dp[0])]


FUNCTIONS = {f.__name__: f for f in (slow, cheap, io_like, expensive, first, second, fetch_and_decode, large_output,
                                     blur, heavy_tailed, changing)}


def check(names, dp):
    """The value the last datapoint must carry after the maps ``names``, or None when it does;
    an error text otherwise."""
    index, got = int(dp[0]), dp[1]
    name = names[-1]
    if name == "large_output":
        want = spin(iterations("large"), index) % 251
        ok = got.shape == (LARGE_BYTES,) and int(got[0]) == want == int(got[-1])
        return None if ok else "datapoint {}: not the 2 MiB array of {}".format(index, want)
    if name == "blur":
        return None
    if name == "changing":
        options = {spin(iterations(c), index) for c in ("dear_cpu", "cheap_cpu")}
        return None if int(got) in options else "datapoint {} came as {}".format(index, got)
    if name == "heavy_tailed":
        want = spin(max(1, int(heavy_tail_ms(index) * CALIBRATION["spin_per_ms"])), index)
        return None if int(got) == want else "datapoint {} came as {}, the map gives {}".format(index, got, want)
    value = index
    for each in names:
        key = "cpu" if each == "fetch_and_decode" else each
        value = spin(iterations(key), value)
    return None if int(got) == value else "datapoint {} came as {}, the map gives {}".format(index, got, value)


# ---------------------------------------------------------------------------------- consumers

def consume_nothing(dp):
    pass


def consume_python(dp):
    spin(max(1, int(COST_MS["consumer"] * CALIBRATION["spin_per_ms"])), 0)


class Trainer:
    """A train step that keeps ~1.5 cores busy: numpy matmuls (the GIL released) for the step's
    ms in this thread and for half of it in a helper thread."""

    def __init__(self):
        self.matrix = np.random.default_rng(0).random((256, 256), dtype=np.float32)
        count = max(1, int(COST_MS["consumer"] * CALIBRATION["matmul_per_ms"]))
        self.main_count, self.helper_count = count, max(1, count // 2)
        self.tasks, self.done = queue.Queue(), queue.Queue()
        threading.Thread(target=self._helper, daemon=True).start()

    def _matmuls(self, count):
        for _ in range(count):
            self.matrix @ self.matrix

    def _helper(self):
        while True:
            count = self.tasks.get()
            if count is None:
                return
            self._matmuls(count)
            self.done.put(None)

    def __call__(self, dp):
        self.tasks.put(self.helper_count)
        self._matmuls(self.main_count)
        self.done.get()

    def close(self):
        self.tasks.put(None)


def make_consumer(kind):
    if kind == "python":
        return consume_python
    if kind == "trainer":
        return Trainer()
    return consume_nothing
