"""train_resnet.py's tables and flags: the summary arithmetic, the comparison table, the input-bound
wording, --help, and the one-line errors for a missing lmdb package and a corrupt image."""
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from fresh_python import run_python

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
sys.path.insert(0, str(EXAMPLES))

from run_report import (  # noqa: E402
    RunNumbers, comparison_table, expectation, input_bound_verdict, numbers_of, summary_table, wait_note)


def _cells(table, label):
    """The cells of the row starting with ``label`` in a tabulate simple_outline table."""
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells and cells[0] == label:
            return cells
    raise AssertionError("no row {!r} in\n{}".format(label, table))


def test_run_numbers_cover_the_same_steps():
    r = RunNumbers("staging", steps=105, warmup_steps=5, seconds=12.0, batch_size=64, wait_ms=3.0)
    assert r.timed_steps == 100
    assert r.ms_per_step == pytest.approx(120.0)
    assert r.steps_per_second == pytest.approx(100 / 12.0)
    assert r.ms_per_step * r.steps_per_second == pytest.approx(1000.0)
    assert r.images_per_second == pytest.approx(64 * 100 / 12.0)
    assert r.wait_fraction == pytest.approx(3.0 / 120.0)


def test_numbers_of_a_train_summary_leave_out_the_warm_up_like_the_source_statistics():
    from types import SimpleNamespace

    summary = SimpleNamespace(steps=10, warmup_steps=5, seconds=0.5)
    numbers = numbers_of("feed", summary, {"steps": 10, "mean_wait_ms": 40.0}, batch_size=8)
    assert (numbers.timed_steps, numbers.ms_per_step, numbers.wait_ms) == (5, 100.0, 40.0)
    assert numbers.images_per_second == pytest.approx(80.0)
    # a run not longer than the warm-up is timed over all its steps, and has no input wait to report
    short = numbers_of("feed", SimpleNamespace(steps=3, warmup_steps=0, seconds=0.3),
                       {"steps": 3, "mean_wait_ms": 0.0}, batch_size=8)
    assert (short.timed_steps, short.wait_ms, short.wait_fraction) == (3, None, None)


def test_summary_table_rates_agree_and_say_what_was_left_out():
    """At 10 steps the old summary divided the timed seconds by all steps (550.9 images/s next to
    58.1 ms/step); every rate now covers the same timed steps."""
    r = RunNumbers("staging", steps=10, warmup_steps=5, seconds=0.58, batch_size=64, wait_ms=0.2)
    text = summary_table(r, total_seconds=2.0, losses=[2.3] * 5 + [1.0] * 5, warn_fraction=0.2,
                         queue="3.0 batches (empty at 0% of steps)", corrupt="0 (0 distinct files)")
    assert "summary (staging input; rates over the last 5 of 10 steps: 5 warm-up steps left out):" in text
    images_per_s = float(_cells(text, "images/s")[1])
    step_ms = float(_cells(text, "time per step")[1].split()[0])
    assert images_per_s == pytest.approx(551.7, abs=0.05)
    assert step_ms == pytest.approx(116.0, abs=0.05)
    assert images_per_s / 64 * step_ms == pytest.approx(1000.0, rel=1e-3)
    assert _cells(text, "waiting for input")[1] == "0.2 ms of 116.0 ms per step (0.2%)"
    assert _cells(text, "steps x batch")[1] == "10 x 64 in 2.0 s (5 timed: 0.6 s)"
    assert _cells(text, "loss (first -> last 1 steps)")[1] == "2.300 -> 1.000"
    assert _cells(text, "corrupt images skipped")[1] == "0 (0 distinct files)"


def test_summary_table_leaves_out_rows_that_do_not_apply():
    r = RunNumbers("dummy", steps=3, warmup_steps=0, seconds=0.3, batch_size=8, wait_ms=None)
    text = summary_table(r, total_seconds=0.3, losses=[1.0, 1.0, 1.0], warn_fraction=0.2, queue=None, corrupt=None)
    assert "corrupt" not in text and "queue occupancy" not in text
    assert "rates over all 3 steps: the run is too short to leave out warm-up steps" in text
    assert _cells(text, "waiting for input")[1] == "- (no steps after the warm-up)"
    assert _cells(text, "input-bound")[1] == "unknown: no steps after the warm-up (raise --steps)"


@pytest.mark.parametrize("fraction, verdict", [
    (0.0, "no: the step waited for input 0.0% of its time"),
    (0.049, "no: the step waited for input 4.9% of its time"),
    (0.165, "partly: the step waited for input 16.5% of its time (add --workers to hide it)"),
    (0.2, "yes: the step waited for input 20.0% of its time; add --workers, use --lmdb, or a lighter pipeline"),
])
def test_input_bound_says_how_much_of_the_step_waited(fraction, verdict):
    assert input_bound_verdict(fraction, warn_fraction=0.2) == verdict


def test_comparison_table_columns_rows_and_consistent_numbers():
    runs = [RunNumbers("feed", 45, 5, 8.8, 64, 105.0), RunNumbers("staging", 45, 5, 4.4, 64, 2.0),
            RunNumbers("dummy", 45, 5, 4.0, 64, None)]
    table = comparison_table(runs)
    header = [c.strip() for c in table.splitlines()[1].strip("│").split("│")]
    assert header == ["input", "images/s", "steps/s", "ms/step", "input wait ms/step", "input wait %",
                      "speed-up over feed"]
    assert _cells(table, "feed")[1:] == ["290.9", "4.55", "220.0", "105.0", "47.7", "1.00x"]
    assert _cells(table, "staging")[1:] == ["581.8", "9.09", "110.0", "2.0", "1.8", "2.00x"]
    assert _cells(table, "dummy")[4:] == ["-", "-", "2.20x"]
    lines = expectation(runs, data_ms=100.0)
    assert lines == ["D = 100 ms of data work per batch (timed alone), T = 100 ms per step with no input (dummy)",
                     "expected: feed about D + T = 200 ms per step; queue and staging about max(D, T) = 100 ms",
                     "measured: feed 220 ms, staging 110 ms"]
    assert wait_note(runs) == ["input wait: how long the op producing a batch blocked within the step; staging's op "
                               "fetches the next batch while the model computes on the current one, so its wait "
                               "overlaps the compute"]
    assert wait_note(runs[:1]) == []


def test_comparison_without_feed_is_relative_to_the_first_input():
    table = comparison_table([RunNumbers("queue", 10, 5, 1.0, 8, 1.0), RunNumbers("dummy", 10, 5, 0.5, 8, 0.0)])
    assert "speed-up over queue" in table
    assert _cells(table, "queue")[-1] == "1.00x" and _cells(table, "dummy")[-1] == "2.00x"
    assert expectation([RunNumbers("queue", 10, 5, 1.0, 8, 1.0)], data_ms=50.0) == []


# -- flags ------------------------------------------------------------------------------------------
def _run_script(args, env_extra=None, timeout=60):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    env.update(env_extra or {})
    return run_python([sys.executable, str(EXAMPLES / "train_resnet.py")] + list(args), env=env,
                      capture_output=True, text=True, timeout=timeout)


def _option_helps(text):
    """{'--steps': 'help text of --steps', ...} from argparse's --help output."""
    helps, current = {}, None
    for line in text.splitlines():
        match = re.match(r"^  (-\S+|-h, --help)(?: \S+)?(?:\s{2,}(.*))?$", line)
        if match:
            current = match.group(1).split(", ")[-1]
            helps[current] = match.group(2) or ""
        elif current and line.startswith(" " * 10):
            helps[current] += " " + line.strip()
        else:
            current = None
    return helps


def test_help_names_each_default_once():
    proc = _run_script(["--help"])
    assert proc.returncode == 0, proc.stderr
    helps = _option_helps(proc.stdout)
    assert {"--steps", "--batch-size", "--image-size", "--workers", "--compare", "--extra-cost-ms",
            "--lmdb"} <= set(helps)
    for option, text in helps.items():
        assert text.count("default") <= 1, (option, text)
    assert "default: None" not in proc.stdout and "default: False" not in proc.stdout
    assert "(default: 600)" in helps["--steps"] and "(default: 64)" in helps["--batch-size"]
    assert "(default: 14)" in helps["--depth"] and "(default: staging" in helps["--input"]
    assert "(default: 40)" in helps["--compare-steps"]
    assert "(default: 32 for cifar, 224 otherwise)" in helps["--image-size"]


@pytest.mark.parametrize("flags, message", [
    (["--compare", "feed,zmq"], "--compare takes a comma-separated list of distinct inputs out of feed, queue, "
                                "staging, dataset, dummy, got 'feed,zmq'"),
    (["--compare", "feed,feed"], "got 'feed,feed'"),
    (["--compare", "--no-compare"], "--compare runs only the comparison; it cannot be combined with --no-compare"),
    (["--compare-steps", "0"], "--compare-steps must be >= 1"),
    (["--extra-cost-ms", "-1"], "--extra-cost-ms must be >= 0"),
])
def test_bad_comparison_flags_are_refused(flags, message):
    proc = _run_script(flags)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_lmdb_without_the_package_names_the_right_extra(tmp_path):
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "lmdb.py").write_text("raise ImportError('No module named lmdb (test stub)')\n")
    proc = _run_script(["--lmdb", "--cache-dir", str(tmp_path / "cache"), "--no-compare"],
                       env_extra={"PYTHONPATH": os.pathsep.join([str(stub), str(REPO)])})
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ['error: --lmdb needs the lmdb package: pip install "inputpipe[lmdb]"']
    assert not (tmp_path / "cache").exists()  # refused before generating anything


def test_corrupt_image_message_has_the_file_and_the_decoders_reason_only(tmp_path):
    from image_pipeline import CorruptImageError, DecodeAndAugment

    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"this is not an image" * 10)
    with pytest.raises(CorruptImageError) as info:
        DecodeAndAugment(16, on_corrupt="fail")([str(bad), 0])
    assert str(info.value) == ("corrupt image file {}: OpenCV cannot decode these 200 bytes as an image (they start "
                               "with b'this is ')".format(bad))
    with pytest.raises(CorruptImageError) as info:   # encoded bytes (LMDB records) name their path
        DecodeAndAugment(16, on_corrupt="fail")([np.frombuffer(b"junk" * 20, np.uint8), 0, "cat/1.jpg"])
    assert str(info.value) == ("corrupt image file cat/1.jpg: OpenCV cannot decode these 80 bytes as an image (they "
                               "start with b'junkjunk')")
    with pytest.raises(CorruptImageError) as info:   # a crop of 96 px and more decodes only the crop
        DecodeAndAugment(96, on_corrupt="fail")([np.frombuffer(b"\xff\xd8\xff" + b"junk" * 20, np.uint8), 0, "x.jpg"])
    assert str(info.value).startswith("corrupt image file x.jpg: ")
    assert " at 0x" not in str(info.value)


def test_extra_cost_makes_each_image_slower(tmp_path):
    import time

    from PIL import Image
    from image_pipeline import DecodeAndAugment

    path = tmp_path / "a.jpg"
    Image.new("RGB", (20, 20), (0, 100, 200)).save(str(path))
    slow, plain = DecodeAndAugment(16, extra_cost_ms=30.0), DecodeAndAugment(16)
    start = time.perf_counter()
    image, label = slow([str(path), 3])
    assert time.perf_counter() - start >= 0.03  # a sleep lasts at least as long as asked
    np.testing.assert_array_equal(plain([str(path), 3])[0].shape, image.shape)
    assert image.dtype == np.float32 and label == 3
    with pytest.raises(ValueError, match="extra_cost_ms must be >= 0, got -1"):
        DecodeAndAugment(16, extra_cost_ms=-1)


def test_each_run_gets_its_own_timestamped_logdir(tmp_path, monkeypatch):
    import time

    import train_resnet

    monkeypatch.setattr(time, "strftime", lambda fmt: "20261124-071500")
    first = train_resnet.run_logdir(str(tmp_path / "logs"), "staging")
    assert first == str(tmp_path / "logs" / "20261124-071500-staging")
    Path(first).mkdir(parents=True)
    second = train_resnet.run_logdir(str(tmp_path / "logs"), "staging")  # the same second: a new folder
    assert second == str(tmp_path / "logs" / "20261124-071500-staging-2")
    assert train_resnet.run_logdir(str(tmp_path / "logs"), "feed") == str(tmp_path / "logs" / "20261124-071500-feed")


@pytest.mark.parametrize("flags, reads_files, input_line, compare_line", [
    ([], True, "input        staging (1 decode worker process)",
     "compare      feed, queue, staging, dummy: 40 timed steps each, +1.5 ms per image (--extra-cost-ms) "
     "(--no-compare skips it)"),
    (["--input", "dummy", "--no-compare"], False, "input        dummy (constant zeros, no data work)", None),
    (["--fake", "--input", "feed", "--no-compare"], False,
     "input        feed (data work in the thread that reads the DataFlow)", None),
    (["--compare", "dummy"], False, None, "compare      dummy: 40 timed steps each"),
    (["--compare", "feed,staging", "--workers", "2", "--extra-cost-ms", "0.5"], True, None,
     "compare      feed, staging: 40 timed steps each, +0.5 ms per image (--extra-cost-ms)"),
])
def test_config_lines_show_only_what_applies(tmp_path, flags, reads_files, input_line, compare_line):
    import train_resnet

    cfg = train_resnet.configure(train_resnet.parse_args(["--logdir", str(tmp_path)] + flags))
    lines = cfg.lines("ResNet-14", training="--compare" not in flags)
    assert cfg.reads_files == reads_files
    assert any(line.startswith("corrupt ") for line in lines) == reads_files
    assert [line for line in lines if line.startswith("input ")] == ([input_line] if input_line else [])
    assert [line for line in lines if line.startswith("compare ")] == ([compare_line] if compare_line else [])
    assert any(line.startswith("logdir ") for line in lines) == ("--compare" not in flags)
    if "--workers" in flags:
        assert (cfg.compare_workers, cfg.compare_extra_cost_ms) == (2, 0.5)
    elif "--fake" not in flags:
        assert (cfg.compare_workers, cfg.compare_extra_cost_ms) == (0, 1.5)
