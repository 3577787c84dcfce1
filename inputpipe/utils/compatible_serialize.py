"""tensorpack's ``utils.compatible_serialize`` (kept there for old imports): ``dumps`` and ``loads``
of :mod:`inputpipe.utils.serialize`.

Example::

    from inputpipe.utils.compatible_serialize import dumps, loads
    assert loads(dumps([1, "a"])) == [1, "a"]
"""
from .serialize import dumps, loads

__all__ = ["dumps", "loads"]
