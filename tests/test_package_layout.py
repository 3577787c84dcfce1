"""The package reads as its architecture (docs/design.md, "Map of the package"): no import circle,
no import from a lower layer to a higher one, private machinery in private capability folders,
and every public import path (tensorpack's and the documented ones) still importing.

What counts as an import: every ``import``/``from ... import`` of an inputpipe module, at module
level or inside a function (a lazy import still makes the importer depend on what it imports),
also in a module's ``__getattr__`` (PEP 562), with two exceptions:

- the names in ``ALIASES_ON_FIRST_USE``: tensorpack's names kept at tensorpack's module path for
  a class of a module above it, looked up by the module's ``__getattr__`` when a name is asked
  for (after both modules are imported; the module's own work never uses them);
- a module's own ancestor packages: Python imports them before the module itself (the tuner
  reads ``inputpipe.dataflow``'s names to print public import paths).

Importing ``a.b.c`` also runs the packages ``a`` and ``a.b``; those implicit imports are not
edges either (a subpackage's ``__init__`` is part of it).
"""
import ast
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "inputpipe"
DATAFLOW = PACKAGE / "dataflow"

# tensorpack's names outside __all__ and names at paths that moved code keeps working; the
# documented paths are collected from the docs below.
PUBLIC_NAMES = {
    "inputpipe.dataflow.base": ["DataFlow", "RNGDataFlow", "ProxyDataFlow", "get_rng"],
    "inputpipe.dataflow.common": ["BatchData", "MapData", "CacheData", "LocallyShuffleData", "get_rng", "get_tqdm"],
    "inputpipe.dataflow.image": ["AugmentImageComponent", "check_dtype", "AugmentorList", "shape2d"],
    "inputpipe.dataflow.imgaug.base": ["ImageAugmentor", "AugmentorList", "check_dtype", "get_rng", "log_once"],
    "inputpipe.dataflow.imgaug.transform": ["ImageAugmentor", "TransformAugmentorBase", "ResizeTransform", "log_once"],
    "inputpipe.dataflow.parallel": ["MultiProcessRunnerZMQ", "MultiThreadRunner", "enable_death_signal"],
    "inputpipe.dataflow.parallel_map": ["MultiProcessMapData", "MultiProcessMapDataComponentSharedArray",
                                        "_ParallelMapBase", "BatchData", "enable_death_signal"],
    "inputpipe.dataflow.shared_array_map": ["MultiProcessMapDataComponentSharedArray"],
    "inputpipe.dataflow.serialize": ["LMDBSerializer", "DatasetFormatError", "create_dummy_class", "get_tqdm"],
    "inputpipe.dataflow.format": ["LMDBData", "HDF5Data", "get_caffe_pb", "timed_operation"],
    "inputpipe.dataflow.dataset_io": ["DatasetFormatError"],
    "inputpipe.dataflow.tensorpack_records": ["decode_tensorpack_record", "is_pickle", "read_tensorpack_npz"],
    "inputpipe.dataflow.tensorpack_helpers": ["get_rng", "download", "maybe_download", "log_once", "DIE"],
    "inputpipe.dataflow.dataset": ["Mnist", "Cifar10", "ILSVRC12", "DatasetDownloadError", "get_dataset_path",
                                   "RNGDataFlow"],
    "inputpipe.dataflow.dataset.mnist": ["Mnist", "download", "maybe_download"],
    "inputpipe.dataflow.profiling": ["profile", "ProfileReport", "StageProfile"],
    "inputpipe.dataflow.tuning": ["tune", "TuneResult", "StageChoice", "Split"],
    "inputpipe.dataflow.ray": ["RayMapData", "RayMapAndBatchData", "RayShardedData", "start_local_ray"],
    "inputpipe.dataflow": ["DataFlow", "MultiThreadRunner", "CacheData", "tune", "profile", "Autoscale", "imgaug",
                           "dataset", "RayMapData"],
    "inputpipe.input_source.input_source_base": ["InputSource", "ProxyInputSource", "call_only_once",
                                                 "build_or_reuse_placeholder"],
}

# (module, the module above it that its __getattr__ takes tensorpack's names from): the names
ALIASES_ON_FIRST_USE = {
    ("inputpipe.dataflow.imgaug.transform", "inputpipe.dataflow.imgaug.base"): ("ImageAugmentor",
                                                                                "TransformAugmentorBase"),
    ("inputpipe.utils.concurrency", "inputpipe.input_source.input_source"): ("ShareSessionThread",),
}

# Modules that only stand for tensorpack's API and so may not be imported by the core below them.
TENSORPACK_COMPAT = ("inputpipe.dataflow.tensorpack_helpers", "inputpipe.dataflow.tensorpack_records",
                     "inputpipe.input_source.tensorpack_helpers", "inputpipe.input_source.tensorpack_trainer",
                     "inputpipe.tensorpack_interop")
DATAFLOW_CORE = ("inputpipe.dataflow.base", "inputpipe.dataflow.seeding", "inputpipe.dataflow._core")


def _modules():
    """``{module name: path}`` of every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _module_level_getattr_bodies(tree):
    """The nodes inside the module's own ``__getattr__``."""
    return {id(node) for top in tree.body if isinstance(top, ast.FunctionDef) and top.name == "__getattr__"
            for node in ast.walk(top)}


def _imports(name):
    """The inputpipe modules ``name`` imports (see the module docstring for what counts)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    in_getattr = _module_level_getattr_bodies(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            candidates = [source + "." + alias.name if source + "." + alias.name in MODULES else source
                          for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate not in MODULES and "." in candidate:
                candidate = candidate.rpartition(".")[0]
            alias_on_first_use = id(node) in in_getattr and (name, candidate) in ALIASES_ON_FIRST_USE
            if candidate in MODULES and candidate != name and not name.startswith(candidate + ".") \
                    and not alias_on_first_use:
                targets.add(candidate)
    return targets


def _graph():
    return {name: _imports(name) for name in MODULES}


def _circles(graph):
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, circles = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circle_among_inputpipe_modules():
    assert _circles(_graph()) == []


def test_each_alias_on_first_use_is_the_class_of_the_module_above():
    for (module, above), names in ALIASES_ON_FIRST_USE.items():
        for name in names:
            assert getattr(importlib.import_module(module), name) in vars(importlib.import_module(above)).values()


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _importers(prefix, forbidden):
    graph = _graph()
    return {name: sorted(t for t in targets if t.startswith(forbidden))
            for name, targets in graph.items()
            if (name == prefix or name.startswith(prefix + ".")) and any(t.startswith(forbidden) for t in targets)}


def test_utils_imports_no_layer_above_it():
    assert _importers("inputpipe.utils", ("inputpipe.dataflow", "inputpipe.input_source", "inputpipe.train",
                                           "inputpipe.estimator", "inputpipe.doctor",
                                           "inputpipe.tensorpack_interop")) == {}


def test_dataflow_imports_no_input_source_train_or_tensorflow():
    assert _importers("inputpipe.dataflow", ("inputpipe.input_source", "inputpipe.train", "inputpipe.estimator",
                                              "inputpipe.doctor", "inputpipe.tensorpack_interop")) == {}
    with_tensorflow = []
    for name, path in MODULES.items():
        if name.startswith("inputpipe.dataflow"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                if any(m == "tensorflow" or m.startswith("tensorflow.") for m in modules):
                    with_tensorflow.append(name)
    assert with_tensorflow == []


def test_the_dataflow_core_imports_no_tensorpack_compatibility_module():
    graph = _graph()
    core = [name for name in graph if name.startswith(DATAFLOW_CORE)]
    assert "inputpipe.dataflow.base" in core and "inputpipe.dataflow._core.state" in core
    assert {name: sorted(graph[name] & set(TENSORPACK_COMPAT)) for name in core if graph[name] & set(TENSORPACK_COMPAT)} \
        == {}


def test_the_tensorpack_helpers_import_nothing_of_the_modules_that_use_them():
    """They sit right above the core: the dataset readers, image and parallel modules import them."""
    allowed = ("inputpipe.utils", "inputpipe.dataflow._formats", "inputpipe.dataflow._core",
               "inputpipe.dataflow.base", "inputpipe.dataflow.seeding", "inputpipe.dataflow.dataset_io",
               "inputpipe.dataflow.image_damage", "inputpipe.dataflow.image_limits", "inputpipe.dataflow._image")
    helpers = _imports("inputpipe.dataflow.tensorpack_helpers")
    assert sorted(t for t in helpers if not t.startswith(allowed)) == []


def test_dataflow_top_level_holds_public_modules_and_private_capability_folders():
    private_files = sorted(p.name for p in DATAFLOW.glob("_*.py") if p.name != "__init__.py")
    assert private_files == []
    folders = sorted(p.name for p in DATAFLOW.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert folders == ["_core", "_formats", "_image", "_parallel", "_ray", "_tuning", "dataset", "imgaug"]
    for folder in folders:
        if folder.startswith("_"):      # inside a private folder, the modules need no underscore of their own
            assert sorted(p.name for p in (DATAFLOW / folder).glob("_*.py")) == ["__init__.py"], folder


def _documented_paths():
    sources = [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md")) + [REPO / "docs" / "conf.py"]
    sources += sorted((REPO / "examples").rglob("*.py")) + sorted((REPO / "benchmarks").glob("*.py"))
    paths = set()
    for source in sources:
        if "_build" not in source.parts:
            paths.update(re.findall(r"\binputpipe(?:\.[A-Za-z_]\w*)+", source.read_text(encoding="utf-8")))
    return sorted(paths)


def _resolve(path):
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(path)


def test_every_documented_inputpipe_path_imports():
    paths = _documented_paths()
    assert "inputpipe.dataflow.seeding" in paths and "inputpipe.input_source" in paths
    failed = []
    for path in paths:
        try:
            _resolve(path)
        except (ImportError, AttributeError) as err:
            failed.append("{}: {}".format(path, err))
    assert failed == []


@pytest.mark.parametrize("module", sorted(PUBLIC_NAMES))
def test_public_module_paths_keep_their_names(module):
    imported = importlib.import_module(module)
    missing = [name for name in PUBLIC_NAMES[module] if getattr(imported, name, None) is None]
    assert missing == []


def test_moved_names_are_the_same_objects_at_every_path():
    from inputpipe.dataflow import image, imgaug, parallel_map, shared_array_map
    from inputpipe.dataflow.imgaug import base, transform

    assert image.check_dtype is base.check_dtype
    assert image.AugmentorList is imgaug.AugmentorList
    assert transform.TransformAugmentorBase is imgaug.ImageAugmentor
    assert shared_array_map.MultiProcessMapDataComponentSharedArray is \
        parallel_map.MultiProcessMapDataComponentSharedArray
