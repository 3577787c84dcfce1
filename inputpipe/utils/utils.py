"""tensorpack's ``utils.utils`` helpers that DataFlow code imports (``get_rng`` for a flow's or an
augmentor's random state, ``get_tqdm``/``get_tqdm_kwargs`` for progress bars), at the same path
(``inputpipe.dataflow`` has them too, as tensorpack's data modules did).

Example::

    from inputpipe.utils.utils import get_rng
    rng = get_rng(self)          # in a DataFlow's reset_state()
"""
import os
import sys
from typing import Any, Dict

import numpy as np

from . import logger  # noqa: F401  (tensorpack's utils.utils has it: `from ...utils.utils import logger`)
from .seeding import new_rng

__all__ = ["get_rng", "get_tqdm_kwargs", "get_tqdm"]

#: Environment variable (tensorpack's) that sets the seconds between progress-bar refreshes.
PROGRESS_REFRESH_ENV = "TENSORPACK_PROGRESS_REFRESH"
_TTY_REFRESH_SECONDS = 0.5
_FILE_REFRESH_SECONDS = 180.0


def get_rng(obj: Any = None) -> np.random.RandomState:
    """A new ``numpy.random.RandomState`` (tensorpack's ``get_rng``): seeded from fresh entropy,
    or reproducibly from :func:`inputpipe.dataflow.seeding.set_global_seed` when a global seed is
    set. ``obj`` is accepted for tensorpack's signature.

    Example::

        rng = get_rng(self)
        order = rng.permutation(10)
    """
    return new_rng(obj)


def _refresh_interval(stream: Any) -> float:
    value = os.environ.get(PROGRESS_REFRESH_ENV)
    if value is not None:
        try:
            return float(value)
        except ValueError:
            raise ValueError("{}={!r}: expected a number of seconds".format(PROGRESS_REFRESH_ENV, value)) from None
    isatty = getattr(stream, "isatty", None)
    return _TTY_REFRESH_SECONDS if callable(isatty) and isatty() else _FILE_REFRESH_SECONDS


def get_tqdm_kwargs(**kwargs: Any) -> Dict[str, Any]:
    """tensorpack's default ``tqdm`` arguments, updated with ``kwargs``: an ASCII bar with the rate,
    refreshed every 0.5 s on a terminal and every 180 s otherwise (a log file), or every
    ``$TENSORPACK_PROGRESS_REFRESH`` seconds.

    Example::

        bar = tqdm.tqdm(total=100, **get_tqdm_kwargs(desc="reading"))
    """
    defaults: Dict[str, Any] = {
        "smoothing": 0.5,
        "dynamic_ncols": True,
        "ascii": True,
        "bar_format": "{l_bar}{bar}|{n_fmt}/{total_fmt}[{elapsed}<{remaining},{rate_noinv_fmt}]",
        "mininterval": _refresh_interval(kwargs.get("file", sys.stderr)),
    }
    defaults.update(kwargs)
    return defaults


def get_tqdm(*args: Any, **kwargs: Any) -> Any:
    """``tqdm.tqdm(*args, **kwargs)`` with :func:`get_tqdm_kwargs`' defaults.

    Example::

        for item in get_tqdm(items, desc="converting"):
            ...
    """
    from tqdm import tqdm

    return tqdm(*args, **get_tqdm_kwargs(**kwargs))
