"""examples/train_resnet.py end to end, in a subprocess, with tiny settings."""
import math
import os
import re
import sys
from pathlib import Path

import pytest

from fresh_python import run_python

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "train_resnet.py"
TINY = ["--steps", "6", "--batch-size", "8", "--image-size", "16", "--depth", "8", "--num-classes", "3",
        "--images-per-class", "6", "--no-progress"]
LOSS_ROW = re.compile(r"loss \(first -> last \d+ steps\)\s*\S\s*(\S+) -> (\S+)")
READS_FILES = {"staging": True, "queue": True, "feed": True, "zmq": True, "dummy": False}


#: A hang guard for one run of the example: alone a run takes 10-20 s here, beside two more copies of
#: the suite on 2 CPUs one took over 90 s. The tests that run it get :data:`TEST_TIMEOUT`.
RUN_TIMEOUT = 300
TEST_TIMEOUT = RUN_TIMEOUT + 60
pytestmark = pytest.mark.timeout(TEST_TIMEOUT)


def run_example(tmp_path, *args, timeout=RUN_TIMEOUT, compare=False):
    """Run the example with tiny settings; without ``--compare`` in ``args`` or ``compare=True``,
    the comparison after training is skipped."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    cmd = [sys.executable, str(SCRIPT), "--cache-dir", str(tmp_path / "cache"),
           "--logdir", str(tmp_path / "logs")] + TINY + list(args)
    if "--compare" not in args and not compare:
        cmd.append("--no-compare")
    return run_python(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=timeout)


def error_lines(proc):
    """stderr without TensorFlow's own start-up chatter."""
    return [line for line in proc.stderr.splitlines()
            if line.strip() and "absl::InitializeLog" not in line and not line.startswith("I0000")]


def table_row(out, label):
    """The value cell of the summary row ``label``."""
    match = re.search(r"│ {} +│ (.*?) +│".format(re.escape(label)), out)
    assert match, "no row {!r} in\n{}".format(label, out)
    return match.group(1)


def assert_trained(proc, input_name, classes=3, reads_files=None, compared=False):
    """The training run's config and summary; ``compared``: the comparison of the inputs followed it."""
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert "config:" in out and "ResNet-8 (CIFAR-style, width 16) on 16x16x3 images, {} classes".format(classes) in out
    # 6 steps, of which the source's 5 warm-up steps are left out of every rate
    assert "summary ({} input; rates over the last 1 of 6 steps: 5 warm-up steps left out):".format(input_name) in out
    for row in ("images/s", "time per step", "waiting for input", "input-bound"):
        assert row in out, row
    reads_files = READS_FILES.get(input_name, True) if reads_files is None else reads_files
    assert ("corrupt images skipped" in out) == reads_files
    assert ("  corrupt      " in out) == reads_files
    assert ("queue occupancy (mean)" in out) == (input_name in ("queue", "staging", "zmq"))
    images_per_s = float(table_row(out, "images/s"))
    step_ms = float(table_row(out, "time per step").split()[0])
    batch = int(re.search(r"training +6 steps x batch (\d+)", out).group(1))
    assert images_per_s / batch * step_ms == pytest.approx(1000.0, rel=0.01)  # one set of timed steps
    steps = re.fullmatch(r"6 x (\d+) in (\S+) s \(1 timed: (\S+) s\)", table_row(out, "steps x batch"))
    assert steps and int(steps.group(1)) == batch and float(steps.group(2)) >= float(steps.group(3))
    assert float(steps.group(3)) == pytest.approx(step_ms / 1e3, abs=0.051)
    first, last = (float(v) for v in LOSS_ROW.search(out).groups())
    assert math.isfinite(first) and math.isfinite(last)
    assert 0.0 < first < 10.0
    if not compared:
        assert "comparing" not in out and "inputs compared" not in out  # --no-compare


def logdir_of(proc):
    """The run's TensorBoard folder, as printed in the config."""
    return Path(re.search(r"logdir +(\S+) \(TensorBoard\)", proc.stdout).group(1))


@pytest.mark.slow
@pytest.mark.parametrize("input_name, extra", [
    ("staging", []),
    ("queue", ["--lmdb"]),
    ("dummy", []),
    ("zmq", ["--workers", "1"]),
])
def test_trains_and_prints_the_summary(tmp_path, input_name, extra):
    proc = run_example(tmp_path, "--input", input_name, *extra)
    assert_trained(proc, input_name)
    if input_name == "dummy":
        assert "generating" not in proc.stdout  # dummy data needs no dataset
    else:
        assert "generating 3 x 6 JPEG images" in proc.stdout
    if "--lmdb" in extra:
        assert re.search(r"dumping 18 images to .*\.lmdb", proc.stdout)
        assert "read through LMDB" in proc.stdout
    logdir = logdir_of(proc)
    assert logdir.parent == tmp_path / "logs" and re.fullmatch(r"\d{8}-\d{6}-" + input_name, logdir.name)
    events = list(logdir.glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    if input_name == "staging":
        assert {"train/loss", "train/accuracy", "train/images_per_second", "input_source/StagingInput/queue_size",
                "input_source/StagingInput/wait_ms"} <= _summary_tags(events[0])


def _summary_tags(path):
    import tensorflow as tf

    return {value.tag for event in tf.compat.v1.train.summary_iterator(str(path)) for value in event.summary.value}


@pytest.mark.parametrize("layout, message", [
    ("missing", "error: dataset folder {root} does not exist"),
    ("empty", "error: dataset folder {root} has no class folders (expected <root>/<class>/*.jpg)"),
    ("no_images", "error: dataset folder {root} has 2 class folder(s) but no image files"),
    ("too_small", "error: dataset folder {root} has 2 images, fewer than one batch of 8 (lower --batch-size)"),
])
def test_bad_dataset_gives_one_clear_error_line(tmp_path, layout, message):
    root = tmp_path / "data"
    if layout != "missing":
        root.mkdir()
    if layout in ("no_images", "too_small"):
        (root / "cats").mkdir()
        (root / "dogs").mkdir()
    if layout == "too_small":
        _write_jpeg(root / "cats" / "1.jpg")
        _write_jpeg(root / "dogs" / "1.jpg")
    proc = run_example(tmp_path, "--data", str(root))
    assert proc.returncode == 2
    lines = error_lines(proc)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(message.format(root=root))
    assert "summary" not in proc.stdout


def test_a_corrupt_lmdb_file_gives_one_clear_error_line(tmp_path):
    bad = tmp_path / "bad.lmdb"
    bad.write_bytes(b"not an LMDB file at all" * 200)
    proc = run_example(tmp_path, "--lmdb", str(bad), "--images-per-class", "6")
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = error_lines(proc)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: LMDBSerializer.load({!r}): {} is not an LMDB file, or truncated: page 0 "
                               "(byte 0) is not an LMDB meta page".format(str(bad), bad))
    assert "summary" not in proc.stdout


def _write_jpeg(path):
    from PIL import Image

    Image.new("RGB", (20, 20), (200, 10, 10)).save(str(path), format="JPEG")


def _dataset_with_a_corrupt_jpeg(tmp_path):
    sys.path.insert(0, str(REPO / "examples"))
    import synthetic_images

    root = synthetic_images.generate(str(tmp_path / "data"), num_classes=2, images_per_class=4, image_size=20)
    bad = Path(root, "square", "00002.jpg")
    bad.write_bytes(bad.read_bytes()[:120])  # truncated mid-scan, as after a failed copy
    return root, bad


@pytest.mark.slow
def test_corrupt_jpeg_fails_clearly_when_asked(tmp_path):
    root, bad = _dataset_with_a_corrupt_jpeg(tmp_path)
    proc = run_example(tmp_path, "--data", root, "--on-corrupt", "fail", "--steps", "20")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = error_lines(proc)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: corrupt image file {}".format(bad))
    assert "summary" not in proc.stdout


@pytest.mark.slow
def test_corrupt_jpeg_is_skipped_with_a_warning_and_counted(tmp_path):
    root, bad = _dataset_with_a_corrupt_jpeg(tmp_path)
    proc = run_example(tmp_path, "--data", root, "--on-corrupt", "skip", "--input", "queue", "--batch-size", "4")
    assert_trained(proc, "queue", classes=2)
    warnings = [line for line in error_lines(proc) if "skipped corrupt image" in line]
    assert warnings == ["WARNING train_resnet: skipped corrupt image {} (pass --on-corrupt fail to stop "
                        "instead)".format(bad)]
    assert "(pass --on-corrupt fail" in warnings[0] and " at 0x" not in proc.stderr
    skipped = re.search(r"corrupt images skipped\s*\S\s*(\d+) \((\d+) distinct files\)", proc.stdout)
    assert skipped and int(skipped.group(1)) >= 1 and skipped.group(2) == "1"


def test_conflicting_flags_are_refused(tmp_path):
    proc = run_example(tmp_path, "--fake", "--data", str(tmp_path))
    assert proc.returncode == 2
    assert "--fake replaces the dataset; it cannot be combined with --data or --lmdb" in proc.stderr
