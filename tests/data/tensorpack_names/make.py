"""Write names.json: every public name of tensorpack 0.11's data modules, for
tests/test_tensorpack_module_names.py.

Run with the Python that has tensorpack 0.11 (here /opt/tpvenv/bin/python), from this directory:

    /opt/tpvenv/bin/python make.py

For each module of ``tensorpack.dataflow`` (with ``imgaug`` and ``dataset``),
``tensorpack.input_source`` and the ``tensorpack.utils`` modules that data code imports
(``serialize``, ``argtools``, ``concurrency``, ``develop``, ``fs``, ``logger``, ``stats``, ``timer``,
``utils``, ``viz``, ``palette``), the file records its ``__all__``
and, for every module-level name without a leading underscore, ``[kind, origin, type]``:

- kind ``own``: defined in that module (its ``__module__`` is the module);
- ``tensorpack``: defined in another tensorpack module (``origin``) and imported here;
- ``foreign``: an object from the standard library or a third-party package, or a constant
  (no ``__module__``: numbers, strings, tuples, None);
- ``module``: an imported module.

``type`` is the name of the object's type. The test decides which names count.
"""
import importlib
import json
import os
import pkgutil
import types

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = ("tensorpack.dataflow", "tensorpack.input_source")
MODULES = ("tensorpack.utils.serialize", "tensorpack.utils.argtools", "tensorpack.utils.concurrency",
           "tensorpack.utils.develop", "tensorpack.utils.fs", "tensorpack.utils.logger", "tensorpack.utils.stats",
           "tensorpack.utils.timer", "tensorpack.utils.utils", "tensorpack.utils.viz", "tensorpack.utils.palette")


def module_names():
    names = []
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        names.append(package_name)
        names.extend(info.name for info in pkgutil.walk_packages(package.__path__, package_name + "."))
    return names + list(MODULES)


def describe(module_name, value):
    if isinstance(value, types.ModuleType):
        kind = "module"
    else:
        origin = getattr(value, "__module__", None)
        if origin == module_name:
            kind = "own"
        elif isinstance(origin, str) and origin.split(".")[0] == "tensorpack":
            kind = "tensorpack"
        else:
            kind = "foreign"
    origin = getattr(value, "__module__", None)
    return [kind, origin if isinstance(origin, str) else None, type(value).__name__]


def main():
    import tensorpack

    out = {"tensorpack_version": tensorpack.__version__, "modules": {}}
    for name in module_names():
        module = importlib.import_module(name)
        public = {key: describe(name, value) for key, value in vars(module).items() if not key.startswith("_")}
        out["modules"][name] = {"all": sorted(getattr(module, "__all__", [])), "names": public}
    with open(os.path.join(HERE, "names.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote names of {} modules".format(len(out["modules"])))


if __name__ == "__main__":
    main()
