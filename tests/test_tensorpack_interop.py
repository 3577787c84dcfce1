"""The registration with tensorpack's classes (inputpipe.tensorpack_interop), on every stack.

A stand-in ``tensorpack`` package (the module paths and ABCMeta base classes the registration
reads, nothing else) is written to a temporary folder and imported before or after inputpipe in a
fresh interpreter. The real tensorpack runs in tests/test_tensorpack_trainer.py (TF 2.15 stack).
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INPUT_SOURCES = ("InputSource", "FeedfreeInput", "PlaceholderInput", "FeedInput", "QueueInput", "BatchQueueInput",
                 "StagingInput", "TFDatasetInput", "TensorInput", "DummyConstantInput", "ZMQInput")
STAND_IN = {
    "__init__.py": "",
    "dataflow/__init__.py": "from .base import DataFlow",
    "dataflow/base.py": "from abc import ABCMeta\n"
                        "class DataFlow(metaclass=ABCMeta): pass\n"
                        "class RNGDataFlow(DataFlow): pass\n"
                        "class ProxyDataFlow(DataFlow): pass\n",
    "input_source/__init__.py": "from .input_source import *",
    "input_source/input_source_base.py": "from abc import ABCMeta\n"
                                         "class InputSource(metaclass=ABCMeta): pass\n"
                                         "class ProxyInputSource(InputSource): pass\n",
    "input_source/input_source.py": "from .input_source_base import InputSource\n" + "".join(
        "class {}(InputSource): pass\n".format(name) for name in INPUT_SOURCES[1:]),
    "callbacks/__init__.py": "",
    "callbacks/base.py": "from abc import ABCMeta\nclass Callback(metaclass=ABCMeta):\n    _chief_only = True\n",
    "train/__init__.py": "",
    "train/interface.py": "def apply_default_prefetch(input, trainer):\n    return ('tensorpack rule', input)\n",
}
TENSORPACK = ("import tensorpack.dataflow.base, tensorpack.input_source, tensorpack.callbacks.base, "
              "tensorpack.train.interface\nimport tensorpack as tp\n")
INPUTPIPE = "import inputpipe.dataflow as df, inputpipe.input_source as src\n"


@pytest.fixture
def stand_in(tmp_path):
    for path, code in STAND_IN.items():
        target = tmp_path / "tensorpack" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code, encoding="utf-8")
    return tmp_path


def run(folder, code):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join([str(folder), str(REPO)]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


CHECKS = """
import tensorflow as tf
flow = df.DataFromList([[1]], shuffle=False)
queue = src.QueueInput(flow)
print(isinstance(flow, tp.dataflow.base.DataFlow), isinstance(flow, tp.dataflow.base.RNGDataFlow),
      isinstance(df.MapData(flow, len), tp.dataflow.base.ProxyDataFlow))
print(*[isinstance(queue, getattr(tp.input_source.input_source, name))
        for name in ("InputSource", "FeedfreeInput", "QueueInput", "StagingInput", "FeedInput")])
with tf.Graph().as_default():
    callbacks = queue.setup([tf.TensorSpec([], tf.int32, "x")])
print(len(callbacks) == len(queue.get_hooks()), all(isinstance(c, tp.callbacks.base.Callback) for c in callbacks),
      all(isinstance(c, tf.compat.v1.train.SessionRunHook) for c in callbacks),
      [c.hook for c in callbacks] == queue.get_hooks(), callbacks == queue.get_callbacks())
class Towers: devices = [0, 1]
staged = tp.train.interface.apply_default_prefetch(queue, Towers())
print(type(staged).__name__, staged._input is queue, tp.train.interface.apply_default_prefetch(flow, Towers())[0])
queue.close()
"""


@pytest.mark.timeout(150)
@pytest.mark.parametrize("order", ["tensorpack first", "inputpipe first"])
def test_the_classes_are_tensorpacks_whichever_library_is_imported_first(stand_in, order):
    imports = TENSORPACK + INPUTPIPE if order == "tensorpack first" else INPUTPIPE + TENSORPACK
    lines = run(stand_in, imports + CHECKS).stdout.splitlines()
    assert lines == ["True True True", "True True True False False", "True True True True True",
                     "StagingInput True tensorpack rule"]


@pytest.mark.timeout(150)
def test_inputpipe_imports_no_tensorpack_and_its_hooks_stay_hooks_without_it(stand_in):
    code = INPUTPIPE + """
import sys
import tensorflow as tf
from inputpipe.tensorpack_interop import registered_pairs
queue = src.QueueInput(df.DataFromList([[1]], shuffle=False))
with tf.Graph().as_default():
    callbacks = queue.setup([tf.TensorSpec([], tf.int32, "x")])
print(sorted(m for m in sys.modules if m.split(".")[0] == "tensorpack"), registered_pairs(),
      callbacks == queue.get_hooks())
"""
    assert run(stand_in, code).stdout.split() == ["[]", "[]", "True"]


@pytest.mark.timeout(150)
def test_a_tensorpack_without_a_registered_name_warns_and_imports(stand_in):
    (stand_in / "tensorpack" / "input_source" / "input_source.py").write_text(
        "from .input_source_base import InputSource\n", encoding="utf-8")
    proc = run(stand_in, INPUTPIPE + TENSORPACK + "print(isinstance(df.DataFromList([]), tp.dataflow.base.DataFlow))")
    assert proc.stdout.split() == ["True"]
    assert ("inputpipe could not register its classes of inputpipe.input_source with tensorpack's "
            "tensorpack.input_source.input_source (AttributeError: ") in proc.stderr
