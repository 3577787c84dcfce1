"""inputpipe.train.train(checkpoint_dir=...): a restarted run restores the model and the input
position and continues the data."""
import numpy as np
import pytest
import tensorflow as tf

from inputpipe.dataflow import BatchData, DataFromList
from inputpipe.dataflow.seeding import set_global_seed
from inputpipe.input_source import QueueInput, StagingInput
from inputpipe.train import train


def run(checkpoint_dir, steps, save_every=None):
    set_global_seed(3)
    df = BatchData(DataFromList([[np.int64(i)] for i in range(9)], shuffle=True), 2)
    graph = tf.Graph()
    with graph.as_default():
        source = StagingInput(QueueInput(df), device="/cpu:0")
        source.setup([tf.TensorSpec([2], tf.int64, "ids")])
        ids, = source.get_input_tensors()
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.assign_add(step, 1)
    seen = []
    train(train_op, source, steps, fetches={"ids": ids}, progress=False, checkpoint_dir=checkpoint_dir,
          save_every=save_every, callback=lambda _, values: seen.extend(values["ids"].tolist()))
    set_global_seed(None)
    return seen


def test_a_restarted_train_continues_the_data_and_the_step(tmp_path):
    uninterrupted = run(None, 11)
    first = run(str(tmp_path), 5, save_every=2)
    assert sorted(p.name for p in tmp_path.glob("model.ckpt-*.index")) == [
        "model.ckpt-2.index", "model.ckpt-4.index", "model.ckpt-5.index"]
    second = run(str(tmp_path), 6)
    assert first + second == uninterrupted
    # an epoch is 4 batches of 2 of the 9 datapoints; the run crossed two epoch boundaries
    assert len(set(uninterrupted[:8])) == 8 and uninterrupted[:8] != uninterrupted[8:16]
    assert tf.train.load_checkpoint(str(tmp_path)).get_tensor("global_step") == 11


def test_save_every_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="save_every must be a positive number of steps, got 0"):
        run(str(tmp_path), 1, save_every=0)
