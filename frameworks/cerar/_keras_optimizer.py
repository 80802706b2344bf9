"""Keras 3 optimizers that reduce their gradients across ranks before applying them, for every
Keras backend. Keras's train step calls `optimizer.apply(grads, trainable_variables)` on all
three backends (TensorFlow inside its tf.function, JAX inside its jitted step through
stateless_apply, torch eagerly), so overriding `apply` puts the reduction in the compiled step
wherever Keras compiles it. The class is a subclass of the optimizer's own, so isinstance
checks, the config and its slots stay the same; `reducer.reduce(grads, variables)` is the
backend layer's (cerar.tensorflow's GradientReducer, cerar.keras's JAX and torch reducers)."""
from cerar._cerar import InvalidArgumentError


class _Reducing:
    """Mixed in before the optimizer's class."""

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = (list(trainable_variables) if trainable_variables is not None
                     else [None] * len(grads))
        return super().apply(self._cerar_reducer.reduce(grads, variables), trainable_variables)


def _reducing_class(optimizer):
    base = optimizer.__class__
    if isinstance(optimizer, _Reducing):  # wrapped twice: reduce once
        base = next(c for c in base.__mro__[1:] if not issubclass(c, _Reducing))
    # The original module: Keras saves the optimizer under the class it knows.
    return type(base.__name__, (_Reducing, base), {"__module__": base.__module__,
                                                   "__qualname__": base.__qualname__})


def check_keras_optimizer(optimizer, who):
    if not hasattr(optimizer, "apply") or not hasattr(optimizer, "get_config"):
        raise InvalidArgumentError(f"{who} wraps Keras 3 optimizers, not "
                                   f"{type(optimizer).__name__}")


def wrap(optimizer, reducer, who, name=None, accumulation_steps=1):
    """A copy of `optimizer` (from its config) whose apply() reduces first. accumulation_steps
    > 1 becomes Keras's gradient_accumulation_steps: the optimizer then updates every that many
    steps with the mean of their (reduced) gradients."""
    check_keras_optimizer(optimizer, who)
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    if accumulation_steps != 1:
        if int(accumulation_steps) < 1 or config.get("gradient_accumulation_steps"):
            raise InvalidArgumentError(
                f"{who}: backward_passes_per_step={accumulation_steps} needs an integer >= 1 "
                "and an optimizer without gradient_accumulation_steps of its own")
        config["gradient_accumulation_steps"] = int(accumulation_steps)
    wrapped = _reducing_class(optimizer).from_config(config)
    wrapped._cerar_reducer = reducer
    return wrapped


def wrap_in_place(optimizer, reducer, who):
    """`optimizer` itself (its variables, e.g. as loaded from a file) reducing from now on."""
    check_keras_optimizer(optimizer, who)
    optimizer.__class__ = _reducing_class(optimizer)
    optimizer._cerar_reducer = reducer
    return optimizer
