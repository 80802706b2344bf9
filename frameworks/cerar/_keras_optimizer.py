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
        if trainable_variables is not None:
            variables = list(trainable_variables)
        else:  # stateless_apply (JAX): the variables the optimizer was built for, as Keras's
            variables = list(getattr(self, "_trainable_variables", None) or [])
            if len(variables) != len(grads):
                variables = [None] * len(grads)
        return super().apply(self._cerar_reducer.reduce(grads, variables), trainable_variables)


def divided(gradient, divisor):
    """gradient / divisor, for any backend's tensor; TensorFlow's IndexedSlices (an embedding's
    gradient) divide their values."""
    if hasattr(gradient, "indices") and hasattr(gradient, "dense_shape"):
        return type(gradient)(gradient.values / divisor, gradient.indices, gradient.dense_shape)
    return gradient / divisor


def local_weights(local_layers, layer_class, class_name):
    """The trainable weights of Horovod's `local_layers` argument (None, one layer or several
    of `layer_class`; anything else: ValueError naming `class_name`)."""
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, layer_class):
        local_layers = [local_layers]
    elif not all(isinstance(layer, layer_class) for layer in local_layers):
        raise ValueError(f"All local layers must be of {class_name} type.")
    return [weight for layer in local_layers for weight in layer.trainable_weights]


class LocalSources:
    """A reducer that leaves the gradients of `variables` to this rank (Horovod's
    PartialDistributedOptimizer): not reduced, divided by `divisor`; `inner` reduces the rest."""

    def __init__(self, inner, variables, divisor):
        self.inner, self.divisor = inner, divisor
        self.local = {id(v) for v in variables}

    def reduce(self, grads, variables):
        out = list(grads)
        shared = [i for i, v in enumerate(variables) if id(v) not in self.local]
        reduced = self.inner.reduce([grads[i] for i in shared], [variables[i] for i in shared])
        for i, g in zip(shared, reduced):
            out[i] = g
        for i, v in enumerate(variables):
            if id(v) in self.local and grads[i] is not None and self.divisor != 1:
                out[i] = divided(grads[i], self.divisor)
        return out


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
