"""inputpipe: Python input pipelines that keep TF1-style graph training from waiting for data.

``inputpipe.dataflow`` is pure Python (no TensorFlow import); ``inputpipe.input_source`` and
``inputpipe.train`` need TensorFlow.

Example::

    from inputpipe.dataflow import DataFromList, BatchData
    from inputpipe.input_source import QueueInput
"""
from ._version import __version__
from .tensorpack_interop import install as _watch_for_tensorpack

_watch_for_tensorpack()     # registers inputpipe's classes with tensorpack's once both are imported

__all__ = ["__version__"]
