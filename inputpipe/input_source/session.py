"""Run InputSource hooks around a plain ``tf.compat.v1.Session`` (no MonitoredSession needed).

:func:`hooked_session` is the two-line way to use any InputSource without a trainer::

    with tf.compat.v1.Session(graph=g) as sess, hooked_session(sess, source) as run:
        for _ in range(100):
            run(train_op)

``run`` behaves like ``sess.run`` but calls the hooks (start the feeding thread, prefill the
staging area, feed, record statistics). Leaving the block stops and closes the sources (also on
an exception); a background failure of a source is raised as :class:`InputSourceError`.
"""
from typing import Any, List, Optional, Union

import tensorflow as tf

from ..utils.compat import Literal
from ..utils.logger import get_logger
from .errors import cleanup_after

__all__ = ["HookedSession", "hooked_session"]

logger = get_logger(__name__)
_STOP_GRACE_SECONDS = 2.0


class HookedSession:
    """A callable wrapping ``session.run`` with ``SessionRunHook``\\ s (begin,
    after_create_session, before_run/after_run, end), like ``MonitoredSession`` does, but on a
    session you created and keep owning. Use it as a context manager.

    Example::

        with HookedSession(sess, source.get_hooks(), sources=[source]) as run:
            loss = run(loss_tensor)
    """

    def __init__(self, session: tf.compat.v1.Session, hooks: List[tf.compat.v1.train.SessionRunHook],
                 sources: Optional[List[Any]] = None):
        self.session = session
        self.hooks = list(hooks)
        self.sources = list(sources or [])
        self.coord = tf.train.Coordinator()
        self._entered = False

    def __enter__(self) -> "HookedSession":
        with self.session.graph.as_default():
            for hook in self.hooks:
                hook.begin()
        self._entered = True
        try:
            for hook in self.hooks:
                hook.after_create_session(self.session, self.coord)
        except BaseException as err:
            cleanup_after(err, "HookedSession", lambda: self._shutdown(failed=True))
            raise
        return self

    def __call__(self, fetches: Any, feed_dict: Optional[dict] = None, options=None, run_metadata=None) -> Any:
        return self.run(fetches, feed_dict=feed_dict, options=options, run_metadata=run_metadata)

    def run(self, fetches: Any, feed_dict: Optional[dict] = None, options=None, run_metadata=None) -> Any:
        """``session.run`` with the hooks' extra fetches, feeds and options added."""
        if not self._entered:
            raise RuntimeError("use HookedSession as a context manager: `with hooked_session(...) as run:`")
        original = tf.compat.v1.train.SessionRunArgs(fetches, feed_dict, options)
        context = tf.compat.v1.train.SessionRunContext(original, self.session)
        hook_fetches, feeds = {}, dict(feed_dict or {})     # hook index -> its fetches
        hook_options = []
        for index, hook in enumerate(self.hooks):
            args = hook.before_run(context)
            if args is None:
                continue
            if args.fetches is not None:
                hook_fetches[index] = args.fetches
            if args.feed_dict:
                overlap = set(args.feed_dict) & set(feeds)
                if overlap:
                    raise RuntimeError("a hook feeds tensors that are already fed: {}".format(overlap))
                feeds.update(args.feed_dict)
            if args.options is not None:
                hook_options.append(args.options)
        run_options = options
        if hook_options:                 # merged into a copy: the caller's options stay as they are
            run_options = tf.compat.v1.RunOptions()
            for extra in ([options] if options is not None else []) + hook_options:
                run_options.MergeFrom(extra)
        try:
            results = self.session.run([fetches] + list(hook_fetches.values()), feed_dict=feeds or None,
                                       options=run_options, run_metadata=run_metadata)
        except tf.errors.OpError:
            self._raise_source_failure()
            raise
        hook_results = dict(zip(hook_fetches, results[1:]))
        if run_options is None:
            run_options = tf.compat.v1.RunOptions()
        for index, hook in enumerate(self.hooks):
            hook.after_run(context, tf.compat.v1.train.SessionRunValues(hook_results.get(index), run_options,
                                                                        run_metadata))
        return results[0]

    def _raise_source_failure(self) -> None:
        for source in self.sources:
            source.raise_if_failed()

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        self._shutdown(failed=exc_type is not None)
        return False

    def _shutdown(self, failed: bool) -> None:
        if not self._entered:
            return
        self._entered = False
        self.coord.request_stop()
        try:
            if not failed:
                for hook in self.hooks:
                    hook.end(self.session)
        finally:
            for source in self.sources:
                source.close()
            try:
                self.coord.join(stop_grace_period_secs=_STOP_GRACE_SECONDS, ignore_live_threads=True)
            except Exception:  # a thread's reported error was already raised in the training thread
                logger.debug("coordinator reported an error at shutdown", exc_info=True)


def _is_input_source(item: Any) -> bool:
    """An InputSource, recognised by its interface: this module is below ``base`` (which uses it)."""
    return callable(getattr(item, "get_hooks", None)) and callable(getattr(item, "raise_if_failed", None))


def hooked_session(session: tf.compat.v1.Session, *sources: Union[Any, tf.compat.v1.train.SessionRunHook]) -> HookedSession:
    """A :class:`HookedSession` running ``session`` with the hooks of ``sources`` (InputSources
    or extra ``SessionRunHook``\\ s); leaving it closes the sources.

    Example::

        with tf.compat.v1.Session(graph=g) as sess, hooked_session(sess, source) as run:
            run(train_op)
    """
    hooks, owned = [], []
    for item in sources:
        if _is_input_source(item):
            hooks.extend(item.get_hooks())
            owned.append(item)
        elif isinstance(item, tf.compat.v1.train.SessionRunHook):
            hooks.append(item)
        else:
            raise TypeError("hooked_session() takes InputSources and SessionRunHooks, got {!r}".format(item))
    return HookedSession(session, hooks, sources=owned)
