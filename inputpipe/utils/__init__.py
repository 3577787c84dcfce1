"""Shared utilities: the wire format, logging, stoppable threads, process supervision."""
