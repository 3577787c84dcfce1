"""Where the library's ops go: ops without a GPU kernel on the host of the caller's device.

A model is often built under ``with tf.device("/gpu:0"):`` (or a full spec such as
``/job:worker/task:1/device:GPU:0``), and ``get_input_tensors()`` is called inside that scope.
Queue ops, timestamps, ``tf.numpy_function``, ``tf.data`` iterators and string ops have no GPU
kernel, so a session without ``allow_soft_placement`` would refuse such a graph. The library
builds those ops inside :func:`on_host`, which keeps the job, replica and task of the current
scope and replaces only the device with the CPU (``/job:worker/task:1/device:CPU:0``). Only the
ops that belong on the accelerator (StagingInput's stage/unstage/size ops and what the model
computes) follow the caller's device.

Example::

    with tf.device("/job:worker/task:1/device:GPU:0"):
        with on_host():
            stamp = tf.timestamp()          # requested on /job:worker/task:1/device:CPU:0
"""
from typing import ContextManager

import tensorflow as tf

__all__ = ["on_host", "HOST_DEVICE"]

#: The device part every host-only op gets; merged with the job/replica/task of the outer scope.
HOST_DEVICE = "/device:CPU:0"


def on_host() -> ContextManager[None]:
    """A device scope putting new ops on the CPU of the current job/replica/task.

    Example::

        with on_host():
            queue = tf.queue.FIFOQueue(10, [tf.float32])
    """
    return tf.device(HOST_DEVICE)
