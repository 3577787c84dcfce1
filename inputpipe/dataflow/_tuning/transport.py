"""What moving a map's datapoints through a worker process costs, measured: the consumer's CPU
to send a datapoint and take its result, and the worker's CPU to take the datapoint and send the
result (the wire format, the pipe, the shared memory: a 2 MiB array costs the consumer little, as
it arrives in shared memory, and the worker a copy). Used by the tuner's model of processes
(:mod:`.model`); private.

One worker process echoes each map's sample (a datapoint it took and what it gave, kept by
:class:`~.chain.TimedFunc`): it receives the datapoint and sends back the result, first
for tiny messages (the cost of a message of any size), then for each map's sample.

Example::

    moves, problems = measure([func.sample for func in timed])
    moves[0].consumer, moves[0].worker        # seconds per datapoint
"""
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from ...utils import resources, serialize
from ...utils.logger import get_logger
from .chain import nbytes
from ..base import DataFlow
from ..parallel_map import MultiProcessMapData

__all__ = ["Transport", "measure"]

logger = get_logger(__name__)

#: Seconds of echoes timed per map (fewer for large datapoints, at least 4 echoes).
SECONDS_PER_MAP = 0.04
#: Samples larger than this are not echoed (their cost stays the model's guess per byte).
MAX_SAMPLE_BYTES = 256 << 20
#: Echoes not timed first (the worker's pages for the results fill).
WARM_ECHOES = 3


@dataclass
class Transport:
    """Seconds per datapoint of a map in processes: the ``consumer``'s CPU (send it, take its
    result) and the ``worker``'s (take it, send the result); of each, the part any message costs
    (``fixed_consumer``, ``fixed_worker``: measured with tiny ones)."""

    consumer: float
    worker: float
    fixed_consumer: float
    fixed_worker: float


class _Tasks(DataFlow):
    """The echoes of one round: ``items`` (replaced between rounds)."""

    def __init__(self) -> None:
        self.items: List[Any] = []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)


class _Echo:
    """The worker's function: ``[k, datapoint]`` -> the result kept for map ``k`` (``[0]`` for -1)."""

    __name__ = "echo"

    def __init__(self, results: Sequence[Any]):
        self.results = list(results)

    def __call__(self, task: Any) -> Any:
        return [0] if task[0] < 0 else self.results[task[0]]


def _problem(sample: Any) -> Optional[str]:
    """Why the datapoints cannot cross to a worker process (None when they can)."""
    for what, value in (("a datapoint it takes", sample[0]), ("a datapoint it gives", sample[1])):
        try:
            serialize.dumps_frames(value)
        except (TypeError, ValueError) as err:
            return "{} cannot cross to a worker process ({})".format(what, err)
    return None


def _round(flow: MultiProcessMapData, tasks: _Tasks, items: List[Any]) -> Tuple[float, float]:
    """Echo ``items`` (a few untimed first); ``(consumer CPU, worker CPU)`` seconds per item."""
    tasks.items = items[:WARM_ECHOES]
    for _ in flow:
        pass
    pid = flow.worker_pids[0]
    tasks.items = items
    worker0, consumer0 = resources.process_schedstat(pid), time.thread_time()
    for _ in flow:
        pass
    consumer, worker1 = time.thread_time() - consumer0, resources.process_schedstat(pid)
    worker = worker1[0] - worker0[0] if worker0 is not None and worker1 is not None else 0.0
    return consumer / len(items), max(0.0, worker) / len(items)


def _count(size: float) -> int:
    guess = 50e-6 + 0.5e-9 * size              # a first guess of an echo's time, to time about 40 ms
    return max(4, min(200, int(SECONDS_PER_MAP / guess)))


def measure(samples: Sequence[Optional[tuple]]) -> Tuple[List[Optional[Transport]], List[Optional[str]]]:
    """``(transports, problems)``, one of each per sample: the measured costs (None without a
    sample, when it cannot cross, or when the echo failed) and why a map cannot run in processes
    (None when it can)."""
    problems = [None if s is None else _problem(s) for s in samples]
    wanted = [k for k, s in enumerate(samples) if s is not None and problems[k] is None
              and nbytes(s[0]) + nbytes(s[1]) <= MAX_SAMPLE_BYTES]
    found: List[Optional[Transport]] = [None] * len(samples)
    if not wanted or not hasattr(os, "fork"):
        return found, problems
    tasks = _Tasks()
    flow = MultiProcessMapData(tasks, 1, _Echo([s[1] if s is not None else None for s in samples]),
                               strict=True, ordered=True, buffer_size=4)
    try:
        flow.reset_state()
        fixed = _round(flow, tasks, [[-1, 0]] * 200)
        for k in wanted:
            sample = samples[k]
            assert sample is not None
            size = nbytes(sample[0]) + nbytes(sample[1])
            consumer, worker = _round(flow, tasks, [[k, sample[0]]] * _count(size))
            found[k] = Transport(max(consumer, fixed[0]), max(worker, fixed[1]), fixed[0], fixed[1])
    except Exception as err:  # noqa: BLE001 - the model then uses its fixed costs
        logger.debug("tune: the transport could not be measured: %s", err)
        found = [None] * len(samples)
    finally:
        flow.close()
    return found, problems
