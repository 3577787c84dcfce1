"""Run by test_estimator_tf.py in a subprocess: a tf.estimator model trained in train(steps) /
evaluate() cycles on EstimatorInputs, logging what every step read (one JSON line: mode, global
step, ids, the pid), optionally SIGKILLing itself at one training step.

    python estimator_cycles_script.py MODEL_DIR LOG CYCLES STEPS_PER_CYCLE KILL_AT_STEP
"""
import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from inputpipe.dataflow import BatchData, DataFromList, MultiProcessMapData  # noqa: E402
from inputpipe.estimator import EstimatorInput  # noqa: E402

TRAIN_IDS, EVAL_IDS, BATCH = 230, 47, 10
SPECS = [tf.TensorSpec([None], tf.int64, "id"), tf.TensorSpec([None, 2], tf.float32, "x")]


def with_x(i):
    return [np.int64(i), np.array([i, -i], np.float32)]


def train_flow():
    """An epoch of the ids in a new shuffled order, mapped by two worker processes, in batches."""
    ids = DataFromList(list(range(TRAIN_IDS)), shuffle=True)
    return BatchData(MultiProcessMapData(ids, 2, with_x, strict=True), BATCH)


def eval_flow():
    return BatchData(DataFromList([with_x(1000 + i) for i in range(EVAL_IDS)], shuffle=False), BATCH, remainder=True)


def main(model_dir, log_path, cycles, steps, kill_at):
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    log = open(log_path, "a")

    def model_fn(features, labels, mode):
        weight = tf.compat.v1.get_variable("w", [2, 1], initializer=tf.zeros_initializer())
        step = tf.compat.v1.train.get_or_create_global_step()

        def record(global_step, ids):
            log.write(json.dumps([mode, int(global_step), ids.tolist(), os.getpid()]) + "\n")
            log.flush()
            if mode == "train" and global_step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return np.int64(0)

        recorded = tf.numpy_function(record, [step, labels], tf.int64)
        with tf.control_dependencies([recorded]):
            loss = tf.reduce_mean(tf.matmul(features["x"], weight)) * 0.0
        if mode == tf.estimator.ModeKeys.TRAIN:
            with tf.control_dependencies([recorded]):          # the step's number is read before it grows
                train_op = tf.compat.v1.assign_add(step, 1)
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
        return tf.estimator.EstimatorSpec(mode, loss=loss)

    config = tf.estimator.RunConfig(model_dir=model_dir, save_checkpoints_steps=7, log_step_count_steps=10 ** 6)
    estimator = tf.estimator.Estimator(model_fn, config=config)
    with EstimatorInput(train_flow(), SPECS, labels="id") as train, \
            EstimatorInput(eval_flow(), SPECS, labels="id") as evaluation:
        while True:
            done = estimator.get_variable_value("global_step") if estimator.latest_checkpoint() else 0
            if done >= cycles * steps:
                break
            estimator.train(train.input_fn, steps=steps - done % steps, hooks=train.hooks)
            estimator.evaluate(evaluation.input_fn, hooks=evaluation.hooks)
    log.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
