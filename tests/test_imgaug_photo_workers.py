"""The photometric augmentors pickle, and each worker's copy draws its own random numbers."""
import os
import pickle

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from inputpipe.dataflow import DataFromList, MultiProcessMapData, imgaug, seeding  # noqa: E402


@pytest.fixture
def restore_seeding():
    """Put the process's seeding state (worker rank, global seed) back after a test that changes it."""
    rank, seed = seeding.worker_rank(), seeding.get_global_seed()
    yield
    seeding.enter_worker(rank, seed)

EIGVEC = np.eye(3)
EVERY_AUGMENTOR = [
    lambda: imgaug.Hue((-10, 10), rgb=False), lambda: imgaug.Brightness(20), lambda: imgaug.BrightnessScale((0.5, 1.5)),
    lambda: imgaug.Contrast((0.5, 1.5), rgb=True), lambda: imgaug.MeanVarianceNormalize(), lambda: imgaug.GaussianBlur(),
    lambda: imgaug.Gamma(), lambda: imgaug.Clip(), lambda: imgaug.Saturation(), lambda: imgaug.Lighting(5, [1, 2, 3], EIGVEC),
    lambda: imgaug.MinMaxNormalize(), lambda: imgaug.JpegNoise(), lambda: imgaug.GaussianNoise(),
    lambda: imgaug.SaltPepperNoise(), lambda: imgaug.ColorSpace(cv2.COLOR_BGR2HSV), lambda: imgaug.Grayscale(keepshape=True),
    lambda: imgaug.ToUint8(), lambda: imgaug.ToFloat32(),
]


@pytest.mark.parametrize("make", EVERY_AUGMENTOR, ids=lambda make: type(make()).__name__)
def test_augmentor_survives_pickle_with_its_arguments(make):
    aug = make()
    copy = pickle.loads(pickle.dumps(aug))
    assert type(copy) is type(aug)

    def arguments(a):
        return {key: repr(value) for key, value in vars(a).items() if not key.startswith("_rng")}

    assert arguments(copy) == arguments(aug)
    img = np.random.RandomState(0).randint(0, 256, (8, 8, 3)).astype(np.uint8)
    aug.rng, copy.rng = np.random.RandomState(9), np.random.RandomState(9)
    np.testing.assert_array_equal(copy.augment(img), aug.augment(img))


def _draws_in_worker(aug, rank, seed):
    seeding.enter_worker(rank, seed)
    aug.reset_state()
    img = np.zeros((1, 1), np.float32)
    return [float(aug.augment(img)[0, 0]) for _ in range(5)]


def test_copies_in_different_workers_draw_differently_and_a_global_seed_repeats_them(restore_seeding):
    blob = pickle.dumps(imgaug.Brightness(50, clip=False))
    first = _draws_in_worker(pickle.loads(blob), 0, 7)
    second = _draws_in_worker(pickle.loads(blob), 1, 7)
    assert first != second
    assert _draws_in_worker(pickle.loads(blob), 0, 7) == first
    assert _draws_in_worker(pickle.loads(blob), 1, 7) == second
    assert _draws_in_worker(pickle.loads(blob), 0, None) != first      # no seed: fresh entropy


class ShiftAndReport:
    """A map function carrying an augmentor into the workers: returns two consecutive draws of the
    shift (a pair: single float32 draws of 300 datapoints collide by chance about once in 600 runs,
    pairs never) and the pid."""

    def __init__(self, aug):
        self.aug = aug

    def __call__(self, dp):
        shifts = tuple(float(self.aug.augment(np.zeros((1, 1), np.float32))[0, 0]) for _ in range(2))
        return [shifts, os.getpid()]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_worker_processes_draw_their_own_numbers(start_method):
    aug = imgaug.Brightness(50, clip=False)
    aug.reset_state()
    df = MultiProcessMapData(DataFromList([[i] for i in range(300)], shuffle=False), 2, ShiftAndReport(aug),
                             strict=True, start_method=start_method, buffer_size=20)
    df.reset_state()
    with df:
        results = list(df)
    shifts = [shift for shift, _ in results]
    pids = {pid for _, pid in results}
    assert len(results) == 300 and len(pids) == 2 and os.getpid() not in pids
    assert len(set(shifts)) == 300                       # no worker repeats another's stream
    assert all(-50 <= s < 50 for pair in shifts for s in pair)
