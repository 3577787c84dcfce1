"""Sphinx configuration of the inputpipe docs (MyST Markdown pages + autodoc API reference).

Build (warnings are errors, as in tests/test_docs.py)::

    sphinx-build -W -b html docs docs/_build/html
"""
import os
import pkgutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from inputpipe import __version__  # noqa: E402

project = "inputpipe"
author = "the inputpipe authors"
copyright = "the inputpipe authors"
version = release = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "alabaster"
html_title = "inputpipe {}".format(release)

# The tutorial pages are written by several people; index.md lists every top-level page that
# exists, in this order first and any other page after it, so a new page is never left out of
# the navigation (and a page still being written does not break the build).
TUTORIAL_ORDER = ["dataflow", "parallel", "dataset_files", "input_source", "wire_format", "benchmarks"]
PAGES_LISTED_ELSEWHERE = {"index", "getting_started", "migrating"}
TUTORIALS_MARKER = "TUTORIAL_PAGES"


def tutorial_pages():
    present = {p.stem for p in DOCS.glob("*.md")} - PAGES_LISTED_ELSEWHERE
    first = [name for name in TUTORIAL_ORDER if name in present]
    return first + sorted(present - set(first))


def _fill_tutorial_toctree(app, docname, source):
    if docname == "index":
        source[0] = source[0].replace(TUTORIALS_MARKER, "\n".join(tutorial_pages()))


# Each page docs/api/<subpackage>.md documents inputpipe.<subpackage>: its modules get a section
# with a title there; a module added later without one is appended under "Other modules", so the
# reference never silently misses a module.
def modules_of(subpackage):
    path = DOCS.parent / "inputpipe" / subpackage
    return ["inputpipe.{}.{}".format(subpackage, info.name)
            for info in pkgutil.iter_modules([str(path)]) if not info.name.startswith("_")]


def _append_undocumented_modules(app, docname, source):
    if not docname.startswith("api/") or docname == "api/index":
        return
    subpackage = docname[len("api/"):]
    missing = [m for m in modules_of(subpackage) if ".. automodule:: {}\n".format(m) not in source[0]]
    if missing:
        parts = ["", "## Other modules", ""]
        for module in missing:
            parts += ["```{eval-rst}", ".. automodule:: " + module, "```", ""]
        source[0] = source[0].rstrip("\n") + "\n" + "\n".join(parts)


def _always_reread_generated(app, env, added, changed, removed):
    """index and the API pages depend on which files exist: re-read them on incremental builds."""
    return ["index"] + sorted(d for d in env.found_docs if d.startswith("api/"))


def setup(app):
    app.connect("env-get-outdated", _always_reread_generated)
    app.connect("source-read", _fill_tutorial_toctree)
    app.connect("source-read", _append_undocumented_modules)
