"""EstimatorInput on the current TensorFlow, with Estimator's pattern of calls (a new graph per
call: see estimator_helpers.py): training continues across calls exactly once, evaluation reads one
whole pass per call, checkpoints continue after a restart, and misuse gets a clear error."""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from estimator_helpers import SPECS, Ids, evaluate_session, flat, train_session
from inputpipe.dataflow import BatchData, DataFromList, MapData, MultiProcessMapData, send_dataflow_zmq
from inputpipe.estimator import EstimatorInput
from inputpipe.input_source import (
    BatchQueueInput, InputSourceError, QueueInput, StagingInput, TFDatasetInput, ZMQInput,
)

pytestmark = pytest.mark.timeout(300)


def single_ids(n):
    return DataFromList([[np.int64(i), np.array([i], np.float32)] for i in range(n)], shuffle=False)


@pytest.mark.parametrize("make", [
    lambda: Ids(100, 10),
    lambda: QueueInput(Ids(100, 10)),
    lambda: QueueInput(Ids(100, 10), in_worker=True),
    lambda: StagingInput(QueueInput(Ids(100, 10)), nr_stage=3, device="/cpu:0"),
    lambda: TFDatasetInput(Ids(100, 10)),
    lambda: BatchQueueInput(single_ids(100), 10),
], ids=["dataflow", "queue", "in_worker", "staging", "tfdataset", "batchqueue"])
def test_training_continues_across_calls_exactly_once(make):
    with EstimatorInput(make(), SPECS, labels="id") as train:
        seen = []
        for steps in (3, 1, 5, 4, 7):
            seen += train_session(train, steps)
        assert train.role == "train"
    assert flat(seen) == (list(range(100)) * 3)[:200]
    assert all(len(batch) == 10 for batch in seen)


def test_no_staging_and_deep_staging_lose_nothing():
    for nr_stage in (0, 4):
        with EstimatorInput(Ids(60, 5), SPECS, labels="id", nr_stage=nr_stage) as train:
            seen = train_session(train, 2) + train_session(train, 9) + train_session(train, 1)
        assert flat(seen) == list(range(60)), nr_stage


def test_workers_are_made_once_for_all_calls():
    flow = BatchData(MultiProcessMapData(single_ids(200), 2, lambda dp: dp, strict=True, ordered=True), 10)
    with EstimatorInput(flow, SPECS, labels="id") as train:
        seen = train_session(train, 2)
        pids = sorted(flow.ds.worker_pids)
        seen += train_session(train, 3) + train_session(train, 2)
        assert sorted(flow.ds.worker_pids) == pids and len(pids) == 2
    assert flat(seen) == list(range(70))


def test_evaluation_reads_the_whole_set_once_per_call_with_the_last_partial_batch():
    flow = BatchData(single_ids(23), 5, remainder=True)
    with EstimatorInput(flow, SPECS, labels="id") as evaluation:
        for _ in range(3):
            batches = evaluate_session(evaluation)
            assert flat(batches) == list(range(23))
            assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
        assert evaluation.role == "eval"
        assert flat(evaluate_session(evaluation, steps=2)) == list(range(10))       # stopped early
        assert flat(evaluate_session(evaluation)) == list(range(23))               # a whole pass again
        assert flat(evaluate_session(evaluation, mode="infer")) == list(range(23))


def test_evaluation_with_a_parallel_map_and_no_staging():
    flow = BatchData(MultiProcessMapData(single_ids(40), 2, lambda dp: dp, strict=True), 8)
    with EstimatorInput(flow, SPECS, labels="id", nr_stage=0) as evaluation:
        for _ in range(3):
            assert sorted(flat(evaluate_session(evaluation))) == list(range(40))


def test_a_checkpoint_continues_the_data_in_a_new_process(tmp_path):
    with EstimatorInput(Ids(100, 10), SPECS, labels="id") as train:
        first = train_session(train, 7, checkpoint_dir=str(tmp_path), save_steps=5)
    # a new EstimatorInput over a new flow (as after a restart): the last checkpoint was saved at
    # the end of the session (step 7), so the data continues after batch 7
    with EstimatorInput(Ids(100, 10), SPECS, labels="id") as train:
        second = train_session(train, 4, checkpoint_dir=str(tmp_path), save_steps=5)
    assert flat(first + second) == (list(range(100)) * 2)[:110] and len(flat(second)) == 40


def test_a_restored_older_checkpoint_restarts_the_data_at_its_position(tmp_path):
    with EstimatorInput(Ids(100, 10), SPECS, labels="id") as train:
        train_session(train, 3, checkpoint_dir=str(tmp_path / "a"), save_steps=100)      # saved at step 3
        train_session(train, 4)                                                       # no checkpoint: 3..6
        seen = train_session(train, 2, checkpoint_dir=str(tmp_path / "a"), save_steps=100)
    assert flat(seen) == list(range(30, 50))


def test_the_same_checkpoint_continues_in_place(tmp_path):
    with EstimatorInput(Ids(100, 10), SPECS, labels="id") as train:
        seen = []
        for _ in range(4):
            seen += train_session(train, 3, checkpoint_dir=str(tmp_path), save_steps=2)
        assert train._stream.carried > 0            # what the queue held was carried over, not re-read
    assert flat(seen) == list(range(100)) + list(range(20))


def test_forgotten_hooks_fail_the_first_step_with_a_message_instead_of_waiting():
    with EstimatorInput(Ids(30, 10), SPECS, labels="id") as train:
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"EstimatorInput: its hooks did not run.*hooks="):
            train_session(train, 1, hooks=False)


def test_features_and_labels_as_asked():
    specs = SPECS + [tf.TensorSpec([None], tf.int64, "weight")]
    flow = MapData(Ids(20, 5), lambda dp: dp + [dp[0] * 2])
    with tf.Graph().as_default():
        features, labels = EstimatorInput(flow, specs, labels="id").input_fn()
        assert sorted(features) == ["weight", "x"] and labels.dtype == tf.int64
        features, labels = EstimatorInput(flow, specs, labels=["id", "weight"], features="x").input_fn()
        assert features.dtype == tf.float32 and sorted(labels) == ["id", "weight"]
        features, labels = EstimatorInput(flow, specs).input_fn()
        assert sorted(features) == ["id", "weight", "x"] and labels is None
        again = EstimatorInput(flow, specs)
        assert again.input_fn()[0]["id"] is again.input_fn()[0]["id"]      # one build per graph
    with pytest.raises(ValueError, match=r"EstimatorInput: labels names \['label'\], but the signature has"):
        EstimatorInput(flow, specs, labels="label")
    with pytest.raises(ValueError, match="nr_stage must be an integer >= 0"):
        EstimatorInput(flow, specs, nr_stage=-1)


def test_one_input_serves_training_or_evaluation_not_both():
    with EstimatorInput(Ids(30, 10), SPECS, labels="id") as data:
        train_session(data, 1)
        with pytest.raises(InputSourceError, match="it serves training .* now called for evaluation"):
            evaluate_session(data)


def test_data_that_cannot_be_rebuilt_in_each_graph_is_refused_with_the_way_out():
    with tf.Graph().as_default():
        dataset = tf.data.Dataset.range(3)
        with pytest.raises(InputSourceError, match="pass a function that builds the dataset"):
            EstimatorInput(TFDatasetInput(dataset), SPECS)
        used = QueueInput(Ids(10, 5))
        used.setup(SPECS)
        with pytest.raises(InputSourceError, match="set up already"):
            EstimatorInput(used, SPECS)
        used.close()
    with pytest.raises(TypeError, match="data must be a DataFlow, an InputSource or a function"):
        EstimatorInput(42, SPECS)
    with pytest.raises(NotImplementedError, match="distribution strategy"):
        EstimatorInput(Ids(10, 5), SPECS).input_fn(mode="train", input_context=object())


def test_a_function_building_a_dataset_in_each_graph():
    def make_dataset():
        ids = tf.data.Dataset.range(12).batch(4)
        return ids.map(lambda i: (i, tf.cast(i, tf.float32)[:, None]))

    with EstimatorInput(make_dataset, SPECS, labels="id") as evaluation:
        assert flat(evaluate_session(evaluation)) == list(range(12))
        assert flat(evaluate_session(evaluation)) == list(range(12))       # tf.data starts over per graph


def test_staging_goes_to_the_device_asked_for_not_estimators_cpu_scope():
    for device, expected in (("/device:GPU:1", "GPU:1"), (None, "CPU:0")):
        with tf.Graph().as_default() as graph, tf.device("/cpu:0"):
            EstimatorInput(Ids(10, 5), SPECS, device=device).input_fn()
            stages = [op for op in graph.get_operations() if op.type == "Stage"]
            assert stages and all(expected in op.device for op in stages), [op.device for op in stages]


def test_a_zmq_stream_continues_across_calls_without_losing_what_was_queued():
    source = ZMQInput("tcp://127.0.0.1:*", hwm=10, timeout=60)
    with EstimatorInput(source, SPECS, labels="id") as train:
        with tf.Graph().as_default():
            train.input_fn()                          # makes the stream; the socket binds at the first session
        train._stream.reset_state()
        address = source.endpoints[0]
        # more than the steps take: a staged source reads one batch ahead of the last step
        sender = threading.Thread(target=send_dataflow_zmq, args=(Ids(260, 10), address),
                                  kwargs={"num_epochs": 1, "timeout": 60}, daemon=True)
        sender.start()
        seen = train_session(train, 4) + train_session(train, 9) + train_session(train, 7)
        sender.join(60)
        with pytest.raises(InputSourceError, match="a socket's stream serves training only"):
            EstimatorInput(ZMQInput("tcp://127.0.0.1:*", hwm=10), SPECS)._stream_for("eval")
    assert flat(seen) == list(range(200))


def test_the_source_of_the_latest_call_and_its_statistics():
    with EstimatorInput(Ids(50, 5), SPECS, labels="id") as train:
        assert train.source is None
        train_session(train, 4)
        assert train.source.stats.steps == 4 and train.source.size() == 10


def test_close_stops_the_reader_thread_and_workers_and_input_fn_after_close_is_an_error():
    flow = BatchData(MultiProcessMapData(single_ids(50), 2, lambda dp: dp, strict=True), 5)
    train = EstimatorInput(flow, SPECS, labels="id")
    train_session(train, 2)
    assert any(t.name == "EstimatorInput-reader" for t in threading.enumerate())
    train.close()
    assert not any(t.name == "EstimatorInput-reader" for t in threading.enumerate())
    with pytest.raises(InputSourceError, match="after close"):
        train.input_fn()


@pytest.mark.skipif(hasattr(tf, "estimator") and hasattr(tf.estimator, "Estimator"),
                    reason="this TensorFlow has tf.estimator: test_estimator_tf.py runs the example")
def test_the_estimator_example_says_which_stack_it_needs():
    import os
    import sys

    from fresh_python import run_python
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                           "train_estimator.py")
    proc = run_python([sys.executable, example], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "tf.estimator is not part of TensorFlow" in proc.stderr and "tensorflow-estimator==2.15" in proc.stderr


def test_evaluation_given_explicitly_serves_an_input_fn_called_without_a_mode():
    with EstimatorInput(Ids(12, 5), SPECS, labels="id", evaluation=True) as evaluation:
        wrapped = type("Wrapped", (), {"input_fn": staticmethod(lambda: evaluation.input_fn()),
                                       "hooks": evaluation.hooks})
        assert flat(evaluate_session(wrapped, mode=None)) == list(range(12))
        assert flat(evaluate_session(wrapped, mode=None)) == list(range(12))
    with EstimatorInput(Ids(12, 5), SPECS, labels="id", evaluation=False) as train:
        assert flat(train_session(train, 3)) == list(range(12))


def test_evaluation_of_an_endless_parallel_map_is_refused_instead_of_running_for_ever():
    flow = BatchData(MultiProcessMapData(single_ids(20), 2, lambda dp: dp), 5)       # strict=False: endless
    with EstimatorInput(flow, SPECS, labels="id") as evaluation:
        with pytest.raises(InputSourceError, match=r"MultiProcessMapData \(strict=False\) streams without end"):
            evaluate_session(evaluation)


def test_a_failing_dataflow_fails_the_step_with_its_own_error_type():
    def load(dp):
        if dp[0] == 23:
            raise KeyError("no file for id 23")
        return dp
    flow = BatchData(MapData(single_ids(100), load), 5)
    with EstimatorInput(flow, SPECS, labels="id") as train:
        seen = train_session(train, 2)
        with pytest.raises(KeyError, match="no file for id 23"):
            train_session(train, 5)
    assert flat(seen) == list(range(10))


@pytest.mark.parametrize("queue", ["QueueInput", "BatchQueueInput"])
@pytest.mark.parametrize("nr_stage", [0, 1, 2])
def test_a_failure_that_comes_while_a_step_waits_fails_that_call_after_every_batch_before_it(nr_stage, queue):
    def load(dp):
        if dp[0] == 23:
            time.sleep(0.5)               # the steps wait for the next batch when the failure comes
            raise KeyError("no file for id 23")
        return dp
    flow = MapData(single_ids(100), load)
    data = BatchQueueInput(flow, 5) if queue == "BatchQueueInput" else BatchData(flow, 5)
    with EstimatorInput(data, SPECS, labels="id", nr_stage=nr_stage) as train:
        seen = []
        with pytest.raises(KeyError, match="no file for id 23"):
            train_session(train, 10, seen=seen)      # a failure must not end train() as if done
        assert flat(seen) == list(range(20))
        again = []
        with pytest.raises(KeyError, match="no file for id 23"):
            train_session(train, 10, seen=again)     # and it stays failed
    # A step that raised the failure itself ends the session without its hooks' end(): what the
    # call handed out is handed out again (Estimator saved no checkpoint of those steps either);
    # a step whose dequeue met the closed queue (OutOfRangeError) ends it with end(), which
    # reports the 4 batches consumed (after the checkpoint hook saved them).
    assert flat(again) in ([], list(range(20)))


@pytest.mark.parametrize("nr_stage", [0, 1])
def test_an_evaluation_whose_data_fails_midway_raises_instead_of_ending_short(nr_stage):
    def load(dp):
        if dp[0] == 13:
            time.sleep(0.5)
            raise KeyError("no file for id 13")
        return dp
    flow = BatchData(MapData(single_ids(30), load), 5, remainder=True)
    with EstimatorInput(flow, SPECS, labels="id", nr_stage=nr_stage, evaluation=True) as evaluation:
        with pytest.raises(KeyError, match="no file for id 13"):
            evaluate_session(evaluation)


def test_a_mismatching_datapoint_is_named_with_the_input():
    flow = MapData(Ids(20, 5), lambda dp: [dp[0], dp[1][:, :0]])          # x has 0 columns, not 1
    with EstimatorInput(flow, SPECS, labels="id") as train:
        with pytest.raises(InputSourceError, match=r"EstimatorInput: .*'x'"):
            train_session(train, 1)


def test_garbage_collection_shuts_the_pipeline_down():
    import gc
    flow = BatchData(MultiProcessMapData(single_ids(50), 2, lambda dp: dp, strict=True), 5)
    train = EstimatorInput(flow, SPECS, labels="id")
    train_session(train, 1)
    pids = list(flow.ds.worker_pids)
    del train
    gc.collect()
    assert not any(t.name == "EstimatorInput-reader" for t in threading.enumerate())
    import psutil
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_a_script_that_never_closes_its_inputs_leaves_no_process_behind(tmp_path):
    import os
    import subprocess
    import sys
    import psutil
    script = tmp_path / "script.py"
    script.write_text("\n".join([
        "import sys, numpy as np",
        "sys.path.insert(0, {!r})".format(os.path.dirname(os.path.abspath(__file__))),
        "from estimator_helpers import SPECS, train_session",
        "from inputpipe.dataflow import BatchData, DataFromList, MultiProcessMapData",
        "from inputpipe.estimator import EstimatorInput",
        "ids = DataFromList([[np.int64(i), np.array([i], np.float32)] for i in range(40)], shuffle=False)",
        "flow = BatchData(MultiProcessMapData(ids, 2, lambda dp: dp, strict=True), 5)",
        "train = EstimatorInput(flow, SPECS, labels='id')",
        "train_session(train, 2)",
        "print(' '.join(str(p) for p in flow.ds.worker_pids), flush=True)",
    ]))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
