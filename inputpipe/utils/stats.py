"""tensorpack's ``utils.stats`` at the same path: small counters for evaluation code.

- :class:`StatCounter` keeps the values fed to it (``average``, ``sum``, ``max``, ``min``);
- :class:`RatioCounter` / :class:`Accuracy` count hits out of a total;
- :class:`BinaryStatistics` counts a binary classifier's hits (``precision``, ``recall``, ...);
- :class:`OnlineMoments` keeps a running mean and variance without the values (Welford).

Asking a :class:`StatCounter` for a statistic before anything was fed raises ``ValueError``
(tensorpack asserted); a ratio of nothing is 0, as in tensorpack.

Example::

    from inputpipe.utils.stats import Accuracy
    accuracy = Accuracy()
    accuracy.feed(int((predictions == labels).sum()), len(labels))
    print(accuracy.accuracy)
"""
from typing import Any, List

import numpy as np

__all__ = ["StatCounter", "BinaryStatistics", "RatioCounter", "Accuracy", "OnlineMoments"]


class StatCounter:
    """The values fed to it (numbers, or arrays of one shape), and statistics of them
    (``average`` and ``sum`` over every element, as numpy gives them for the list).

    Example::

        times = StatCounter()
        times.feed(0.5); times.feed(1.5)
        assert times.count == 2 and times.average == 1.0 and times.max == 1.5
    """

    def __init__(self) -> None:
        self._values: List[Any] = []

    def feed(self, v: Any) -> None:
        """Add one value."""
        self._values.append(v)

    def reset(self) -> None:
        """Forget every value."""
        self._values = []

    def _fed(self, statistic: str) -> List[Any]:
        if not self._values:
            raise ValueError("StatCounter.{}: no value was fed".format(statistic))
        return self._values

    @property
    def count(self) -> int:
        return len(self._values)

    @property
    def average(self) -> Any:
        return np.mean(self._fed("average"))

    @property
    def sum(self) -> Any:
        return np.sum(self._fed("sum"))

    @property
    def max(self) -> Any:
        return max(self._fed("max"))

    @property
    def min(self) -> Any:
        return min(self._fed("min"))

    def samples(self) -> List[Any]:
        """Every value fed, in order."""
        return self._values


class RatioCounter:
    """Counts events of interest out of a total: ``feed(count, total=1)``; ``ratio`` is 0 before
    any total.

    Example::

        hits = RatioCounter()
        hits.feed(3, 4)
        assert hits.ratio == 0.75 and hits.count == 3 and hits.total == 4
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._tot = 0
        self._cnt = 0

    def feed(self, count: Any, total: Any = 1) -> None:
        """Add ``count`` events of interest out of ``total`` events."""
        self._tot += total
        self._cnt += count

    @property
    def ratio(self) -> float:
        return self._cnt * 1.0 / self._tot if self._tot else 0

    @property
    def total(self) -> Any:
        return self._tot

    @property
    def count(self) -> Any:
        return self._cnt


class Accuracy(RatioCounter):
    """A :class:`RatioCounter` whose ratio is called ``accuracy``.

    Example::

        accuracy = Accuracy()
        accuracy.feed(9, 10)
        assert accuracy.accuracy == 0.9
    """

    @property
    def accuracy(self) -> float:
        return self.ratio


class BinaryStatistics:
    """Counts of a binary decision's outcomes, fed as arrays of 0 and 1 (predictions, labels):
    ``precision``, ``recall``, ``false_positive`` (1 - precision), ``false_negative`` (1 - recall),
    each 0 when nothing was predicted (or labelled) positive.

    Example::

        stats = BinaryStatistics()
        stats.feed(np.array([1, 1, 0]), np.array([1, 0, 0]))
        assert stats.precision == 0.5 and stats.recall == 1.0
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.nr_pos = 0          # labelled positive
        self.nr_neg = 0          # labelled negative
        self.nr_pred_pos = 0
        self.nr_pred_neg = 0
        self.corr_pos = 0        # predicted positive, and so labelled
        self.corr_neg = 0        # predicted negative, and so labelled

    def feed(self, pred: np.ndarray, label: np.ndarray) -> None:
        """Add predictions ``pred`` against ``label`` (binary arrays of one shape)."""
        pred, label = np.asarray(pred), np.asarray(label)
        if pred.shape != label.shape:
            raise ValueError("BinaryStatistics.feed: pred has shape {}, label {}: expected the same".format(
                pred.shape, label.shape))
        self.nr_pos += int((label == 1).sum())
        self.nr_neg += int((label == 0).sum())
        self.nr_pred_pos += int((pred == 1).sum())
        self.nr_pred_neg += int((pred == 0).sum())
        self.corr_pos += int(((pred == 1) & (pred == label)).sum())
        self.corr_neg += int(((pred == 0) & (pred == label)).sum())

    @property
    def precision(self) -> float:
        return self.corr_pos * 1.0 / self.nr_pred_pos if self.nr_pred_pos else 0

    @property
    def recall(self) -> float:
        return self.corr_pos * 1.0 / self.nr_pos if self.nr_pos else 0

    @property
    def false_positive(self) -> float:
        return 1 - self.precision if self.nr_pred_pos else 0

    @property
    def false_negative(self) -> float:
        return 1 - self.recall if self.nr_pos else 0


class OnlineMoments:
    """The mean and variance (sample variance, n - 1) of the values fed, kept without the values
    (Welford's update); values may be numbers or arrays of one shape.

    Example::

        moments = OnlineMoments()
        for v in (1.0, 2.0, 3.0):
            moments.feed(v)
        assert moments.mean == 2.0 and moments.variance == 1.0
    """

    def __init__(self) -> None:
        self._mean: Any = 0
        self._M2: Any = 0
        self._n = 0

    def feed(self, x: Any) -> None:
        """Add one value."""
        self._n += 1
        delta = x - self._mean
        self._mean = self._mean + delta * (1.0 / self._n)
        self._M2 = self._M2 + delta * (x - self._mean)

    @property
    def mean(self) -> Any:
        return self._mean

    @property
    def variance(self) -> Any:
        if self._n < 2:
            raise ValueError("OnlineMoments.variance: needs two values at least, got {}".format(self._n))
        return self._M2 / (self._n - 1)

    @property
    def std(self) -> Any:
        return np.sqrt(self.variance)
