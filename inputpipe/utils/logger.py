"""The library's logger. inputpipe never prints; it logs to ``logging.getLogger("inputpipe")``.

Warnings and errors reach stderr without any logging setup (as ``inputpipe WARNING: ...``); INFO
and DEBUG stay quiet unless asked for. As soon as the application configures logging (a handler
on the root logger, e.g. ``logging.basicConfig``), inputpipe's records go only through the
application's handlers, so nothing is printed twice.

tensorpack's module-level calls work on it too (``logger.info``, ``logger.warn``, ``logger.error``,
``logger.exception``, ``logger.setLevel``, ...), for scripts whose ``from tensorpack.utils import
logger`` became ``from inputpipe.utils import logger``, and so do its log directory functions:
:func:`set_logger_dir` (inputpipe's records also go to ``log.log`` there), :func:`auto_set_dir`,
:func:`get_logger_dir`.

Example::

    import logging
    logging.basicConfig(level=logging.INFO)   # show inputpipe's INFO messages too
"""
import logging
import os
import shutil
import sys
import time
from typing import Optional

__all__ = ["get_logger"]


class _UnconfiguredStderrHandler(logging.Handler):
    """Writes WARNING and above to the current ``sys.stderr`` while the root logger has no
    handler (the application has not configured logging); silent once it has one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("inputpipe %(levelname)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never raise into the library
            self.handleError(record)


logger = logging.getLogger("inputpipe")
if not any(isinstance(h, _UnconfiguredStderrHandler) for h in logger.handlers):
    logger.addHandler(_UnconfiguredStderrHandler())


# tensorpack's ``utils.logger`` module functions, for scripts that log through it after the
# import change (``from inputpipe.utils import logger; logger.info(...)``): the inputpipe logger's.
debug = logger.debug
info = logger.info
warning = logger.warning
warn = logger.warning
error = logger.error
critical = logger.critical
fatal = logger.critical
exception = logger.exception
log = logger.log
setLevel = logger.setLevel
addFilter = logger.addFilter

#: What :func:`set_logger_dir` does with a directory that holds files (tensorpack's letters).
LOG_DIR_ACTIONS = {"k": "keep it", "d": "delete it", "b": "move it to a backup with the time appended",
                   "n": "use a new directory with the time appended", "q": "quit"}
_log_dir: Optional[str] = None
_file_handler: Optional[logging.FileHandler] = None


def get_logger_dir() -> Optional[str]:
    """The directory set by :func:`set_logger_dir`, or None.

    Example::

        checkpoint_dir = get_logger_dir() or "."
    """
    return _log_dir


def set_logger_dir(dirname: str, action: Optional[str] = None) -> None:
    """Log to ``dirname/log.log`` too (every record of the ``inputpipe`` logger, INFO and above),
    creating the directory; the file of an earlier call is closed. When ``dirname`` holds files
    (other than hidden ones), ``action`` says what to do, as in tensorpack: ``"k"`` keep it (a
    resumed run), ``"d"`` delete it, ``"b"`` move it aside to ``dirname`` + the time, ``"n"`` use
    ``dirname`` + the time instead, ``"q"`` raise ``OSError``. With no ``action`` the user is
    asked at a terminal; without one (a batch job), ``OSError`` says which to pass.

    Example::

        set_logger_dir("train_log/resnet", action="k")
    """
    global _log_dir, _file_handler
    dirname = os.path.normpath(dirname)
    if _file_handler is not None:         # (closed first: the directory may be deleted below)
        logger.removeHandler(_file_handler)
        _file_handler.close()
        _file_handler = None
    if _holds_files(dirname):
        if action is None:
            action = _ask_action(dirname)
        action = action.lower().strip()
        if action not in LOG_DIR_ACTIONS:
            raise ValueError("set_logger_dir: action must be one of {}, got {!r}".format(
                ", ".join("{!r} ({})".format(k, v) for k, v in LOG_DIR_ACTIONS.items()), action))
        if action == "b":
            backup = _unused(dirname)
            shutil.move(dirname, backup)
            logger.info("set_logger_dir: %s moved to %s", dirname, backup)
        elif action == "d":
            shutil.rmtree(dirname)
        elif action == "n":
            dirname = _unused(dirname)
            logger.info("set_logger_dir: using the new directory %s", dirname)
        elif action == "q":
            raise OSError("set_logger_dir: the log directory {} exists and holds files".format(dirname))
    os.makedirs(dirname, exist_ok=True)
    path = os.path.join(dirname, "log.log")
    if os.path.isfile(path):              # (kept: a resumed run's earlier log)
        backup = _unused(path + ".")
        shutil.move(path, backup)
        logger.info("set_logger_dir: the existing %s moved to %s", path, backup)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("[%(asctime)s @%(filename)s:%(lineno)d] %(levelname)s %(message)s",
                                           "%m%d %H:%M:%S"))
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)     # (what reaches stderr unconfigured stays WARNING and above)
    _file_handler, _log_dir = handler, dirname
    logger.info("set_logger_dir: logging to %s", path)


def auto_set_dir(action: Optional[str] = None, name: Optional[str] = None) -> None:
    """:func:`set_logger_dir` of ``train_log/<the main script's name>`` (``:name`` appended when
    given), as tensorpack's.

    Example::

        auto_set_dir(action="k")       # train_log/train_resnet for train_resnet.py
    """
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    script = os.path.splitext(os.path.basename(main_file))[0] if main_file else "interactive"
    dirname = os.path.join("train_log", script)
    if name:
        dirname += ("_" if os.name == "nt" else ":") + name
    set_logger_dir(dirname, action=action)


def _unused(prefix: str) -> str:
    """``prefix`` + the time (``MMDD-HHMMSS``), + ``-2``, ``-3``, ... while that path exists."""
    stamped = prefix + time.strftime("%m%d-%H%M%S")
    candidate, number = stamped, 1
    while os.path.lexists(candidate):
        number += 1
        candidate = "{}-{}".format(stamped, number)
    return candidate


def _holds_files(dirname: str) -> bool:
    return os.path.isdir(dirname) and any(not entry.startswith(".") for entry in os.listdir(dirname))


def _ask_action(dirname: str) -> str:
    choices = ", ".join("{} ({})".format(k, v) for k, v in LOG_DIR_ACTIONS.items())
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        raise OSError("set_logger_dir: the log directory {} exists and holds files, and there is no terminal to "
                      "ask what to do: pass action= one of {}".format(dirname, choices))
    answer = ""
    while answer not in LOG_DIR_ACTIONS:
        answer = input("Log directory {} exists. Select action: {}: ".format(dirname, choices)).lower().strip()
    return answer


def get_logger(name: str) -> logging.Logger:
    """A child of the ``inputpipe`` logger, e.g. ``get_logger(__name__)`` (``"inputpipe"`` itself
    gives the root ``inputpipe`` logger).

    Example::

        logger = get_logger(__name__)
        logger.warning("MyFlow: expected 3 components, got 2")
    """
    if name == "inputpipe":
        return logger
    if name.startswith("inputpipe."):
        name = name[len("inputpipe."):]
    return logger.getChild(name)
