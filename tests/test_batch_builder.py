"""BatchBuilder: a batch assembled as the datapoints come is BatchData's batch of them, and the
map-and-batch workers build theirs in place in shared memory (sent without a copy)."""
import numpy as np
import pytest

from inputpipe.dataflow import BatchData, DataFromList, MultiProcessMapAndBatchData
from inputpipe.dataflow.batch import BatchBuilder


def built(datapoints, capacity=None, allocate=None):
    builder = BatchBuilder(capacity or len(datapoints)) if allocate is None else \
        BatchBuilder(capacity or len(datapoints), allocate)
    for dp in datapoints:
        builder.add(dp)
    return builder.batch()


def same(a, b):
    assert type(a) is type(b)
    items = a.items() if isinstance(a, dict) else enumerate(a)
    for key, value in items:
        expected = b[key]
        assert value.dtype == expected.dtype and value.shape == expected.shape, key
        np.testing.assert_array_equal(value, expected)


CASES = {
    "images and labels": [[np.full((32, 32, 3), i, np.uint8), i] for i in range(5)],
    "small arrays and floats": [[np.arange(3) + i, float(i), "s{}".format(i)] for i in range(4)],
    "tuples": [(np.full((40, 40), i, np.float32), np.int32(i)) for i in range(3)],
    "dicts": [{"image": np.full((40, 40), i, np.float32), "label": i} for i in range(3)],
    "a float64 image among float32 ones": [[np.full((40, 40), 0.1, np.float32)], [np.full((40, 40), 0.1)]],
    "bytes": [[b"x" * i, np.zeros((64, 64), np.uint8)] for i in range(3)],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_built_batch_is_batch_datas_batch(case):
    datapoints = CASES[case]
    same(built(datapoints), BatchData.aggregate_batch(datapoints))


def test_fewer_datapoints_than_the_capacity_give_a_smaller_batch_and_none_gives_none():
    datapoints = [[np.full((32, 32, 3), i, np.uint8), i] for i in range(3)]
    batch = built(datapoints, capacity=8)
    same(batch, BatchData.aggregate_batch(datapoints))
    assert built([], capacity=4) is None
    with pytest.raises(ValueError, match="BatchBuilder: the batch already has its 1 datapoints"):
        built(datapoints[:2], capacity=1)


def test_a_datapoint_that_does_not_fit_gives_batch_datas_error():
    datapoints = [[np.zeros((40, 40), np.float32)], [np.zeros((40, 41), np.float32)]]
    with pytest.raises(ValueError) as expected:
        BatchData.aggregate_batch(datapoints)
    with pytest.raises(ValueError) as got:
        built(datapoints)
    assert str(got.value) == str(expected.value)
    with pytest.raises(ValueError, match="would change its values"):
        built([[np.zeros((40, 40), np.int32)], [np.full((40, 40), 0.5)]])


def test_large_components_are_copied_into_the_allocated_arrays_as_they_come():
    made = []

    def allocate(shape, dtype):
        made.append(np.empty(shape, dtype))
        return made[-1]

    builder = BatchBuilder(4, allocate)
    for i in range(3):
        image = np.full((64, 64), i, np.uint8)
        builder.add([image, i])
        image[:] = 99                         # the builder copied it already
    images, labels = builder.batch()
    assert [m.shape for m in made] == [(4, 64, 64)] and np.shares_memory(images, made[0])
    assert images[:, 0, 0].tolist() == [0, 1, 2] and labels.tolist() == [0, 1, 2]


def _image_and_flip(dp):
    image = np.full((64, 96, 3), dp[0] % 251, np.uint8)
    image[:, 0] = 7
    return [image[:, ::-1], dp[0]]           # a view with a negative stride, as a flip gives


def test_map_and_batch_workers_send_batches_built_in_shared_memory_without_copies():
    flow = MultiProcessMapAndBatchData(DataFromList([[i] for i in range(96)], shuffle=False), 2, _image_and_flip, 16,
                                       strict=True, ordered=True)
    flow.reset_state()
    try:
        batches = list(flow)
        assert flow.pipe_fallbacks == 0
    finally:
        flow.close()
    assert len(batches) == 6
    for k, (images, labels) in enumerate(batches):
        assert images.shape == (16, 64, 96, 3) and images.dtype == np.uint8
        assert labels.tolist() == list(range(16 * k, 16 * k + 16))
        assert images[:, 0, 0, 0].tolist() == [i % 251 for i in labels] and (images[:, :, -1] == 7).all()


def test_an_array_made_in_a_workers_shared_memory_is_sent_without_a_copy_and_an_unsent_one_is_given_back():
    from inputpipe.utils import channel

    parent, spec = channel.open_channel("BuilderTest", shm_bytes=16 << 20)
    worker = spec.open()
    try:
        def no_copy(*_):
            raise AssertionError("the datapoint was copied")

        batch = worker.shared_empty((8, 128, 128, 3), np.uint8)
        batch[:] = np.arange(8, dtype=np.uint8)[:, None, None, None]
        copier, worker._segment._copier.copy = worker._segment._copier.copy, no_copy
        worker.send_datapoint([batch[:5], 3])
        worker._segment._copier.copy = copier
        kind, (images, label) = parent.receive()
        assert kind == "data" and label == 3 and images.shape == (5, 128, 128, 3)
        assert images[:, 0, 0, 0].tolist() == [0, 1, 2, 3, 4]
        unsent = worker.shared_empty((8, 128, 128, 3), np.uint8)
        region, = worker._segment.prepared.values()
        worker.send_datapoint([np.ones((128, 128, 3), np.uint8)])      # copied: the prepared one is freed
        assert worker._segment.prepared == {} and parent._states[region[0]] == channel._FREE
        kind, (ones,) = parent.receive()
        assert ones.sum() == 128 * 128 * 3 and unsent.shape == (8, 128, 128, 3)
        small = worker.shared_empty((4, 4), np.float32)            # too small for shared memory: an ordinary array
        assert worker._segment.prepared == {} and small.ctypes.data % 64 == 0
    finally:
        parent.close()
        spec.close_in_parent()
