"""close() of a parallel map closes the source iterator it holds (the one kept across epochs of a
strict=False map, or that of an epoch left unfinished) at once: a source that admits one reader
can be read again as soon as close() returns, without waiting for a garbage collection (found by
tune(), whose trial runs read the user's base one after another)."""
import gc
import itertools

import pytest

from inputpipe.dataflow import DataFlow, DataFlowReentrantGuard, MultiProcessMapData, MultiThreadMapData


class OneReader(DataFlow):
    """Numbers 0..999; a second iteration while one is open is refused."""

    def __init__(self):
        self._guard = DataFlowReentrantGuard("OneReader")

    def __iter__(self):
        with self._guard:
            for i in range(1000):
                yield [i]


def same(dp):
    return dp


@pytest.fixture
def no_garbage_collection():
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strict", [False, True], ids=["endless stream", "epoch left unfinished"])
@pytest.mark.parametrize("cls", [MultiThreadMapData, MultiProcessMapData])
def test_close_frees_the_source_for_the_next_reader_at_once(no_garbage_collection, cls, strict):
    source = OneReader()
    df = cls(source, 2, same, strict=strict)
    df.reset_state()
    try:
        itr = iter(df)
        taken = [next(itr)[0] for _ in range(5)]
        assert len(set(taken)) == 5 and all(0 <= t < 1000 for t in taken)     # (unordered: any order)
        itr.close()
    finally:
        df.close()
    assert [dp[0] for dp in itertools.islice(iter(source), 3)] == [0, 1, 2]     # no "not re-entrant"
