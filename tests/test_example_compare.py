"""train_resnet.py's comparison of InputSources: one table, side by side, consistent numbers."""
import re

import pytest

from test_example import TEST_TIMEOUT, assert_trained, error_lines, run_example

pytestmark = pytest.mark.timeout(TEST_TIMEOUT)

HEADER = ["input", "images/s", "steps/s", "ms/step", "input wait ms/step", "input wait %", "speed-up over feed"]


def comparison_rows(out):
    """{input: [cells]} of the comparison table, and its header."""
    table = out[out.index("inputs compared:"):]
    lines = [line for line in table.splitlines() if line.startswith("│")]
    header = [c.strip() for c in lines[0].strip("│").split("│")]
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("│").split("│")]
        rows[cells[0]] = cells[1:]
    return header, rows


def assert_consistent(header, rows, batch):
    assert header == HEADER
    for name, (images_s, steps_s, step_ms, wait_ms, wait_pct, speedup) in rows.items():
        assert float(step_ms) * float(steps_s) == pytest.approx(1000.0, rel=0.01), name
        assert float(images_s) == pytest.approx(batch * float(steps_s), rel=0.01), name
        if wait_ms != "-":  # each printed number is rounded to 0.1: the share within those bounds
            low = 100 * max(float(wait_ms) - 0.05, 0) / (float(step_ms) + 0.05) - 0.05
            high = 100 * (float(wait_ms) + 0.05) / (float(step_ms) - 0.05) + 0.05
            assert low <= float(wait_pct) <= high, name
        assert float(speedup.rstrip("x")) == pytest.approx(float(steps_s) / float(rows["feed"][1]), abs=0.011), name
    assert rows["feed"][5] == "1.00x"


@pytest.mark.slow
def test_compare_two_inputs_prints_one_consistent_table(tmp_path):
    # 21 timed steps: enough for the library's input-bound warning (20 steps), which the comparison
    # leaves out because it makes the data slow on purpose
    proc = run_example(tmp_path, "--compare", "feed,staging", "--compare-steps", "21", "--extra-cost-ms", "3")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert "summary (" not in out and "  training   " not in out and "  logdir   " not in out  # comparison only
    assert "  compare      feed, staging: 21 timed steps each, +3 ms per image (--extra-cost-ms)\n" in out
    assert re.search(r"compare 1/2: feed +\d+\.\d ms per step\ncompare 2/2: staging +\d+\.\d ms per step\n", out)
    assert ("inputs compared: the same model, data, seed and steps, a fresh graph each; each timed over the "
            "last 21 of 26 steps: 5 warm-up steps left out\n") in out
    assert ("data work: decode + augment, +3 ms per image (--extra-cost-ms), in the thread that reads the "
            "DataFlow (--workers 0)\n") in out
    header, rows = comparison_rows(out)
    assert list(rows) == ["feed", "staging"]
    assert_consistent(header, rows, batch=8)
    assert "D = " not in out  # no dummy run: no T to compare with
    assert not list((tmp_path / "logs").glob("*"))  # comparison runs write no summaries
    assert error_lines(proc) == []  # no traceback, no input-bound warning


@pytest.mark.slow
def test_default_run_ends_with_the_comparison(tmp_path):
    """The main command trains, prints its summary, then compares (here: tiny, with --fake data
    and the feed input)."""
    proc = run_example(tmp_path, "--fake", "--input", "feed", "--compare-steps", "2", "--extra-cost-ms", "1",
                       compare=True)
    assert_trained(proc, "feed", reads_files=False, compared=True)
    out = proc.stdout
    assert "in-memory random tensors (--fake)" in out
    assert not (tmp_path / "cache").exists()
    assert "  compare      feed, queue, staging, dummy: 2 timed steps each, +1 ms per image (--extra-cost-ms) " \
           "(--no-compare skips it)" in out
    assert out.index("summary (feed input;") < out.index("comparing the inputs feed, queue, staging, dummy "
                                                            "(--no-compare skips this) ...")
    assert "data work: fake batches, +1 ms per image (--extra-cost-ms), in the thread that reads the DataFlow " \
           "(--workers 0)" in out
    header, rows = comparison_rows(out)
    assert list(rows) == ["feed", "queue", "staging", "dummy"]
    assert_consistent(header, rows, batch=8)
    assert rows["dummy"][3] == "0.0" and float(rows["dummy"][4]) < 1.0  # constant input: nothing to wait for
    expected = re.search(r"D = (\d+) ms of data work per batch \(timed alone\), T = (\d+) ms per step with no "
                         r"input \(dummy\)\n  expected: feed about D \+ T = (\d+) ms per step; queue and staging "
                         r"about max\(D, T\) = (\d+) ms\n  measured: feed \d+ ms, queue \d+ ms, staging \d+ ms", out)
    assert expected, out[-1500:]
    d, t, d_plus_t, max_dt = (int(v) for v in expected.groups())
    assert d >= 8  # 8 images x 1 ms of sleep per batch at least
    assert abs(d_plus_t - (d + t)) <= 1 and max_dt == max(d, t)
    assert float(rows["dummy"][2]) == pytest.approx(t, abs=0.51)
