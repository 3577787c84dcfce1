"""Determinism by construction: random work in parallel maps is seeded per datapoint from (the
map's base seed, epoch, index), so a seeded pipeline gives the same datapoints with 1, 2 or 4
workers, threads or processes, and image augmentors draw the same crops in every worker."""
import json
import random
import threading

import numpy as np
import pytest

pytest.importorskip("cv2", reason='the augmentation tests need OpenCV: pip install "inputpipe[image]"')

from inputpipe.dataflow import (DataFromList, MultiProcessMapData, MultiThreadMapData, imgaug,  # noqa: E402
                                seeding)
from inputpipe.utils import seeding as core_seeding  # noqa: E402

SEED = 1234
IMAGES = [np.arange(i, i + 24 * 20 * 3, dtype=np.int64).reshape(24, 20, 3).astype(np.uint8) for i in range(30)]


@pytest.fixture(autouse=True)
def no_global_seed():
    yield
    seeding.set_global_seed(None)


class Augment:
    """A map function applying an augmentor list to the image of ``[index, image]``."""

    def __init__(self):
        self.augs = imgaug.AugmentorList([imgaug.RandomCrop((16, 14)), imgaug.Flip(horiz=True),
                                          imgaug.Flip(vert=True)])

    def __call__(self, dp):
        index, image = dp
        return [index, self.augs.augment(image)]


def global_numpy(dp):
    return [dp[0], float(np.random.rand()), int(np.random.randint(1000)), float(__import__("random").random())]


def run(cls, workers, map_func, ordered=False, data=None, epochs=2):
    seeding.set_global_seed(SEED)
    data = data if data is not None else [[i, IMAGES[i]] for i in range(len(IMAGES))]
    df = cls(DataFromList(data, shuffle=True), workers, map_func, strict=True, ordered=ordered, buffer_size=6)
    df.reset_state()
    with df:
        out = [list(df) for _ in range(epochs)]
    # unordered: compare datapoint by datapoint (the source index is the first component)
    return [sorted(epoch, key=lambda dp: dp[0]) for epoch in out] if not ordered else out


def _same(a, b):
    assert len(a) == len(b)
    for epoch_a, epoch_b in zip(a, b):
        assert [dp[0] for dp in epoch_a] == [dp[0] for dp in epoch_b]
        for x, y in zip(epoch_a, epoch_b):
            for u, v in zip(x[1:], y[1:]):
                np.testing.assert_array_equal(u, v)


@pytest.mark.timeout(100)
def test_augmentation_in_worker_processes_is_the_same_with_1_2_and_4_workers():
    one = run(MultiProcessMapData, 1, Augment())
    assert {dp[1].shape for epoch in one for dp in epoch} == {(16, 14, 3)}
    # the crops are random: not all the same offset, and epoch 2 differs from epoch 1
    corners = {int(dp[1][0, 0, 0]) - dp[0] for dp in one[0]}
    assert len(corners) > 3
    assert any(not np.array_equal(a[1], b[1]) for a, b in zip(one[0], one[1]))
    for workers in (2, 4):
        _same(one, run(MultiProcessMapData, workers, Augment()))
    # threads draw the same numbers as processes
    _same(one, run(MultiThreadMapData, 3, Augment()))


@pytest.mark.timeout(60)
def test_numpy_and_random_globals_are_reseeded_per_datapoint_in_worker_processes():
    data = [[i] for i in range(20)]
    one = run(MultiProcessMapData, 1, global_numpy, data=data)
    _same(one, run(MultiProcessMapData, 2, global_numpy, data=data))
    _same(one, run(MultiProcessMapData, 4, global_numpy, data=data))
    draws = [dp[1] for dp in one[0]]
    assert len(set(draws)) == 20


@pytest.mark.timeout(60)
def test_a_different_global_seed_gives_different_augmentations():
    first = run(MultiProcessMapData, 2, Augment(), epochs=1)
    seeding.set_global_seed(SEED + 1)
    df = MultiProcessMapData(DataFromList([[i, IMAGES[i]] for i in range(len(IMAGES))], shuffle=True), 2, Augment(),
                             strict=True, ordered=False)
    df.reset_state()
    with df:
        other = sorted(df, key=lambda dp: dp[0])
    assert any(not np.array_equal(a[1], b[1]) for a, b in zip(first[0], other))


def test_datapoint_context_seeds_user_and_augmentor_streams():
    flip = imgaug.Flip(horiz=True)
    outside = flip.rng
    assert flip.rng is outside                  # outside a context: the augmentor's own RNG
    assert seeding.datapoint_seed() is None
    draws = []
    for _ in range(2):
        with seeding.datapoint_context(seeding.derive_seed(5, 0, 7)) as seed:
            assert seeding.datapoint_seed() == seed
            draws.append([seeding.datapoint_rng().randint(10 ** 6), seeding.datapoint_rng().randint(10 ** 6),
                          seeding.datapoint_rng(1).randint(10 ** 6), flip.rng.randint(10 ** 6)])
            assert flip.rng is not outside
    assert draws[0] == draws[1]
    assert len(set(draws[0])) == 4               # a stream continues; salts and the augmentor differ
    assert flip.rng is outside and seeding.datapoint_seed() is None
    with seeding.datapoint_context(seeding.derive_seed(5, 0, 8)):
        assert seeding.datapoint_rng().randint(10 ** 6) != draws[0][0]


def test_augmentors_are_numbered_by_their_first_draw_in_the_datapoint():
    a, b = imgaug.Flip(horiz=True), imgaug.Flip(horiz=True)
    with seeding.datapoint_context(11):
        first_a, first_b = a.rng.randint(10 ** 6), b.rng.randint(10 ** 6)
    with seeding.datapoint_context(11):
        swapped_b, swapped_a = b.rng.randint(10 ** 6), a.rng.randint(10 ** 6)
    assert first_a != first_b                    # two equal augmentors do not repeat each other
    assert (swapped_b, swapped_a) == (first_a, first_b)


def test_nested_contexts_keep_their_own_rngs():
    with seeding.datapoint_context(1):
        outer = seeding.datapoint_rng()
        start = outer.randint(10 ** 6)
        with seeding.datapoint_context(2):
            inner = seeding.datapoint_rng()
            assert inner is not outer
            inner.randint(10 ** 6, size=100)
        assert seeding.datapoint_seed() == 1
        second = outer.randint(10 ** 6)
    with seeding.datapoint_context(1):
        assert seeding.datapoint_rng().randint(10 ** 6, size=2).tolist() == [start, second]


def test_reseed_global_only_when_asked():
    np.random.seed(0)
    expected = np.random.RandomState(0).rand()
    with seeding.datapoint_context(3):
        assert np.random.rand() == expected          # threads and the main process: untouched
    with seeding.datapoint_context(3, reseed_global=True):
        first = np.random.rand()
    with seeding.datapoint_context(3, reseed_global=True):
        assert np.random.rand() == first


def test_reseed_global_seeds_both_generators_as_their_own_seed_functions_would():
    # the values a worker gives must not depend on how the reseed is done: pinned to seed()'s
    random.seed(1)
    random.gauss(0, 1)                           # a cached second Gaussian, dropped by a reseed
    for seed in (0, 7, 2 ** 32 - 1, 3716711880):
        with seeding.datapoint_context(seed, reseed_global=True):
            got = (np.random.rand(3).tolist(), np.random.randn(), random.random(), random.gauss(0, 1))
        np.random.seed(seeding.derive_seed(seed, 2))
        random.seed(seeding.derive_seed(seed, 3))
        assert got == (np.random.rand(3).tolist(), np.random.randn(), random.random(), random.gauss(0, 1))


def test_reseed_global_goes_through_a_replaced_random_seed(monkeypatch):
    called = []
    monkeypatch.setattr(random, "seed", lambda value: called.append(value))
    with seeding.datapoint_context(5, reseed_global=True):
        pass
    assert called == [seeding.derive_seed(5, 3)]


def test_one_context_object_entered_twice_nested_leaves_each_level_in_turn():
    context = seeding.datapoint_context(4)
    with context as seed:
        assert seed == 4 and seeding.datapoint_seed() == 4
        with context:
            assert seeding.datapoint_seed() == 4
        assert seeding.datapoint_seed() == 4
    assert seeding.datapoint_seed() is None


def test_datapoint_context_also_decorates_a_function():
    @seeding.datapoint_context(9)
    def draw():
        return seeding.datapoint_seed(), seeding.datapoint_rng().randint(10 ** 6)

    first = draw()
    assert first == draw() and first[0] == 9 and seeding.datapoint_seed() is None


def test_derive_seed_is_stable():
    # fixed values: a change of the hash would silently change every restored run's randomness
    assert seeding.derive_seed(1, 2, 3) == core_seeding.derive_seed(1, 2, 3)
    assert seeding.derive_seed(0) == 1222067678
    assert seeding.derive_seed(1234, 0, 5) == 3716711880
    import hashlib
    payload = b"".join(n.to_bytes(16, "little", signed=True) for n in (1234, 0, 5))
    assert int.from_bytes(hashlib.blake2b(payload, digest_size=4).digest(), "little") == 3716711880
    assert 0 <= seeding.derive_seed(2 ** 40, -1) < 2 ** 32
    assert json.loads(json.dumps(seeding.derive_seed(7, 7))) == seeding.derive_seed(7, 7)


def test_task_seed_is_derive_seed_for_any_numbers_and_threads():
    assert core_seeding.task_seed(1234, 0, 5) == 3716711880
    cases = [(b, e, i) for b in (0, -1, 7, 2 ** 40, -(2 ** 63)) for e in (0, 3, -2) for i in (0, 1, 2 ** 33)]
    for base, epoch, index in cases + cases[::-1]:          # (the cached prefix changes and comes back)
        assert core_seeding.task_seed(base, epoch, index) == seeding.derive_seed(base, epoch, index)
    got = {}

    def derive(base):
        got[base] = [core_seeding.task_seed(base, epoch, index) for epoch in range(20) for index in range(50)]

    threads = [threading.Thread(target=derive, args=(base,)) for base in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert got == {base: [seeding.derive_seed(base, epoch, index) for epoch in range(20) for index in range(50)]
                   for base in range(4)}


def test_call_seeded_is_a_call_inside_datapoint_context():
    def draw(tag):
        return tag, seeding.datapoint_seed(), seeding.datapoint_rng().randint(10 ** 6), np.random.rand()

    np.random.seed(1)
    with seeding.datapoint_context(21, reseed_global=True):
        want = draw("x")
    np.random.seed(1)
    assert core_seeding.call_seeded(draw, "x", 21, True) == want
    with seeding.datapoint_context(3):                  # nested in an open context, then back to it
        assert core_seeding.call_seeded(draw, "y", 22)[1] == 22
        assert seeding.datapoint_seed() == 3

    def fail(_):
        raise KeyError("no record")
    with pytest.raises(KeyError):
        core_seeding.call_seeded(fail, None, 23)
    assert seeding.datapoint_seed() is None                 # the context was left on the error too
