"""The library's logger. inputpipe never prints; it logs to ``logging.getLogger("inputpipe")``.

Example::

    import logging
    logging.basicConfig(level=logging.INFO)   # show inputpipe's INFO messages
"""
import logging

logger = logging.getLogger("inputpipe")
logger.addHandler(logging.NullHandler())


def get_logger(name: str) -> logging.Logger:
    """A child of the ``inputpipe`` logger, e.g. ``get_logger(__name__)`` (``"inputpipe"`` itself
    gives the root ``inputpipe`` logger)."""
    if name == "inputpipe":
        return logger
    if name.startswith("inputpipe."):
        name = name[len("inputpipe."):]
    return logger.getChild(name)
