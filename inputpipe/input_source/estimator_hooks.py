"""The one hook an :class:`~inputpipe.input_source.estimator.EstimatorInput` asks to be passed: it
runs the hooks of the source built in the graph of each session, and tells the stream what the
session's steps consumed when it ends.

The hook is made once and asks its ``EstimatorInput`` (``find(graph)``) for what ``input_fn``
built in the graph of each session.

Example::

    hook = EstimatorInputHook(estimator_input.built_in, "EstimatorInput")
    estimator.train(input_fn, hooks=[hook])
"""
from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf

from ..utils.logger import get_logger
from .errors import InputSourceError

__all__ = ["EstimatorInputHook"]

logger = get_logger(__name__)


class EstimatorInputHook(tf.compat.v1.train.SessionRunHook):
    """Runs the hooks of the source its ``EstimatorInput`` built in the session's graph (none in a
    graph without one), as if each had been passed: their fetches and feeds go into the same run.

    Example::

        estimator.evaluate(evaluation.input_fn, hooks=evaluation.hooks)   # [EstimatorInputHook]
    """

    def __init__(self, find: Callable[[tf.Graph], Any], owner: str):
        self._find = find
        self._owner = owner

    def _built(self, graph: Optional[tf.Graph]) -> Any:
        return None if graph is None else self._find(graph)

    def begin(self) -> None:
        built = self._built(tf.compat.v1.get_default_graph())
        if built is None:
            return
        built.hooks = built.source.get_hooks()
        built.in_flight = False
        for hook in built.hooks:
            hook.begin()

    def after_create_session(self, session: Any, coord: Any) -> None:
        built = self._built(session.graph)
        if built is None:
            return
        session.run(built.mark_started)
        for hook in built.hooks:
            hook.after_create_session(session, coord)

    def before_run(self, run_context: Any) -> Any:
        built = self._built(run_context.session.graph)
        if built is None:
            return None
        fetches: List[Any] = []
        feeds: Dict[Any, Any] = {}
        options = None
        built.fetched = []
        for hook in built.hooks:
            args = hook.before_run(run_context)
            built.fetched.append(args is not None)
            if args is None:
                continue
            fetches.append(args.fetches if args.fetches is not None else [])
            for key, value in (args.feed_dict or {}).items():
                if key in feeds:
                    raise RuntimeError("{}: two of its source's hooks feed {}".format(self._owner, key))
                feeds[key] = value
            if args.options is not None:
                if options is None:
                    options = tf.compat.v1.RunOptions()
                options.MergeFrom(args.options)
        if not fetches and not feeds and options is None:
            return None
        built.in_flight = True
        return tf.compat.v1.train.SessionRunArgs(fetches, feed_dict=feeds or None, options=options)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        built = self._built(run_context.session.graph)
        if built is None:
            return
        built.in_flight = False
        results = iter(run_values.results or [])
        for hook, fetched in zip(built.hooks, built.fetched or [False] * len(built.hooks)):
            values = tf.compat.v1.train.SessionRunValues(
                results=next(results) if fetched else None, options=run_values.options,
                run_metadata=run_values.run_metadata)
            hook.after_run(run_context, values)

    def end(self, session: Any) -> None:
        built = self._built(session.graph)
        if built is None:
            return
        consumed, state = self._consumed(built, session)
        try:
            _end_all(built.hooks, session)
        except InputSourceError as err:
            if built.stream is None or built.source.failure() is None or built.in_flight:
                raise        # the session's last step met the failure (its run ended with OutOfRangeError)
            # The data failed beyond what the steps consumed (no step met it): the stream keeps
            # the failure, and the step of a later call that reaches it raises it. Raising here
            # would skip the hooks after this one, among them the checkpoint Estimator saves at
            # the end of train().
            logger.info("%s: %s; the step that reaches it will raise it", self._owner, err)
        finally:
            if built.stream is not None:
                built.stream.session_ended(consumed, state)

    def _consumed(self, built: Any, session: Any) -> Any:
        """How many datapoints the session's steps consumed and the state after the last one."""
        position = built.source._input_position()
        if position is None or not position.records:
            return None, None
        try:
            count = position.consumed_count(session)
        except (tf.errors.OpError, RuntimeError) as err:
            logger.warning("%s: could not read what the session consumed (%s); the next session is handed "
                           "everything not known consumed", self._owner, err)
            return None, None
        return count, (position.state_at(count - 1) if count > 0 and position.enabled else None)


def _end_all(hooks: List[Any], session: Any) -> None:
    """``end()`` of every hook, the first error raised after all of them ran."""
    error: Optional[BaseException] = None
    for hook in hooks:
        try:
            hook.end(session)
        except BaseException as err:
            error = error or err
    if error is not None:
        raise error
