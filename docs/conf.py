"""Sphinx configuration of the inputpipe docs (MyST Markdown pages + autodoc API reference).

Build (warnings are errors, as in tests/test_docs.py)::

    sphinx-build -W -b html docs docs/_build/html
"""
import importlib
import inspect
import os
import pkgutil
import sys
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util.nodes import nested_parse_with_titles

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from inputpipe import __version__  # noqa: E402

project = "inputpipe"
author = "the inputpipe authors"
copyright = "the inputpipe authors"
version = release = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.intersphinx"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "show-inheritance": True}

# Cross-references to Python, numpy and TensorFlow. The docs build offline (tests and CI have no
# network), so only inventories found on disk are used: put objects.inv files in docs/_inventories/
# (python.inv, numpy.inv, tensorflow.inv) to resolve those links; without them the names show as
# plain code, and no warning is raised.
_INVENTORIES = DOCS / "_inventories"
_TARGETS = {"python": "https://docs.python.org/3", "numpy": "https://numpy.org/doc/stable",
            "tensorflow": "https://www.tensorflow.org/api_docs/python"}
intersphinx_mapping = {name: (url, str(_INVENTORIES / (name + ".inv")))
                       for name, url in _TARGETS.items() if (_INVENTORIES / (name + ".inv")).is_file()}
intersphinx_disabled_reftypes = ["*"]

html_theme = "furo"
html_title = "inputpipe {}".format(release)

# The tutorial pages are written by several people; index.md lists every top-level page that
# exists, in this order first and any other page after it, so a new page is never left out of
# the navigation (and a page still being written does not break the build).
TUTORIAL_ORDER = ["dataflow", "image_augmentation", "datasets", "parallel", "dataset_files", "input_source", "estimator", "doctor",
                  "wire_format", "guarantees", "benchmarks", "design"]
PAGES_LISTED_ELSEWHERE = {"index", "getting_started", "migrating"}
TUTORIALS_MARKER = "TUTORIAL_PAGES"


def tutorial_pages():
    present = {p.stem for p in DOCS.glob("*.md")} - PAGES_LISTED_ELSEWHERE
    first = [name for name in TUTORIAL_ORDER if name in present]
    return first + sorted(present - set(first))


def _fill_tutorial_toctree(app, docname, source):
    if docname == "index":
        source[0] = source[0].replace(TUTORIALS_MARKER, "\n".join(tutorial_pages()))


# Each page docs/api/<subpackage>.md documents inputpipe.<subpackage> (a dotted page name such as
# api/dataflow.imgaug documents inputpipe.dataflow.imgaug): its modules get a section with a title
# there; a module added later without one is appended under "Other modules", so the reference
# never silently misses a module.
def modules_of(subpackage):
    path = DOCS.parent / "inputpipe" / Path(*subpackage.split("."))
    return ["inputpipe.{}.{}".format(subpackage, info.name)
            for info in pkgutil.iter_modules([str(path)]) if not info.name.startswith("_")]


def _documents(source, module):
    return any(marker.format(module) in source
               for marker in (".. automodule:: {}\n", ".. public-names:: {}\n", ".. public-names:: {} "))


def _append_undocumented_modules(app, docname, source):
    if not docname.startswith("api/") or docname == "api/index":
        return
    subpackage = docname[len("api/"):]
    missing = [m for m in modules_of(subpackage) if not _documents(source[0], m)]
    if missing:
        parts = ["", "## Other modules", ""]
        for module in missing:
            parts += ["```{eval-rst}", ".. public-names:: " + module, "```", ""]
        source[0] = source[0].rstrip("\n") + "\n" + "\n".join(parts)


class PublicNames(Directive):
    """``.. public-names:: inputpipe.dataflow.batch``: the module's docstring, then every name in its
    ``__all__`` documented under the public package that re-exports it (``inputpipe.dataflow.BatchData``,
    not ``inputpipe.dataflow.batch.BatchData``). Names the package does not re-export stay under the
    module's own path."""

    required_arguments = 1

    def run(self):
        module_name = self.arguments[0]
        module = importlib.import_module(module_name)
        package_name = module_name.rsplit(".", 1)[0]
        package = importlib.import_module(package_name)
        lines = [".. automodule:: {}".format(module_name), "   :no-members:", ""]
        elsewhere = []
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            home = getattr(obj, "__module__", module_name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and home != module_name:
                elsewhere.append(name)  # re-exported here (a tensorpack module path): documented where defined
                continue
            path = "{}.{}".format(package_name if getattr(package, name, None) is obj else module_name, name)
            if inspect.isclass(obj):
                if obj.__name__ != name:  # an alias kept for tensorpack code
                    lines += [".. py:data:: {}".format(path), "",
                              "   Alias of :class:`{}.{}` (tensorpack's name).".format(package_name, obj.__name__), ""]
                    continue
                lines += [".. autoclass:: {}".format(path), ""]
            elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
                lines += [".. autofunction:: {}".format(path), ""]
            else:
                lines += [".. autodata:: {}".format(path), "   :no-value:", ""]
        if elsewhere:
            lines += ["Also importable from here (tensorpack's module path): {}.".format(
                ", ".join("``{}``".format(name) for name in elsewhere)), ""]
        content = StringList(lines, source=module_name)
        holder = nodes.container()
        nested_parse_with_titles(self.state, content, holder)
        return holder.children


def _always_reread_generated(app, env, added, changed, removed):
    """index and the API pages depend on which files exist: re-read them on incremental builds."""
    return ["index"] + sorted(d for d in env.found_docs if d.startswith("api/"))


def setup(app):
    app.add_directive("public-names", PublicNames)
    app.connect("env-get-outdated", _always_reread_generated)
    app.connect("source-read", _fill_tutorial_toctree)
    app.connect("source-read", _append_undocumented_modules)
