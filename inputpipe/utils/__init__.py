"""Shared utilities: the wire format, logging, stoppable threads, process supervision.

tensorpack's ``utils`` package names are here too: what ``tensorpack.utils`` exported
(``get_rng``, ``fix_rng_seed``, ``get_tqdm``, ``execute_only_once``, ``change_env``,
``humanize_time_delta``, and the ``logger`` module), and its submodules that data code imports at
their paths: ``utils.argtools``, ``utils.timer``, ``utils.fs``, ``utils.stats``, ``utils.develop``,
``utils.concurrency``, ``utils.serialize``, ``utils.logger`` (see docs/migrating.md).
"""
from .utils import change_env, execute_only_once, fix_rng_seed, get_rng, get_tqdm, humanize_time_delta  # noqa: F401
