"""tensorpack 0.11's exported names (its ``__all__``, or ``dir()`` without modules and helpers for
packages) exist in inputpipe under the same module path, so migrating is changing the import, and
``from X import *`` gives them. The lists are copies of those names. The names tensorpack's modules
have outside ``__all__`` are checked by tests/test_tensorpack_module_names.py."""
import importlib

import pytest

TENSORPACK_0_11 = {
    "inputpipe.dataflow": [
        "AugmentImageComponent", "AugmentImageComponents", "AugmentImageCoordinates", "BatchData",
        "BatchDataByShape", "CacheData", "CaffeLMDB", "ConcatData", "DataFlow", "DataFlowTerminated",
        "DataFromGenerator", "DataFromIterable", "DataFromList", "DataFromQueue", "FakeData", "FixedSizeData",
        "HDF5Data", "HDF5Serializer", "ImageFromFile", "JoinData", "LMDBData", "LMDBDataDecoder", "LMDBSerializer",
        "LocallyShuffleData", "MapData", "MapDataComponent", "MultiProcessMapAndBatchData",
        "MultiProcessMapAndBatchDataZMQ", "MultiProcessMapData", "MultiProcessMapDataZMQ", "MultiProcessPrefetchData",
        "MultiProcessRunner", "MultiProcessRunnerZMQ", "MultiThreadMapData", "MultiThreadPrefetchData",
        "MultiThreadRunner", "NumpySerializer", "PrefetchData", "PrefetchDataZMQ", "PrintData", "ProxyDataFlow",
        "RNGDataFlow", "RandomChooseData", "RandomMixData", "RemoteDataZMQ", "RepeatedData", "RepeatedDataPoint",
        "SVMLightData", "SelectComponent", "TFRecordSerializer", "TestDataSpeed", "send_dataflow_zmq",
        "imgaug", "dataset",
    ],
    "inputpipe.dataflow.base": ["DataFlow", "DataFlowTerminated", "ProxyDataFlow", "RNGDataFlow"],
    "inputpipe.dataflow.common": [
        "BatchData", "BatchDataByShape", "CacheData", "ConcatData", "FixedSizeData", "JoinData",
        "LocallyShuffleData", "MapData", "MapDataComponent", "PrintData", "RandomChooseData", "RandomMixData",
        "RepeatedData", "RepeatedDataPoint", "SelectComponent", "TestDataSpeed",
    ],
    "inputpipe.dataflow.raw": ["DataFromGenerator", "DataFromIterable", "DataFromList", "DataFromQueue", "FakeData"],
    "inputpipe.dataflow.serialize": ["HDF5Serializer", "LMDBSerializer", "NumpySerializer", "TFRecordSerializer"],
    "inputpipe.dataflow.format": ["CaffeLMDB", "HDF5Data", "LMDBData", "LMDBDataDecoder", "SVMLightData"],
    "inputpipe.dataflow.remote": ["RemoteDataZMQ", "send_dataflow_zmq"],
    "inputpipe.dataflow.parallel": [
        "MultiProcessPrefetchData", "MultiProcessRunner", "MultiProcessRunnerZMQ", "MultiThreadPrefetchData",
        "MultiThreadRunner", "PrefetchData", "PrefetchDataZMQ",
    ],
    "inputpipe.dataflow.parallel_map": [
        "MultiProcessMapAndBatchData", "MultiProcessMapAndBatchDataZMQ", "MultiProcessMapData",
        "MultiProcessMapDataZMQ", "MultiThreadMapData",
    ],
    "inputpipe.dataflow.imgaug": [
        "Affine", "Albumentations", "Augmentor", "AugmentorList", "BackgroundFiller", "Brightness",
        "BrightnessScale", "CenterCrop", "CenterPaste", "Clip", "ColorSpace", "ConstantBackgroundFiller",
        "Contrast", "CropTransform", "Flip", "FlipTransform", "Gamma", "GaussianBlur", "GaussianNoise",
        "GoogleNetRandomCropAndResize", "Grayscale", "Hue", "IAAugmentor", "Identity", "ImageAugmentor",
        "JpegNoise", "Lighting", "MapImage", "MeanVarianceNormalize", "MinMaxNormalize", "PhotometricAugmentor",
        "RandomApplyAug", "RandomChooseAug", "RandomCrop", "RandomCropRandomShape", "RandomCutout",
        "RandomOrderAug", "RandomPaste", "RandomResize", "Resize", "ResizeShortestEdge", "ResizeTransform",
        "Rotation", "RotationAndCropValid", "SaltPepperNoise", "Saturation", "Shift", "ToFloat32", "ToUint8",
        "Transform", "TransformFactory", "TransformList", "Transpose",
    ],
    "inputpipe.dataflow.dataset": [
        "BSDS500", "Caltech101Silhouettes", "Cifar10", "Cifar100", "CifarBase", "FashionMnist", "ILSVRC12",
        "ILSVRC12Files", "ILSVRCMeta", "Mnist", "Places365Standard", "RNGDataFlow", "SVHNDigit", "TinyImageNet",
    ],
    "inputpipe.input_source": [
        "BatchQueueInput", "DummyConstantInput", "FeedInput", "FeedfreeInput", "InputSource", "PlaceholderInput",
        "QueueInput", "StagingInput", "TFDatasetInput", "TensorInput", "ZMQInput", "remap_input_source",
    ],
}

@pytest.mark.parametrize("module", list(TENSORPACK_0_11))
def test_every_tensorpack_name_exists(module):
    mod = importlib.import_module(module)
    missing = [name for name in TENSORPACK_0_11[module] if not hasattr(mod, name)]
    assert missing == [], "{} lacks tensorpack's {}".format(module, missing)


@pytest.mark.parametrize("module", ["inputpipe.dataflow.common", "inputpipe.dataflow.raw",
                                    "inputpipe.dataflow.serialize", "inputpipe.dataflow.format",
                                    "inputpipe.dataflow.remote"])
def test_star_import_of_a_submodule_gives_tensorpacks_names(module):
    namespace = {}
    exec("from {} import *".format(module), namespace)
    assert set(TENSORPACK_0_11[module]) <= set(namespace)


def test_the_names_are_the_same_objects_at_every_path():
    import inputpipe.dataflow as df
    for module in ("inputpipe.dataflow.common", "inputpipe.dataflow.raw", "inputpipe.dataflow.serialize",
                   "inputpipe.dataflow.format", "inputpipe.dataflow.remote"):
        mod = importlib.import_module(module)
        for name in TENSORPACK_0_11[module]:
            assert getattr(df, name) is getattr(mod, name), (module, name)
