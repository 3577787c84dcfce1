"""The one rule for unpickling what a reader meets in a file: refused unless the caller opted in.

Every reader that can meet a pickle (tensorpack's dataset files, :func:`inputpipe.utils.serialize.loads`)
takes ``allow_pickle``: True unpickles, False refuses, and None (the default, nothing passed)
follows the environment variable ``INPUTPIPE_ALLOW_PICKLE``: ``1`` allows, so a migrated script
reads its own trusted pickled files without a code change (as ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``
does for ``torch.load``). The first pickle that the variable lets through logs one warning per
process. Sockets and inputpipe's own files never reach this rule: they are never unpickled.
"""
import os
import threading
from typing import Optional

from .logger import get_logger

logger = get_logger(__name__)

#: The environment variable that allows unpickling where ``allow_pickle`` is not passed.
ALLOW_PICKLE_ENV = "INPUTPIPE_ALLOW_PICKLE"
#: The one-time command that rewrites a pickled tensorpack file into inputpipe's format.
CONVERT_COMMAND = "python -m inputpipe.dataflow.convert IN OUT --allow-pickle"

_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")
_warned = False
_warned_lock = threading.Lock()


def pickle_allowed(allow_pickle: Optional[bool]) -> bool:
    """Whether a pickle may be unpickled: ``allow_pickle`` when passed, else ``INPUTPIPE_ALLOW_PICKLE``."""
    if allow_pickle is not None:
        return bool(allow_pickle)
    value = os.environ.get(ALLOW_PICKLE_ENV, "").strip().lower()
    if value in _OFF:
        return False
    if value not in _ON:
        raise ValueError("{}={!r}: expected 1 (unpickle trusted files) or 0 (refuse pickles, the default)".format(
            ALLOW_PICKLE_ENV, os.environ[ALLOW_PICKLE_ENV]))
    _warn_once()
    return True


def _warn_once() -> None:
    global _warned
    with _warned_lock:
        if _warned:
            return
        _warned = True
    logger.warning("%s=1: pickled records of dataset files are unpickled in this process (pid %d). Unpickling "
                   "runs code chosen by whoever wrote the file: use it only for your own trusted files, and "
                   "convert them once with: %s", ALLOW_PICKLE_ENV, os.getpid(), CONVERT_COMMAND)


def pickle_refusal() -> str:
    """Why a pickle is refused, and the three ways to read it (the end of every refusal's message)."""
    return ("inputpipe unpickles only when asked, since unpickling runs code chosen by whoever wrote the file: pass "
            "allow_pickle=True if the file is a trusted local file, or set {}=1 for the same without a code change, "
            "or convert the file once into inputpipe's format: {}".format(ALLOW_PICKLE_ENV, CONVERT_COMMAND))
