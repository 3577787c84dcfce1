"""RayMapData, RayMapAndBatchData and RayShardedData on a local Ray instance (2 CPUs).

The first test starts and stops a Ray instance of its own (a flow with no Ray to join starts one
and its close() shuts it down). The others share ONE instance started by a module fixture and
shut down at the end of the module; flows join it and leave it running.
"""
import itertools
import ipaddress
import os
import signal
import stat
import time

import numpy as np
import psutil
import pytest

ray = pytest.importorskip("ray", reason='Ray is an optional extra: pip install "inputpipe[ray]"')

from inputpipe.dataflow.ray import RayMapAndBatchData, RayMapData, RayShardedData, start_local_ray  # noqa: E402
from inputpipe.utils.errors import WorkerError  # noqa: E402
from dataflow_helpers import Indexed  # noqa: E402

# a module-scoped fixture is made once: the module's tests run in one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("test_ray_map")


def square_with_array(dp):
    i = dp[0]
    return None if i % 7 == 3 else [i, i * i, np.full((4,), i, np.int64)]


def expected_squares(n):
    return [i for i in range(n) if i % 7 != 3]


def slow_identity(dp):
    time.sleep(0.005)
    return [dp[0]]


def fail_on_13(dp):
    if dp[0] == 13:
        raise KeyError("no datapoint 13 here")
    return dp


def hang_on_5(dp):
    if dp[0] == 5:
        time.sleep(60)
    return dp


def megabyte_of(dp):
    return [np.full((1 << 20,), dp[0] % 256, np.uint8)]


def read_range(shard):
    start, stop = shard
    for i in range(start, stop):
        time.sleep(0.001)
        yield [i]


def read_range_failing_at_57(shard):
    for i in range(*shard):
        if i == 57:
            raise ValueError("shard {} is corrupt at {}".format(shard, i))
        yield [i]


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


#: Servers of the local instance that Ray (2.60) gives no way to keep on loopback: none.
NOT_NARROWABLE = ()


def _listening_sockets_of_the_instance():
    """(process name, address) of every listening socket of this process (the driver) and of the
    Ray processes under it."""
    found = []
    for process in [psutil.Process()] + psutil.Process().children(recursive=True):
        try:
            name = process.name()
            connections = process.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        found += [(name, c.laddr) for c in connections if c.status == psutil.CONN_LISTEN]
    return found


def _is_loopback(ip):
    address = ipaddress.ip_address(ip.split("%")[0])
    return address.is_loopback or getattr(address, "ipv4_mapped", None) is not None and address.ipv4_mapped.is_loopback


def _assert_reachable_from_this_machine_only_with_private_files():
    listening = _listening_sockets_of_the_instance()
    names = {name for name, _ in listening}
    assert {"gcs_server", "raylet"} <= names, listening
    exposed = [(name, address) for name, address in listening
               if not _is_loopback(address.ip) and name not in NOT_NARROWABLE]
    assert exposed == [], "listening beyond this machine: {}".format(exposed)
    # Ray makes its own directories 0777; the instance's temp directory is inside one of ours, 0700
    session_dir = ray._private.worker._global_node.get_session_dir_path()
    private = os.path.dirname(os.path.dirname(session_dir))
    assert os.path.basename(private) == "inputpipe-ray-{}".format(os.getuid()), session_dir
    status = os.lstat(private)
    assert stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid() and stat.S_IMODE(status.st_mode) == 0o700
    token = os.path.expanduser("~/.ray/auth_token")
    if os.path.exists(token):                        # Ray >= 2.5x: token authentication
        assert stat.S_IMODE(os.stat(token).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(token)).st_mode) == 0o700


@pytest.mark.timeout(90)
def test_a_flow_that_started_ray_shuts_it_down_on_close_and_leaves_no_process():
    assert not ray.is_initialized()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    df = RayMapData(Indexed(20), 1, square_with_array, strict=True)
    try:
        df.reset_state()
        assert ray.is_initialized()
        assert ray.cluster_resources()["CPU"] == os.cpu_count()
        ray_processes = {p.pid for p in psutil.Process().children(recursive=True)} - before
        assert ray_processes, "the local instance runs in child processes of this one"
        assert [dp[0] for dp in df] == expected_squares(20)
        _assert_reachable_from_this_machine_only_with_private_files()     # the instance a flow starts itself
    finally:
        df.close()
    assert not ray.is_initialized()
    assert _wait_gone(ray_processes, 10) == []


@pytest.fixture(scope="module")
def ray_instance():
    start_local_ray(num_cpus=2)
    # let the instance settle (its prestarted workers), so that the leak check of the first test
    # compares against a stable set of processes
    children = None
    for _ in range(40):
        now = {p.pid for p in psutil.Process().children(recursive=True)}
        if now == children:
            break
        children = now
        time.sleep(0.25)
    yield
    ray.shutdown()


def test_the_local_instance_listens_on_loopback_only_and_keeps_its_files_private(ray_instance):
    # Ray alone (2.60) listens on 7 ports of every interface (GCS, raylet, object manager, the core
    # workers of the driver and of each actor) and its runtime-env agent on the network address;
    # its session files sit in world-writable directories and its token file is 0644.
    df = RayMapData(Indexed(10), 2, slow_identity, strict=True)
    df.reset_state()
    with df:
        assert [dp[0] for dp in df] == list(range(10))         # the actors' servers are up too
        assert sum(name == "ray::RayWorker" for name, _ in _listening_sockets_of_the_instance()) >= 2
        _assert_reachable_from_this_machine_only_with_private_files()


def test_the_actors_of_the_local_instance_run_at_the_niceness_of_this_process(ray_instance):
    # Ray's default (nice 15) starved them on a busy machine: 55 s to start beside 8 busy processes
    df = RayMapData(Indexed(4), 2, slow_identity, strict=True)
    df.reset_state()
    with df:
        assert [dp[0] for dp in df] == list(range(4))
        assert [psutil.Process(pid).nice() for pid in df.worker_pids] == [os.nice(0)] * 2


def test_the_local_instance_options_merge_the_callers_system_config():
    from inputpipe.dataflow._ray.runtime import _local_init_options

    assert _local_init_options()["_system_config"] == {"worker_niceness": 0}
    options = _local_init_options(num_cpus=3, _system_config={"object_timeout_milliseconds": 500})
    assert options["num_cpus"] == 3
    assert options["_system_config"] == {"worker_niceness": 0, "object_timeout_milliseconds": 500}
    assert _local_init_options(_system_config={"worker_niceness": 5})["_system_config"] == {"worker_niceness": 5}


@pytest.mark.parametrize("num_actors", [1, 2])
def test_strict_ordered_epochs_yield_each_datapoint_once_in_source_order(ray_instance, num_actors):
    n = 300
    df = RayMapData(Indexed(n), num_actors, square_with_array, strict=True, ordered=True, buffer_size=50)
    df.reset_state()
    with df:
        for _ in range(3):
            epoch = list(df)
            assert [dp[0] for dp in epoch] == expected_squares(n)
            assert [dp[1] for dp in epoch] == [i * i for i in expected_squares(n)]
            assert all(dp[2].dtype == np.int64 and dp[2].shape == (4,) and (dp[2] == dp[0]).all() for dp in epoch)
    assert ray.is_initialized(), "a flow that joined an instance leaves it running"


_FIRST_DRAWS = {}


def rank_and_first_draw(dp):
    """[index, the actor's rank, its pid, the first number of the first RNG made in it]."""
    from inputpipe.utils import seeding

    rank = seeding.worker_rank()
    if rank not in _FIRST_DRAWS:
        _FIRST_DRAWS[rank] = int(seeding.new_rng().randint(1 << 30))
    return [dp[0], rank, os.getpid(), _FIRST_DRAWS[rank]]


def test_actors_have_their_own_ranks_and_under_a_global_seed_their_own_repeatable_rng_streams(ray_instance):
    from inputpipe.utils import seeding

    def run():
        df = RayMapData(Indexed(40), 2, rank_and_first_draw, strict=True, ordered=True)
        df.reset_state()
        with df:
            return {(rank, pid, draw) for _, rank, pid, draw in df}

    seeding.set_global_seed(7)
    try:
        first, second = run(), run()
    finally:
        seeding.set_global_seed(None)
    assert sorted(rank for rank, _, _ in first) == [0, 1] and len({pid for _, pid, _ in first}) == 2
    draws = {rank: draw for rank, _, draw in first}
    assert draws[0] != draws[1]                                   # each actor its own stream
    assert {rank: draw for rank, _, draw in second} == draws      # the same streams on every run


def test_strict_unordered_epochs_yield_each_datapoint_exactly_once(ray_instance):
    n = 200
    df = RayMapData(Indexed(n), 2, slow_identity, strict=True, ordered=False, buffer_size=16)
    df.reset_state()
    with df:
        for _ in range(2):
            got = [dp[0] for dp in df]
            assert sorted(got) == list(range(n))


def test_continuous_mode_streams_the_passes_exactly_from_one_iterator(ray_instance):
    n = 50
    df = RayMapData(Indexed(n), 2, slow_identity, strict=False, ordered=True, buffer_size=20)
    df.reset_state()
    with df:
        first = [dp[0] for dp in itertools.islice(df, 70)]
        rest = [dp[0] for dp in itertools.islice(df, 80)]      # a new iterator continues the stream
    assert len(df) == n and first + rest == list(range(n)) * 3


def test_map_and_batch_stacks_in_the_actors_and_drops_the_incomplete_batch(ray_instance):
    df = RayMapAndBatchData(Indexed(70), 2, square_with_array, 10, strict=True)
    df.reset_state()
    with df:
        assert len(df) == 7
        for _ in range(2):
            batches = list(df)
            assert len(batches) == 7
            ids, squares, arrays = zip(*batches)
            flat = [int(i) for batch in ids for i in batch]
            assert flat == expected_squares(70)
            assert all(a.dtype == np.int64 and a.shape == (len(i), 4) for i, a in zip(ids, arrays))
            assert all((s == np.asarray(i) ** 2).all() for i, s in zip(ids, squares))


def test_an_actor_killed_mid_epoch_is_replaced_and_the_epoch_stays_exact(ray_instance):
    n = 400
    df = RayMapData(Indexed(n), 2, slow_identity, strict=True, ordered=True, buffer_size=40)
    df.reset_state()
    with df:
        victim = df.worker_pids[1]
        got = []
        for dp in df:
            got.append(dp[0])
            if len(got) == 50:
                os.kill(victim, signal.SIGKILL)
        assert got == list(range(n))
        new_pid = df.worker_pids[1]
        assert new_pid not in (None, victim)
        assert [dp[0] for dp in df] == list(range(n)), "the next epoch runs on the restarted actor"
        pids = df.worker_pids
    assert _wait_gone(pids, 5) == [], "close() ends every actor process"


def test_a_raising_map_func_reaches_the_consumer_with_the_actors_traceback(ray_instance):
    df = RayMapData(Indexed(100), 2, fail_on_13, strict=True)
    df.reset_state()
    pids = df.worker_pids
    with df:
        with pytest.raises(KeyError) as info:
            list(df)
    err = info.value
    assert isinstance(err, WorkerError)
    assert "RayMapData: actor" in str(err) and "raised KeyError: 'no datapoint 13 here'" in str(err)
    assert "in fail_on_13" in err.remote_traceback and "no datapoint 13 here" in err.remote_traceback
    assert err.pid in pids


def test_map_timeout_names_the_stuck_actor_and_close_kills_it(ray_instance):
    df = RayMapData(Indexed(20), 2, hang_on_5, strict=True, map_timeout=1.0)
    df.reset_state()
    pids = df.worker_pids
    started = time.monotonic()
    with pytest.raises(WorkerError, match=r"RayMapData: actor \d \(pid \d+\) has not answered for"):
        list(df)
    assert time.monotonic() - started < 20
    df.close()
    assert _wait_gone(pids, 5) == []
    assert ray.is_initialized()


def test_results_in_flight_are_bounded_in_bytes(ray_instance):
    df = RayMapData(Indexed(40), 2, megabyte_of, strict=True, buffer_size=200, max_buffer_bytes=4 << 20)
    df.reset_state()
    with df:
        assert df.buffer_size == 200
        got = [int(dp[0][0]) for dp in df]
        assert got == list(range(40))
        assert df.buffer_size == 4


@pytest.mark.parametrize("num_actors", [1, 2])
def test_sharded_source_reads_every_shard_once_per_epoch(ray_instance, num_actors):
    shards = [(0, 10), (10, 11), (11, 11), (11, 150), (150, 200)]
    df = RayShardedData(shards, num_actors, read_range, chunk_size=16, size=200)
    df.reset_state()
    with df:
        assert len(df) == 200
        for _ in range(2):
            got = [dp[0] for dp in df]
            assert sorted(got) == list(range(200))
            for start, stop in shards:          # each shard's datapoints in its own order
                assert [i for i in got if start <= i < stop] == list(range(start, stop))


def test_a_sharded_reader_killed_mid_shard_is_resumed_without_loss_or_repeat(ray_instance):
    shards = [(0, 300), (300, 600)]
    df = RayShardedData(shards, 2, read_range, chunk_size=8)
    df.reset_state()
    with df:
        victim = df.worker_pids[0]
        got = []
        for dp in df:
            got.append(dp[0])
            if len(got) == 60:
                os.kill(victim, signal.SIGKILL)
        assert sorted(got) == list(range(600))
        assert df.worker_pids[0] != victim


def test_a_failing_read_shard_reaches_the_consumer_with_the_actors_traceback(ray_instance):
    df = RayShardedData([(0, 50), (50, 100)], 2, read_range_failing_at_57)
    df.reset_state()
    with df:
        with pytest.raises(ValueError) as info:
            list(df)
    assert isinstance(info.value, WorkerError)
    assert "RayShardedData: actor" in str(info.value) and "shard (50, 100) is corrupt at 57" in str(info.value)
    assert "in read_range_failing_at_57" in info.value.remote_traceback


def test_too_many_actors_for_the_cluster_fail_with_what_they_wait_for(ray_instance, monkeypatch):
    from inputpipe.dataflow._ray import runtime as _ray_runtime
    monkeypatch.setattr(_ray_runtime, "ACTOR_START_TIMEOUT", 2.0)
    # Each actor asks for more CPUs than the whole 2-CPU cluster has, so none can ever start, however
    # fast or slow the host is (a test that relied on 2 of 3 actors starting within 2 s was timing-bound).
    df = RayMapData(Indexed(10), 2, slow_identity, actor_options={"num_cpus": 3})
    with pytest.raises(WorkerError, match=r"2 of 2 actors \(ranks \[0, 1\]\) did not start within 2 s: each asks "
                                          r"for \{'num_cpus': 3\}"):
        df.reset_state()
    df.close()


@pytest.mark.allow_leaks
def test_auto_actors_added_and_retired_at_random_moments_keep_epochs_exact(ray_instance):
    """(allow_leaks: actors coming and going make Ray start idle workers of its own pool, ray::IDLE,
    which belong to the running instance; the test checks that every actor process is gone.)"""
    from itertools import cycle

    from inputpipe.dataflow.autoscale import Autoscale

    counts = cycle([1, None, 2, None, None, 1, 2])
    # settle_intervals=1: a decision waits for the actor added last to be placed and answer
    df = RayMapData(Indexed(150), Autoscale(interval=0, settle_intervals=1, start=2, policy=lambda m: next(counts)),
                    slow_identity, strict=True, ordered=True, buffer_size="auto")
    assert df.autoscaled and df.num_actors == 2
    df.reset_state()
    epochs = 0
    started = time.monotonic()
    with df:
        # on a busy host Ray may place an added actor only after some epochs: run whole epochs
        # until an actor was retired and another added (each epoch exact), within a bound
        while True:
            assert [dp[0] for dp in df] == list(range(150))
            epochs += 1
            history = df.worker_count_history()
            actor_pids = [pid for pid in df._pool.pids if pid is not None]
            if epochs >= 2 and len(actor_pids) >= 3 and len(history) >= 4:
                break
            assert time.monotonic() - started < 60, (epochs, actor_pids, history)
        stats = df.worker_stats()
    assert len(stats) >= len(actor_pids) >= 3
    assert _wait_gone(actor_pids, 10) == []
    assert {c.workers for c in history} == {1, 2}
    assert sum(s["items"] for s in stats) == 150 * epochs and any(not s["active"] for s in stats)


@pytest.mark.allow_leaks
def test_an_added_actor_the_cluster_cannot_place_is_given_up(ray_instance, monkeypatch, caplog):
    """(allow_leaks: as above, Ray's own idle workers; the actors' processes are checked.)"""
    from inputpipe.dataflow._ray import runtime as _ray_runtime
    df = RayMapData(Indexed(60), 2, slow_identity, strict=True, ordered=True, actor_options={"num_cpus": 1})
    df.reset_state()
    monkeypatch.setattr(_ray_runtime, "ACTOR_START_TIMEOUT", 1.0)
    with df:
        df.set_num_workers(3)                  # the 2-CPU cluster has no CPU left for a third
        started = time.monotonic()
        assert [dp[0] for dp in df] == list(range(60))
        while df.worker_count_history()[-1].reason != "actor 2 could not be placed":
            assert time.monotonic() - started < 10
            assert len(list(df)) == 60
        actor_pids = [pid for pid in df._pool.pids if pid is not None]
    assert len(actor_pids) == 2 and _wait_gone(actor_pids, 10) == []
    assert [c.workers for c in df.worker_count_history()] == [2, 3, 2]
    assert "actor 2 was not placed within 1 s" in caplog.text


@pytest.mark.allow_leaks
def test_a_sharded_source_with_auto_actors_reads_every_shard_once_while_actors_come_and_go(ray_instance):
    """(allow_leaks: Ray's own idle workers, as above; the actors' processes are checked.)"""
    from itertools import cycle

    from inputpipe.dataflow.autoscale import Autoscale

    counts = cycle([None, 1, None, 2, None, 1])
    shards = [(k * 40, k * 40 + 40) for k in range(6)]
    df = RayShardedData(shards, Autoscale(interval=0, settle_intervals=1, start=2, policy=lambda m: next(counts)),
                        read_range, chunk_size=8, size=240)
    assert df.autoscaled and df.num_actors == 2
    df.reset_state()
    epochs = 0
    started = time.monotonic()
    with df:
        while True:                         # whole epochs until actors came and went (bounded)
            assert sorted(dp[0] for dp in df) == list(range(240))
            epochs += 1
            history = df.worker_count_history()
            if epochs >= 2 and len(history) >= 3 and {c.workers for c in history} == {1, 2}:
                break
            assert time.monotonic() - started < 60, (epochs, history)
        stats = df.worker_stats()
        actor_pids = [pid for pid in df._pool.pids if pid is not None]
    assert _wait_gone(actor_pids, 10) == []
    assert sum(s["items"] for s in stats) >= 240 * epochs
