"""The docs site builds with warnings as errors, has its key pages, and documents every module."""
import os
import pkgutil
import sys
from pathlib import Path

import pytest

import inputpipe

from fresh_python import run_python

pytest.importorskip("sphinx", reason='building the docs needs Sphinx: pip install -e ".[docs]"')
pytest.importorskip("myst_parser", reason='building the docs needs MyST: pip install -e ".[docs]"')

# The build takes 20-40 s of CPU (the setup of the first test; 39 s with Sphinx 9 on an AVX2 EPYC):
# 70-91 s were seen beside the rest of the suite on 2 busy cores, and over 270 s beside two more
# copies of the suite on the slower host, so its phase gets room to finish under any load.
BUILD_TIMEOUT = 900
pytestmark = [pytest.mark.xdist_group("test_docs"), pytest.mark.timeout(BUILD_TIMEOUT + 60)]

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
KEY_PAGES = ["index.html", "getting_started.html", "migrating.html", "benchmarks.html", "api/index.html",
             "api/dataflow.html", "genindex.html"]


def _all_modules():
    """Every public module of the package (``inputpipe.x.y``), found on disk."""
    names = []
    for info in pkgutil.walk_packages(inputpipe.__path__, prefix="inputpipe."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names)


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    # (autodoc imports inputpipe.input_source, hence TensorFlow: forked from a process that has it)
    proc = run_python(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
        cwd=str(REPO), env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
    )
    assert proc.returncode == 0, "sphinx-build -W failed:\n" + proc.stderr[-6000:]
    return out


def test_docs_build_without_warnings_and_have_key_pages(built_site):
    missing = [page for page in KEY_PAGES if not (built_site / page).is_file()]
    assert missing == []
    index = (built_site / "index.html").read_text(encoding="utf-8")
    for page in ("getting_started.html", "migrating.html", "benchmarks.html", "api/index.html"):
        assert 'href="{}"'.format(page) in index, page


def test_every_tutorial_page_is_in_the_navigation(built_site):
    index = (built_site / "index.html").read_text(encoding="utf-8")
    tutorials = sorted(p.stem for p in DOCS.glob("*.md") if p.stem != "index")
    assert tutorials, "docs/ has no pages"
    for name in tutorials:
        assert (built_site / (name + ".html")).is_file(), name
        assert 'href="{}.html"'.format(name) in index, name


def test_api_reference_is_generated_from_docstrings_under_the_public_names(built_site):
    page = (built_site / "api" / "dataflow.html").read_text(encoding="utf-8")
    for name in ("DataFlow", "BatchData", "MultiProcessMapData", "AugmentImageComponent", "LMDBSerializer"):
        assert 'id="inputpipe.dataflow.{}"'.format(name) in page, name
    assert 'id="inputpipe.dataflow.batch.BatchData"' not in page
    assert "reset_state" in page
    imgaug = (built_site / "api" / "dataflow.imgaug.html").read_text(encoding="utf-8")
    assert 'id="inputpipe.dataflow.imgaug.ResizeShortestEdge"' in imgaug
    sources = (built_site / "api" / "input_source.html").read_text(encoding="utf-8")
    assert 'id="inputpipe.input_source.StagingInput"' in sources


def test_every_module_is_in_the_api_reference(built_site):
    modules = _all_modules()
    assert "inputpipe.dataflow.base" in modules
    pages = "".join(p.read_text(encoding="utf-8") for p in (built_site / "api").glob("*.html"))
    undocumented = [m for m in modules if 'id="module-{}"'.format(m) not in pages]
    assert undocumented == []
