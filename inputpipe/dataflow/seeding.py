"""Random seeds for DataFlows: different in every process by default, reproducible on request.

By default every ``RNGDataFlow.reset_state()`` draws fresh OS entropy, so copies of a flow in
different worker processes never repeat each other's randomness. To make a whole pipeline
reproducible, set one global seed before calling ``reset_state()`` (or export
``INPUTPIPE_SEED``): every RNG is then derived from (seed, worker rank, order of
``reset_state()`` calls in that process), and parallel runners give each worker its rank.

The implementation is :mod:`inputpipe.utils.seeding` (below the DataFlow layer, so worker
supervision can use it); this module is its public face.

Inside a parallel map's call, :func:`datapoint_rng` (and every image augmentor) draws from the
datapoint's own seed, so the result does not depend on which worker mapped it.

Example::

    from inputpipe.dataflow import seeding
    seeding.set_global_seed(1234)
    df.reset_state()          # same datapoints on every run
"""
from ..utils.seeding import (augmentor_rng, datapoint_context, datapoint_rng, datapoint_seed, derive_seed,
                             enter_worker, get_global_seed, new_rng, set_global_seed, worker_rank)

__all__ = ["set_global_seed", "get_global_seed", "enter_worker", "worker_rank", "new_rng", "derive_seed",
           "datapoint_context", "datapoint_seed", "datapoint_rng", "augmentor_rng"]
