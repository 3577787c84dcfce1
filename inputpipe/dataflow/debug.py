"""Inspection: PrintData shows what flows through, TestDataSpeed measures how fast.

Example::

    from inputpipe.dataflow import DataFromList, TestDataSpeed
    stats = TestDataSpeed(DataFromList([[i] for i in range(100)], shuffle=False), size=50).start()
    assert stats["datapoints"] == 50
"""
import itertools
import logging
import sys
import time
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

from ..utils.logger import get_logger
from ._core.helpers import close_iterators
from ._core.state import StatePlan, check_input_state
from .base import DataFlow, ProxyDataFlow, check_state

__all__ = ["PrintData", "TestDataSpeed"]

logger = get_logger(__name__)


def _report(text: str) -> None:
    """Show a report the user asked for (PrintData, TestDataSpeed): logged at INFO when the
    application configured logging (its levels decide), and written to stderr through a logging
    record when it did not (where INFO would be silent), as tensorpack shows them."""
    if logging.getLogger().handlers or logger.isEnabledFor(logging.INFO):
        logger.info("%s", text)
        return
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, "%s", (text,), None)
    _UNCONFIGURED_REPORT.handle(record)


class _StderrReport(logging.StreamHandler):
    """Formats a report record for ``sys.stderr`` as it is when the report is made."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("inputpipe: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


_UNCONFIGURED_REPORT = _StderrReport()

# ---------------------------------------------------------------------------------------------
# Inspection
# ---------------------------------------------------------------------------------------------

def _describe_tree(value: Any, label: Any, depth: int, max_depth: int, max_list: int) -> List[str]:
    indent = "  " * depth
    head = "{}{}: ".format(indent, label)
    if isinstance(value, np.ndarray):
        text = "ndarray:{} of shape {}".format(value.dtype, value.shape)
        if value.size and value.dtype.kind in "biuf":
            text += " in range [{}, {}]".format(value.min(), value.max())
        return [head + text]
    if isinstance(value, np.generic):
        return [head + "{} with value {}".format(value.dtype, value)]
    if isinstance(value, (bool, int, float, complex)):
        return [head + "{} with value {}".format(type(value).__name__, value)]
    if isinstance(value, (str, bytes)):
        shown = value if len(value) <= 40 else value[:40]
        return [head + "{} of len {}: {!r}{}".format(type(value).__name__, len(value), shown,
                                                     "..." if len(value) > 40 else "")]
    if isinstance(value, (list, tuple, dict)):
        lines = [head + "{} of len {}".format(type(value).__name__, len(value))]
        items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        if depth + 1 >= max_depth:
            if items:
                lines.append("  " * (depth + 1) + "...")
            return lines
        for key, sub in items[:max_list]:
            lines.extend(_describe_tree(sub, key, depth + 1, max_depth, max_list))
        if len(items) > max_list:
            lines.append("  " * (depth + 1) + "...")
        return lines
    return [head + type(value).__name__]


class PrintData(ProxyDataFlow):
    """Pass datapoints through unchanged, showing the structure, shapes, dtypes and value ranges
    of the first ``num`` datapoints after ``reset_state()``: on stderr when the application has
    not configured logging, otherwise logged at INFO (so its logging levels decide).

    ``max_depth`` limits how deep nested lists/dicts are described, ``max_list`` how many of
    their items.

    Example::

        df = PrintData(df, num=2, name="after augmentation")
    """

    def __init__(self, ds: DataFlow, num: int = 1, name: Optional[str] = None, max_depth: int = 3,
                 max_list: int = 3):
        super().__init__(ds)
        self.num = num
        self.name = name
        self.max_depth = max_depth
        self.max_list = max_list
        self._count = 0

    def reset_state(self) -> None:
        super().reset_state()
        self._count = 0

    def describe(self, dp: Any) -> str:
        """The text logged for one datapoint."""
        label = " ({})".format(self.name) if self.name is not None else ""
        lines = ["datapoint {}/{}{}: {} with {} components".format(
            self._count, self.num, label, type(dp).__name__, len(dp))]
        items = dp.items() if isinstance(dp, dict) else enumerate(dp)
        for key, value in items:
            lines.extend(_describe_tree(value, key, 1, self.max_depth + 1, self.max_list))
        return "\n".join(lines)

    def __iter__(self) -> Iterator[Any]:
        for dp in self.ds:
            if self._count < self.num:
                _report(self.describe(dp))
                self._count += 1
            yield dp

    def get_state(self) -> Dict[str, Any]:
        """``{"type", "input"}``: it passes datapoints through, so its state is its input's."""
        return {"type": type(self).__name__, "input": self.ds.get_state()}

    def _check_state(self, state: Any, plan: StatePlan) -> None:
        check_input_state(self, self.ds, check_state(self, state, {"input": dict})["input"], plan)


# ---------------------------------------------------------------------------------------------
# Speed test
# ---------------------------------------------------------------------------------------------

def _array_bytes(dp: Any) -> int:
    """Bytes held by the numpy components of a datapoint (top-level components only)."""
    values = dp.values() if isinstance(dp, dict) else dp
    return sum(v.nbytes for v in values if isinstance(v, (np.ndarray, np.generic)))


class TestDataSpeed(ProxyDataFlow):
    """Measure how fast a DataFlow produces datapoints, with a tqdm progress bar.

    :meth:`start` calls ``reset_state()`` on the input, takes ``warmup`` datapoints untimed,
    then times up to ``size`` datapoints (fewer if the input ends first), shows a table
    (datapoints/s, and MB/s when components are numpy arrays; on stderr without logging setup,
    as :class:`PrintData` does) and returns the numbers.
    Iterating a TestDataSpeed runs the test first and then produces the input's datapoints.

    Example::

        stats = TestDataSpeed(df, size=1000).start()
        print(stats["datapoints_per_sec"])
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, ds: DataFlow, size: int = 5000, warmup: int = 0):
        super().__init__(ds)
        self.test_size = int(size)
        self.warmup = int(warmup)

    def start(self) -> Dict[str, Any]:
        """Run the test; returns ``datapoints``, ``seconds``, ``datapoints_per_sec``, ``bytes``
        and ``bytes_per_sec`` (the last two None when no component is a numpy array)."""
        from tabulate import tabulate
        from tqdm import tqdm

        class ProgressBar(tqdm):
            monitor_interval = 0  # no tqdm monitor thread left running after the test

        self.ds.reset_state()
        itr = iter(self.ds)
        try:
            for _ in itertools.islice(itr, self.warmup):
                pass
            count, nbytes = 0, 0
            with ProgressBar(total=self.test_size, leave=True, smoothing=0.2, desc="TestDataSpeed") as bar:
                started = time.perf_counter()
                for dp in itertools.islice(itr, self.test_size):
                    nbytes += _array_bytes(dp)
                    count += 1
                    bar.update()
                seconds = time.perf_counter() - started
        finally:
            close_iterators([itr])
        has_bytes = nbytes > 0
        per_sec = count / seconds if seconds > 0 else float("inf")
        bytes_per_sec = (nbytes / seconds if seconds > 0 else float("inf")) if has_bytes else None
        stats = {
            "datapoints": count,
            "seconds": seconds,
            "datapoints_per_sec": per_sec,
            "bytes": nbytes if has_bytes else None,
            "bytes_per_sec": bytes_per_sec,
        }
        rows = [["datapoints", "{:,}".format(count)], ["seconds", "{:,.3f}".format(seconds)],
                ["datapoints/s", "{:,.1f}".format(per_sec)]]
        if bytes_per_sec is not None:
            rows.append(["MB/s", "{:,.1f}".format(bytes_per_sec / 1e6)])
        # disable_numparse: tabulate would turn "1205830.5" back into a number printed as 1.20583e+06
        _report("TestDataSpeed of {}:\n{}".format(type(self.ds).__name__, tabulate(
            rows, tablefmt="simple", disable_numparse=True, colalign=("left", "right"))))
        return stats

    def __iter__(self) -> Iterator[Any]:
        self.start()
        yield from self.ds

    get_state = PrintData.get_state
    _check_state = PrintData._check_state
