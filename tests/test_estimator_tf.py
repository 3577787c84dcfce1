"""EstimatorInput with the real tf.estimator (TensorFlow up to 2.15 with tensorflow-estimator, and
1.15): train/evaluate cycles, train_and_evaluate, predict, a SIGKILL and a restart."""
import json
import os
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np
import psutil
import pytest
import tensorflow as tf

from inputpipe.dataflow import BatchData, DataFromList, MapData, MultiProcessMapData
from inputpipe.estimator import EstimatorInput

estimator_module = getattr(tf, "estimator", None)
if estimator_module is None or not hasattr(estimator_module, "Estimator"):
    pytest.skip("tf.estimator is not part of this TensorFlow ({}); it exists up to TF 2.15 with "
                "tensorflow-estimator".format(tf.__version__), allow_module_level=True)

pytestmark = pytest.mark.timeout(300)

HERE = os.path.dirname(os.path.abspath(__file__))
SPECS = [tf.TensorSpec([None], tf.int64, "id"), tf.TensorSpec([None, 2], tf.float32, "x")]


def with_x(i):
    return [np.int64(i), np.array([i, -i], np.float32)]


def recording_model(log):
    """A model_fn whose steps append ``(mode, ids)`` to ``log``."""
    def model_fn(features, labels, mode):
        weight = tf.compat.v1.get_variable("w", [2, 1], initializer=tf.zeros_initializer())
        step = tf.compat.v1.train.get_or_create_global_step()
        ids = labels if labels is not None else features["id"]
        recorded = tf.numpy_function(lambda values: log.append((mode, values.tolist())) or np.int64(0), [ids], tf.int64)
        with tf.control_dependencies([recorded]):
            output = tf.matmul(features["x"], weight)
            loss = tf.reduce_mean(output) * 0.0
        if mode == tf.estimator.ModeKeys.PREDICT:
            with tf.control_dependencies([recorded]):
                return tf.estimator.EstimatorSpec(mode, predictions={"id": tf.identity(ids)})
        if mode == tf.estimator.ModeKeys.TRAIN:
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=tf.compat.v1.assign_add(step, 1))
        return tf.estimator.EstimatorSpec(mode, loss=loss)
    return model_fn


@pytest.fixture
def estimator_writers():
    yield
    tf.compat.v1.summary.FileWriterCache.clear()      # Estimator's summary writer threads


def test_train_evaluate_cycles_in_one_process_see_the_stream_and_the_set_exactly_once(tmp_path, estimator_writers):
    log = []
    config = tf.estimator.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=20, log_step_count_steps=10 ** 6)
    estimator = tf.estimator.Estimator(recording_model(log), config=config)
    train_flow = BatchData(MultiProcessMapData(DataFromList(list(range(500)), shuffle=False), 2, with_x, strict=True,
                                               ordered=True), 10)
    eval_flow = BatchData(DataFromList([with_x(1000 + i) for i in range(55)], shuffle=False), 10, remainder=True)
    with EstimatorInput(train_flow, SPECS, labels="id") as train, \
            EstimatorInput(eval_flow, SPECS, labels="id") as evaluation:
        evaluations = []
        for _ in range(10):
            estimator.train(train.input_fn, steps=20, hooks=train.hooks)
            start = len(log)
            estimator.evaluate(evaluation.input_fn, hooks=evaluation.hooks)
            evaluations.append([i for mode, ids in log[start:] for i in ids])
        pids = train_flow.ds.worker_pids
        assert len(pids) == 2
    trained = [i for mode, ids in log if mode == "train" for i in ids]
    assert trained == list(range(500)) * 4
    assert evaluations == [list(range(1000, 1055))] * 10
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)


def test_train_and_evaluate_evaluates_the_whole_set_at_every_checkpoint(tmp_path, estimator_writers):
    log = []
    config = tf.estimator.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=15, log_step_count_steps=10 ** 6)
    estimator = tf.estimator.Estimator(recording_model(log), config=config)
    train_flow = BatchData(DataFromList([with_x(i) for i in range(200)], shuffle=False), 10)
    eval_flow = BatchData(DataFromList([with_x(1000 + i) for i in range(33)], shuffle=False), 10, remainder=True)
    with EstimatorInput(train_flow, SPECS, labels="id") as train, \
            EstimatorInput(eval_flow, SPECS, labels="id") as evaluation:
        tf.estimator.train_and_evaluate(
            estimator, tf.estimator.TrainSpec(train.input_fn, max_steps=60, hooks=train.hooks),
            tf.estimator.EvalSpec(evaluation.input_fn, steps=None, hooks=evaluation.hooks, throttle_secs=0))
    trained = [i for mode, ids in log if mode == "train" for i in ids]
    assert trained == (list(range(200)) * 3)[:600]
    runs = []
    for mode, ids in log:
        if mode == "eval":
            if not runs or runs[-1][-1] == 1032:
                runs.append([])
            runs[-1] += ids
    assert len(runs) >= 2 and all(run == list(range(1000, 1033)) for run in runs)


def test_predict_yields_every_datapoint_once_per_call(tmp_path, estimator_writers):
    log = []
    estimator = tf.estimator.Estimator(recording_model(log), model_dir=str(tmp_path))
    with EstimatorInput(BatchData(DataFromList([with_x(i) for i in range(30)], shuffle=False), 10), SPECS,
                        labels="id") as train:
        estimator.train(train.input_fn, steps=1, hooks=train.hooks)
    with EstimatorInput(BatchData(DataFromList([with_x(i) for i in range(25)], shuffle=False), 4, remainder=True),
                        SPECS) as data:
        for _ in range(2):
            assert [p["id"] for p in estimator.predict(data.input_fn, hooks=data.hooks)] == list(range(25))


def test_forgotten_hooks_fail_with_a_message(tmp_path, estimator_writers):
    estimator = tf.estimator.Estimator(recording_model([]), model_dir=str(tmp_path))
    with EstimatorInput(BatchData(DataFromList([with_x(i) for i in range(30)], shuffle=False), 10), SPECS,
                        labels="id") as train:
        with pytest.raises(tf.errors.InvalidArgumentError, match="its hooks did not run"):
            estimator.train(train.input_fn, steps=2)


@pytest.mark.parametrize("nr_stage", [0, 1, 2])
def test_a_dataflow_failing_while_a_step_waits_fails_train_after_every_batch_before_it(tmp_path, estimator_writers,
                                                                                      nr_stage):
    def load(i):
        if i == 23:
            time.sleep(0.5)              # the steps wait for the next batch when the failure comes
            raise KeyError("no file for id 23")
        return with_x(i)
    log = []
    config = tf.estimator.RunConfig(model_dir=str(tmp_path), log_step_count_steps=10 ** 6)
    estimator = tf.estimator.Estimator(recording_model(log), config=config)
    flow = BatchData(MapData(DataFromList(list(range(100)), shuffle=False), load), 5)
    with EstimatorInput(flow, SPECS, labels="id", nr_stage=nr_stage) as train:
        with pytest.raises(KeyError, match="no file for id 23"):
            estimator.train(train.input_fn, steps=10, hooks=train.hooks)     # not a return as if done
    assert [i for mode, ids in log if mode == "train" for i in ids] == list(range(20))


def _children_of(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_ten_cycles_a_sigkill_and_a_restart_see_every_datapoint_exactly_once(tmp_path):
    """The script trains 10 cycles of 9 steps with an evaluation after each; the first run is
    SIGKILLed at step 52 (3 steps after the checkpoint of step 49), the second continues from the
    checkpoint. The steps that count are the last run of each global step."""
    script = os.path.join(HERE, "estimator_cycles_script.py")
    log = str(tmp_path / "log.jsonl")
    model_dir = str(tmp_path / "model")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    first = subprocess.run([sys.executable, script, model_dir, log, "10", "9", "52"], env=env,
                           capture_output=True, text=True, timeout=240)
    assert first.returncode == -9, first.stderr[-3000:]
    rows = [json.loads(line) for line in open(log)]
    killed_pid = rows[-1][3]
    for row in rows:
        if row[3] == killed_pid and psutil.pid_exists(row[3]):
            pytest.fail("the killed process {} still runs".format(row[3]))
    leftovers = [p for p in psutil.process_iter(["cmdline", "ppid"]) if p.info["ppid"] == killed_pid]
    assert not leftovers, "workers of the killed process still run: {}".format(leftovers)
    second = subprocess.run([sys.executable, script, model_dir, log, "10", "9", "-1"], env=env,
                            capture_output=True, text=True, timeout=240)
    assert second.returncode == 0, second.stderr[-3000:]
    rows = [json.loads(line) for line in open(log)]
    steps = {}
    evaluations = defaultdict(list)
    for mode, step, ids, pid in rows:
        if mode == "train":
            steps[step] = ids
        else:
            evaluations[(pid, step)] += ids
    assert sorted(steps) == list(range(90))
    trained = [i for step in sorted(steps) for i in steps[step]]
    epoch = 230
    for start in range(0, len(trained) - epoch + 1, epoch):
        assert sorted(trained[start:start + epoch]) == list(range(epoch)), "epoch at {}".format(start)
    rest = trained[len(trained) // epoch * epoch:]
    assert len(set(rest)) == len(rest)
    assert len(evaluations) == 10
    assert all(ids == list(range(1000, 1047)) for ids in evaluations.values())
    assert {pid for mode, step, ids, pid in rows} == {killed_pid, rows[-1][3]}


def test_the_estimator_page_snippets_run(tmp_path):
    """docs/estimator.md runs as written (test_doc_snippets.py leaves it here: it needs tf.estimator)."""
    from test_doc_snippets import PRELUDE, REPO, _blocks

    page = REPO / "docs" / "estimator.md"
    code = [PRELUDE.read_text(encoding="utf-8")]
    code += [block for block, reason in _blocks(page) if reason is None]
    assert len(code) >= 3
    script = tmp_path / "snippets.py"
    script.write_text("\n".join(code), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_the_example_runs_its_cycles_and_prints_the_summary(tmp_path):
    example = os.path.join(os.path.dirname(HERE), "examples", "train_estimator.py")
    proc = subprocess.run([sys.executable, example, "--clips", "200", "--eval-clips", "50", "--batch", "32",
                           "--cycles", "2", "--steps", "5", "--step-ms", "20", "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the model's own step (constant input)" in proc.stdout
    assert "cycle 2/2: accuracy" in proc.stdout and "examples/s (training)" in proc.stdout
    assert len(os.listdir(tmp_path / "train")) == 200


def test_tpu_estimator_without_a_tpu_as_bert_runs_on_gpus(tmp_path, estimator_writers):
    """TPUEstimator(use_tpu=False) insists on an input_fn taking params (for params["batch_size"])."""
    tpu = tf.compat.v1.estimator.tpu
    log = []

    def model_fn(features, labels, mode, params):
        weight = tf.compat.v1.get_variable("w", [2, 1])
        recorded = tf.numpy_function(lambda ids: log.append((mode, ids.tolist())) or np.int64(0), [labels], tf.int64)
        with tf.control_dependencies([recorded]):
            loss = tf.reduce_mean(tf.matmul(features["x"], weight))
        step = tf.compat.v1.train.get_or_create_global_step()
        if mode == tf.estimator.ModeKeys.TRAIN:
            train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
            return tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
        return tpu.TPUEstimatorSpec(mode, loss=loss)

    estimator = tpu.TPUEstimator(model_fn=model_fn, config=tpu.RunConfig(model_dir=str(tmp_path)), use_tpu=False,
                                 train_batch_size=10, eval_batch_size=10)
    with EstimatorInput(BatchData(DataFromList([with_x(i) for i in range(100)], shuffle=False), 10), SPECS,
                        labels="id") as train, \
            EstimatorInput(BatchData(DataFromList([with_x(i) for i in range(25)], shuffle=False), 10, remainder=True),
                           SPECS, labels="id") as evaluation:
        for _ in range(2):
            estimator.train(train.input_fn, steps=3, hooks=train.hooks)
            estimator.evaluate(evaluation.input_fn, hooks=evaluation.hooks)
    assert [i for mode, ids in log if mode == "train" for i in ids] == list(range(60))
    assert [i for mode, ids in log if mode == "eval" for i in ids] == list(range(25)) * 2
