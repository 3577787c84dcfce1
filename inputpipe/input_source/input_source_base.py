"""tensorpack's module path ``tensorpack.input_source.input_source_base``: the same names, from
:mod:`inputpipe.input_source`.

Example::

    from inputpipe.input_source.input_source_base import InputSource, remap_input_source
"""
from .base import InputSource
from .remap import remap_input_source

__all__ = ["InputSource", "remap_input_source"]
