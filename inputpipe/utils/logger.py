"""The library's logger. inputpipe never prints; it logs to ``logging.getLogger("inputpipe")``.

Warnings and errors reach stderr without any logging setup (as ``inputpipe WARNING: ...``); INFO
and DEBUG stay quiet unless asked for. As soon as the application configures logging (a handler
on the root logger, e.g. ``logging.basicConfig``), inputpipe's records go only through the
application's handlers, so nothing is printed twice.

tensorpack's module-level calls work on it too (``logger.info``, ``logger.warn``, ``logger.error``,
``logger.exception``, ...), for scripts whose ``from tensorpack.utils import logger`` became
``from inputpipe.utils import logger``.

Example::

    import logging
    logging.basicConfig(level=logging.INFO)   # show inputpipe's INFO messages too
"""
import logging
import sys

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
