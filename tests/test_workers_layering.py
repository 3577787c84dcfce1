"""The layers import downwards only: utils -> dataflow -> input_source -> train.

One exception, as in tests/test_package_layout.py's ``ALIASES_ON_FIRST_USE``: a name tensorpack
had at a lower module's path for a class of a higher layer, which that module's ``__getattr__``
(PEP 562) imports when the name is asked for; the module's own work never uses it."""
import ast
import os

import pytest

from inputpipe.dataflow import seeding as dataflow_seeding
from inputpipe.utils import seeding as utils_seeding

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "inputpipe")
LAYERS = ["utils", "dataflow", "input_source", "train"]
#: (module path under inputpipe/, the layer its ``__getattr__`` may import on first use)
FIRST_USE_ALIASES = {("utils/concurrency.py", "input_source")}


def _imported_packages(path, layer):
    """The top-level inputpipe sub-packages a module imports (absolute or relative)."""
    tree = ast.parse(open(path).read(), path)
    depth = os.path.relpath(path, PACKAGE).count(os.sep)       # 1 for inputpipe/utils/x.py
    in_getattr = {id(node) for top in tree.body if isinstance(top, ast.FunctionDef) and top.name == "__getattr__"
                  for node in ast.walk(top)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                names = [node.module or ""]
            elif node.level > depth:                           # from .. import x / from ..dataflow import y
                names = ["inputpipe." + (node.module or alias.name) for alias in node.names]
            else:
                names = ["inputpipe.{}.{}".format(layer, node.module or "")]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "inputpipe" and len(parts) > 1 and parts[1] in LAYERS:
                if id(node) in in_getattr and (os.path.relpath(path, PACKAGE), parts[1]) in FIRST_USE_ALIASES:
                    continue
                found.add(parts[1])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_imports_only_the_layers_below_it(layer):
    allowed = set(LAYERS[:LAYERS.index(layer) + 1])
    wrong = {}
    for root, _, files in os.walk(os.path.join(PACKAGE, layer)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                above = _imported_packages(path, layer) - allowed
                if above:
                    wrong[os.path.relpath(path, PACKAGE)] = sorted(above)
    assert wrong == {}


def test_the_first_use_alias_is_the_class_of_the_layer_above():
    import inputpipe.utils.concurrency as concurrency
    from inputpipe.input_source.input_source import ShareSessionThread

    assert concurrency.ShareSessionThread is ShareSessionThread
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        concurrency.NoSuchName  # noqa: B018  (the read looks it up)


def test_dataflow_seeding_is_the_utils_core():
    for name in utils_seeding.__all__:
        assert getattr(dataflow_seeding, name) is getattr(utils_seeding, name)
    try:
        dataflow_seeding.set_global_seed(7)
        assert utils_seeding.get_global_seed() == 7
    finally:
        dataflow_seeding.set_global_seed(None)
