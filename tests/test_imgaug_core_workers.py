"""Geometric augmentors pickle, draw their own numbers in each worker, and repeat under a global seed."""
import pickle

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from inputpipe.dataflow import DataFromList, MultiProcessMapData, imgaug, seeding  # noqa: E402

IMG = np.arange(20 * 30, dtype=np.float32).reshape(20, 30)


@pytest.fixture
def restore_seeding():
    """Put the process's seeding state (worker rank, global seed) back after a test that changes it."""
    rank, seed = seeding.worker_rank(), seeding.get_global_seed()
    yield
    seeding.set_global_seed(seed)
    seeding.enter_worker(rank, seed)


def _crops(aug, count=6):
    return [float(aug.augment(IMG)[0, 0]) for _ in range(count)]


def _make_list():
    return imgaug.AugmentorList([imgaug.RandomCrop((10, 10)), imgaug.Flip(horiz=True),
                                 imgaug.RandomApplyAug(imgaug.Rotation(30, border=cv2.BORDER_CONSTANT), 0.5)])


@pytest.mark.parametrize("make", [_make_list, lambda: imgaug.RandomCrop(5), lambda: imgaug.Affine((0.5, 1.5)),
                                  lambda: imgaug.RandomChooseAug([imgaug.RandomCrop(4), imgaug.CenterCrop(4)]),
                                  lambda: imgaug.RandomPaste((25, 35)), lambda: imgaug.RandomCutout(3, (2, 5)),
                                  lambda: imgaug.GoogleNetRandomCropAndResize(target_shape=6)],
                         ids=["list", "crop", "affine", "choose", "paste", "cutout", "googlenet"])
def test_pickled_copy_keeps_arguments_and_state(make):
    aug = make()
    aug.reset_state()
    copy = pickle.loads(pickle.dumps(aug))
    assert repr(copy) == repr(aug)
    # in the same process the copy continues the same stream, as a copy of tensorpack's would
    np.testing.assert_array_equal(copy.augment(IMG), aug.augment(IMG))


def _draws_in_worker(blob, rank, seed):
    seeding.enter_worker(rank, seed)
    aug = pickle.loads(blob)
    aug.reset_state()
    return _crops(aug)


def test_copies_reset_in_different_workers_draw_different_crops_and_a_seed_repeats_them(restore_seeding):
    blob = pickle.dumps(_make_list())
    first = _draws_in_worker(blob, 0, 11)
    second = _draws_in_worker(blob, 1, 11)
    assert first != second
    assert _draws_in_worker(blob, 0, 11) == first
    assert _draws_in_worker(blob, 1, 11) == second
    assert _draws_in_worker(blob, 0, 12) != first


def test_global_seed_makes_construction_and_reset_reproducible(restore_seeding):
    runs = []
    for _ in range(2):
        seeding.set_global_seed(5)
        aug = _make_list()
        aug.reset_state()
        runs.append(_crops(aug, 10))
    assert runs[0] == runs[1] and len(set(runs[0])) > 3


class CropAndReport:
    """A map function carrying an augmentor into the workers: returns the worker's rank and the crop."""

    def __init__(self, aug):
        self.aug = aug

    def __call__(self, dp):
        return [seeding.worker_rank(), float(self.aug.augment(IMG)[0, 0])]


def _run_workers(start_method):
    aug = _make_list()
    aug.reset_state()
    df = MultiProcessMapData(DataFromList([[i] for i in range(200)], shuffle=False), 2, CropAndReport(aug),
                             strict=True, start_method=start_method, buffer_size=10)
    df.reset_state()
    with df:
        results = list(df)
    assert len(results) == 200
    return {rank: [crop for r, crop in results if r == rank] for rank in (0, 1)}


@pytest.mark.timeout(60)
def test_forked_workers_draw_their_own_crops_without_reset(restore_seeding):
    seeding.set_global_seed(None)
    streams = _run_workers("fork")
    # how the 200 datapoints split between the workers depends on the machine's load (one may get
    # only a few); the first draws of each worker are compared
    count = min(len(streams[0]), len(streams[1]), 10)
    assert count >= 3, [len(stream) for stream in streams.values()]
    # without the per-process RNG both workers would repeat the parent's stream
    assert streams[0][:count] != streams[1][:count]


class CropAndReportIndex(CropAndReport):
    """As CropAndReport, with the datapoint's index instead of the worker's rank."""

    def __call__(self, dp):
        return [dp[0], float(self.aug.augment(IMG)[0, 0])]


@pytest.mark.timeout(90)
def test_crops_repeat_per_datapoint_under_a_global_seed_whichever_worker_maps_them(restore_seeding):
    # A parallel map seeds each datapoint's augmentation from (base seed, epoch, index), so the
    # crop of a datapoint does not depend on the worker, the number of workers or the start method.
    runs = []
    for workers, start_method in ((2, "spawn"), (1, "fork"), (3, "fork")):
        seeding.set_global_seed(21)
        aug = _make_list()
        aug.reset_state()
        df = MultiProcessMapData(DataFromList([[i] for i in range(200)], shuffle=False), workers,
                                 CropAndReportIndex(aug), strict=True, start_method=start_method, buffer_size=10)
        df.reset_state()
        with df:
            runs.append(sorted(df))
    assert runs[0] == runs[1] == runs[2]
    assert [i for i, _ in runs[0]] == list(range(200))
    assert len({crop for _, crop in runs[0]}) > 10
