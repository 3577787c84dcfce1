"""Readers of standard on-disk datasets (tensorpack's ``dataflow.dataset``): each one a DataFlow
of ``[image, label]`` datapoints read from the dataset's own file format in a local directory,
downloading the standard files first where the dataset is downloadable.

Example::

    from inputpipe.dataflow import dataset
    ds = dataset.Mnist("train", dir="/data/mnist")
    ds.reset_state()
    image, label = next(iter(ds))
"""
from ..base import RNGDataFlow  # tensorpack's dataset package re-exports it; user readers subclass it from there
from .._formats.dataset_files import DatasetDownloadError, get_dataset_path
from .bsds500 import *  # noqa: F401,F403
from .caltech101 import *  # noqa: F401,F403
from .cifar import *  # noqa: F401,F403
from .ilsvrc import *  # noqa: F401,F403
from .mnist import *  # noqa: F401,F403
from .places import *  # noqa: F401,F403
from .svhn import *  # noqa: F401,F403
from . import bsds500, caltech101, cifar, ilsvrc, mnist, places, svhn

__all__ = ["DatasetDownloadError", "get_dataset_path", "RNGDataFlow"]
for _module in (bsds500, caltech101, cifar, ilsvrc, mnist, places, svhn):
    __all__ += _module.__all__
del _module
