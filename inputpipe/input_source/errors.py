"""Errors raised by InputSources.

:class:`InputSourceError` is a ``ValueError`` (the type tensorpack's input sources raised for bad
input) and a ``RuntimeError``. When the data failed because the DataFlow raised, the error the
training thread gets is made by :func:`failure_error`: it is also an instance of the DataFlow's
exception type, so ``except KeyError`` around training still catches a ``KeyError`` raised in
the DataFlow (as it did with tensorpack's FeedInput, where the DataFlow ran in the training
thread), and the original exception with its traceback is the ``__cause__``.

Example::

    try:
        run(train_op)
    except KeyError as err:            # the DataFlow raised KeyError
        assert isinstance(err, InputSourceError)
"""
import threading
from typing import Callable, Dict, Optional, Type

from ..utils.logger import get_logger

__all__ = ["InputSourceError", "failure_error", "cleanup_after"]

logger = get_logger(__name__)


class InputSourceError(ValueError, RuntimeError):
    """An InputSource could not deliver data: its DataFlow raised, ended unexpectedly, or gave a
    datapoint that does not match the input signature. The message names the source; the
    original exception (with its traceback) is the ``__cause__``.

    Example::

        try:
            sess.run(train_op)
        except InputSourceError as err:
            print(err, err.__cause__)
    """


_matching_classes: Dict[Type[BaseException], Type[InputSourceError]] = {}
_matching_lock = threading.Lock()


def _matching_class(original: Type[BaseException]) -> Type[InputSourceError]:
    """A subclass of InputSourceError and ``original`` (cached), or InputSourceError itself when
    ``original`` is not an ordinary ``Exception`` subclass. When ``original`` cannot be combined
    with it (incompatible layouts, or an order of bases no class can keep, e.g. a
    ``WorkerError[ValueError]``, a RuntimeError before ValueError), the nearest base class of
    ``original`` that can is used (``WorkerError`` there; InputSourceError is a ValueError)."""
    if issubclass(InputSourceError, original) or issubclass(original, InputSourceError):
        return original if issubclass(original, InputSourceError) else InputSourceError
    if not issubclass(original, Exception) or issubclass(original, (StopIteration, StopAsyncIteration)):
        return InputSourceError      # would change how loops and generators end
    with _matching_lock:
        made = _matching_classes.get(original)
        if made is None:
            made = InputSourceError
            for candidate in original.__mro__:
                if candidate is Exception or issubclass(InputSourceError, candidate):
                    break
                combined = _combine(candidate)
                if combined is not None:
                    made = combined
                    break
            _matching_classes[original] = made
    return made


def _combine(original: Type[BaseException]) -> Optional[Type[InputSourceError]]:
    """A subclass of InputSourceError and ``original``, or None when Python cannot make one."""
    try:
        made = type("InputSourceError_" + original.__name__, (InputSourceError, original), {
            "__init__": InputSourceError.__init__,       # one message argument, whatever the original takes
            "__str__": InputSourceError.__str__,         # e.g. KeyError would print the repr
            "__module__": __name__,
        })
        made("probe")
    except Exception:      # incompatible layouts (OSError, ...), no consistent MRO, an odd metaclass / __new__
        return None
    return made


def failure_error(message: str, cause: Optional[BaseException]) -> InputSourceError:
    """An :class:`InputSourceError` with ``message`` and ``__cause__ = cause``, whose type also
    matches ``type(cause)`` when that is an ``Exception`` that can be combined with it.

    Example::

        raise failure_error("QueueInput: the DataFlow raised KeyError: 'x'", err) from err
    """
    error = _matching_class(type(cause))(message) if cause is not None else InputSourceError(message)
    error.__cause__ = cause
    return error


def cleanup_after(err: BaseException, component: str, cleanup: Callable[[], None]) -> None:
    """Run ``cleanup`` while ``err`` is on its way up: an error of the cleanup is logged (a
    warning naming ``component``), never raised in place of ``err`` (a Ctrl-C must reach the
    training loop as KeyboardInterrupt).

    Example::

        except BaseException as err:
            cleanup_after(err, "QueueInput", source.close)
            raise
    """
    try:
        cleanup()
    except Exception as failure:        # logged: the original error is the one raised
        logger.warning("%s: stopping after %s failed too: %s: %s", component, type(err).__name__,
                       type(failure).__name__, failure, exc_info=True)
