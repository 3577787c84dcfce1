"""Resumable transforms, batching and combining flows: a run cut after k datapoints, its state
through JSON and a fresh flow restored from it (under another global seed) continue exactly as the
uninterrupted run, across epochs (see tests/resume_helpers.py)."""
import numpy as np
import pytest

from inputpipe.dataflow import (
    AugmentImageComponent, AugmentImageComponents, AugmentImageCoordinates, BatchData, BatchDataByShape, CacheData, ConcatData, DataFromList, FilterData,
    FixedSizeData, JoinData, LocallyShuffleData, MapData, MapDataComponent, PrintData, RandomChooseData,
    RandomMixData, RepeatedData, RepeatedDataPoint, SelectComponent, imgaug,
)
from resume_helpers import check_resume, epochs, take


def numbers(n=7, shuffle=True):
    return DataFromList([[i, "s%d" % i] for i in range(n)], shuffle=shuffle)


def shapes(n=13):
    return DataFromList([[np.zeros((i % 3 + 1,), "int32") + i, i] for i in range(n)], shuffle=True)


class _Negate(imgaug.ImageAugmentor):
    """A deterministic augmentor: its output depends on the image only, so it resumes exactly."""

    def _get_augment_params(self, img):
        return None

    def _augment(self, img, param):
        return -img


CASES = {
    # name: (factory, cuts: 0, mid-epoch, exactly at an epoch's end, across epochs)
    "MapData": (lambda: MapData(numbers(), lambda dp: None if dp[0] == 3 else [dp[0] * 2]), [0, 2, 6, 7, 9]),
    "MapDataComponent": (lambda: MapDataComponent(numbers(), lambda x: x + 100, 0), [0, 3, 7, 10]),
    "FilterData": (lambda: FilterData(numbers(), lambda dp: dp[0] % 2), [0, 1, 3, 4, 7]),
    "SelectComponent": (lambda: SelectComponent(numbers(), [1, 0]), [0, 3, 7, 10]),
    "PrintData": (lambda: PrintData(numbers(), num=0), [0, 3, 7, 10]),
    "AugmentImageComponent": (lambda: AugmentImageComponent(
        DataFromList([[np.full((2, 2), i, "float32"), i] for i in range(5)]), [_Negate()]), [0, 2, 5, 7]),
    "FixedSizeData": (lambda: FixedSizeData(numbers(), 5), [0, 2, 5, 6, 12]),
    "FixedSizeData(keep_state=False)": (lambda: FixedSizeData(numbers(), 5, keep_state=False), [0, 2, 5, 6, 12]),
    "RepeatedData": (lambda: RepeatedData(numbers(), 3), [0, 2, 7, 14, 21, 23]),
    "RepeatedData(-1)": (lambda: RepeatedData(numbers(), -1), [0, 2, 7, 14, 23]),
    "RepeatedDataPoint": (lambda: RepeatedDataPoint(numbers(), 3), [0, 1, 2, 3, 4, 20, 21, 22]),
    "LocallyShuffleData": (lambda: LocallyShuffleData(numbers(20), 5, num_reuse=2, shuffle_interval=2),
                           [0, 1, 3, 5, 8, 20, 39, 40, 41, 70]),
    "LocallyShuffleData(64)": (lambda: LocallyShuffleData(numbers(300), 64, num_reuse=2, shuffle_interval=5),
                               [0, 5, 100, 299, 600, 601, 903]),
    "LocallyShuffleData(RepeatedData(-1))": (lambda: LocallyShuffleData(RepeatedData(numbers(20), -1), 6),
                                             [0, 1, 5, 20, 41, 70]),
    "CacheData(shuffle)": (lambda: CacheData(numbers(), shuffle=True), [0, 3, 7, 8, 15]),
    "CacheData": (lambda: CacheData(numbers(shuffle=False)), [0, 3, 7, 8, 15]),
    "BatchData": (lambda: BatchData(numbers(10), 3), [0, 1, 3, 4, 7]),
    "BatchData(remainder)": (lambda: BatchData(numbers(10), 3, remainder=True), [0, 1, 3, 4, 7, 8, 12]),
    "BatchData(remainder, use_list)": (lambda: BatchData(numbers(10), 3, remainder=True, use_list=True),
                                       [0, 3, 4, 8]),
    "RepeatedData(BatchData(remainder))": (lambda: RepeatedData(BatchData(numbers(10), 3, remainder=True), 2),
                                           [0, 3, 4, 7, 8, 9, 15]),
    "BatchDataByShape(2)": (lambda: BatchDataByShape(shapes(), 2, 0), [0, 1, 2, 3, 5, 8, 11]),
    "BatchDataByShape(3)": (lambda: BatchDataByShape(shapes(), 3, 0), [0, 1, 2, 3, 5, 8, 11]),
    "ConcatData": (lambda: ConcatData([numbers(3), numbers(4, False), numbers(2)]), [0, 2, 3, 7, 9, 10, 20]),
    "JoinData": (lambda: JoinData([numbers(5), numbers(5, False)]), [0, 2, 5, 6, 11]),
    "RandomMixData": (lambda: RandomMixData([numbers(5), numbers(7, False)]), [0, 2, 12, 13, 30]),
    "RandomChooseData": (lambda: RandomChooseData([(numbers(5), 0.3), (numbers(400, False), 0.7)]),
                         [0, 2, 5, 8, 300]),
    "RandomChooseData(forever)": (lambda: RandomChooseData([RepeatedData(numbers(5), -1),
                                                            RepeatedData(numbers(4), -1)]),
                                  [0, 2, 255, 256, 257, 600]),
    "pipeline": (lambda: BatchData(LocallyShuffleData(RepeatedData(MapData(
        ConcatData([numbers(6), numbers(5)]), lambda dp: [dp[0] * 3, dp[1]]), -1), 4), 3, use_list=True),
        [0, 1, 4, 11, 12, 30]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_resumes_exactly(name):
    make, cuts = CASES[name]
    check_resume(make, cuts, after=40)


def test_join_data_of_unequal_inputs_resumes(caplog):
    check_resume(lambda: JoinData([numbers(5), numbers(7)]), [0, 2, 5, 6, 11], after=30)


def test_batch_data_state_is_the_inputs_plus_the_partial_batch_flag():
    df = BatchData(DataFromList([[i] for i in range(5)], shuffle=False), 2, remainder=True)
    df.reset_state()
    itr = iter(df)
    take(itr, 3)
    assert df.get_state() == {"type": "BatchData", "ended": True,
                              "input": {"type": "DataFromList", "epoch": 1, "position": 0, "size": 5, "seed": None}}
    assert take(itr, 1) == []
    assert df.get_state()["ended"] is False


def test_locally_shuffle_data_state_holds_entry_numbers_not_data():
    df = LocallyShuffleData(DataFromList([[np.zeros(1000)] for _ in range(50)], shuffle=False), 8)
    df.reset_state()
    itr = epochs(df)
    take(itr, 20)
    state = df.get_state()
    slots = state["shuffled"][state["dropped"]:] + list(range(state["tail_from"], state["entries"]))
    assert len(slots) == 8 and len(set(slots)) == 8 and all(isinstance(e, int) for e in slots)
    assert state["entries"] == 28 and state["produced"] == 20
    assert min(slots) == state["anchor_entry"] and max(slots) < 28
    assert state["anchor"] == {"type": "DataFromList", "epoch": 0, "position": state["anchor_entry"], "size": 50,
                               "seed": None}
    assert df.get_state()["shuffled"] is state["shuffled"]   # shared between states, not copied
    itr.close()


def test_batch_data_by_shape_state_names_waiting_datapoints():
    df = BatchDataByShape(DataFromList([[np.zeros(i % 2 + 1)] for i in range(9)], shuffle=False), 3, 0)
    df.reset_state()
    itr = iter(df)
    take(itr, 1)   # the even datapoints 0, 2, 4 make the first batch; 1 and 3 wait
    state = df.get_state()
    assert state["held"] == [1, 3] and state["read"] == 5 and state["anchor_index"] == 1
    assert state["anchor"] == {"type": "DataFromList", "epoch": 0, "position": 1, "size": 9, "seed": None}
    itr.close()


def test_cache_data_restore_refills_the_cache_from_the_input():
    reads = []
    source = MapData(DataFromList([[i] for i in range(4)], shuffle=False), lambda dp: reads.append(dp[0]) or dp)
    df = CacheData(source, shuffle=True)
    df.reset_state()
    itr = epochs(df)
    take(itr, 6)          # the fill (4), then 2 from the cache
    assert reads == [0, 1, 2, 3]
    state = df.get_state()
    assert (state["filled"], state["epoch"], state["position"]) == (True, 1, 2)
    reads.clear()
    again = CacheData(MapData(DataFromList([[i] for i in range(4)], shuffle=False),
                              lambda dp: reads.append(dp[0]) or dp), shuffle=True)
    again.reset_state()
    again.set_state(state)
    rest = take(epochs(again), 2)
    assert reads == [0, 1, 2, 3] and len(rest) == 2    # the whole first epoch re-read, nothing re-yielded
    itr.close()


def _images(n=6):
    rng = np.random.RandomState(0)
    return [rng.randint(0, 256, (8, 9, 3)).astype("uint8") for _ in range(n)]


RANDOM_AUGMENTING = {
    "AugmentImageComponent": lambda: AugmentImageComponent(
        DataFromList([[im, i] for i, im in enumerate(_images())]),
        [imgaug.Flip(horiz=True), imgaug.RandomCrop((4, 5)), imgaug.Brightness(20)]),
    "AugmentImageCoordinates": lambda: AugmentImageCoordinates(
        DataFromList([[im, np.array([[1.0, 2.0], [3.0, 4.0]], "float32")] for im in _images()]),
        [imgaug.Flip(horiz=True), imgaug.RandomCrop((5, 6))]),
    "AugmentImageComponents": lambda: AugmentImageComponents(
        DataFromList([[im, im[:, :, 0].copy()] for im in _images()]),
        [imgaug.RandomCrop((5, 6)), imgaug.Flip(vert=True)], index=(0, 1)),
}


@pytest.mark.parametrize("name", sorted(RANDOM_AUGMENTING))
def test_random_augmentation_resumes_exactly(name):
    check_resume(RANDOM_AUGMENTING[name], [0, 2, 6, 7, 13], after=15)


def test_augmentation_draws_differ_between_datapoints_and_runs():
    from inputpipe.dataflow import seeding

    def crops(seed):
        seeding.set_global_seed(seed)
        try:
            df = AugmentImageComponent(DataFromList([[np.arange(90).reshape(9, 10), 0]] * 8, shuffle=False),
                                       [imgaug.RandomCrop((3, 3))])
            df.reset_state()
            return [int(dp[0][0, 0]) for dp in df]
        finally:
            seeding.set_global_seed(None)

    first = crops(1)
    assert first == crops(1) and first != crops(2) and len(set(first)) > 1


@pytest.mark.parametrize("remainder, cut", [(True, 3), (False, 2)])
def test_a_restore_at_the_end_of_an_epoch_ends_that_epoch_first(remainder, cut):
    """The resume helpers join epochs; here each epoch is iterated on its own: a state saved after
    an epoch's last batch (before its iterator said it was done) restores to that epoch's end."""
    def make():
        return BatchData(DataFromList([[i] for i in range(5 if remainder else 4)], shuffle=False), 2,
                         remainder=remainder)

    df = make()
    df.reset_state()
    itr = iter(df)
    assert len(take(itr, cut)) == cut                   # the epoch's last batch, the iterator still open
    state = df.get_state()
    assert state["ended"] is remainder
    again = make()
    again.reset_state()
    again.set_state(state)
    following = [[0, 1], [2, 3], [4]] if remainder else [[0, 1], [2, 3]]
    assert list(again) == []                            # the end of the restored epoch
    assert [batch[0].tolist() for batch in again] == following
    assert take(itr, 1) == []                           # as the uninterrupted run: its epoch ends
    assert [batch[0].tolist() for batch in df] == following


def test_locally_shuffle_data_keeps_an_input_state_every_eighth_of_its_buffer_not_every_datapoint():
    calls = []
    source = DataFromList([[i] for i in range(3000)], shuffle=False)
    original = source.get_state
    source.get_state = lambda: calls.append(1) or original()
    df = LocallyShuffleData(source, 400, shuffle_interval=7)
    df.reset_state()
    itr = epochs(df)
    most = 0
    for _ in range(20):
        take(itr, 250)
        most = max(most, len(df._before))
        state = df.get_state()
        slots = state["shuffled"][state["dropped"]:] + list(range(state["tail_from"], state["entries"]))
        assert 0 <= min(slots) - state["anchor_entry"] < 50                 # at most 400 // 8 datapoints early
    assert most <= 8 * 64 // 4              # the span is ~10 buffers: ~80 states, not ~4,000 (one per datapoint)
    assert len(calls) < 5000 // 50 + 40     # get_state() of the input once per 50 datapoints, and by get_state()
    itr.close()
