"""Tests of BatchData and BatchDataByShape: batching rules, dtypes, lengths and error messages."""
import numpy as np
import pytest

from inputpipe.dataflow import (
    BatchData, BatchDataByShape, DataFlowLengthUnknown, DataFromGenerator, DataFromList, get_length,
)


def flow(items):
    df = DataFromList(items, shuffle=False)
    df.reset_state()
    return df


def batches_of(items, batch_size, **kwargs):
    df = BatchData(flow(items), batch_size, **kwargs)
    df.reset_state()
    return list(df)


def test_batch_list_datapoints_stacks_each_component():
    items = [[np.full((2, 3), i, dtype=np.float32), i] for i in range(10)]
    batches = batches_of(items, 4)
    assert len(batches) == 2
    images, labels = batches[1]
    assert (images.shape, images.dtype) == ((4, 2, 3), np.float32)
    assert (labels.shape, labels.dtype) == ((4,), np.int64)
    np.testing.assert_array_equal(images[:, 0, 0], [4, 5, 6, 7])
    np.testing.assert_array_equal(labels, [4, 5, 6, 7])


def test_batch_dict_datapoints():
    items = [{"x": np.arange(3, dtype=np.int16) + i, "name": "n{}".format(i)} for i in range(4)]
    (batch,) = batches_of(items, 4)
    assert set(batch) == {"x", "name"}
    assert (batch["x"].shape, batch["x"].dtype) == ((4, 3), np.int16)
    np.testing.assert_array_equal(batch["x"][:, 0], [0, 1, 2, 3])
    assert batch["name"].dtype.kind == "U" and batch["name"].tolist() == ["n0", "n1", "n2", "n3"]


def test_batch_tuple_datapoints_give_a_list():
    (batch,) = batches_of([(1, 2.0), (3, 4.0)], 2)
    assert isinstance(batch, list)
    assert batch[0].tolist() == [1, 3] and batch[1].tolist() == [2.0, 4.0]


def test_remainder():
    items = [[i] for i in range(10)]
    without = BatchData(flow(items), 4)
    with_rest = BatchData(flow(items), 4, remainder=True)
    assert len(without) == 2 and len(with_rest) == 3
    assert [b[0].tolist() for b in without] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [b[0].tolist() for b in with_rest] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(BatchData(flow(items[:8]), 4, remainder=True)) == 2


def test_use_list_keeps_values_as_lists():
    items = [[np.zeros(i + 1), "a" * i] for i in range(3)]  # ragged: fine with use_list
    (batch,) = batches_of(items, 3, use_list=True)
    assert [x.shape for x in batch[0]] == [(1,), (2,), (3,)]
    assert batch[1] == ["", "a", "aa"]
    (dict_batch,) = batches_of([{"k": [1]}, {"k": [2, 3]}], 2, use_list=True)
    assert dict_batch == {"k": [[1], [2, 3]]}


def test_batch_over_a_flow_without_length():
    df = BatchData(DataFromGenerator(lambda: ([i] for i in range(7))), 3, remainder=True)
    df.reset_state()
    with pytest.raises(DataFlowLengthUnknown, match="BatchData has no length because its input has none"):
        len(df)
    assert get_length(df) is None
    assert [b[0].tolist() for b in list(df)] == [[0, 1, 2], [3, 4, 5], [6]]


# --- dtype rules ---------------------------------------------------------------------------------

def test_python_scalar_dtype_rules():
    (batch,) = batches_of([[True, 1, 1, 1, 1j, b"a\x00"], [False, 2, True, 2.5, 2, b"b"]], 2)
    assert [c.dtype for c in batch] == [np.bool_, np.int64, np.int64, np.float64, np.complex128, object]
    assert batch[1].tolist() == [1, 2]
    assert batch[2].tolist() == [1, 1]
    assert batch[3].tolist() == [1.0, 2.5]
    assert batch[5].tolist() == [b"a\x00", b"b"]  # every byte is kept


def test_python_ints_do_not_overflow_int32():
    (batch,) = batches_of([[2 ** 40], [-(2 ** 63)]], 2)
    assert batch[0].dtype == np.int64 and batch[0].tolist() == [2 ** 40, -(2 ** 63)]


def test_numpy_scalars_keep_their_dtype():
    (batch,) = batches_of([[np.float16(1.5), np.uint8(3)], [np.float16(2), np.uint8(255)]], 2)
    assert (batch[0].dtype, batch[0].shape) == (np.float16, (2,))
    assert batch[1].dtype == np.uint8 and batch[1].tolist() == [3, 255]


def test_shape_mismatch_names_component_index_and_both_shapes():
    items = [[np.zeros(3, np.float32), np.zeros((2, 2), np.float32)]] * 3 + \
            [[np.zeros(3, np.float32), np.zeros((2, 3), np.float32)]]
    with pytest.raises(ValueError, match=r"^BatchData: cannot batch component 1: datapoint 3 of the batch has "
                                         r"a numpy array of shape \(2, 3\) and dtype float32 but datapoint 0 has "
                                         r"a numpy array of shape \(2, 2\) and dtype float32$"):
        batches_of(items, 4)


def test_other_dtypes_take_the_first_ones_as_in_tensorpack_when_no_value_changes():
    batch, = batches_of([{"img": np.full(2, 0.1, np.float32)}, {"img": np.full(2, 0.1, np.float64)}], 2)
    assert batch["img"].dtype == np.float32 and batch["img"].tolist() == [[np.float32(0.1)] * 2] * 2
    (labels,), = batches_of([[np.int32(3)], [np.int64(-5)], [7], [True]], 4)
    assert labels.dtype == np.int32 and labels.tolist() == [3, -5, 7, 1]
    (pixels,), = batches_of([[np.zeros(2, np.float32)], [np.array([255, 2 ** 24], np.int64)]], 2)
    assert pixels.dtype == np.float32 and pixels.tolist() == [[0, 0], [255, 2 ** 24]]


def test_a_cast_that_would_change_values_is_an_error_not_a_silent_cast():
    cases = [
        ([np.zeros(2, np.int32)], [np.full(2, 2 ** 40)], r"dtype int64 but datapoint 0 has .* dtype int32; casting "
                                                         r"it to the batch's int32 would change its values"),
        ([np.zeros(2, np.int64)], [np.full(2, 0.5)], r"dtype float64 but .* int64 would change its values"),
        ([np.zeros(2, np.uint8)], [np.full(2, -1)], r"dtype int64 but .* uint8 would change its values"),
        ([np.zeros(2, np.float32)], [np.full(2, 2 ** 25 + 1)], r"float32 would change its values"),
        ([np.float32(1)], [1 + 2j], r"a python complex but datapoint 0 has a numpy float32 scalar"),
    ]
    for first, second, message in cases:
        with pytest.raises(ValueError, match=message):
            batches_of([first, second], 2)
    with pytest.raises(ValueError, match=r"component 'img': datapoint 1 of the batch has a numpy array of shape "
                                         r"\(3,\) and dtype float32 but datapoint 0 has a numpy array of shape "
                                         r"\(2,\) and dtype float32"):
        batches_of([{"img": np.zeros(2, np.float32)}, {"img": np.zeros(3, np.float32)}], 2)


def test_numpy_component_with_a_python_value_that_is_no_number_is_an_error():
    with pytest.raises(ValueError, match=r"datapoint 1 of the batch has a python list but datapoint 0 has a "
                                         r"numpy array of shape \(2,\)"):
        batches_of([[np.zeros(2)], [[0.0, 0.0]]], 2)
    with pytest.raises(ValueError, match=r"datapoint 1 of the batch has a python str but datapoint 0 has a "
                                         r"numpy float32 scalar"):
        batches_of([[np.float32(1)], ["2"]], 2)


def test_python_component_with_a_wrong_type_is_an_error():
    with pytest.raises(ValueError, match=r"component 0: datapoint 2 of the batch has a python str but "
                                         r"datapoint 0 has a python int"):
        batches_of([[1], [2], ["3"]], 3)
    with pytest.raises(ValueError, match=r"datapoint 1 of the batch has a numpy array of shape \(2,\) and dtype "
                                         r"float64 but datapoint 0 has a python float"):
        batches_of([[1.0], [np.zeros(2)]], 2)
    with pytest.raises(ValueError, match=r"datapoint 1 of the batch has a python str but datapoint 0 has a "
                                         r"python bytes"):
        batches_of([[b"a"], ["b"]], 2)
    with pytest.raises(ValueError, match=r"datapoint 1 of the batch has a python int but datapoint 0 has a "
                                         r"python str"):
        batches_of([["a"], [1]], 2)


def test_int_outside_int64_is_an_error():
    with pytest.raises(ValueError, match=r"component 0: datapoint 1 of the batch has the python int "
                                         r"1180591620717411303424 \(outside int64\) but datapoint 0 has a python int"):
        batches_of([[1], [2 ** 70]], 2)


def test_int_just_outside_int64_is_an_error_not_a_rounded_float():
    # numpy makes float64 of [1, 2**63]: that would silently round 2**63 + 1
    with pytest.raises(ValueError, match=r"component 0: datapoint 1 of the batch has the int value "
                                         r"9223372036854775809, outside int64, and datapoint 0 has a python int"):
        batches_of([[1], [2 ** 63 + 1]], 2)


def test_numpy_uint64_among_python_ints_batches_as_exact_int64():
    big = 2 ** 62 + 1  # not representable in float64
    (batch,) = batches_of([[1], [np.uint64(big)], [np.int32(-5)]], 3)
    assert batch[0].dtype == np.int64 and batch[0].tolist() == [1, big, -5]
    with pytest.raises(ValueError, match=r"BatchData: cannot batch component 'id': datapoint 1 of the batch has the "
                                         r"uint64 value 18446744073709551615, outside int64, and datapoint 0 has a "
                                         r"python int; a column of integers is batched as int64"):
        BatchData.aggregate_batch([{"id": 1}, {"id": np.uint64(2 ** 64 - 1)}])
    (batch,) = batches_of([[0.5], [np.uint64(3)]], 2)  # with a float: float64, as for python ints
    assert batch[0].dtype == np.float64 and batch[0].tolist() == [0.5, 3.0]


def test_unsupported_component_type():
    with pytest.raises(TypeError, match=r"BatchData: cannot batch component 'meta': datapoint 0 of the batch has a "
                                        r"python dict, which is not a numpy array or a python scalar; convert it to "
                                        r"a numpy array first, or use use_list=True"):
        batches_of([{"meta": {}}, {"meta": {}}], 2)


def test_structure_errors():
    with pytest.raises(ValueError, match=r"BatchData: datapoint 1 of the batch has 1 components but datapoint 0 "
                                         r"has 2 components"):
        batches_of([[1, 2], [3]], 2)
    with pytest.raises(ValueError, match=r"datapoint 1 of the batch has no components list \(it is a dict\) but "
                                         r"datapoint 0 has 2 components"):
        batches_of([[1, 2], {0: 1, 1: 2}], 2)
    with pytest.raises(ValueError, match=r"BatchData: datapoint 1 of the batch has keys \['a', 'c'\] but "
                                         r"datapoint 0 has keys \['a', 'b'\]"):
        batches_of([{"a": 1, "b": 2}, {"a": 1, "c": 2}], 2)
    with pytest.raises(ValueError, match=r"datapoint 1 of the batch has no keys \(it is a list\) but datapoint 0 "
                                         r"has keys \['a'\]"):
        batches_of([{"a": 1}, [1]], 2)
    with pytest.raises(TypeError, match=r"BatchData: a datapoint must be a list, tuple or dict, got int "
                                        r"\(datapoint 0 of the batch\)"):
        batches_of([1, 2], 2)
    with pytest.raises(ValueError, match=r"datapoint 1 of the batch has no components list \(it is a int\)"):
        batches_of([[1], 2], 2)


def test_aggregate_batch_is_public_and_rejects_empty():
    batch = BatchData.aggregate_batch([[1, 2.0], [3, 4.0]])
    assert batch[0].tolist() == [1, 3] and batch[1].dtype == np.float64
    assert BatchData.aggregate_batch(((1,), (2,)), use_list=True) == [[1, 2]]
    with pytest.raises(ValueError, match="BatchData.aggregate_batch: got no datapoints"):
        BatchData.aggregate_batch([])


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4"])
def test_batch_size_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="BatchData: batch_size must be a positive int, got {!r}".format(bad)
                       .replace("(", r"\(").replace(".", r"\.")):
        BatchData(flow([[1]] * 10), bad)


def test_batch_size_larger_than_input_without_remainder():
    with pytest.raises(ValueError, match=r"BatchData: batch_size=5 is larger than the length of its input \(3\), "
                                         r"so it would produce no batch; use remainder=True or a smaller batch_size"):
        BatchData(flow([[1]] * 3), 5)
    assert len(BatchData(flow([[1]] * 3), 5, remainder=True)) == 1


# --- BatchDataByShape -------------------------------------------------------------------------

def test_batch_by_shape_groups_by_the_shape_of_one_component():
    items = [[np.full(n, i), i] for i, n in enumerate([2, 3, 2, 3, 2, 2, 3])]
    df = BatchDataByShape(flow(items), 2, idx=0)
    df.reset_state()
    batches = list(df)
    assert [(b[0].shape, b[1].tolist()) for b in batches] == [((2, 2), [0, 2]), ((2, 3), [1, 3]), ((2, 2), [4, 5])]
    # the incomplete group (item 6) carries over to the next epoch
    assert [b[1].tolist() for b in df] == [[6, 1], [0, 2], [4, 5], [3, 6]]
    df.reset_state()  # forgets incomplete groups
    assert [b[1].tolist() for b in df][0] == [0, 2]


def test_batch_by_shape_loses_nothing_when_the_consumer_stops_at_a_batch():
    items = [[np.zeros(2), i] for i in range(6)]
    df = BatchDataByShape(flow(items), 2, idx=0)
    df.reset_state()
    itr = iter(df)
    assert next(itr)[1].tolist() == [0, 1]
    itr.close()  # stop right after a batch: the group must not stay full
    assert [b[1].tolist() for b in df] == [[0, 1], [2, 3], [4, 5]]
    items = [[np.zeros(2), 1], [np.zeros(2), "x"]]
    bad = BatchDataByShape(flow(items), 2, 0)
    bad.reset_state()
    with pytest.raises(ValueError, match="component 1: datapoint 1 of the batch has a python str"):
        list(bad)
    items[:] = [[np.zeros(2), 7], [np.zeros(2), 8]]
    assert [b[1].tolist() for b in bad] == [[7, 8]]  # the failed group did not stay behind


def test_batch_by_shape_has_tensorpacks_estimated_length_and_is_not_reentrant():
    items = [{"x": np.zeros(1 + i % 2), "y": i} for i in range(7)]
    df = BatchDataByShape(flow(items), 2, idx="x")
    df.reset_state()
    assert len(df) == 3                     # len(ds) // batch_size, as in tensorpack
    assert len(df) // 2 == 1                # what scripts compute at start-up (steps per GPU)
    first = iter(df)
    assert next(first)["y"].tolist() == [0, 2]
    with pytest.raises(RuntimeError, match="BatchDataByShape is not re-entrant"):
        next(iter(df))
    first.close()
    # an epoch of 7 datapoints in two shapes (4 and 3) makes 3 full batches and leaves one
    # datapoint waiting, which the next epoch completes first
    fresh = BatchDataByShape(flow(items), 2, idx="x")
    fresh.reset_state()
    assert [b["y"].tolist() for b in fresh] == [[0, 2], [1, 3], [4, 6]]
    assert [b["y"].tolist() for b in fresh] == [[5, 1], [0, 2], [3, 5], [4, 6]]
    with pytest.raises(DataFlowLengthUnknown, match="has no length"):
        len(BatchDataByShape(DataFromGenerator(lambda: iter(items)), 2, idx="x"))


def test_numpy_scalars_among_python_numbers():
    (batch,) = batches_of([[1, 1.0], [np.int64(2), np.float32(0.5)]], 2)
    assert batch[0].dtype == np.int64 and batch[1].dtype == np.float64
    assert batch[1].tolist() == [1.0, 0.5]


def test_error_points_at_the_value_that_is_not_a_number():
    with pytest.raises(ValueError, match=r"component 0: datapoint 2 of the batch has a python str but datapoint 0 "
                                         r"has a python int"):
        batches_of([[1], [np.int64(2)], ["a"]], 3)
    if np.dtype(np.longdouble).itemsize > 8:  # long double is float64 on some platforms
        with pytest.raises(ValueError, match=r"component 0: datapoint 1 of the batch has a numpy {} scalar but "
                                             r"datapoint 0 has a python float".format(np.dtype(np.longdouble))):
            batches_of([[1.0], [np.longdouble(2)]], 2)


def test_large_batches_are_64_byte_aligned_and_exact():
    """Large batches go into aligned memory (TF then shares them without a copy); values,
    shape and dtype are the same as a plain stack, and small batches are plain arrays."""
    from inputpipe.utils.buffers import ALIGN_MIN_BYTES, is_aligned

    images = [np.full((64, 64, 3), i, np.uint8) for i in range(32)]
    assert images[0].nbytes * len(images) >= ALIGN_MIN_BYTES
    batch = BatchData.aggregate_batch([[img, i] for i, img in enumerate(images)])
    assert is_aligned(batch[0]) and batch[0].flags.c_contiguous and batch[0].flags.writeable
    assert batch[0].shape == (32, 64, 64, 3) and batch[0].dtype == np.uint8
    np.testing.assert_array_equal(batch[0], np.stack(images))
    np.testing.assert_array_equal(batch[1], np.arange(32))

    small = BatchData.aggregate_batch([[np.zeros(3, np.float32)], [np.ones(3, np.float32)]])
    assert small[0].dtype == np.float32 and small[0].shape == (2, 3)
    np.testing.assert_array_equal(small[0], [[0, 0, 0], [1, 1, 1]])


def test_large_batch_shape_mismatch_still_names_the_datapoint():
    big = np.zeros((64, 64, 3), np.uint8)
    holder = [[big]] * 20 + [[np.zeros((64, 63, 3), np.uint8)]]
    with pytest.raises(ValueError, match=r"component 0: datapoint 20 of the batch has a numpy array "
                                         r"of shape \(64, 63, 3\)"):
        BatchData.aggregate_batch(holder)
