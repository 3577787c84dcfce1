"""A small graph-mode training loop over any InputSource (used by the examples).

Example::

    from inputpipe.train import train
    summary = train(train_op, source, steps=1000)
    print(summary)
"""
from .loop import TrainSummary, train

__all__ = ["train", "TrainSummary"]
