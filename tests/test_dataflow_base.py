"""Tests of the DataFlow base classes, the length protocol, the guard and seeding."""
import abc
import threading

import numpy as np
import pytest

from inputpipe.dataflow import (
    DataFlow, DataFlowLengthUnknown, DataFlowReentrantGuard, ProxyDataFlow, RNGDataFlow, get_length,
    seeding,
)
from inputpipe.utils.logger import get_logger


class NoLength(DataFlow):
    def __iter__(self):
        yield [1]
        yield [2]


class RaisesNotImplemented(DataFlow):
    """A user flow written against tensorpack's contract: ``__len__`` raises NotImplementedError."""

    def __len__(self):
        raise NotImplementedError("infinite")

    def __iter__(self):
        yield [7]


class Sized(DataFlow):
    def __len__(self):
        return 3

    def __iter__(self):
        for i in range(3):
            yield [i]


class RandomFlow(RNGDataFlow):
    def __iter__(self):
        for _ in range(5):
            yield [int(self.rng.randint(1 << 30))]


def test_list_works_on_flows_without_length():
    assert list(NoLength()) == [[1], [2]]
    assert list(RaisesNotImplemented()) == [[7]]


def test_missing_length_is_both_notimplemented_and_typeerror():
    for flow in (NoLength(), RaisesNotImplemented()):
        with pytest.raises(NotImplementedError):
            len(flow)
        with pytest.raises(TypeError):
            len(flow)
        with pytest.raises(DataFlowLengthUnknown, match=type(flow).__name__):
            len(flow)


def test_get_length():
    assert get_length(Sized()) == 3
    assert get_length(NoLength()) is None
    assert get_length(RaisesNotImplemented(), default=-1) == -1
    assert ProxyDataFlow(Sized()).size() == 3


def test_proxy_forwards_iteration_length_and_reset():
    inner = RandomFlow()
    proxy = ProxyDataFlow(inner)
    proxy.reset_state()
    assert inner.rng is not None
    assert len(list(proxy)) == 5
    assert get_length(proxy) is None


def test_reentrant_guard_refuses_second_concurrent_iteration():
    guard = DataFlowReentrantGuard("MyFlow")

    class Guarded(DataFlow):
        def __iter__(self):
            with guard:
                yield from range(3)

    flow = Guarded()
    first = iter(flow)
    assert next(first) == 0
    with pytest.raises(RuntimeError, match="MyFlow is not re-entrant"):
        next(iter(flow))
    first.close()
    assert list(flow) == [0, 1, 2]


def test_reentrant_guard_across_threads():
    guard = DataFlowReentrantGuard("Shared")
    entered, release = threading.Event(), threading.Event()
    errors = []

    def hold():
        with guard:
            entered.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    assert entered.wait(5)
    try:
        with guard:
            pass
    except RuntimeError as err:
        errors.append(str(err))
    release.set()
    t.join(5)
    assert len(errors) == 1 and "Shared is not re-entrant" in errors[0]


def test_rng_differs_between_resets_by_default():
    seeding.set_global_seed(None)
    a, b = RandomFlow(), RandomFlow()
    a.reset_state()
    b.reset_state()
    assert list(a) != list(b)


def test_global_seed_makes_pipeline_reproducible():
    def run():
        seeding.set_global_seed(42)
        flows = [RandomFlow(), RandomFlow()]
        for f in flows:
            f.reset_state()
        return [list(f) for f in flows]

    try:
        first, second = run(), run()
    finally:
        seeding.set_global_seed(None)
    assert first == second
    assert first[0] != first[1]


def test_worker_rank_changes_the_stream():
    try:
        seeding.enter_worker(0, 7)
        rank0 = seeding.new_rng().randint(1 << 30, size=4)
        seeding.enter_worker(1, 7)
        rank1 = seeding.new_rng().randint(1 << 30, size=4)
        seeding.enter_worker(0, 7)
        again = seeding.new_rng().randint(1 << 30, size=4)
    finally:
        seeding.enter_worker(0, None)
    assert not np.array_equal(rank0, rank1)
    np.testing.assert_array_equal(rank0, again)


def test_set_global_seed_rejects_bad_values():
    with pytest.raises(ValueError, match="non-negative int"):
        seeding.set_global_seed(-1)
    with pytest.raises(ValueError, match="non-negative int"):
        seeding.set_global_seed("3")
    with pytest.raises(ValueError, match=r"set_global_seed expects a non-negative int or None, got True"):
        seeding.set_global_seed(True)


def test_get_logger_names_children_of_the_inputpipe_logger():
    assert get_logger("inputpipe").name == "inputpipe"
    assert get_logger("inputpipe.dataflow.common").name == "inputpipe.dataflow.common"
    assert get_logger("myapp").name == "inputpipe.myapp"


class OldStyle(DataFlow):
    """A flow written against tensorpack's pre-0.9 API: only get_data() and size()."""

    def get_data(self):
        for i in range(3):
            yield [i]

    def size(self):
        return 3


class OldStyleNoSize(DataFlow):
    def get_data(self):
        yield [5]


class OldStyleProxy(ProxyDataFlow):
    def get_data(self):
        for dp in self.ds:
            yield [dp[0] * 10]


def test_a_pre_09_flow_with_only_get_data_and_size_iterates_and_has_a_length():
    df = OldStyle()
    df.reset_state()
    assert list(df) == [[0], [1], [2]]
    assert len(df) == 3 and df.size() == 3
    assert list(df.get_data()) == [[0], [1], [2]]
    no_size = OldStyleNoSize()
    assert list(no_size) == [[5]]
    with pytest.raises(DataFlowLengthUnknown, match="OldStyleNoSize has no length"):
        len(no_size)
    proxy = OldStyleProxy(OldStyle())
    assert list(proxy) == [[0], [10], [20]] and len(proxy) == 3
    # the new API still goes through the compatibility names without recursing
    assert list(Sized().get_data()) == [[0], [1], [2]] and Sized().size() == 3


class Closable(DataFlow):
    def __init__(self):
        self.closed = 0

    def __iter__(self):
        yield [self.closed]

    def close(self):
        self.closed += 1


class NoCloseMethod:
    """A duck-typed flow (no DataFlow base) without close()."""

    def reset_state(self):
        pass

    def __iter__(self):
        return iter([[1]])


def test_close_is_a_no_op_on_a_dataflow_and_a_proxy_forwards_it_down_the_chain():
    NoLength().close()
    inner = Closable()
    outer = ProxyDataFlow(ProxyDataFlow(inner))
    outer.close()
    outer.close()
    assert inner.closed == 2
    ProxyDataFlow(NoCloseMethod()).close()          # a wrapped object without close() is fine


# -- abstract as in tensorpack 0.11 (ABCMeta, __iter__ abstract) ----------------------------------
#: Python's words for it: "with abstract method" before 3.12, "without an implementation for
#: abstract method" since
ABSTRACT_METHOD = "(?:with|without an implementation for) abstract methods?"


def test_dataflow_and_rngdataflow_are_abstract_like_tensorpack():
    for abstract in (DataFlow, RNGDataFlow):
        with pytest.raises(TypeError, match=r"Can't instantiate abstract class {} {} '?__iter__"
                           .format(abstract.__name__, ABSTRACT_METHOD)):
            abstract()
    assert DataFlow.__abstractmethods__ == frozenset({"__iter__"}) == RNGDataFlow.__abstractmethods__
    assert ProxyDataFlow.__abstractmethods__ == frozenset()            # it iterates its input
    assert list(ProxyDataFlow(Sized())) == [[0], [1], [2]]


def test_a_subclass_without_iter_is_refused_at_construction_and_user_abstract_methods_are_enforced():
    class OnlyLength(DataFlow):
        def __len__(self):
            return 1

    with pytest.raises(TypeError, match="abstract class OnlyLength {} '?__iter__".format(ABSTRACT_METHOD)):
        OnlyLength()

    class Reader(DataFlow):              # a user's abstract base, as with tensorpack's ABCMeta
        @abc.abstractmethod
        def read(self, i):
            """Read record i."""

        def __iter__(self):
            for i in range(2):
                yield [self.read(i)]

    with pytest.raises(TypeError, match="abstract class Reader {} '?read".format(ABSTRACT_METHOD)):
        Reader()

    class Doubles(Reader):
        def read(self, i):
            return 2 * i

    assert list(Doubles()) == [[0], [2]]


def test_pre_09_flows_stay_concrete_under_the_abstract_base():
    assert OldStyle.__abstractmethods__ == frozenset() and OldStyleNoSize.__abstractmethods__ == frozenset()

    class OldRandom(RNGDataFlow):        # tensorpack < 0.9: get_data/size on an RNGDataFlow
        def get_data(self):
            for _ in range(2):
                yield [int(self.rng.randint(10))]

        def size(self):
            return 2

    df = OldRandom()
    df.reset_state()
    assert len(df) == 2 and len(list(df)) == 2 and len(list(df.get_data())) == 2


def test_a_length_assigned_to_the_instance_counts_for_the_flows_around_it():
    # tensorpack's wrappers asked ds.__len__(), so `ds.__len__ = lambda: n` on a generator flow
    # gave the chain a length (a tfds-fed loader does this); len() itself ignores it
    from inputpipe.dataflow import BatchData, DataFromGenerator, MapData, MultiProcessMapAndBatchData, MultiThreadRunner
    source = DataFromGenerator(lambda: ([i] for i in range(100)))
    source.__len__ = lambda: 10
    assert len(MapData(source, lambda dp: dp)) == 10
    assert len(BatchData(MapData(source, lambda dp: dp), 3)) == 3
    assert len(BatchData(source, 3, remainder=True)) == 4
    assert len(MultiProcessMapAndBatchData(source, 1, lambda dp: dp, 5)) == 2
    assert len(MultiThreadRunner(lambda: source, 1, 2)) == 10
    source.__len__ = lambda: -1
    with pytest.raises(ValueError, match=r"DataFromGenerator.__len__\(\) should return >= 0, got -1"):
        len(MapData(source, lambda dp: dp))
    with pytest.raises(DataFlowLengthUnknown, match="DataFromGenerator has no length"):
        len(MapData(DataFromGenerator(lambda: iter([])), lambda dp: dp))
