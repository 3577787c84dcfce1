"""Device placement: built under a GPU device scope, every source requests the GPU only for ops
that have a GPU kernel; everything else goes to the CPU of the same job/replica/task."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

from inputpipe.input_source import (
    BatchQueueInput, DummyConstantInput, FeedInput, PlaceholderInput, QueueInput, StagingInput, TensorInput,
    TFDatasetInput, ZMQInput, remap_input_source,
)

from input_source_helpers import BATCH_SPECS, SPECS, Counting

# Op types the library may place on the caller's GPU, all of which have GPU kernels in TF's GPU
# builds. This CPU build registers no GPU kernel, so TF cannot be asked (see _has_gpu_kernel).
GPU_CAPABLE = frozenset([
    "Stage", "Unstage", "StageSize",     # StagingInput's area ops (data_flow_ops, GPU kernels)
    "NoOp",                              # control-dependency groups
    "Identity",                          # reads of variables (TensorInput)
    "Placeholder",                       # fed: replaced by the fed value, kernel on every device
    "Const",                             # DummyConstantInput / the user's constants
])


def _has_gpu_kernel(op_type):
    registered = {k.device_type for k in kernels.get_registered_kernels_for_op(op_type).kernel}
    if any(d in ("GPU", "DEFAULT") for d in registered):    # DEFAULT: every device type (IdentityN)
        return True
    return op_type in GPU_CAPABLE


def test_this_build_has_no_gpu_kernels_so_the_list_is_hard_coded():
    assert not any(k.device_type == "GPU" for k in kernels.get_registered_kernels_for_op("Stage").kernel)
    assert any(k.device_type == "CPU" for k in kernels.get_registered_kernels_for_op("QueueDequeueV2").kernel)


SOURCES = {
    "PlaceholderInput": (lambda: PlaceholderInput(), SPECS),
    "FeedInput": (lambda: FeedInput(Counting(3)), SPECS),
    "QueueInput": (lambda: QueueInput(Counting(3)), SPECS),
    "BatchQueueInput": (lambda: BatchQueueInput(Counting(3), 2), BATCH_SPECS),
    "StagingInput(QueueInput)": (lambda: StagingInput(QueueInput(Counting(3)), nr_stage=2), SPECS),
    "StagingInput(FeedInput)": (lambda: StagingInput(FeedInput(Counting(3))), SPECS),
    "TFDatasetInput": (lambda: TFDatasetInput(Counting(3)), SPECS),
    "StagingInput(TFDatasetInput)": (lambda: StagingInput(TFDatasetInput(Counting(3))), SPECS),
    "TensorInput": (lambda: TensorInput(lambda: [tf.zeros([3]), tf.constant(1)]), SPECS),
    "DummyConstantInput": (lambda: DummyConstantInput([[3], []]), SPECS),
    "ZMQInput": (lambda: ZMQInput("tcp://127.0.0.1:*", hwm=2), SPECS),
    "remap_input_source": (lambda: remap_input_source(QueueInput(Counting(3)), ["x", "label"]),
                           SPECS + [tf.TensorSpec([], tf.float32, "score")]),
}
SCOPES = {"gpu": "/gpu:0", "worker": "/job:worker/replica:0/task:1/device:GPU:0"}


@pytest.mark.parametrize("scope", sorted(SCOPES))
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_only_ops_with_gpu_kernels_are_requested_on_the_gpu(name, scope):
    make, specs = SOURCES[name]
    graph = tf.Graph()
    with graph.as_default(), tf.device(SCOPES[scope]):
        source = make()
        source.setup(specs)
        source.get_input_tensors()
        if isinstance(source, (StagingInput,)):
            source.get_input_tensors()          # a second tower
    ops = graph.get_operations()
    assert ops
    on_gpu = sorted({op.type for op in ops if tf.DeviceSpec.from_string(op.device).device_type == "GPU"})
    assert [t for t in on_gpu if not _has_gpu_kernel(t)] == [], on_gpu
    for op in ops:
        spec = tf.DeviceSpec.from_string(op.device)
        assert spec.device_type in ("GPU", "CPU"), (op.name, op.type, op.device)
        if scope == "worker":                   # the caller's job/replica/task are kept
            assert (spec.job, spec.replica, spec.task) == ("worker", 0, 1), (op.name, op.device)
    host_only = {"QueueDequeueV2", "QueueDequeueManyV2", "QueueEnqueueV2", "Timestamp", "IteratorGetNext",
                 "IteratorV2", "PyFunc", "EagerPyFunc", "FIFOQueueV2"}
    assert not [op.name for op in ops if op.type in host_only
                and tf.DeviceSpec.from_string(op.device).device_type != "CPU"]
    if name.startswith("StagingInput"):
        assert "Stage" in on_gpu and "Unstage" in on_gpu
    if isinstance(source, ZMQInput):
        source.close()


@pytest.mark.parametrize("scope", sorted(SCOPES))
@pytest.mark.parametrize("kind", ["QueueInput", "BatchQueueInput", "FeedInput"])
def test_the_input_position_ops_of_a_resumable_source_stay_on_the_cpu(kind, scope):
    """A resumable DataFlow makes the source record and save its input position; those ops (the
    record variable, the step's scatter_max, the checkpoint's encode/receive numpy_functions) have
    no GPU kernel and must be on the CPU of the caller's job/replica/task, also inside
    StagingInput(device=<GPU>) and a Saver built under the GPU scope."""
    from inputpipe.dataflow import BatchData, DataFromList
    points = [[np.array([i, i + 0.5, -i], np.float32), i] for i in range(6)]
    make = {"QueueInput": lambda: QueueInput(DataFromList(points, shuffle=False)),
            "BatchQueueInput": lambda: BatchQueueInput(DataFromList(points, shuffle=False), 2),
            "FeedInput": lambda: FeedInput(BatchData(DataFromList(points, shuffle=False), 1))}[kind]
    specs = BATCH_SPECS if kind != "QueueInput" else SPECS
    graph = tf.Graph()
    with graph.as_default(), tf.device(SCOPES[scope]):
        source = StagingInput(make(), nr_stage=2, device=SCOPES[scope])
        source.setup(specs)
        source.get_input_tensors()
        source.get_input_tensors()              # a second tower
        tf.compat.v1.train.Saver()              # the checkpoint's save and restore ops of the position
    assert source._input_position().enabled
    position_ops = [op for op in graph.get_operations() if "input_position" in op.name or "no_position" in op.name]
    types = {op.type for op in position_ops}
    assert {"VarHandleOp", "ResourceScatterMax", "PyFunc"} <= types, types
    for op in position_ops:
        spec = tf.DeviceSpec.from_string(op.device)
        assert spec.device_type == "CPU", (op.name, op.type, op.device)
        if scope == "worker":
            assert (spec.job, spec.replica, spec.task) == ("worker", 0, 1), (op.name, op.device)
    assert any(tf.DeviceSpec.from_string(op.device).device_type == "GPU" for op in graph.get_operations()
               if op.type == "Stage")        # the staging itself stays on the GPU
