"""Checks that turn a malformed dataset file into a :class:`DatasetFormatError` naming the reader,
the file, what was expected and what was found (instead of a KeyError, IndexError or a numpy
error from deep inside a reader).

Example::

    from inputpipe.dataflow.dataset._checks import check_array, read_text_lines
    lines = read_text_lines("ILSVRCMeta", "/data/ilsvrc_metadata/synsets.txt", "the metadata file")
    check_array("SVHNDigit", path, "X", images, (32, 32, 3, None), "uint8")
"""
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..dataset_io import DatasetFormatError

__all__ = ["DatasetFormatError", "format_error", "describe", "read_text_lines", "check_keys", "check_variables",
           "check_array", "check_labels"]


def format_error(component: str, path: str, message: str) -> DatasetFormatError:
    """``DatasetFormatError("<component>: <path>: <message>")``."""
    return DatasetFormatError("{}: {}: {}".format(component, path, message))


def describe(value: Any) -> str:
    """'an array of shape (2, 3) and dtype uint8', or 'a list'."""
    if isinstance(value, np.ndarray):
        return "an array of shape {} and dtype {}".format(value.shape, value.dtype)
    return "a {}".format(type(value).__name__)


def read_text_lines(component: str, path: str, what: str) -> List[str]:
    """The stripped lines of the UTF-8 text file ``path`` (as iterating the open file gives them);
    a FileNotFoundError naming ``component`` and ``what`` when it is missing, a DatasetFormatError
    when it is not UTF-8 text."""
    if not os.path.isfile(path):
        raise FileNotFoundError("{}: {} {} is missing".format(component, what, path))
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise format_error(component, path, "expected UTF-8 text, found a byte 0x{:02x} at offset {}".format(
            data[err.start], err.start)) from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()      # the newline that ends the last line
    return [line.strip() for line in lines]


def check_keys(component: str, path: str, content: Any, keys: Sequence[Any]) -> None:
    """``content`` (a loaded pickle) must be a dict holding every key of ``keys``."""
    if isinstance(content, dict) and all(key in content for key in keys):
        return
    found = "the keys {}".format(sorted(content, key=repr)) if isinstance(content, dict) else describe(content)
    raise format_error(component, path, "expected a dict with the key{} {}, found {}".format(
        "s" if len(keys) > 1 else "", " and ".join(repr(key) for key in keys), found))


def check_variables(component: str, path: str, content: Dict[str, Any], names: Sequence[str]) -> None:
    """``content`` (a loaded .mat file) must hold every variable of ``names``."""
    if all(name in content for name in names):
        return
    found = sorted(name for name in content if not name.startswith("__"))
    raise format_error(component, path, "expected the variables {}, found {}".format(" and ".join(names), found))


def check_array(component: str, path: str, name: str, value: Any, shape: Sequence[Optional[int]],
                dtype: Optional[str] = None) -> np.ndarray:
    """``value`` itself when it is an array of ``shape`` (None: any size) and ``dtype`` (None: any)."""
    if isinstance(value, np.ndarray) and value.ndim == len(shape) \
            and all(want is None or want == got for want, got in zip(shape, value.shape)) \
            and (dtype is None or value.dtype == np.dtype(dtype)):
        return value
    pattern = "({})".format(", ".join("N" if want is None else str(want) for want in shape)) if len(shape) > 1 \
        else "(N,)"
    raise format_error(component, path, "expected {} as {} array of shape {}, found {}".format(
        name, "a " + dtype if dtype else "an", pattern, describe(value)))


def check_labels(component: str, path: str, labels: Any, low: int, high: int, where: str = "") -> np.ndarray:
    """``labels`` as a flat int64 array whose values lie in ``[low, high]``; ``where`` (e.g.
    ' in y') says where the file keeps them."""
    if not (isinstance(labels, np.ndarray) and labels.dtype.kind in "iu"):
        items = list(labels) if isinstance(labels, (list, tuple)) else np.asarray(labels, dtype=object).ravel()
        for index, value in enumerate(items):
            if isinstance(value, (bool, np.bool_)) or not (isinstance(value, (int, np.integer)) or (
                    isinstance(value, (float, np.floating)) and float(value).is_integer())):
                raise format_error(component, path, "expected integer labels {}-{}{}, found {!r} at index {}".format(
                    low, high, where, value, index))
    values = np.asarray(labels).astype(np.int64).ravel()
    bad = (values < low) | (values > high)
    if bad.any():
        index = int(np.argmax(bad))
        raise format_error(component, path, "expected labels {}-{}{}, found {} at index {}".format(
            low, high, where, values[index], index))
    return values
