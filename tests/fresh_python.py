"""Run a Python script as a new process without paying TensorFlow's import each time.

Many tests run a script that imports TensorFlow (the docs' snippets, the examples) and check
what it printed: a new interpreter spends 5-6 s of CPU importing TensorFlow before the script's
first line, most of those tests' cost. :func:`run_python` takes the arguments of
``subprocess.run([sys.executable, ...])`` and runs the script in a process forked from a
*zygote*: an interpreter of this xdist worker that imported TensorFlow once and waits. The
forked process is the script's own: its own pid, working directory, environment, ``sys.argv``,
``sys.path``, standard streams (files read back as ``stdout``/``stderr``), exit code or signal,
and its interpreter's normal exit (``atexit`` handlers, non-daemon threads joined). It starts
with TensorFlow (and numpy) already imported, as a script that imports them first would have
them; numpy's global generator and Python's ``random`` are reseeded from the OS.

Only for scripts that import TensorFlow: one that does not starts and ends faster in a new
interpreter (a process holding TensorFlow takes about 1 s to exit, and every process it forks,
a parallel map's workers, copies its larger page tables).

What cannot be the same falls back to ``subprocess.run``: an interpreter other than
``sys.executable``, options other than ``-c``/``-m``/``-W``, standard input, and environment
variables that TensorFlow or the interpreter read when they start (``TF_*``, ``CUDA_*``,
``OMP_*``, ``PYTHON*`` other than ``PYTHONPATH``...) that differ from a zygote's: a zygote is
kept per set of those (at most :data:`MOST_ZYGOTES` per worker). Tests about a fresh
interpreter itself (what importing a module imports, start-up order, signals) use
``subprocess`` directly.

The zygotes are this worker's children (tests/conftest.py leaves them out of its leak check,
not what they fork), end when it ends (``PR_SET_PDEATHSIG``) or closes their pipe.

Example::

    proc = run_python([sys.executable, str(script)], cwd=str(tmp_path), env=env,
                      capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
"""
import atexit
import json
import locale
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

#: Zygotes one worker keeps (each holds an interpreter with TensorFlow: ~0.7 GB, shared with
#: what it forks); more distinct start-up environments run as ordinary subprocesses.
MOST_ZYGOTES = 2
#: Seconds a zygote may take to import TensorFlow (6 s alone; far more beside busy suites).
START_TIMEOUT = 300
#: Environment variables read when TensorFlow or the interpreter starts.
_START_UP_PREFIXES = ("TF_", "TF2_", "CUDA", "NVIDIA", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "XLA_", "PYTHON",
                      "LD_", "MALLOC", "GLIBC")
_HEADER = struct.Struct("!I")
_ZYGOTE_SCRIPT = os.path.abspath(__file__)

#: pids of the zygotes alive in this process (tests/conftest.py's leak check leaves them out).
ZYGOTE_PIDS = set()
_zygotes = {}
_lock = threading.Lock()


def _start_up_environment(env):
    return tuple(sorted((key, value) for key, value in env.items()
                        if key.startswith(_START_UP_PREFIXES) and key != "PYTHONPATH"))


def _parse(args):
    """``(kind, target, argv, warning options)`` for ``[sys.executable, ...]``, or None when the
    command is not one a zygote runs as an interpreter would."""
    if not args or args[0] != sys.executable:
        return None
    rest, warnings = list(args[1:]), []
    while rest and rest[0] == "-W" and len(rest) > 1:
        warnings.append(rest[1])
        rest = rest[2:]
    if not rest:
        return None
    if rest[0] in ("-c", "-m"):
        if len(rest) < 2:
            return None
        argv = ["-c"] + rest[2:] if rest[0] == "-c" else [rest[1]] + rest[2:]
        return rest[0], rest[1], argv, warnings
    if rest[0].startswith("-"):
        return None
    return "path", rest[0], rest, warnings


class _Zygote:
    def __init__(self, start_up):
        env = dict(os.environ)
        for key in [key for key in env if key.startswith(_START_UP_PREFIXES) and key != "PYTHONPATH"]:
            del env[key]
        env.update(start_up)
        self._log = tempfile.NamedTemporaryFile(prefix="inputpipe-zygote-", suffix=".log", delete=False)
        self.process = subprocess.Popen([sys.executable, _ZYGOTE_SCRIPT], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._log, env=env)
        ZYGOTE_PIDS.add(self.process.pid)
        try:
            self._read(START_TIMEOUT, "imported TensorFlow")
        except BaseException:
            self.close()
            raise

    def _read(self, timeout, waiting_for):
        """The next message of the zygote (a JSON object), within ``timeout`` seconds."""
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        data = b""
        while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack(data[:_HEADER.size])[0]:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("the test zygote (pid {}) has not {} in {:.0f} s".format(
                    self.process.pid, waiting_for, timeout))
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RuntimeError("the test zygote (pid {}) ended (exit code {}) before it {}; its log:\n{}".format(
                    self.process.pid, self.process.wait(5), waiting_for, self.log_text()))
            data += chunk
        return json.loads(data[_HEADER.size:].decode("utf-8"))

    def log_text(self):
        with open(self._log.name, "rb") as log:
            return log.read()[-4000:].decode("utf-8", "replace")

    def run(self, request, timeout):
        body = json.dumps(request).encode("utf-8")
        self.process.stdin.write(_HEADER.pack(len(body)) + body)
        self.process.stdin.flush()
        pid = self._read(60, "forked the script")["pid"]
        try:
            return self._read(float("inf") if timeout is None else timeout, "seen the script end")["status"]
        except BaseException:          # its timeout, or the test's own (pytest-timeout) while it waited
            _kill_tree(pid)
            self._read(60, "reaped the killed script")
            raise

    def close(self):
        ZYGOTE_PIDS.discard(self.process.pid)
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self._log.close()
        os.unlink(self._log.name)


def _kill_tree(pid):
    import psutil

    try:
        victims = [psutil.Process(pid)]
        victims += victims[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for victim in victims:
        try:
            victim.kill()
        except psutil.NoSuchProcess:
            pass


def _close_all():
    with _lock:
        for zygote in _zygotes.values():
            zygote.close()
        _zygotes.clear()


atexit.register(_close_all)


def _decode(data, text):
    if not text:
        return data
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def run_python(args, *, cwd=None, env=None, capture_output=False, text=False, timeout=None, check=False):
    """``subprocess.run(args, ...)`` for ``args = [sys.executable, script or -c code or -m module, ...]``,
    run in a process forked from a zygote that imported TensorFlow (see the module doc); a
    ``subprocess.CompletedProcess`` either way. Output is always captured (as ``capture_output``)."""
    parsed = _parse(args)
    env = dict(os.environ if env is None else env)
    start_up = _start_up_environment(env)
    with _lock:
        zygote = _zygotes.get(start_up)
        if parsed is not None and zygote is None and len(_zygotes) < MOST_ZYGOTES:
            zygote = _zygotes[start_up] = _Zygote(start_up)
        if parsed is None or zygote is None:
            return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=text, timeout=timeout,
                                  check=check)
        kind, target, argv, warnings = parsed
        with tempfile.TemporaryDirectory(prefix="inputpipe-fresh-python-") as streams:
            out, err = os.path.join(streams, "stdout"), os.path.join(streams, "stderr")
            request = {"kind": kind, "target": target, "argv": argv, "warnings": warnings, "env": env,
                       "cwd": os.path.abspath(cwd or os.getcwd()), "stdout": out, "stderr": err}
            try:
                status = zygote.run(request, timeout)
            except TimeoutError:
                raise subprocess.TimeoutExpired(args, timeout, _read_bytes(out), _read_bytes(err)) from None
            except BaseException:      # the zygote broke (or the test was stopped): the next call starts another
                del _zygotes[start_up]
                zygote.close()
                raise
            stdout, stderr = _decode(_read_bytes(out), text), _decode(_read_bytes(err), text)
    proc = subprocess.CompletedProcess(args, status, stdout, stderr)
    if check:
        proc.check_returncode()
    return proc


def _read_bytes(path):
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except FileNotFoundError:
        return b""


# ----------------------------------------------------------------------------------- the zygote

def _message(payload):
    body = json.dumps(payload).encode("utf-8")
    data = _HEADER.pack(len(body)) + body
    while data:
        data = data[os.write(1, data):]


def _request():
    """The next request from the worker, or None when it closed the pipe."""
    data = b""
    while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack(data[:_HEADER.size])[0]:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return None
        data += chunk
    return json.loads(data[_HEADER.size:].decode("utf-8"))


def _serve():
    """Import TensorFlow, then fork a process for each request; returns the request in the forked
    process (which runs it), None in the zygote when the worker is gone."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)     # PR_SET_PDEATHSIG: end with the worker
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        return None
    import numpy  # noqa: F401
    import tensorflow  # noqa: F401

    _message({"ready": True})
    while True:
        request = _request()
        if request is None:
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return request
        _message({"pid": pid})
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        _message({"status": code})


def _become(request):
    """In the forked process: take the script's streams, directory, environment and arguments."""
    import random
    import runpy
    import warnings

    import numpy as np

    stdin = os.open(os.devnull, os.O_RDONLY)
    stdout = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    stderr = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None                 # found again from TMPDIR & co.
    random.seed()
    np.random.seed()
    paths = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    first = {"path": os.path.dirname(os.path.abspath(request["target"])), "-c": "", "-m": os.getcwd()}[request["kind"]]
    sys.path[:] = [first] + paths + [p for p in sys.path[1:] if p not in paths]
    sys.argv[:] = request["argv"]
    for option in request["warnings"]:
        sys.warnoptions.append(option)
        warnings._setoption(option)
    if request["kind"] == "path":
        runpy.run_path(request["target"], run_name="__main__")
    elif request["kind"] == "-m":
        runpy.run_module(request["target"], run_name="__main__", alter_sys=True)
    else:
        import types

        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(request["target"], "<string>", "exec"), main.__dict__)


if __name__ == "__main__":
    _work = _serve()
    if _work is not None:
        _become(_work)          # in the forked process: its exit is the script's
