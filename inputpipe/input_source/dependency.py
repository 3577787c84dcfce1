"""Which input ops a ``session.run`` call would execute, from its fetches and feeds.

A step consumes a batch only if its fetches depend on the op that produces the batch (a dequeue,
an unstage, an iterator's get_next, a placeholder). Hooks use :class:`FetchDependencies` to add
per-step work (staging, statistics, feeding) only to the steps that consume, so that e.g.
``sess.run(global_step)`` does not eat a batch.

Example::

    deps = FetchDependencies(graph)
    if deps.depends_on(run_context.original_args, dequeue_op):
        ...
"""
from typing import Any, Dict, FrozenSet, Tuple

import tensorflow as tf

from ..utils.compat import tensor_ref

__all__ = ["FetchDependencies"]


def _fetch_ops(graph: tf.Graph, fetches: Any) -> FrozenSet[tf.Operation]:
    ops = set()
    for leaf in tf.nest.flatten(fetches, expand_composites=True):
        if leaf is None:
            continue
        if isinstance(leaf, (str, bytes)):
            leaf = graph.as_graph_element(leaf.decode() if isinstance(leaf, bytes) else leaf)
        if isinstance(leaf, tf.Operation):
            ops.add(leaf)
        elif hasattr(leaf, "op") and isinstance(leaf.op, tf.Operation):
            ops.add(leaf.op)
    return frozenset(ops)


def _feed_tensors(graph: tf.Graph, feed_dict: Any) -> FrozenSet[Any]:
    if not feed_dict:
        return frozenset()
    tensors = set()
    for key in feed_dict:
        for leaf in tf.nest.flatten(key, expand_composites=True):
            if isinstance(leaf, (str, bytes)):
                leaf = graph.as_graph_element(leaf.decode() if isinstance(leaf, bytes) else leaf)
            if isinstance(leaf, tf.Tensor):
                tensors.add(tensor_ref(leaf))
    return frozenset(tensors)


class FetchDependencies:
    """Cached answers to "does running these fetches with these feeds execute op X?".

    Example::

        deps = FetchDependencies(graph)
        deps.executed_ops(fetches, feed_dict)       # the set of ops the run would execute
    """

    def __init__(self, graph: tf.Graph):
        self.graph = graph
        self._cache: Dict[Tuple[FrozenSet, FrozenSet], FrozenSet[tf.Operation]] = {}

    def executed_ops(self, fetches: Any, feed_dict: Any = None) -> FrozenSet[tf.Operation]:
        key = (_fetch_ops(self.graph, fetches), _feed_tensors(self.graph, feed_dict))
        found = self._cache.get(key)
        if found is None:
            found = self._walk(*key)
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = found
        return found

    @staticmethod
    def _walk(roots: FrozenSet[tf.Operation], fed: FrozenSet[Any]) -> FrozenSet[tf.Operation]:
        seen = set(roots)
        stack = list(roots)
        while stack:
            op = stack.pop()
            for tensor in op.inputs:
                if tensor_ref(tensor) in fed:
                    continue
                if tensor.op not in seen:
                    seen.add(tensor.op)
                    stack.append(tensor.op)
            for dep in op.control_inputs:
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return frozenset(seen)

    def depends_on(self, run_args: Any, op: tf.Operation) -> bool:
        """True if ``run_args`` (a ``SessionRunArgs``) would execute ``op``."""
        return op in self.executed_ops(run_args.fetches, run_args.feed_dict)
