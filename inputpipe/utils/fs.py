"""Files: tensorpack's ``utils.fs`` at the same path, and the verified downloads of the dataset readers.

- :func:`get_dataset_path`: where datasets live (``$INPUTPIPE_DATASET``, else tensorpack's
  ``$TENSORPACK_DATASET``, else ``~/tensorpack_data``);
- :func:`download`: a URL into a directory, through a ``.part`` file moved into place only when
  complete (and of ``expect_size`` bytes); :func:`fetch` does the same for a :class:`RemoteFile`
  (several URLs, md5 or size checked), for the dataset readers. A failure is a
  :class:`DatasetDownloadError` naming the URL and the files to put there by hand;
- :func:`mkdir_p`, :func:`recursive_walk`, :func:`normpath`.

Example::

    from inputpipe.utils.fs import download, get_dataset_path
    path = download("http://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", get_dataset_path("cifar10_data"),
                    expect_size=170498071)
"""
import os
import shutil
import urllib.error
import urllib.request
from typing import Iterator, NamedTuple, Optional, Sequence, Tuple

from .compat import md5
from .logger import get_logger
from .utils import execute_only_once  # noqa: F401  (tensorpack's utils.fs has it)

__all__ = ["mkdir_p", "download", "recursive_walk", "get_dataset_path", "normpath"]

logger = get_logger(__name__)

#: Seconds a download may wait for the server (connect or a read) before it is given up.
DOWNLOAD_TIMEOUT = 30.0
_CHUNK_BYTES = 1 << 20
_DEFAULT_ROOT = os.path.join("~", "tensorpack_data")


class DatasetDownloadError(OSError):
    """A dataset file is missing and could not be downloaded, or the download is not the
    standard file (wrong checksum or size). The message says which URL, which directory and
    which files to put there by hand.

    Example::

        try:
            ds = Mnist("train")
        except DatasetDownloadError as err:
            print(err)     # ... put train-images-idx3-ubyte.gz, ... into ~/tensorpack_data/mnist_data
    """


class RemoteFile(NamedTuple):
    """One standard dataset file: its name in the dataset directory, the base URLs to fetch it
    from (the file name is appended), and its md5 and/or size in bytes when known."""

    name: str
    base_urls: Tuple[str, ...]
    md5: Optional[str] = None
    size: Optional[int] = None

    @property
    def urls(self) -> Tuple[str, ...]:
        return tuple(base + self.name for base in self.base_urls)


def get_dataset_path(*names: str) -> str:
    """The default directory of a dataset: ``$INPUTPIPE_DATASET``, else ``$TENSORPACK_DATASET``
    (so data that tensorpack downloaded is found), else ``~/tensorpack_data``, joined with
    ``names``. Nothing is created here.

    Example::

        get_dataset_path("mnist_data")     # e.g. '/home/me/tensorpack_data/mnist_data'
    """
    root = os.environ.get("INPUTPIPE_DATASET") or os.environ.get("TENSORPACK_DATASET") or _DEFAULT_ROOT
    return os.path.join(os.path.expanduser(root), *names)


def _fetch_url(url: str, destination: str, timeout: float) -> None:
    """Write the body of ``url`` to ``destination``; raises OSError (URLError, timeouts) on failure."""
    with urllib.request.urlopen(url, timeout=timeout) as response, open(destination, "wb") as out:
        shutil.copyfileobj(response, out, _CHUNK_BYTES)


def _md5_of(path: str) -> str:
    digest = md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify(remote: RemoteFile, path: str, url: str, component: str) -> None:
    size = os.path.getsize(path)
    if remote.size is not None and size != remote.size:
        raise DatasetDownloadError("{}: the file downloaded from {} has {} bytes, but the standard {} has "
                                   "{}".format(component, url, size, remote.name, remote.size))
    if remote.md5 is not None:
        actual = _md5_of(path)
        if actual != remote.md5:
            raise DatasetDownloadError("{}: the file downloaded from {} has md5 {}, but the standard {} has "
                                       "md5 {}".format(component, url, actual, remote.name, remote.md5))


def _missing_files_message(component: str, directory: str, expected: Sequence[str]) -> str:
    return ("put the file{} {} into {} yourself (or pass the directory that holds them) and try "
            "again".format("s" if len(expected) > 1 else "", ", ".join(expected), directory))


def fetch(remote: RemoteFile, directory: str, component: str, expected: Optional[Sequence[str]] = None) -> str:
    """The path of ``remote`` in ``directory``, downloading and verifying it first when missing.

    ``expected`` lists every file the caller needs in that directory, for the error message
    (default: just this one). A failed download leaves no partial file behind.
    """
    path = os.path.join(directory, remote.name)
    if os.path.isfile(path):
        return path
    expected = list(expected or [remote.name])
    os.makedirs(directory, exist_ok=True)
    partial = path + ".part"
    errors = []
    for url in remote.urls:
        logger.info("%s: downloading %s to %s", component, url, path)
        try:
            _fetch_url(url, partial, DOWNLOAD_TIMEOUT)
            _verify(remote, partial, url, component)
        except DatasetDownloadError as err:
            errors.append(str(err))
        except (OSError, ValueError) as err:  # URLError, HTTPError, timeouts, a malformed URL
            errors.append("{}: cannot download {} ({}: {})".format(component, url, type(err).__name__, err))
        else:
            os.replace(partial, path)
            logger.info("%s: downloaded %s (%d bytes)", component, remote.name, os.path.getsize(path))
            return path
        finally:
            if os.path.exists(partial):
                os.remove(partial)
    raise DatasetDownloadError("{}; {}".format("; ".join(errors), _missing_files_message(component, directory, expected)))


def mkdir_p(dirname: str) -> None:
    """Make the directory ``dirname`` and its parents, like ``mkdir -p`` (nothing for ``""`` or an
    existing directory).

    Example::

        mkdir_p("/tmp/cache/images")
    """
    if dirname is None:
        raise ValueError("mkdir_p: dirname is None")
    if dirname:
        os.makedirs(dirname, exist_ok=True)


def download(url: str, dir: str, filename: Optional[str] = None, expect_size: Optional[int] = None) -> str:
    """Download ``url`` into the directory ``dir`` (made if missing) as ``filename`` (default: the
    last part of the URL) and return the file's path.

    A file already there is kept when it has ``expect_size`` bytes (or when no size is given),
    else downloaded again. The download goes to a ``.part`` file that is moved into place only
    when it is complete and of ``expect_size`` bytes: a failure raises
    :class:`DatasetDownloadError` naming the URL and leaves no
    partial file.

    Example::

        path = download("http://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "/data", expect_size=170498071)
    """
    class _WholeUrl(RemoteFile):
        """A RemoteFile fetched from ``base_urls[0]`` as it is (its name in the directory may differ)."""

        __slots__ = ()

        @property
        def urls(self) -> Tuple[str, ...]:
            return self.base_urls

    name = filename or url.rstrip("/").rsplit("/", 1)[-1]
    if not name or "://" in name or name.endswith(":"):
        raise ValueError("download: cannot tell a file name from the URL {!r}; pass filename=".format(url))
    mkdir_p(dir)
    path = os.path.join(dir, name)
    if os.path.isfile(path):
        size = os.path.getsize(path)
        if expect_size is None or size == expect_size:
            logger.info("download: %s exists, not downloading it again", path)
            return path
        logger.warning("download: %s has %d bytes, expected %d: downloading it again", path, size, expect_size)
        os.remove(path)
    return fetch(_WholeUrl(name, (url,), size=expect_size), dir, "download")


def recursive_walk(rootdir: str) -> Iterator[str]:
    """The path of every file under ``rootdir``, recursively (``os.walk``'s order).

    Example::

        images = [p for p in recursive_walk("/data/train") if p.endswith(".jpg")]
    """
    for root, _, names in os.walk(rootdir):
        for name in names:
            yield os.path.join(root, name)


def normpath(path: str) -> str:
    """``os.path.normpath(path)``, except for a URL of remote storage (``gs://...``, ``s3://...``:
    anything with ``://``), which is kept as it is.

    Example::

        assert normpath("/data//train/") == "/data/train" and normpath("gs://b/x/") == "gs://b/x/"
    """
    return path if "://" in path else os.path.normpath(path)
