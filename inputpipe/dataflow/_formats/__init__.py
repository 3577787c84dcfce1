"""Machinery of the dataset files (private): the format tag of inputpipe's files, LMDB files
checked against their header, and the reading of LMDB files behind
:mod:`inputpipe.dataflow.serialize` and :mod:`inputpipe.dataflow.format`."""
