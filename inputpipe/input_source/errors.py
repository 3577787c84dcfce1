"""Errors raised by InputSources."""

__all__ = ["InputSourceError"]


class InputSourceError(RuntimeError):
    """An InputSource could not deliver data: its DataFlow raised, ended unexpectedly, or gave a
    datapoint that does not match the input signature. The message names the source; the
    original exception (with its traceback) is the ``__cause__``.

    Example::

        try:
            sess.run(train_op)
        except InputSourceError as err:
            print(err, err.__cause__)
    """
