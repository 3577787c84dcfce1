"""``python -m inputpipe.dataflow.convert IN OUT``: rewrite a tensorpack dataset file, once, into
inputpipe's format, which never needs pickle.

IN is a file written by tensorpack 0.11: an LMDB file or directory (``LMDBSerializer.save``,
``dump_dataflow_to_lmdb``), a TFRecord file (``TFRecordSerializer``) or a ``.npz`` file
(``NumpySerializer``), its records pickled (tensorpack's default) or msgpack-numpy. OUT is written
by the matching inputpipe serializer (``LMDBSerializer``, ``TFRecordSerializer``, or
``NumpySerializer``: a ``.npy`` file at exactly OUT) and loads with the same call as before,
without ``allow_pickle``. Unpickling IN needs consent, since it runs code chosen by whoever wrote
the file: ``--allow-pickle``, or ``INPUTPIPE_ALLOW_PICKLE=1``.

OUT is written to a temporary name beside it (``.OUT.converting-<pid>``), read back and compared
with IN record by record (types, dtypes, shapes and bytes), and only then renamed to OUT: a run
killed at any moment leaves no OUT that was not checked (at most the temporary file). On any
difference, or an interrupted check, the temporary file is removed. An existing OUT, a symlink
included (even one pointing nowhere), is never overwritten nor written through. Exit codes: 0
converted and checked; 1 IN could not be converted (damaged, or holding values the wire format
does not carry; OUT could not be written) or the check failed; 2 bad arguments, including an OUT
whose folder is missing or not writable (one line on stderr).

Example::

    python -m inputpipe.dataflow.convert train.lmdb train-inputpipe.lmdb --allow-pickle
    python -m inputpipe.dataflow.convert val.tfrecord val-inputpipe.tfrecord
"""
# ruff: noqa: T201 - reporting is this command's job (the library itself never prints)
import argparse
import os
import struct
import sys
from itertools import zip_longest
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Type

import numpy as np
from tqdm import tqdm

from ..utils._pickle_policy import ALLOW_PICKLE_ENV, pickle_allowed
from ..utils._tensorpack_records import is_pickle
from ..utils.crc32c import masked_crc32c
from .base import DataFlow, ProxyDataFlow, get_length
from .dataset_io import DatasetFormatError, _lmdb_location
from .format import LMDBData
from .serialize import LMDBSerializer, NumpySerializer, TFRecordSerializer, _is_tensorpack_lmdb

__all__ = ["main"]

_PROG = "python -m inputpipe.dataflow.convert"
_USAGE = "usage: {} IN OUT [--allow-pickle]".format(_PROG)
_LMDB_MAGIC = struct.pack("=I", 0xBEEFC0DE)  # at byte 16 of a (64-bit) LMDB file


class _UsageError(Exception):
    """A bad argument: one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own prints the whole usage and exits
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=_PROG, description="Rewrite a tensorpack 0.11 dataset file (LMDB, TFRecord or .npz; pickled "
                     "or msgpack-numpy records) into inputpipe's format, then check it record by record.")
    parser.add_argument("input", metavar="IN", help="the tensorpack file (an LMDB directory holds data.mdb)")
    parser.add_argument("output", metavar="OUT", help="the file to write (must not exist)")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="unpickle IN's records: only for your own trusted file, since unpickling runs code "
                        "chosen by whoever wrote it (or set {}=1)".format(ALLOW_PICKLE_ENV))
    return parser


def _kind(path: str) -> str:
    """``"lmdb"``, ``"tfrecord"`` or ``"npz"``: the kind of tensorpack file at ``path``."""
    data_file = _lmdb_location(path)[0]
    if os.path.isdir(path) and not os.path.isfile(data_file):
        raise _UsageError("IN {} is a directory without data.mdb (not an LMDB directory)".format(path))
    with open(data_file, "rb") as f:
        head = f.read(20)
    if head.startswith(b"PK\x03\x04"):
        return "npz"
    if head[16:20] == _LMDB_MAGIC:
        return "lmdb"
    if head.startswith(b"\x93NUMPY"):
        raise _UsageError("IN {} is a .npy file: already inputpipe's format (NumpySerializer), nothing to "
                          "convert".format(path))
    if len(head) >= 12 and struct.unpack_from("<I", head, 8)[0] == masked_crc32c(head[:8]):
        return "tfrecord"
    raise _UsageError("IN {} is neither an LMDB, a TFRecord nor a .npz file (it starts with {!r})".format(path, head[:8]))


def _first_record(kind: str, path: str) -> Optional[bytes]:
    """The raw bytes of IN's first record (to ask for consent before a pickle is met), or None."""
    if kind == "npz":
        return None
    if kind == "lmdb":
        if not _is_tensorpack_lmdb(path):
            raise _UsageError("IN {} is not an LMDB file of tensorpack's LMDBSerializer (no '__keys__' record, or "
                              "an inputpipe header): nothing to convert".format(path))
        records = LMDBData(path, shuffle=False)
        records.reset_state()
        first = next(iter(records), None)
        return None if first is None else bytes(first[1])
    with open(path, "rb") as f:
        length = struct.unpack("<Q", f.read(8))[0]
        f.seek(4, os.SEEK_CUR)
        return f.read(min(length, 16))


def _load(kind: str, path: str, allow_pickle: Optional[bool]) -> DataFlow:
    if kind == "lmdb":
        return LMDBSerializer.load(path, shuffle=False, allow_pickle=allow_pickle)
    if kind == "tfrecord":
        return TFRecordSerializer.load(path, allow_pickle=allow_pickle)
    return NumpySerializer.load(path, shuffle=False, allow_pickle=allow_pickle)


_SAVERS: Dict[str, Callable[[DataFlow, str], None]] = {
    "lmdb": LMDBSerializer.save, "tfrecord": TFRecordSerializer.save, "npz": NumpySerializer.save}


class _Progress(ProxyDataFlow):
    """The datapoints of ``ds`` under a tqdm progress bar."""

    def __init__(self, ds: DataFlow, desc: str):
        super().__init__(ds)
        self.desc = desc

    def __iter__(self) -> Iterator[Any]:
        with tqdm(self.ds, total=get_length(self.ds), desc=self.desc, unit=" records", file=sys.stderr) as bar:
            yield from bar


# ------------------------------------------------------------------------------- the record check

_BUILTINS: Tuple[Any, ...] = (bool, int, float, str, bytes, tuple, list, dict)


def _plain(value: Any) -> Any:
    """``value`` as the wire format carries it: numpy str/bytes scalars and subclasses of the
    builtin types (a namedtuple, an OrderedDict, an IntEnum) become the builtin type."""
    if isinstance(value, np.generic):
        return str(value) if isinstance(value, np.str_) else bytes(value) if isinstance(value, np.bytes_) else value
    for base in _BUILTINS:
        if isinstance(value, base) and type(value) is not base:
            return base(value)
    return value


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "a {} array of shape {}".format(value.dtype, value.shape)
    text = repr(value)
    return "{} {}".format(type(value).__name__, text if len(text) <= 60 else text[:57] + "...")


def _difference(want: Any, got: Any, where: str) -> Optional[str]:
    """Where and how ``got`` (OUT's) differs from ``want`` (IN's), or None when they are the same."""
    want = _plain(want)
    if isinstance(want, np.ndarray) and isinstance(got, np.ndarray) and want.dtype.str == got.dtype.str \
            and want.shape == got.shape:
        return _array_difference(want, got, where)
    if isinstance(want, np.ndarray) or isinstance(got, np.ndarray):
        same = False
    elif type(want) is not type(got):
        same = False
    elif isinstance(want, (list, tuple)):
        if len(want) != len(got):
            return "{}: IN has {} items, OUT has {}".format(where, len(want), len(got))
        for i, (a, b) in enumerate(zip(want, got)):
            found = _difference(a, b, "{}[{}]".format(where, i))
            if found:
                return found
        return None
    elif isinstance(want, dict):
        keys = [_plain(k) for k in want]
        if [(type(k), k) for k in keys] != [(type(k), k) for k in got]:
            return "{}: IN has the keys {!r}, OUT has {!r}".format(where, keys, list(got))
        for key, plain_key in zip(want, keys):
            found = _difference(want[key], got[plain_key], "{}[{!r}]".format(where, plain_key))
            if found:
                return found
        return None
    elif isinstance(want, (np.generic, float)):
        same = np.asarray(want).dtype == np.asarray(got).dtype and np.asarray(want).tobytes() == np.asarray(got).tobytes()
    else:
        same = want == got
    return None if same else "{}: IN has {}, OUT has {}".format(where, _describe(want), _describe(got))


def _array_difference(want: np.ndarray, got: np.ndarray, where: str) -> Optional[str]:
    """Where two arrays of one dtype and shape first differ (byte for byte), or None."""
    if want.tobytes() == got.tobytes():
        return None
    width = want.dtype.itemsize
    wanted, found = np.frombuffer(want.tobytes(), np.uint8), np.frombuffer(got.tobytes(), np.uint8)
    first = int(np.flatnonzero(wanted != found)[0]) // max(width, 1) if want.size else 0
    index = np.unravel_index(first, want.shape) if want.shape else ()
    return "{}: the {} arrays of shape {} differ first at {}: IN has {!r}, OUT has {!r}".format(
        where, want.dtype, want.shape, tuple(int(i) for i in index), want[index].item(), got[index].item())


_MISSING = object()


def _check(kind: str, source: str, written: str, target: str,
           allow_pickle: Optional[bool]) -> Tuple[Optional[str], int]:
    """Read ``written`` (OUT under its temporary name) back and compare it with ``source`` record
    by record: (the first difference or None, the number of records)."""
    theirs, ours = _load(kind, source, allow_pickle), _load(kind, written, False)
    theirs.reset_state()
    ours.reset_state()
    count = 0
    for want, got in zip_longest(iter(theirs), _Progress(ours, "checking " + target), fillvalue=_MISSING):
        if want is _MISSING or got is _MISSING:
            return "record {} is only in {}".format(count, "OUT" if want is _MISSING else "IN"), count
        found = _difference(want, got, "record {}".format(count))
        if found:
            return found, count
        count += 1
    return None, count


def _refuse_existing_out(target: str) -> None:
    if os.path.lexists(target):            # a symlink too, even a dangling one: never written through
        raise _UsageError("OUT {} already exists; the converter never overwrites a file (remove it or choose "
                          "another name)".format(target))


def _temporary_name(target: str) -> str:
    """The hidden name beside OUT that is written and checked before it becomes OUT; a leftover of
    a killed run with the same pid is removed first."""
    folder, name = os.path.split(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise _UsageError("OUT {}: its folder {} does not exist".format(target, folder))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _UsageError("OUT {}: its folder {} is not writable".format(target, folder))
    tmp = os.path.join(folder, ".{}.converting-{}".format(name, os.getpid()))
    if os.path.lexists(tmp):
        os.remove(tmp)
    return tmp


def _open_source(args: argparse.Namespace) -> Tuple[str, str, str, DataFlow]:
    """(IN, OUT, kind, IN's flow) once the arguments are checked; raises _UsageError."""
    source, target = os.fspath(args.input), os.fspath(args.output)
    if not os.path.exists(source):
        raise _UsageError("IN {} does not exist".format(source))
    _refuse_existing_out(target)
    kind = _kind(source)
    first = _first_record(kind, source)
    allow_pickle = True if args.allow_pickle else None  # None: INPUTPIPE_ALLOW_PICKLE decides (and warns once)
    if (kind == "npz" or (first is not None and is_pickle(first))) and not pickle_allowed(allow_pickle):
        raise _UsageError("IN {} holds pickled records, and unpickling runs code chosen by whoever wrote the file: if "
                          "it is your own trusted file, pass --allow-pickle (or set {}=1)".format(source, ALLOW_PICKLE_ENV))
    flow = _load(kind, source, allow_pickle)
    if getattr(flow, "_tensorpack", True) is False:
        raise _UsageError("IN {} is already an inputpipe TFRecord file: nothing to convert".format(source))
    return source, target, kind, flow


def _write_errors() -> Tuple[Type[BaseException], ...]:
    """The errors that mean IN could not be converted or OUT not written (LMDB's own are no
    OSError: a read-only folder is an ``lmdb.ReadonlyError``)."""
    errors: Tuple[Type[BaseException], ...] = (DatasetFormatError, TypeError, ValueError, OSError)
    try:
        import lmdb
    except ImportError:
        return errors
    return errors + (lmdb.Error,)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``python -m inputpipe.dataflow.convert``; returns the exit code (0: converted
    and checked, 1: not converted, 2: bad arguments)."""
    errors = _write_errors()
    try:
        args = _parser().parse_args(argv)
        source, target, kind, flow = _open_source(args)
        tmp = _temporary_name(target)
        _SAVERS[kind](_Progress(flow, "writing " + target), tmp)
    except _UsageError as err:
        print("{}: error: {} ({})".format(_PROG, err, _USAGE), file=sys.stderr)
        return 2
    except errors as err:
        print("{}: error: {} was not converted: {}".format(_PROG, args.input, err), file=sys.stderr)
        return 1
    try:
        difference, count = _check(kind, source, tmp, target, True if args.allow_pickle else None)
        if not difference:
            _refuse_existing_out(target)            # made while this ran: still never overwritten
            os.rename(tmp, target)                 # only a checked file ever has OUT's name
    except BaseException as err:
        os.remove(tmp)
        if isinstance(err, _UsageError):
            print("{}: error: {} ({})".format(_PROG, err, _USAGE), file=sys.stderr)
            return 2
        if not isinstance(err, errors):
            raise
        difference, count = "{}: {}".format(type(err).__name__, err), 0
    if difference:
        if os.path.lexists(tmp):
            os.remove(tmp)
        print("{}: error: {} does not read back as {} ({}); nothing was written to {}".format(
            _PROG, target, source, difference, target), file=sys.stderr)
        return 1
    print("{}: {} -> {}: {} records, each read back and found equal".format(_PROG, source, target, count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
