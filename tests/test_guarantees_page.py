"""docs/guarantees.md and docs/migrating.md name the tests that check each line; every named test exists.

A reference is written ``tests/<file>.py::<test name>`` (a parametrised id such as ``[True]`` may
follow the name) or ``tests/<file>.py`` for a whole file. A renamed or deleted test makes these
tests fail, so the pages cannot silently go stale.
"""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = ["docs/guarantees.md", "docs/migrating.md"]
REFERENCE = re.compile(r"tests/(?P<file>test_\w+\.py)(?:::(?P<name>test_\w+)(?:\[[^\]\s`]*\])?)?")
ANY_TEST_NAME = re.compile(r"\btest_\w+")


def _defined_tests(test_file: Path) -> set:
    text = test_file.read_text(encoding="utf-8")
    return set(re.findall(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(test_\w+)[ \t]*\(", text, re.M))


def problems_with_references(text: str, tests_dir: Path) -> list:
    """Each reference in ``text`` whose file or test does not exist, as a readable string."""
    problems = []
    for match in REFERENCE.finditer(text):
        test_file = tests_dir / match.group("file")
        if not test_file.is_file():
            problems.append("no file tests/{}".format(match.group("file")))
        elif match.group("name") and match.group("name") not in _defined_tests(test_file):
            problems.append("no def {} in tests/{}".format(match.group("name"), match.group("file")))
    return problems


def bare_test_names(text: str) -> list:
    """Test names that are not part of a full ``tests/file.py::name`` reference (so nobody checks them)."""
    return ANY_TEST_NAME.findall(REFERENCE.sub("", text))


def _bullets_under_sections(text: str) -> list:
    """The top-level bullets of every ``##`` section (a bullet runs to the next bullet or heading)."""
    bullets, current, in_section = [], None, False
    for line in text.splitlines():
        if line.startswith("#"):
            in_section = line.startswith(("## ", "### "))
            current = None
        elif line.startswith("- ") and in_section:
            current = [line]
            bullets.append(current)
        elif current is not None and line.startswith("  "):
            current.append(line)
        else:
            current = None
    return ["\n".join(bullet) for bullet in bullets]


@pytest.mark.parametrize("page", PAGES)
def test_every_test_the_page_names_exists(page):
    text = (REPO / page).read_text(encoding="utf-8")
    assert len(REFERENCE.findall(text)) >= 40, "{} names fewer tests than expected".format(page)
    assert problems_with_references(text, REPO / "tests") == []


@pytest.mark.parametrize("page", PAGES)
def test_every_test_name_on_the_page_is_a_full_reference(page):
    text = (REPO / page).read_text(encoding="utf-8")
    assert bare_test_names(text) == []


def test_every_guarantee_names_a_test():
    text = (REPO / "docs/guarantees.md").read_text(encoding="utf-8")
    bullets = _bullets_under_sections(text)
    assert len(bullets) >= 30
    without = [bullet.splitlines()[0][:80] for bullet in bullets if not REFERENCE.search(bullet)]
    assert without == []


def test_the_page_has_every_group_of_guarantees():
    headings = re.findall(r"^## (.+)$", (REPO / "docs/guarantees.md").read_text(encoding="utf-8"), re.M)
    for group in ("Never hang", "Never lose data", "Never leave orphans", "Bounded memory",
                  "Hostile senders", "Bad input", "Placement"):
        assert any(heading.startswith(group) for heading in headings), (group, headings)


def test_the_checker_reports_stale_and_bare_names(tmp_path):
    (tmp_path / "test_here.py").write_text("def test_present(x):\n    pass\n\nclass T:\n    def test_method(self):\n"
                                           "        pass\n", encoding="utf-8")
    text = ("`tests/test_here.py::test_present[a/b*]`, `tests/test_here.py::test_method`, `tests/test_here.py`; "
            "`tests/test_here.py::test_gone`, `tests/test_nowhere.py::test_present`; and test_bare alone")
    assert problems_with_references(text, tmp_path) == ["no def test_gone in tests/test_here.py",
                                                        "no file tests/test_nowhere.py"]
    assert bare_test_names(text) == ["test_bare"]
    assert _bullets_under_sections("## A\n\n- one `tests/test_here.py`\n  more\n- two\n\n# Top\n- three\n") == [
        "- one `tests/test_here.py`\n  more", "- two"]
