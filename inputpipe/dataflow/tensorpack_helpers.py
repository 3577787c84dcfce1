"""The small ``tensorpack.utils`` helpers that tensorpack 0.11's data modules import, working here.

tensorpack's dataflow modules import helpers at module level (``get_tqdm`` in ``dataflow.common``,
``get_rng`` in ``dataflow.base``, ``download`` in every dataset module, ...), and scripts import
them from there: ``from tensorpack.dataflow.common import get_tqdm``. inputpipe's modules expose
the same names (outside their ``__all__``, as tensorpack does), all gathered here. Most are
defined at tensorpack's own paths in :mod:`inputpipe.utils` (``utils.argtools``, ``utils.develop``,
``utils.fs``, ``utils.timer``, ``utils.concurrency``: the same objects); the few that only the
data modules had are defined here. They do what tensorpack documents, with inputpipe's pieces
underneath:

- :func:`get_rng` is :func:`inputpipe.dataflow.seeding.new_rng`: fresh entropy by default,
  reproducible under ``set_global_seed`` (tensorpack's ``fix_rng_seed``);
- :func:`download` is the verified downloader of the dataset readers: a ``.part`` file moved into
  place only when complete and, with ``expect_size``, of that size (tensorpack only logs a
  mismatch; here it is a ``DatasetDownloadError``);
- :func:`enable_death_signal` is what inputpipe's workers do: the process is killed (SIGKILL) when
  its parent dies (tensorpack sends SIGHUP, and only when ``python-prctl`` is installed);
- :func:`get_caffe_pb` is a stand-in: tensorpack compiled Caffe's protobuf with ``protoc``;
  inputpipe reads Caffe LMDB files without protobuf (``CaffeLMDB``), and calling it says so.

Nothing here imports TensorFlow or OpenCV.

Example::

    from inputpipe.dataflow.common import get_tqdm
    from inputpipe.dataflow.base import get_rng
    rng = get_rng()
    for _ in get_tqdm(range(3), disable=True):
        rng.rand()
"""
import weakref
from typing import Any

from ..utils.argtools import call_only_once, log_once, memoized_method, shape2d
from ..utils.concurrency import DIE, enable_death_signal, ensure_proc_terminate, start_proc_mask_signal
from ..utils.develop import create_dummy_class, deprecated, log_deprecated
from ..utils.fs import download, mkdir_p
from ..utils.timer import timed_operation
from ..utils.utils import PROGRESS_REFRESH_ENV, get_rng, get_tqdm, get_tqdm_kwargs  # noqa: F401 (tensorpack's)

__all__ = ["get_rng", "get_tqdm_kwargs", "get_tqdm", "log_once", "log_deprecated", "deprecated", "timed_operation",
           "mkdir_p", "download", "maybe_download", "create_dummy_class", "shape2d", "call_only_once", "memoized_method",
           "enable_death_signal", "ensure_proc_terminate", "start_proc_mask_signal", "DIE", "del_weakref",
           "get_caffe_pb"]


# ------------------------------------------------------------------------------------------- files

def maybe_download(url: str, work_directory: str) -> str:
    """The path of ``url``'s file in ``work_directory``, downloaded there first when it is missing
    (tensorpack's helper of the MNIST and Caltech101 readers); see :func:`download`.

    Example::

        path = maybe_download("http://yann.lecun.com/exdb/mnist/t10k-labels-idx1-ubyte.gz", "/data/mnist")
    """
    return download(url, work_directory)


# ------------------------------------------------------------------------------------------ objects

def del_weakref(x: "weakref.ReferenceType[Any]") -> None:
    """Stop the object a weak reference points to, if it is still alive: its ``close()`` (what
    stops an inputpipe flow's workers), else its ``__del__`` (tensorpack's runners').

    Example::

        weakref.finalize(owner, del_weakref, weakref.ref(runner))
    """
    obj = x()
    if obj is None:
        return
    stop = getattr(obj, "close", None) or getattr(obj, "__del__", None)
    if stop is not None:
        stop()


# ---------------------------------------------------------------------------------------- stand-ins

def get_caffe_pb() -> Any:
    """A stand-in: tensorpack compiled Caffe's ``caffe.proto`` with ``protoc`` to decode the
    ``Datum`` records of Caffe LMDB files. inputpipe decodes them without protobuf; calling this
    raises ``NotImplementedError`` saying so.

    Example::

        ds = CaffeLMDB("/data/ilsvrc12_train_lmdb", shuffle=False)   # instead of get_caffe_pb()
    """
    raise NotImplementedError(
        "get_caffe_pb: tensorpack built Caffe's protobuf module with protoc to decode the Datum records of Caffe "
        "LMDB files; inputpipe needs neither protobuf nor Caffe for them: read such a file with "
        "inputpipe.dataflow.CaffeLMDB(lmdb_path, shuffle=...), or decode one record with "
        "inputpipe.dataflow.caffe_datum.parse_datum(value)")

