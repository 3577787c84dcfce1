"""Every Python block of README.md, docs/*.md and docs/api/*.md that is meant to run, runs as written.

The blocks of one page run in order in one fresh interpreter (later blocks use what earlier ones
defined, as a reader would), after tests/doc_snippets/prelude.py has defined the names the pages
leave to the reader (``files``, ``load_and_augment``, ``build_model``). A block that is only a
fragment is marked on the line before its fence with ``<!-- not run: the reason -->``; the test
checks that every such mark gives a reason.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fresh_python import run_python

REPO = Path(__file__).resolve().parents[1]
PRELUDE = Path(__file__).resolve().parent / "doc_snippets" / "prelude.py"
# Pages whose code has a dedicated test with more assertions than "it runs".
COVERED_ELSEWHERE = {"docs/dataflow.md": "tests/test_dataflow_docs.py",
                     "docs/estimator.md": "tests/test_estimator_tf.py",     # needs tf.estimator (TF <= 2.15)
                     "docs/getting_started.md": "tests/test_example_getting_started.py",
                     "docs/image_augmentation.md": "tests/test_imgaug_core_docs.py"}
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)```", re.S)
SKIP_MARK = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->")
# The pages are written for TensorFlow 2's defaults (eager execution, graphs built inside
# ``tf.Graph().as_default()``); TF 1.15 has the same once eager execution is on at program start.
EAGER_LIKE_TF2 = """import tensorflow as tf
if not tf.executing_eagerly():
    tf.compat.v1.enable_eager_execution()
"""


def _pages():
    pages = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md")) + sorted((REPO / "docs" / "api").glob("*.md"))
    return [p for p in pages if str(p.relative_to(REPO)) not in COVERED_ELSEWHERE]


def _blocks(page: Path):
    """(code, skip reason or None) for each ```python block of the page, in order."""
    text = "\n" + page.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        mark = SKIP_MARK.search(match.group("before"))
        found.append((match.group("code"), mark.group("reason") if mark else None))
    return found


def _pages_with_code():
    return [p for p in _pages() if any(reason is None for _, reason in _blocks(p))]


def test_every_not_run_mark_gives_a_reason():
    for page in _pages():
        for code, reason in _blocks(page):
            if reason is not None:
                assert len(reason) >= 10, "{}: a block is skipped without a reason: {!r}".format(page, code[:60])


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("page", _pages_with_code(), ids=lambda p: str(p.relative_to(REPO)))
def test_page_snippets_run(page, tmp_path):
    code = [PRELUDE.read_text(encoding="utf-8")]
    uses_tensorflow = any("import tensorflow" in block for block, reason in _blocks(page) if reason is None)
    if uses_tensorflow:
        code.append(EAGER_LIKE_TF2)
    for index, (block, reason) in enumerate(_blocks(page)):
        if reason is None:
            code.append("# --- block {} of {}\n{}".format(index + 1, page.name, block))
    script = tmp_path / "snippets.py"
    script.write_text("\n".join(code), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO), INPUTPIPE_REPO=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    # (a page that uses TensorFlow runs forked from a process that imported it: tests/fresh_python.py;
    # one that does not runs in a new interpreter, which starts and ends faster without it)
    run = run_python if uses_tensorflow else subprocess.run
    proc = run([sys.executable, str(script)], cwd=str(tmp_path), env=env, capture_output=True, text=True,
               timeout=180)
    assert proc.returncode == 0, "{} failed:\n{}".format(page.relative_to(REPO), proc.stderr[-4000:])


def test_the_pages_left_to_other_tests_have_those_tests():
    for page, test_file in COVERED_ELSEWHERE.items():
        assert (REPO / page).is_file(), page
        assert Path(page).name in (REPO / test_file).read_text(encoding="utf-8"), (page, test_file)
