"""tensorpack's ``utils.gpu`` at the same path: how many GPUs this process may use, and a context
that changes which ones (``CUDA_VISIBLE_DEVICES``). Input code sizes batches per GPU with it
(``batch_size = total // max(get_num_gpu(), 1)``).

Example::

    from inputpipe.utils.gpu import change_gpu, get_num_gpu
    per_gpu = 256 // max(get_num_gpu(), 1)
    with change_gpu(-1):            # no GPU inside
        ...
"""
import os
import re
import shutil
import sys
from typing import ContextManager, List, Optional, Union

from .concurrency import subproc_call
from .logger import get_logger
from .utils import change_env

__all__ = ["change_gpu", "get_nr_gpu", "get_num_gpu"]

logger = get_logger(__name__)

#: Seconds ``nvidia-smi -L`` may take.
NVIDIA_SMI_TIMEOUT = 5.0


def change_gpu(val: Union[int, str]) -> ContextManager[None]:
    """A context in which ``CUDA_VISIBLE_DEVICES`` is ``val`` (a GPU index, or a list such as
    ``"0,2"``); ``-1`` hides every GPU. The variable is put back on exit (the CUDA runtime reads it
    when it starts in the process: set it before TensorFlow touches a GPU).

    Example::

        with change_gpu(1):
            assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    """
    text = str(val).strip()
    return change_env("CUDA_VISIBLE_DEVICES", "" if text == "-1" else text)


def get_num_gpu() -> int:
    """The GPUs this process may use: the devices listed in ``CUDA_VISIBLE_DEVICES`` when it is
    set and not empty (up to the first invalid entry such as ``-1``, where CUDA stops), else the
    GPUs ``nvidia-smi -L`` lists, else those TensorFlow finds (imported for it, as tensorpack
    did). With a GPU count but a TensorFlow built without CUDA, a warning says TensorFlow cannot
    use them.

    Example::

        towers = max(get_num_gpu(), 1)
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return _checked(len(_visible_devices(visible)), "CUDA_VISIBLE_DEVICES={!r}".format(visible))
    listed = _nvidia_smi_gpus()
    if listed is not None:
        return _checked(listed, "nvidia-smi lists {} GPU(s)".format(listed))
    logger.info("get_num_gpu: no CUDA_VISIBLE_DEVICES and no nvidia-smi: asking TensorFlow")
    try:
        import tensorflow as tf
    except ImportError:
        return 0
    config = getattr(tf, "config", None)
    list_devices = getattr(config, "list_physical_devices", None) or \
        getattr(getattr(config, "experimental", None), "list_physical_devices", None)
    if list_devices is not None:
        return len(list_devices("GPU"))
    from tensorflow.python.client import device_lib       # (TF before 1.14)
    return sum(1 for device in device_lib.list_local_devices() if device.device_type == "GPU")


#: tensorpack's older name.
get_nr_gpu = get_num_gpu


def _visible_devices(value: str) -> List[str]:
    """The entries of a ``CUDA_VISIBLE_DEVICES`` value that CUDA takes: up to the first negative
    index (``"0,-1,1"`` -> ``["0"]``)."""
    devices = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry or re.fullmatch(r"-\d+", entry):
            break
        devices.append(entry)
    return devices


def _nvidia_smi_gpus() -> Optional[int]:
    """The GPUs ``nvidia-smi -L`` lists, or None without a working nvidia-smi."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return None
    output, code = subproc_call([program, "-L"], timeout=NVIDIA_SMI_TIMEOUT)
    if code != 0:
        return None
    return sum(1 for line in output.decode("utf-8", "replace").splitlines() if line.startswith("GPU "))


def _checked(count: int, source: str) -> int:
    tf = sys.modules.get("tensorflow")
    test = getattr(tf, "test", None)
    if count > 0 and test is not None and hasattr(test, "is_built_with_cuda") and not test.is_built_with_cuda():
        logger.warning("get_num_gpu: %s, but this TensorFlow was built without CUDA and cannot use GPUs", source)
    return count
