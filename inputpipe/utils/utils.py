"""tensorpack's ``utils.utils`` helpers that DataFlow code imports (``get_rng`` for a flow's or an
augmentor's random state, ``get_tqdm``/``get_tqdm_kwargs`` for progress bars), at the same path.

Example::

    from inputpipe.utils.utils import get_rng
    rng = get_rng(self)          # in a DataFlow's reset_state()
"""
from ..dataflow.tensorpack_helpers import get_rng, get_tqdm, get_tqdm_kwargs

__all__ = ["get_rng", "get_tqdm", "get_tqdm_kwargs"]
