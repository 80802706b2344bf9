"""DistributedOptimizer for Keras 3 optimizers: the same optimizer (its class, its config) whose
apply() -- which apply_gradients() and model.fit() call -- first reduces the gradients across
ranks, as Horovod's keras wrapper does by overriding the gradient step. Built as a subclass of
the optimizer's own class, so isinstance checks, serialisation and its slots stay the same."""
from cerar import Average
from cerar._cerar import InvalidArgumentError
from cerar._process_sets import global_process_set
from cerar.tensorflow.compression import Compression
from cerar.tensorflow.gradient_tape import GradientReducer


class _Reducing:
    """Mixed in before the optimizer's class."""

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = (list(trainable_variables) if trainable_variables is not None
                     else [None] * len(grads))
        return super().apply(self._cerar_reducer.reduce(grads, variables), trainable_variables)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """A copy of the Keras 3 `optimizer` (from its config) that reduces gradients before
    applying them. Not supported here: backward_passes_per_step > 1 (accumulate with the
    optimizer's own gradient_accumulation_steps instead) and TF1/legacy optimizers."""
    if not hasattr(optimizer, "apply") or not hasattr(optimizer, "get_config"):
        raise InvalidArgumentError("cerar.tensorflow.DistributedOptimizer wraps Keras 3 "
                                   f"optimizers, not {type(optimizer).__name__}")
    if backward_passes_per_step != 1:
        raise InvalidArgumentError("cerar.tensorflow.DistributedOptimizer: "
                                   "backward_passes_per_step > 1 is not supported; use the "
                                   "optimizer's gradient_accumulation_steps")
    cls = type(optimizer.__class__.__name__, (_Reducing, optimizer.__class__), {})
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    wrapped = cls.from_config(config)
    wrapped._cerar_reducer = GradientReducer(compression, sparse_as_dense, op,
                                             gradient_predivide_factor, num_groups, groups,
                                             process_set, scale_local_gradients)
    return wrapped
