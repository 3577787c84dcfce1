"""Where the supported stacks differ: Python 3.7 to 3.13, TensorFlow 1.15, 2.15 and the current release.

Every difference of the Python or TensorFlow API that inputpipe meets is bridged here, once; the
rest of the code calls these names and never checks a version itself. Supported and tested:
TensorFlow 1.15 on Python 3.7 (numpy 1.18), TensorFlow 2.15 with numpy 1.x, and the current
TensorFlow on Python 3.11 and 3.13 (docs/getting_started.md, "Supported stacks").

The Python part is imported with ``inputpipe.dataflow`` and costs nothing; the TensorFlow part
imports TensorFlow only when one of its functions is called, so this module stays importable
where ``import tensorflow`` would be slow or impossible.

Example::

    from inputpipe.utils.compat import numpy_function, prod

    prod([2, 3, 4])                                            # 24, also on Python 3.7
    value = numpy_function(read_stat, [], tf.float32, stateful=True)   # any TensorFlow
"""
import contextlib
import errno
import gzip
import hashlib
import io
import inspect
import mmap
import os
import pickle
import sys
import threading
from functools import reduce
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, List, Optional, Sequence, cast

if TYPE_CHECKING or sys.version_info >= (3, 8):
    from typing import Literal, Protocol
else:                                                   # Python 3.7: the same names, from the backport
    from typing_extensions import Literal, Protocol

__all__ = ["Literal", "Protocol", "Thread", "BadGzipFile", "prod", "native_thread_id", "pidfd_open", "madvise", "md5",
           "distribution_files", "pickle_loads", "npz_array", "tf_major_version", "numpy_function", "list_physical_devices",
           "dataset_from_generator", "without_injected_prefetch", "map_fn", "where", "tensor_ref",
           "shape_text", "quiet_tf_deprecations", "session_c_api"]


# ---- Python --------------------------------------------------------------------------------------

def prod(values: Iterable[int]) -> int:
    """The product of ``values`` (1 for none): ``math.prod``, which Python 3.7 lacks, for integers.

    Example::

        prod((2, 3, 4))      # 24
    """
    return reduce(lambda a, b: a * b, values, 1)


def native_thread_id() -> Optional[int]:
    """The calling thread's id in the kernel (``threading.get_native_id()``, Python 3.8+); on 3.7
    read from Linux's ``/proc/thread-self`` (no ctypes: a ``dlopen`` in a thread can deadlock a
    process forked meanwhile), None where that is not there."""
    get_native_id = getattr(threading, "get_native_id", None)
    if get_native_id is not None:
        return get_native_id()
    try:
        return int(os.readlink("/proc/thread-self").rsplit("/", 1)[1])
    except (OSError, ValueError, IndexError):
        return None


def _linux_syscall() -> Optional[Callable[..., int]]:
    """libc's ``syscall`` where Python lacks a wrapper (3.7, 3.8), looked up at import: a
    ``dlopen`` later, in a thread, could leave a process forked meanwhile deadlocked."""
    if hasattr(os, "pidfd_open") or not sys.platform.startswith("linux"):
        return None
    import ctypes
    function = ctypes.CDLL(None, use_errno=True).syscall
    return cast(Callable[..., int], function)


_SYSCALL = _linux_syscall()
_SYS_PIDFD_OPEN = 434         # the same number on every Linux architecture (5.3+)


def pidfd_open(pid: int) -> int:
    """A descriptor that becomes readable when process ``pid`` exits (``os.pidfd_open``, Python
    3.9+; the Linux system call itself on 3.7 and 3.8). OSError where the kernel has none (before
    5.3, ENOSYS) or refuses it, as from ``os.pidfd_open``."""
    opener = getattr(os, "pidfd_open", None)
    if opener is not None:
        return opener(pid)
    if _SYSCALL is None:
        raise OSError(errno.ENOSYS, "pidfd_open is Linux's")
    import ctypes
    fd = _SYSCALL(_SYS_PIDFD_OPEN, ctypes.c_int(pid), ctypes.c_uint(0))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


if TYPE_CHECKING or sys.version_info >= (3, 8):
    Thread = threading.Thread
else:
    class Thread(threading.Thread):
        """``threading.Thread`` with Python 3.8's ``native_id``: the thread's id in the kernel
        (None until the thread runs), so other threads can read its CPU time from /proc."""

        native_id: Optional[int] = None

        def _bootstrap_inner(self) -> None:      # where 3.8's Thread records it
            self.native_id = native_thread_id()
            super()._bootstrap_inner()

#: What ``gzip`` raises for a file that is not gzip (``OSError`` before Python 3.8, which added
#: this subclass of it).
BadGzipFile = getattr(gzip, "BadGzipFile", OSError)


def madvise(mapped: mmap.mmap, advice: int, start: int, length: int) -> bool:
    """``mapped.madvise(advice, start, length)``; False where Python has no ``mmap.madvise``
    (3.7), so the caller does what the advice would have done itself. OSError/ValueError from
    the kernel propagate, as from ``madvise``."""
    method = getattr(mapped, "madvise", None)
    if method is None:
        return False
    method(advice, start, length)
    return True


def md5() -> Any:
    """An MD5 hash object for checksums (not security): ``usedforsecurity=False`` where Python
    takes it (3.9+), so a FIPS build of OpenSSL allows it."""
    try:
        return hashlib.md5(usedforsecurity=False)
    except TypeError:
        return hashlib.md5()


def distribution_files(name: str) -> List[Any]:
    """The files an installed distribution ships (``importlib.metadata.files``, Python 3.8+; the
    ``importlib_metadata`` backport on 3.7 where installed), each with ``.name`` and ``.locate()``;
    empty when it is not installed or not known."""
    try:
        if sys.version_info >= (3, 8):
            from importlib import metadata
        else:
            import importlib_metadata as metadata
        return list(metadata.files(name) or ())
    except Exception:                   # not installed (PackageNotFoundError), no backport, odd metadata
        return []


def pickle_loads(data: bytes) -> Any:
    """``pickle.loads`` that also reads pickles written on a newer stack: protocol 5 on Python 3.7
    (through the ``pickle5`` backport where it is installed; else pickle's own error) and numpy 2's
    module paths (``numpy._core``) with numpy 1.x (which has at most some of them).

    Example::

        datapoint = pickle_loads(record)     # a record tensorpack pickled on Python 3.11, numpy 2
    """
    module: Any = pickle
    if sys.version_info < (3, 8):
        try:
            import pickle5 as module
        except ImportError:
            pass

    class Unpickler(module.Unpickler):          # type: ignore[misc,name-defined,unused-ignore]
        def find_class(self, module_name: str, name: str) -> Any:
            if module_name.split(".")[:2] == ["numpy", "_core"] and _numpy_lacks_core():
                module_name = "numpy.core" + module_name[len("numpy._core"):]
            return super().find_class(module_name, name)

    return Unpickler(io.BytesIO(data)).load()


def npz_array(archive: Any, name: str) -> Any:
    """``archive[name]`` of a .npz opened by ``np.load(path, allow_pickle=True)``; with a numpy
    before 1.26, an object array that numpy 2 pickled (naming ``numpy._core``, which numpy's own
    unpickler cannot find there) is unpickled by :func:`pickle_loads`."""
    if not _numpy_lacks_core():
        return archive[name]
    import numpy as np
    with archive.zip.open(name + ".npy") as member:
        version = np.lib.format.read_magic(member)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        dtype = read_header(member)[2]
        if dtype.hasobject:
            return pickle_loads(member.read())
    return archive[name]


def _numpy_lacks_core() -> bool:
    """Whether numpy is 1.x, which has no (or, from 1.26, only some) of numpy 2's ``numpy._core``
    modules: ``numpy.core`` holds what they name."""
    import numpy as np
    return np.lib.NumpyVersion(np.__version__) < "2.0.0"


# ---- TensorFlow ----------------------------------------------------------------------------------
# Each function imports TensorFlow when called (already imported by then, so it costs a lookup).

def tf_major_version() -> int:
    """1 on TensorFlow 1.x, 2 on 2.x (and later majors)."""
    import tensorflow as tf
    return int(tf.__version__.split(".")[0])


def numpy_function(func: Callable, inp: Sequence[Any], Tout: Any, stateful: bool = True,
                   name: Optional[str] = None) -> Any:
    """``tf.numpy_function`` with ``stateful`` on every TensorFlow (TF 1.15's has no ``stateful``:
    there ``tf.compat.v1.py_func``, the same op, takes it).

    Example::

        value = numpy_function(lambda: np.float32(1), [], tf.float32, stateful=True, name="one")
    """
    import tensorflow as tf
    if "stateful" in _parameters(tf.numpy_function):
        return tf.numpy_function(func, inp, Tout, stateful=stateful, name=name)
    if stateful:                        # TF 1.15's numpy_function is always stateful
        return tf.numpy_function(func, inp, Tout, name=name)
    from tensorflow.python.ops import script_ops   # the op behind it (tf.compat.v1.py_func logs a deprecation)
    return script_ops.py_func_common(func, inp, Tout, stateful=False, name=name)


def list_physical_devices(device_type: Optional[str] = None) -> List[Any]:
    """``tf.config.list_physical_devices`` (``tf.config.experimental`` in TF 1.15)."""
    import tensorflow as tf
    lister = getattr(tf.config, "list_physical_devices", None) or tf.config.experimental.list_physical_devices
    return lister(device_type)


def dataset_from_generator(generator: Callable, output_signature: Any) -> Any:
    """``tf.data.Dataset.from_generator(generator, output_signature=...)``; TF 1.15 has no
    ``output_signature``, so there the same structure of ``tf.TensorSpec`` is passed as
    ``output_types`` and ``output_shapes``."""
    import tensorflow as tf
    from_generator = tf.data.Dataset.from_generator
    if "output_signature" in _parameters(from_generator):
        return from_generator(generator, output_signature=output_signature)
    return from_generator(generator, output_types=tf.nest.map_structure(lambda s: s.dtype, output_signature),
                          output_shapes=tf.nest.map_structure(lambda s: s.shape, output_signature))


def without_injected_prefetch(dataset: Any) -> Any:
    """``dataset`` with tf.data's automatic read-ahead (``inject_prefetch``, TF 2.8+) turned off;
    ``dataset`` itself where TensorFlow has no such option (TF 1.15 adds no read-ahead)."""
    import tensorflow as tf
    options = tf.data.Options()
    if not hasattr(options.experimental_optimization, "inject_prefetch"):
        return dataset
    options.experimental_optimization.inject_prefetch = False
    return dataset.with_options(options)


def map_fn(fn: Callable, elems: Any, fn_output_signature: Any, **kwargs: Any) -> Any:
    """``tf.map_fn(fn, elems, fn_output_signature=...)``; TF 1.15 takes the dtype as ``dtype``
    (a ``tf.TensorSpec``'s shape is then set on the result by ``fn``'s ops)."""
    import tensorflow as tf
    if "fn_output_signature" in _parameters(tf.map_fn):
        return tf.map_fn(fn, elems, fn_output_signature=fn_output_signature, **kwargs)
    dtype = tf.nest.map_structure(lambda s: s.dtype if isinstance(s, tf.TensorSpec) else tf.as_dtype(s),
                                  fn_output_signature)
    return tf.map_fn(fn, elems, dtype=dtype, **kwargs)


def where(condition: Any, x: Any, y: Any, name: Optional[str] = None) -> Any:
    """TF 2's ``tf.where(condition, x, y)``, which broadcasts its arguments like ``np.where``
    (TF 1.15's ``tf.where`` wants ``x`` and ``y`` of the condition's shape; its TF 2 version is
    ``tf.compat.v2.where``, the same function on TF 2)."""
    import tensorflow as tf
    return tf.compat.v2.where(condition, x, y, name=name)


def tensor_ref(tensor: Any) -> Any:
    """A hashable key for a graph tensor: ``tensor.ref()`` (``experimental_ref()`` in TF 1.15)."""
    ref = getattr(tensor, "ref", None) or tensor.experimental_ref
    return ref()


def shape_text(shape: Any) -> str:
    """A ``tf.TensorShape`` as TF 2 prints it, on every TensorFlow: ``(None, 3)`` (TF 1.15 prints
    ``(?, 3)``), ``<unknown>`` for an unknown rank, so error messages read the same everywhere.

    Example::

        shape_text(tf.TensorShape([None, 3]))     # '(None, 3)'
    """
    if shape.ndims is None:
        return "<unknown>"
    return str(tuple(shape.as_list()))


@contextlib.contextmanager
def quiet_tf_deprecations() -> Iterator[None]:
    """No "... is deprecated" log lines from TensorFlow for the ops inputpipe builds inside: TF 1.15
    prints them for plain graph-mode calls (a resource variable, say), about migrating to TF 2.
    The user's own calls outside keep their warnings.

    Example::

        with quiet_tf_deprecations():
            variable = tf.compat.v1.Variable(0, use_resource=True)
    """
    from tensorflow.python.util import deprecation
    with deprecation.silence():
        yield


def session_c_api() -> Any:
    """TensorFlow's private module of the session C API wrappers (``TF_NewBufferFromString``,
    ``TF_DeleteBuffer``, ...): ``pywrap_tf_session`` (TF 2.2+), ``pywrap_tensorflow`` in TF 1.15;
    None where neither can be imported (callers then use the public API)."""
    try:
        from tensorflow.python.client import pywrap_tf_session
        return pywrap_tf_session
    except ImportError:
        pass
    try:
        from tensorflow.python import pywrap_tensorflow
        return pywrap_tensorflow
    except ImportError:
        return None


def _parameters(function: Callable) -> Any:
    return inspect.signature(function).parameters
