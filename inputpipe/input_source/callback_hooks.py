"""What an InputSource written for tensorpack returns from ``_get_callbacks()``, as SessionRunHooks.

tensorpack runs an InputSource's callbacks in its trainer; inputpipe runs every source through
``SessionRunHook``\\ s, in any TF1 loop. :func:`callbacks_as_hooks` takes the list a subclass's
``_get_callbacks()`` returned and gives the hooks that do the same:

- a ``tf.compat.v1.train.SessionRunHook`` is used as it is;
- tensorpack's ``HookToCallback`` (a callback that only wraps a hook) gives its hook;
- a ``CallbackFactory`` (the lambdas ``setup_graph``, ``before_train``, ``after_train``, each
  taking the callback) runs them in ``begin``, ``after_create_session`` and ``end``;
- any other tensorpack ``Callback`` (an object with ``setup_graph``, ``before_train``,
  ``before_run``, ``after_run`` and ``after_train``) runs them in the matching hook methods.
  tensorpack's own rule for an InputSource's callbacks holds: they have no trainer
  (``setup_graph(None)``) and their ``trigger*`` and ``*_epoch`` methods are not called.

``before_train``, ``before_run``, ``after_run`` and ``after_train`` run with the session as the
default session, as in tensorpack's trainer. Anything else, and a ``CallbackFactory`` with a
``trigger``, is an :class:`~inputpipe.input_source.errors.InputSourceError` saying to return a
SessionRunHook.

Example::

    hooks = callbacks_as_hooks("MyInput", my_input._get_callbacks())
"""
import contextlib
from typing import Any, Callable, List, Optional

import tensorflow as tf

from .errors import InputSourceError

__all__ = ["callbacks_as_hooks", "CallbackHook"]

_HOOK: Any = tf.compat.v1.train.SessionRunHook
_MISSING = object()
_CALLBACK_METHODS = ("setup_graph", "before_train", "before_run", "after_run", "after_train")
_FACTORY_FIELDS = ("_cb_setup_graph", "_cb_before_train", "_cb_trigger", "_cb_after_train")


def _default_session(session: Optional[tf.compat.v1.Session]) -> Any:
    """``session`` as the default session (nothing when there is none, or it was closed)."""
    if session is None or getattr(session, "_closed", False):
        return contextlib.nullcontext()
    return session.as_default()


class CallbackHook(tf.compat.v1.train.SessionRunHook):
    """Runs one tensorpack callback as a ``SessionRunHook`` (see the module docstring).
    ``finish()`` runs its ``after_train`` once per session, from ``end`` or, when the session
    ended without calling ``end`` (an exception), from the source's ``close()``.

    Example::

        hook = CallbackHook(callback, "MyInput")
    """

    def __init__(self, callback: Any, owner: str):
        self.callback = callback
        self.owner = owner
        self._session: Optional[tf.compat.v1.Session] = None
        self._running = False

    # the callback's parts; a CallbackFactory's are its lambdas, which take the callback
    def _call(self, part: str, *args: Any) -> Any:
        factory_part: Any = getattr(self.callback, "_cb_" + part, _MISSING)
        if factory_part is not _MISSING:           # a CallbackFactory
            return factory_part(self.callback) if factory_part is not None else None
        method: Optional[Callable[..., Any]] = getattr(self.callback, part, None)
        return method(*args) if method is not None else None

    def begin(self) -> None:
        self._call("setup_graph", None)

    def after_create_session(self, session, coord) -> None:
        self._session, self._running = session, True
        with _default_session(session):
            self._call("before_train")

    def before_run(self, run_context):
        with _default_session(run_context.session):
            wanted = self._call("before_run", run_context)
        if wanted is None or isinstance(wanted, tf.compat.v1.train.SessionRunArgs):
            return wanted
        return tf.compat.v1.train.SessionRunArgs(fetches=wanted)     # a list of fetches, as tensorpack allows

    def after_run(self, run_context, run_values) -> None:
        with _default_session(run_context.session):
            self._call("after_run", run_context, run_values)

    def end(self, session) -> None:
        self.finish()

    def finish(self) -> None:
        """Run ``after_train`` if this session started the callback and did not end it yet."""
        if not self._running:
            return
        self._running = False
        session, self._session = self._session, None
        with _default_session(session):
            self._call("after_train")


def _describe(item: Any) -> str:
    text = repr(item)
    if len(text) > 80:
        text = text[:77] + "..."
    kind = type(item).__name__
    return "{} ({} {})".format(text, "an" if kind[:1].lower() in "aeiou" else "a", kind)


def callbacks_as_hooks(owner: str, callbacks: Any) -> List[tf.compat.v1.train.SessionRunHook]:
    """The hooks that run ``callbacks`` (what ``owner``'s ``_get_callbacks()`` returned).

    Example::

        hooks = callbacks_as_hooks("MyInput", [StartThreadHook(thread)])
    """
    if not isinstance(callbacks, (list, tuple)):
        raise InputSourceError("{}._get_callbacks() must return a list of tf.compat.v1.train.SessionRunHook objects, "
                               "got {}".format(owner, _describe(callbacks)))
    hooks: List[tf.compat.v1.train.SessionRunHook] = []
    for item in callbacks:
        wrapped = getattr(item, "_hook", None)
        if isinstance(item, _HOOK):
            hooks.append(item)
        elif type(item).__name__ == "HookToCallback" and isinstance(wrapped, _HOOK):
            hooks.append(wrapped)
        elif all(hasattr(item, field) for field in _FACTORY_FIELDS):
            if item._cb_trigger is not None:
                raise InputSourceError(
                    "{}._get_callbacks() returned a CallbackFactory with trigger=: an InputSource's callbacks cannot "
                    "use trigger() (tensorpack's rule too), and inputpipe has no epochs to trigger it; do that work "
                    "in a tf.compat.v1.train.SessionRunHook (e.g. its after_run)".format(owner))
            hooks.append(CallbackHook(item, owner))
        elif all(callable(getattr(item, name, None)) for name in _CALLBACK_METHODS):
            hooks.append(CallbackHook(item, owner))
        else:
            raise InputSourceError(
                "{}._get_callbacks() returned {}, which inputpipe cannot run: an InputSource's extra work runs in "
                "tf.compat.v1.train.SessionRunHook objects here (begin, after_create_session, before_run, "
                "after_run, end); return those from _get_callbacks(), or tensorpack Callbacks that use only "
                "setup_graph, before_train, before_run, after_run and after_train".format(owner, _describe(item)))
    return hooks
