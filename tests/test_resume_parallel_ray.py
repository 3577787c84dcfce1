"""Resumable Ray maps: the same state protocol and per-datapoint seeds as the process maps, on
one local Ray instance (2 CPUs) shared by the module."""
import json

import numpy as np
import psutil
import pytest

ray = pytest.importorskip("ray", reason='Ray is an optional extra: pip install "inputpipe[ray]"')

from inputpipe.dataflow import DataFromList, MultiProcessMapData, NotResumableError, seeding  # noqa: E402
from inputpipe.dataflow.ray import RayMapAndBatchData, RayMapData, start_local_ray  # noqa: E402

from resume_helpers import OTHER_SEED, SEED, canon, epochs, take  # noqa: E402

# a module-scoped fixture is made once: the module's tests run in one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_resume_parallel_ray")

N = 17


def draw(dp):
    if dp[0] == 5:
        return None
    return [dp[0], int(seeding.datapoint_rng().randint(10 ** 6)), int(np.random.randint(10 ** 6))]


def source():
    return DataFromList([[i] for i in range(N)], shuffle=True)


@pytest.fixture(scope="module")
def ray_instance():
    start_local_ray(num_cpus=2)
    children = None
    for _ in range(40):          # let the instance settle before the first leak check
        now = {p.pid for p in psutil.Process().children(recursive=True)}
        if now == children:
            break
        children = now
        import time
        time.sleep(0.25)
    yield
    ray.shutdown()
    seeding.set_global_seed(None)


def _run(df, count):
    df.reset_state()
    with df:
        itr = epochs(df)
        got = [canon(dp) for dp in take(itr, count)]
        itr.close()
    return got


@pytest.mark.timeout(240)
@pytest.mark.parametrize("batch", [None, 3])
def test_ray_map_resumes_with_another_number_of_actors_and_matches_the_process_map(ray_instance, batch):
    def make(actors):
        if batch:
            return RayMapAndBatchData(source(), actors, draw, batch, strict=True, ordered=True)
        return RayMapData(source(), actors, draw, strict=True, ordered=True, buffer_size=4)

    per_epoch = (N // 3) if batch else N - 1
    seeding.set_global_seed(SEED)
    full = _run(make(2), 3 * per_epoch)
    if not batch:
        # the same datapoints as the process map with the same global seed
        seeding.set_global_seed(SEED)
        assert _run(MultiProcessMapData(source(), 2, draw, strict=True, ordered=True), 3 * per_epoch) == full
    for cut in (per_epoch, per_epoch + 2):      # at an epoch's end, and within the next epoch
        seeding.set_global_seed(SEED)
        first = make(2)
        first.reset_state()
        with first:
            itr = epochs(first)
            assert [canon(dp) for dp in take(itr, cut)] == full[:cut]
            text = json.dumps(first.get_state())
            itr.close()
        assert len(text) < 4096
        seeding.set_global_seed(OTHER_SEED)
        second = make(1)
        second.reset_state()
        second.set_state(json.loads(text))
        with second:
            itr = epochs(second)
            assert [canon(dp) for dp in take(itr, 3 * per_epoch - cut)] == full[cut:], "cut {}".format(cut)
            itr.close()


@pytest.mark.timeout(120)
def test_non_strict_ray_map_is_not_resumable(ray_instance):
    df = RayMapData(source(), 1, draw, strict=False)
    with pytest.raises(NotResumableError, match=r"RayMapData\(strict=False\) is not resumable.*strict=True"):
        df.check_resumable()
