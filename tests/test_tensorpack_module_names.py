"""Every public name of every tensorpack 0.11 data module exists in the matching inputpipe module
(``tensorpack.X`` -> ``inputpipe.X``), not only the names in its ``__all__``: real scripts import
names that tensorpack defines or imports outside ``__all__`` (``PlasmaGetData`` from
``dataflow.parallel``, ``get_rng`` from ``dataflow.base``, ``DATA_URL_CIFAR_10`` from
``dataflow.dataset.cifar``, ...).

The names come from tests/data/tensorpack_names/names.json (made by ``make.py`` there with
tensorpack 0.11 installed). The modules are every module of ``tensorpack.dataflow`` (with
``imgaug`` and ``dataset``), of ``tensorpack.input_source``, and the ``tensorpack.utils`` modules
that data code imports (``serialize``, ``argtools``, ``concurrency``, ``develop``, ``fs``, ``logger``,
``stats``, ``timer``, ``utils``, ``viz``, ``palette``).

Which names count:

- every name a module defines itself (kind ``own``) and every object of another tensorpack module
  that it imports (kind ``tensorpack``: e.g. ``get_tqdm`` of ``tensorpack.utils.utils`` in
  ``dataflow.common``, ``RNGDataFlow`` in each dataset module);
- module-level constants (numbers, strings, tuples: ``DATA_URL_CIFAR_10``, ``MAX_MSGPACK_LEN``,
  ``CAFFE_ILSVRC12_URL``, ``IMG_W``).

Not counted:

- imported modules (``np``, ``cv2``, ``six``, tensorpack's ``logger`` module, ...);
- objects from outside tensorpack (standard library or third party: ``Mapping``, ``colored``,
  ``StagingArea``, pickle's ``dumps``/``loads`` in ``dataflow.parallel``, ...), and ``plasma``
  (``None``: the module pyarrow no longer has);
- what the loops of tensorpack's package ``__init__`` files leave behind (``global_import``,
  ``STATICA_HACK``, ``srcpath``, ``module_name``, ``iter_modules``);
- tensorpack's own test modules (``imgaug_test``, ``serialize_test``).

Where tensorpack's name is another module's object, inputpipe's is the same object as in that
module too, and as the package's export (``inputpipe.dataflow``, ``.imgaug``, ``.dataset``,
``inputpipe.input_source``) when the package has the name. Names kept from ``tensorpack.utils``,
``tfutils`` and ``callbacks`` are importable but not in ``__all__``, as in tensorpack, so a star
import gives what tensorpack's gives.
"""
import importlib
import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "data", "tensorpack_names", "names.json")) as _f:
    TENSORPACK = json.load(_f)["modules"]

# (and ``func``: the loop of tensorpack's utils.logger that binds its logging functions)
PACKAGE_LOOP_ARTIFACTS = {"global_import", "STATICA_HACK", "srcpath", "module_name", "iter_modules", "func"}
CONSTANT_TYPES = {"int", "float", "str", "bytes", "tuple", "bool"}
PACKAGES = ("tensorpack.dataflow.imgaug", "tensorpack.dataflow.dataset", "tensorpack.dataflow",
            "tensorpack.input_source")
MODULES = sorted(name for name in TENSORPACK if not name.endswith("_test"))


def ours(tensorpack_name):
    return "inputpipe" + tensorpack_name[len("tensorpack"):]


def ours_to_tp(inputpipe_name):
    return "tensorpack" + inputpipe_name[len("inputpipe"):]


def counted(name, kind, origin, type_name):
    if name in PACKAGE_LOOP_ARTIFACTS:
        return False
    if kind in ("own", "tensorpack"):
        return True
    return kind == "foreign" and origin is None and type_name in CONSTANT_TYPES


def counted_names(module):
    return sorted(name for name, (kind, origin, type_name) in TENSORPACK[module]["names"].items()
                  if counted(name, kind, origin, type_name))


def package_of(module):
    """The inputpipe package whose export a module's names should be (None for utils.serialize)."""
    for package in PACKAGES:
        if module == package or module.startswith(package + "."):
            return ours(package)
    return None


def test_the_rule_counts_what_the_issue_names():
    assert "PlasmaGetData" in counted_names("tensorpack.dataflow.parallel")
    assert "DATA_URL_CIFAR_10" in counted_names("tensorpack.dataflow.dataset.cifar")
    assert "MAX_MSGPACK_LEN" in counted_names("tensorpack.utils.serialize")
    assert "CAFFE_ILSVRC12_URL" in counted_names("tensorpack.dataflow.dataset.ilsvrc")
    assert "get_rng" in counted_names("tensorpack.dataflow.base")
    for module, name in [("tensorpack.dataflow.common", "np"), ("tensorpack.dataflow.common", "Mapping"),
                         ("tensorpack.dataflow.parallel", "loads"), ("tensorpack.dataflow.parallel", "plasma"),
                         ("tensorpack.input_source.input_source", "StagingArea"),
                         ("tensorpack.dataflow", "STATICA_HACK"), ("tensorpack.dataflow.imgaug", "iter_modules")]:
        assert name in TENSORPACK[module]["names"] and name not in counted_names(module), (module, name)
    for module, name in [("tensorpack.utils.timer", "timed_operation"), ("tensorpack.utils.fs", "execute_only_once"),
                         ("tensorpack.utils.concurrency", "ShareSessionThread"),
                         ("tensorpack.utils.logger", "set_logger_dir")]:
        assert name in counted_names(module), (module, name)
    assert "func" in TENSORPACK["tensorpack.utils.logger"]["names"]
    assert "func" not in counted_names("tensorpack.utils.logger")
    assert sum(len(counted_names(m)) for m in MODULES) == 517


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_of_the_tensorpack_module_exists(module):
    mod = importlib.import_module(ours(module))
    missing = [name for name in counted_names(module) if not hasattr(mod, name)]
    assert missing == [], "{} lacks tensorpack's {}".format(ours(module), missing)


@pytest.mark.parametrize("module", MODULES)
def test_names_are_the_same_objects_as_the_package_export_and_their_origin(module):
    mod = importlib.import_module(ours(module))
    package = package_of(module)
    package_mod = importlib.import_module(package) if package else None
    different = []
    for name in counted_names(module):
        if not hasattr(mod, name):
            continue                                    # the test above reports it
        value = getattr(mod, name)
        kind, origin, _ = TENSORPACK[module]["names"][name]
        if package_mod is not None and name in TENSORPACK[ours_to_tp(package)]["names"]:
            if getattr(package_mod, name) is not value:
                different.append((name, package))
        if kind == "tensorpack" and name in TENSORPACK.get(origin, {}).get("names", {}):   # not an alias
            origin_mod = importlib.import_module(ours(origin))
            if getattr(origin_mod, name, None) is not value:
                different.append((name, ours(origin)))
    assert different == []


def test_a_helper_imported_in_several_modules_is_one_object():
    by_origin = {}
    for module in MODULES:
        mod = importlib.import_module(ours(module))
        for name in counted_names(module):
            kind, origin, _ = TENSORPACK[module]["names"][name]
            if kind == "tensorpack" and hasattr(mod, name):
                by_origin.setdefault((origin, name), {})[ours(module)] = getattr(mod, name)
    split = {key: sorted(where) for key, where in by_origin.items()
             if len({id(value) for value in where.values()}) > 1}
    assert split == {}


@pytest.mark.parametrize("module", MODULES)
def test_helpers_from_outside_the_data_modules_stay_out_of_star_imports(module):
    """tensorpack.utils/tfutils/callbacks helpers and names outside tensorpack's ``__all__`` that
    inputpipe adds for it are importable, but ``from X import *`` does not give them."""
    mod = importlib.import_module(ours(module))
    exported = set(getattr(mod, "__all__", ()))
    tensorpack_all = set(TENSORPACK[module]["all"])
    leaked = []
    for name in counted_names(module):
        kind, origin, _ = TENSORPACK[module]["names"][name]
        helper = kind == "tensorpack" and origin.startswith(("tensorpack.utils.", "tensorpack.tfutils.",
                                                              "tensorpack.callbacks."))
        if helper and name in exported and name not in tensorpack_all:
            leaked.append(name)
    assert leaked == []
