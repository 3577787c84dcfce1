"""Resumable sources, file loaders and dataset readers: a run cut after k datapoints (0, mid-epoch,
exactly at an epoch's end, across epochs), its state through JSON, a fresh flow restored from it
under another global seed: the continuation equals the uninterrupted run's, for several epochs."""
import numpy as np
import pytest

from inputpipe.dataflow import (
    DataFromIterable, DataFromList, FakeData, HDF5Serializer, ImageFromFile, LMDBData, LMDBDataDecoder,
    LMDBSerializer, NumpySerializer, SVMLightData, TFRecordSerializer, dataset, seeding,
)
from resume_helpers import check_resume, epochs, take

POINTS = [[np.arange(3, dtype="int32") + i, i] for i in range(6)]


def _saved(serializer, tmp_path, name, **kwargs):
    path = str(tmp_path / name)
    serializer.save(DataFromList(POINTS, shuffle=False), path, **kwargs)
    return path


CUTS = [0, 2, 6, 7, 13]   # none, mid-epoch, at the end of epoch 0, just after it, in epoch 2


def _lmdb(tmp_path):
    return _saved(LMDBSerializer, tmp_path, "d.lmdb")


def _svm(tmp_path):
    path = tmp_path / "d.svm"
    path.write_text("".join("{} 1:{} 3:{}\n".format(i % 2, i, i * 2) for i in range(6)))
    return str(path)


def _mnist(tmp_path):
    from test_dataset_readers import make_mnist
    return make_mnist(str(tmp_path / "mnist"))


def _cifar(tmp_path):
    from test_dataset_readers import make_cifar
    return make_cifar(str(tmp_path / "cifar"))


def _images(tmp_path):
    from test_image_components import make_image_files
    return make_image_files(str(tmp_path))


# name -> (tmp_path -> (factory, cuts))
SOURCES = {
    "DataFromList(shuffle)": lambda t: (lambda: DataFromList(POINTS), CUTS),
    "DataFromList": lambda t: (lambda: DataFromList(POINTS, shuffle=False), CUTS),
    "DataFromIterable(list)": lambda t: (lambda: DataFromIterable(POINTS), CUTS),
    "DataFromIterable(range)": lambda t: (lambda: DataFromIterable(range(6)), CUTS),
    "FakeData": lambda t: (lambda: FakeData([[2], [1]], size=5, dtype=["float32", "int64"],
                                            domain=[(0, 1), (0, 9)]), [0, 2, 5, 7, 12]),
    "FakeData(random=False)": lambda t: (lambda: FakeData([[2]], size=4, random=False), [0, 2, 4, 5, 9]),
    "LMDBSerializer.load(shuffle)": lambda t: (lambda path=_lmdb(t): LMDBSerializer.load(path, shuffle=True), CUTS),
    "LMDBSerializer.load": lambda t: (lambda path=_lmdb(t): LMDBSerializer.load(path, shuffle=False), CUTS),
    "LMDBData(shuffle)+LMDBDataDecoder": lambda t: (lambda path=_lmdb(t): LMDBDataDecoder(
        LMDBData(path, shuffle=True), lambda k, v: [bytes(k), len(v)]), [0, 2, 6, 7, 14]),
    "LMDBData": lambda t: (lambda path=_lmdb(t): LMDBData(path, shuffle=False), [0, 2, 6, 7, 14]),
    "TFRecordSerializer.load": lambda t: (
        lambda path=_saved(TFRecordSerializer, t, "d.tfrecord"): TFRecordSerializer.load(path), CUTS),
    "NumpySerializer.load(shuffle)": lambda t: (
        lambda path=_saved(NumpySerializer, t, "d.npy"): NumpySerializer.load(path, shuffle=True), CUTS),
    "HDF5Serializer.load(shuffle)": lambda t: (
        lambda path=_saved(HDF5Serializer, t, "d.h5", data_paths=["x", "y"]):
        HDF5Serializer.load(path, ["x", "y"], shuffle=True), CUTS),
    "SVMLightData(shuffle)": lambda t: (lambda path=_svm(t): SVMLightData(path, shuffle=True), CUTS),
    "ImageFromFile(shuffle)": lambda t: (lambda files=_images(t): ImageFromFile(files, shuffle=True),
                                         [0, 1, 3, 4, 8]),
    "Mnist(train)": lambda t: (lambda d=_mnist(t): dataset.Mnist("train", dir=d), [0, 2, 5, 6, 11]),
    "Cifar10(test, shuffle)": lambda t: (lambda d=_cifar(t): dataset.Cifar10("test", shuffle=True, dir=d),
                                         [0, 5, 12]),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_resumes_exactly(name, tmp_path):
    make, cuts = SOURCES[name](tmp_path)
    check_resume(make, cuts, after=15)


def test_shuffled_epochs_are_permutations_derived_from_the_state():
    seeding.set_global_seed(5)
    try:
        df = DataFromList(list(range(50)))
        df.reset_state()
        first, second = list(df), list(df)
    finally:
        seeding.set_global_seed(None)
    assert sorted(first) == sorted(second) == list(range(50)) and first != second
    state = df.get_state()
    assert state == {"type": "DataFromList", "epoch": 2, "position": 0, "size": 50, "seed": df.base_seed}
    order = np.random.RandomState(seeding.derive_seed(df.base_seed, 1)).permutation(50).tolist()
    assert second == order


def test_state_at_an_epochs_last_datapoint_gives_that_epochs_end_first():
    df = DataFromList([[0], [1], [2]], shuffle=False)
    df.reset_state()
    itr = iter(df)
    take(itr, 3)
    state = df.get_state()
    assert (state["epoch"], state["position"]) == (0, 3)   # the iterator has not said StopIteration yet
    take(itr, 1)
    assert (df.get_state()["epoch"], df.get_state()["position"]) == (1, 0)
    again = DataFromList([[0], [1], [2]], shuffle=False)
    again.reset_state()
    again.set_state(state)
    assert list(again) == [] and list(again) == [[0], [1], [2]]


def test_a_closed_iterator_ends_its_epoch():
    df = DataFromList([[i] for i in range(5)], shuffle=False)
    df.reset_state()
    itr = iter(df)
    take(itr, 2)
    itr.close()
    assert (df.get_state()["epoch"], df.get_state()["position"]) == (1, 0)
    assert next(iter(df)) == [0]


def test_tfrecord_state_holds_the_file_offset(tmp_path):
    path = _saved(TFRecordSerializer, tmp_path, "t.tfrecord")
    df = TFRecordSerializer.load(path)
    df.reset_state()
    itr = iter(df)
    take(itr, 2)
    state = df.get_state()
    assert state["position"] == 2 and isinstance(state["offset"], int) and state["offset"] > 0
    itr.close()


def test_readers_and_loaders_need_reset_state_before_their_state(tmp_path):
    path = _saved(LMDBSerializer, tmp_path, "r.lmdb")
    with pytest.raises(RuntimeError, match="call reset_state"):
        LMDBSerializer.load(path, shuffle=False).get_state()
    with pytest.raises(RuntimeError, match="FakeData has no RNG yet"):
        FakeData([[1]]).get_state()


def test_epochs_helper_stops_after_two_empty_epochs():
    df = DataFromList([], shuffle=False)
    df.reset_state()
    assert list(epochs(df)) == []
