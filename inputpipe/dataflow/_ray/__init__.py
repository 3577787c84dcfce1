"""Machinery of the Ray flows of :mod:`inputpipe.dataflow.ray` (private, the ``ray`` extra): the
local Ray instance, the connection, the actors and their answers."""
