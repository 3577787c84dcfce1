"""inputpipe for ``tf.estimator`` users: :class:`EstimatorInput` builds the ``input_fn`` (and the
hooks to pass with it) over a DataFlow or an InputSource; see ``docs/estimator.md``.

Example::

    from inputpipe.estimator import EstimatorInput
    train = EstimatorInput(df, specs, labels="label")
    estimator.train(train.input_fn, hooks=train.hooks, max_steps=1000)
"""
from .input_source.estimator import EstimatorInput

__all__ = ["EstimatorInput"]
