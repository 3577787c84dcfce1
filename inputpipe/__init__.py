"""inputpipe: Python input pipelines that keep TF1-style graph training from waiting for data.

``inputpipe.dataflow`` is pure Python (no TensorFlow import); ``inputpipe.input_source`` and
``inputpipe.train`` need TensorFlow.

Example::

    from inputpipe.dataflow import DataFromList, BatchData
    from inputpipe.input_source import QueueInput
"""
from ._version import __version__

__all__ = ["__version__"]
