"""Machinery of the doctor and the tuner (private): the timing probes of
:mod:`inputpipe.dataflow.profiling`, and the chain, model, measurements and code printing behind
:func:`inputpipe.dataflow.tuning.tune`."""
