"""Shared utilities: the wire format, logging, stoppable threads, process supervision.

``get_rng`` is here too, as ``tensorpack.utils`` had it (``from inputpipe.utils import get_rng``).
"""
from .utils import get_rng  # noqa: F401  (tensorpack's utils package exports it)
