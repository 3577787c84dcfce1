"""A worker's exception keeps its type: ``except ValueError`` (etc.) still catches it, as a
WorkerError carrying the worker's traceback, for processes and threads, runners and maps."""
import pickle

import pytest

from inputpipe.dataflow import (
    DataFlow, MultiProcessMapData, MultiProcessRunnerZMQ, MultiThreadMapData, MultiThreadRunner,
)
from inputpipe.utils.errors import WorkerError, exception_type_named, worker_error_class


class CodeError(Exception):
    """A user exception whose constructor takes other arguments than a message."""

    def __init__(self, code, detail):
        super().__init__(code, detail)
        self.code = code


class Refuses(Exception):
    """An exception class that cannot be derived from."""

    def __init_subclass__(cls, **kwargs):
        raise TypeError("Refuses is final")


class Raises(DataFlow):
    def __init__(self, make_error):
        self.make_error = make_error

    def __len__(self):
        return 5

    def __iter__(self):
        yield [0]
        raise self.make_error()


def raise_value_error():
    return ValueError("bad value 3")


def raise_key_error():
    return KeyError("no key 'x'")


def raise_code_error():
    return CodeError(42, "the answer")


def raise_refuses():
    return Refuses("odd one")


def raise_os_error():
    return FileNotFoundError(2, "No such file", "/nowhere")


class Indexed(DataFlow):
    def __len__(self):
        return 10

    def __iter__(self):
        for i in range(10):
            yield [i]


def map_value_error(dp):
    if dp[0] == 2:
        raise ValueError("bad value 3")
    return dp


def map_key_error(dp):
    if dp[0] == 2:
        raise KeyError("no key 'x'")
    return dp


def map_code_error(dp):
    if dp[0] == 2:
        raise CodeError(42, "the answer")
    return dp


def map_refuses(dp):
    if dp[0] == 2:
        raise Refuses("odd one")
    return dp


def map_os_error(dp):
    if dp[0] == 2:
        raise FileNotFoundError(2, "No such file", "/nowhere")
    return dp


CASES = [  # (error factory, map function, the class it is caught as, text in the message)
    (raise_value_error, map_value_error, ValueError, "raised ValueError: bad value 3"),
    (raise_key_error, map_key_error, KeyError, "raised KeyError: \"no key 'x'\""),
    (raise_code_error, map_code_error, CodeError, "raised CodeError: (42, 'the answer')"),
    (raise_refuses, map_refuses, WorkerError, "raised Refuses: odd one"),
    (raise_os_error, map_os_error, WorkerError, "raised FileNotFoundError: [Errno 2] No such file: '/nowhere'"),
]


def _flows(make_error, map_func):
    return {
        "process runner": MultiProcessRunnerZMQ(Raises(make_error), num_proc=1),
        "thread runner": MultiThreadRunner(lambda: Raises(make_error), num_prefetch=2, num_thread=1),
        "process map": MultiProcessMapData(Indexed(), 2, map_func, strict=True),
        "thread map": MultiThreadMapData(Indexed(), 2, map_func, strict=True),
    }


@pytest.mark.timeout(60, method="signal")
@pytest.mark.parametrize("kind", ["process runner", "thread runner", "process map", "thread map"])
@pytest.mark.parametrize("make_error,map_func,caught_as,text", CASES, ids=[c[2].__name__ for c in CASES])
def test_the_original_exception_type_is_caught_with_the_workers_traceback(kind, make_error, map_func, caught_as, text):
    df = _flows(make_error, map_func)[kind]
    df.reset_state()
    with df:
        with pytest.raises(caught_as) as info:
            for _ in range(20):
                list(df)
    err = info.value
    assert isinstance(err, WorkerError)
    assert text in str(err) and "Traceback in the worker:" in str(err)
    assert err.remote_traceback and ("in __iter__" in err.remote_traceback or "in map_" in err.remote_traceback)
    if caught_as is WorkerError:
        assert type(err) is WorkerError and err.original_type is None
        assert not isinstance(err, (Refuses, OSError))
    else:
        assert err.original_type is caught_as and type(err).__name__ == "WorkerError[{}]".format(caught_as.__name__)


def test_derived_classes_are_made_once_per_type_and_odd_types_fall_back():
    assert worker_error_class(ValueError) is worker_error_class(ValueError)
    assert issubclass(worker_error_class(KeyError), (WorkerError, KeyError))
    for odd in (OSError, Refuses, SystemExit, KeyboardInterrupt, StopIteration, None, int, "ValueError"):
        assert worker_error_class(odd) is WorkerError, odd
    err = worker_error_class(KeyError)("Flow", "worker 0", 123, None, "Traceback ...", "raised KeyError: 'k'")
    assert str(err) == "Flow: worker 0 (pid 123) raised KeyError: 'k'\n\nTraceback in the worker:\nTraceback ..."
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is type(err) and str(copy) == str(err) and copy.pid == 123


def test_exception_types_are_found_by_name_only_when_already_imported():
    assert exception_type_named("builtins", "KeyError") is KeyError
    assert exception_type_named(__name__, "CodeError") is CodeError
    assert exception_type_named("__mp_main__", "NoSuchThing") is None
    assert exception_type_named("a_module_nobody_imported", "Error") is None
    assert exception_type_named("builtins", "len") is None            # not an exception class
    assert exception_type_named(__name__, "test_exception_types_are_found_by_name_only_when_already_imported") is None
