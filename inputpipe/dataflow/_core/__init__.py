"""Machinery of the DataFlow core (private): the checking of resumable states, the helpers the
flows share (lengths, closing, epoch positions) and the buffering flows that
:mod:`inputpipe.dataflow.common` shows (``LocallyShuffleData``, ``CacheData``)."""
