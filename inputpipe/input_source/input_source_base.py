"""tensorpack's module path ``tensorpack.input_source.input_source_base``: the same names, from
:mod:`inputpipe.input_source`.

Example::

    from inputpipe.input_source.input_source_base import InputSource, remap_input_source
"""
from .base import InputSource
from .remap import remap_input_source
# tensorpack's input_source_base also has these (outside __all__): code imports them from here
from ..dataflow.tensorpack_helpers import call_only_once, memoized_method  # noqa: F401
from .proxy import ProxyInputSource  # noqa: F401
from .tensorpack_helpers import (CallbackFactory, build_or_reuse_placeholder, get_op_tensor_name,  # noqa: F401
                                 get_sublist_by_names, get_tensors_inputs)

__all__ = ["InputSource", "remap_input_source"]
