"""DistributedOptimizer for Keras 3 optimizers: the same optimizer (its class, its config) whose
apply() -- which apply_gradients() and model.fit() call -- first reduces the gradients across
ranks, as Horovod's keras wrapper does by overriding the gradient step (cerar/_keras_optimizer.py,
shared with cerar.keras). A tf.compat.v1.train optimizer (TF1 graphs) is wrapped as Horovod's
TF1 wrapper does, reducing in compute_gradients() (sessions.py)."""
from cerar import Average
from cerar._cerar import InvalidArgumentError
from cerar._keras_optimizer import check_keras_optimizer, wrap
from cerar._process_sets import global_process_set
from cerar.tensorflow.compression import Compression
from cerar.tensorflow.gradient_tape import GradientReducer
from cerar.tensorflow.sessions import distributed_v1_optimizer, is_v1_optimizer


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """A copy of the Keras 3 `optimizer` (from its config) that reduces gradients before
    applying them. Not supported here: backward_passes_per_step > 1 (accumulate with the
    optimizer's own gradient_accumulation_steps instead)."""
    reducer = GradientReducer(compression, sparse_as_dense, op, gradient_predivide_factor,
                              num_groups, groups, process_set, scale_local_gradients)
    if is_v1_optimizer(optimizer):
        return distributed_v1_optimizer(optimizer, reducer, name, use_locking,
                                        backward_passes_per_step)
    check_keras_optimizer(optimizer, "cerar.tensorflow.DistributedOptimizer")
    if backward_passes_per_step != 1:
        raise InvalidArgumentError("cerar.tensorflow.DistributedOptimizer: "
                                   "backward_passes_per_step > 1 is not supported; use the "
                                   "optimizer's gradient_accumulation_steps")
    return wrap(optimizer, reducer, "cerar.tensorflow.DistributedOptimizer", name=name)
