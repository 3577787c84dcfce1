"""Machinery of the parallel flows (private): the workers and the scheduling behind
:mod:`inputpipe.dataflow.parallel`, :mod:`inputpipe.dataflow.parallel_map` and
:mod:`inputpipe.dataflow.ray` (the map scheduler and its saved position, the thread runner, and
what stages with a variable worker count share)."""
