"""Readers of standard on-disk datasets (tensorpack's ``dataflow.dataset``), being written."""
