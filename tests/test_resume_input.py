"""Resumable input: InputSources save what the training steps consumed in TF checkpoints and a
restored session continues the data there (see docs/resuming.md)."""
import json
import logging

import numpy as np
import pytest
import tensorflow as tf

from inputpipe.dataflow.base import DataFlow, NotResumableError, StateMismatchError, check_state
from inputpipe.input_source import BatchQueueInput, FeedInput, QueueInput, StagingInput, remap_input_source
from inputpipe.input_source.position import decode_position, encode_position

SPEC = [tf.TensorSpec([], tf.int64, "x")]
BATCH_SPEC = [tf.TensorSpec([None], tf.int64, "x")]


class Numbered(DataFlow):
    """Datapoint ``[epoch * 100 + i]`` for i < n; resumable (counts its states and iterations)."""

    def __init__(self, n=7):
        self.n = n
        self.epoch = 0
        self.position = 0
        self.state_calls = 0
        self.iterations = 0

    def __len__(self):
        return self.n

    def __iter__(self):
        # as the library's flows: a state taken after an epoch's last datapoint resumes with the
        # (empty) rest of that epoch, then the next one
        self.iterations += 1
        while self.position < self.n:
            value = self.epoch * 100 + self.position
            self.position += 1
            yield [np.int64(value)]
        self.epoch, self.position = self.epoch + 1, 0

    def get_state(self):
        self.state_calls += 1
        return {"type": "Numbered", "epoch": self.epoch, "position": self.position}

    def set_state(self, state):
        state = check_state(self, state, {"epoch": int, "position": int})
        self.epoch, self.position = state["epoch"], state["position"]


class Plain(DataFlow):
    """Not resumable: no get_state/set_state."""

    def __len__(self):
        return 5

    def __iter__(self):
        for i in range(5):
            yield [np.int64(i)]


def expected_values(n, count, start=0):
    values = [e * 100 + i for e in range(count // n + 3) for i in range(n)]
    return values[start:start + count]


def make_source(kind, df):
    if kind == "queue":
        return QueueInput(df), SPEC
    if kind == "staging":
        return StagingInput(QueueInput(df), nr_stage=2, device="/cpu:0"), SPEC
    if kind == "batch":
        return BatchQueueInput(df, batch_size=3), BATCH_SPEC
    if kind == "staged_batch":
        return StagingInput(BatchQueueInput(df, batch_size=3), nr_stage=1, device="/cpu:0"), BATCH_SPEC
    if kind == "feed":
        return FeedInput(df), SPEC
    if kind == "worker":
        return QueueInput(df, in_worker=True), SPEC
    if kind == "staged_worker_batch":
        return StagingInput(BatchQueueInput(df, batch_size=3, in_worker=True), device="/cpu:0"), BATCH_SPEC
    if kind == "staged_remap":
        return StagingInput(remap_input_source(QueueInput(df), ["x"]), device="/cpu:0"), SPEC
    raise ValueError(kind)


def train(logdir, kind, steps, df=None, save_every=1000, extra_hooks=()):
    """Run ``steps`` steps in a MonitoredTrainingSession over ``logdir``; returns (values, source)."""
    df = df if df is not None else Numbered()
    graph = tf.Graph()
    with graph.as_default():
        source, spec = make_source(kind, df)
        source.setup(spec)
        x, = source.get_input_tensors()
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.assign_add(step, 1)
        values = []
        try:
            with tf.compat.v1.train.MonitoredTrainingSession(
                    checkpoint_dir=logdir, save_checkpoint_steps=save_every, save_summaries_steps=None,
                    save_summaries_secs=None, log_step_count_steps=None,
                    hooks=source.get_hooks() + list(extra_hooks)) as sess:
                for _ in range(steps):
                    got, _ = sess.run([x, train_op])
                    values.extend(np.reshape(got, [-1]).tolist())
        finally:
            tf.compat.v1.summary.FileWriterCache.clear()     # stops the checkpoint hook's event writer thread
    return values, source


def saved_position(logdir):
    reader = tf.train.load_checkpoint(logdir)
    keys = [k for k in reader.get_variable_to_shape_map() if k.endswith("input_position")]
    assert len(keys) == 1, keys
    return json.loads(reader.get_tensor(keys[0]))


@pytest.mark.parametrize("kind", ["queue", "staging", "batch", "staged_batch", "feed", "worker",
                                  "staged_worker_batch", "staged_remap"])
def test_restored_session_continues_after_the_last_consumed_datapoint(tmp_path, kind):
    per_step = 3 if "batch" in kind else 1
    first, _ = train(str(tmp_path), kind, 4)
    second, _ = train(str(tmp_path), kind, 5)
    third, _ = train(str(tmp_path), kind, 3)
    assert first + second + third == expected_values(7, 12 * per_step)
    document = saved_position(str(tmp_path))
    assert document["format"] == 1 and document["dataflow"] == "Numbered"
    consumed = 12 * per_step
    assert document["state"] == {"type": "Numbered", "epoch": consumed // 7, "position": consumed % 7}


@pytest.mark.parametrize("kind", ["queue", "staging", "feed", "worker"])
def test_restored_exactly_at_the_end_of_an_epoch_continues_with_the_next(tmp_path, kind):
    first, _ = train(str(tmp_path), kind, 7)
    assert saved_position(str(tmp_path))["state"] == {"type": "Numbered", "epoch": 0, "position": 7}
    second, _ = train(str(tmp_path), kind, 3)
    assert first + second == expected_values(7, 10)


def test_finite_source_restored_at_its_end_has_nothing_left(tmp_path):
    train(str(tmp_path), "queue", 7)
    graph = tf.Graph()
    with graph.as_default():
        source = QueueInput(Numbered(), infinite=False)
        source.setup(SPEC)
        x, = source.get_input_tensors()
        step = tf.compat.v1.train.get_or_create_global_step()
        with pytest.raises(tf.errors.OutOfRangeError):
            with tf.compat.v1.Session(graph=graph) as sess:
                tf.compat.v1.train.Saver().restore(sess, tf.train.latest_checkpoint(str(tmp_path)))
                with source.session(sess) as run:
                    run([x, step])


def test_checkpoint_holds_what_was_consumed_not_what_was_read_ahead(tmp_path):
    df = Numbered(n=50)
    values, source = train(str(tmp_path), "staging", 5, df=df)
    assert values == list(range(5))
    assert df.state_calls > 5 + 2           # the feeding thread read ahead (queue, staging)
    assert saved_position(str(tmp_path))["state"] == {"type": "Numbered", "epoch": 0, "position": 5}


class _SavedAtEachStep(tf.compat.v1.train.SessionRunHook):
    """Reads the newest checkpoint in after_run (after CheckpointSaverHook wrote it)."""

    def __init__(self, logdir):
        self.logdir = logdir
        self.positions = []

    def after_run(self, run_context, run_values):
        self.positions.append(saved_position(self.logdir)["state"]["position"])


def test_every_checkpoint_written_after_a_step_includes_that_step(tmp_path):
    hook = _SavedAtEachStep(str(tmp_path))
    values, _ = train(str(tmp_path), "queue", 4, df=Numbered(n=50), save_every=1, extra_hooks=[hook])
    assert values == [0, 1, 2, 3]
    assert hook.positions == [1, 2, 3, 4]


def test_first_run_checkpoint_at_start_has_no_position_and_starts_at_the_beginning(tmp_path):
    hook = _SavedAtEachStep(str(tmp_path))
    train(str(tmp_path), "queue", 0, extra_hooks=[hook])
    reader = tf.train.load_checkpoint(str(tmp_path))
    key = [k for k in reader.get_variable_to_shape_map() if k.endswith("input_position")][0]
    assert reader.get_tensor(key) == b""
    values, _ = train(str(tmp_path), "queue", 3)
    assert values == [0, 1, 2]


def test_plain_saver_saves_and_restores_the_position_without_extra_code(tmp_path):
    path = str(tmp_path / "model")

    def run(steps, restore):
        graph = tf.Graph()
        with graph.as_default():
            source = QueueInput(Numbered())
            source.setup(SPEC)
            x, = source.get_input_tensors()
            saver = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session(graph=graph) as sess:
                if restore:
                    saver.restore(sess, path)          # before the source starts
                with source.session(sess) as run_step:
                    values = [int(run_step(x)) for _ in range(steps)]
                    assert source.get_state(sess) == {"type": "Numbered", "epoch": (steps + 9 * restore) // 7,
                                                      "position": (steps + 9 * restore) % 7}
                    saver.save(sess, path)
        return values

    assert run(9, False) + run(6, True) == expected_values(7, 15)


def test_saving_after_the_source_stopped_saves_the_last_consumed_position(tmp_path):
    path = str(tmp_path / "model")
    graph = tf.Graph()
    with graph.as_default():
        source = StagingInput(QueueInput(Numbered(n=50)), device="/cpu:0")
        source.setup(SPEC)
        x, = source.get_input_tensors()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as sess:
            with source.session(sess) as run:
                assert [int(run(x)) for _ in range(6)] == list(range(6))
            saver.save(sess, path)          # the source and its DataFlow are closed by now
    document = json.loads(tf.train.load_checkpoint(path).get_tensor("StagingInput/QueueInput/input_position"))
    assert document["state"] == {"type": "Numbered", "epoch": 0, "position": 6}


def test_non_resumable_chain_warns_at_first_save_and_restore_and_refuses_set_state(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="inputpipe")
    first, source = train(str(tmp_path), "queue", 3, df=Plain())
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    setup = [(level, m) for level, m in messages if "will not be saved" in m]
    assert len(setup) == 1 and setup[0][0] == logging.INFO and "Plain is not resumable" in setup[0][1]
    saved = [m for level, m in messages if level == logging.WARNING and "was saved without the input position" in m]
    assert len(saved) == 1 and "QueueInput" in saved[0] and "Plain is not resumable" in saved[0]   # once
    assert saved_position(str(tmp_path))["state"] is None
    with pytest.raises(NotResumableError, match="Plain is not resumable"):
        source.set_state({"type": "Plain"})
    caplog.clear()
    second, _ = train(str(tmp_path), "queue", 3, df=Plain())
    assert first == second == [0, 1, 2]          # the data starts over
    restore_warnings = [r.getMessage() for r in caplog.records
                        if r.levelno == logging.WARNING and "starts over" in r.getMessage()]
    assert any("QueueInput" in m and "Plain" in m for m in restore_warnings), restore_warnings


def test_track_state_true_warns_at_setup_when_not_resumable(caplog):
    caplog.set_level(logging.INFO, logger="inputpipe")
    with tf.Graph().as_default():
        QueueInput(Plain(), track_state=True).setup(SPEC)
        FeedInput(Plain(), track_state=False).setup(SPEC)
    found = [(r.levelno, r.getMessage()) for r in caplog.records if "will not be saved" in r.getMessage()]
    assert len(found) == 1 and found[0][0] == logging.WARNING
    assert found[0][1].startswith("QueueInput: the input position will not be saved in checkpoints")
    assert "Plain is not resumable" in found[0][1]


def test_track_state_false_does_not_ask_the_dataflow_and_cannot_set_state(tmp_path):
    df = Numbered(n=50)
    graph = tf.Graph()
    with graph.as_default():
        source = QueueInput(df, track_state=False)
        source.setup(SPEC)
        x, = source.get_input_tensors()
        with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
            assert [int(run(x)) for _ in range(4)] == [0, 1, 2, 3]
    assert df.state_calls == 0
    with pytest.raises(NotResumableError, match="track_state=False"):
        source.set_state({"type": "Numbered", "epoch": 0, "position": 3})


def test_explicit_set_state_continues_there(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        source = StagingInput(QueueInput(Numbered()), device="/cpu:0")
        source.setup(SPEC)
        x, = source.get_input_tensors()
        source.set_state({"type": "Numbered", "epoch": 2, "position": 5})
        with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
            assert [int(run(x)) for _ in range(4)] == [205, 206, 300, 301]


def test_checkpoint_of_another_pipeline_fails_at_session_start_naming_the_flow(tmp_path):
    train(str(tmp_path), "queue", 2)

    class Other(Numbered):
        def get_state(self):
            return {"type": "Other", "epoch": self.epoch, "position": self.position}

        def set_state(self, state):
            check_state(self, state, {"epoch": int, "position": int})

    with pytest.raises(StateMismatchError, match="expected a state of Other.*got a state of Numbered"):
        train(str(tmp_path), "queue", 1, df=Other())


def test_position_document_round_trip_and_errors():
    data = encode_position("QueueInput", {"type": "Numbered", "epoch": 1, "position": 2}, "Numbered")
    assert decode_position("QueueInput", data)["state"] == {"type": "Numbered", "epoch": 1, "position": 2}
    assert decode_position("QueueInput", b"") is None
    with pytest.raises(ValueError, match="QueueInput: the checkpoint's input position is not JSON"):
        decode_position("QueueInput", b"{nope")
    with pytest.raises(ValueError, match="unknown layout: expected format 1"):
        decode_position("QueueInput", b'{"format": 7}')


def test_user_queue_without_position_component_still_works_untracked(caplog):
    caplog.set_level(logging.INFO, logger="inputpipe")
    graph = tf.Graph()
    with graph.as_default():
        queue = tf.queue.FIFOQueue(8, [tf.int64])
        source = QueueInput(Numbered(), queue=queue)
        source.setup(SPEC)
        x, = source.get_input_tensors()
        with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
            assert [int(run(x)) for _ in range(3)] == [0, 1, 2]
    assert any("no int64 position component" in r.getMessage() for r in caplog.records)


def test_sources_without_a_dataflow_position_refuse_get_and_set_state():
    from inputpipe.input_source import DummyConstantInput
    graph = tf.Graph()
    with graph.as_default():
        source = DummyConstantInput([[2]])
        source.setup([tf.TensorSpec([2], tf.float32, "x")])
        with pytest.raises(NotResumableError, match="DummyConstantInput reads no DataFlow"):
            source.set_state({"type": "Numbered"})
        with pytest.raises(NotResumableError, match="DummyConstantInput reads no DataFlow"):
            source.get_state()


def test_batch_queue_asks_for_the_state_of_batch_ends_only_and_keeps_few():
    df = Numbered(n=1000)
    graph = tf.Graph()
    with graph.as_default():
        source = BatchQueueInput(df, batch_size=4)
        source.setup(BATCH_SPEC)
        x, = source.get_input_tensors()
        with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
            assert [run(x).tolist() for _ in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
            assert source.get_state(sess) == {"type": "Numbered", "epoch": 0, "position": 8}
    position = source._input_position()
    kept = sorted(position._states)
    assert position._next >= 8 and df.state_calls == position._next // 4      # the feeding thread's calls
    assert kept and all((seq + 1) % 4 == 0 for seq in kept) and len(kept) <= position._span // 4


def test_finite_batch_queue_records_the_partial_last_batch():
    graph = tf.Graph()
    with graph.as_default():
        source = BatchQueueInput(Numbered(n=7), batch_size=3, infinite=False)
        source.setup(BATCH_SPEC)
        x, = source.get_input_tensors()
        positions = []
        with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
            for want in ([0, 1, 2], [3, 4, 5], [6]):
                assert run(x).tolist() == want
                positions.append(source.get_state(sess)["position"])
            with pytest.raises(tf.errors.OutOfRangeError):
                run(x)
    assert positions == [3, 6, 7]


def test_two_towers_consuming_in_one_step_record_both(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        source = StagingInput(QueueInput(Numbered(n=50)), device="/cpu:0")
        source.setup(SPEC)
        x0, = source.get_input_tensors()
        x1, = source.get_input_tensors()
        with tf.compat.v1.Session(graph=graph) as sess, source.session(sess) as run:
            taken = [sorted(int(v) for v in run([x0, x1])) for _ in range(3)]
            state = source.get_state(sess)
    assert sorted(sum(taken, [])) == list(range(6))          # both towers, no datapoint twice
    assert state == {"type": "Numbered", "epoch": 0, "position": 6}
