"""Horovod's Keras API on Keras 3, for each Keras backend (`import cerar.keras as hvd`, or
Horovod's spelling `import cerar.tensorflow.keras as hvd`, the same module):

    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size())),
                  loss="mse")
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

The backend is Keras's active one (keras.backend.backend()), whose cerar layer carries the
collectives: cerar.tensorflow (inside Keras's tf.function), cerar.jax (inside its jitted step)
or cerar.torch (docs/keras.md says what each costs).
"""
try:
    import keras
except ImportError as error:
    raise ImportError("cerar.keras needs Keras 3 (pip install keras) and its backend's framework "
                      f"(TensorFlow, JAX or torch), which do not import: {error}") from error
if int(keras.__version__.split(".")[0]) < 3:
    raise ImportError(f"cerar.keras needs Keras 3, found keras {keras.__version__}")

from cerar import (Adasum, Average, CerarError, CerarTimeoutError, InternalError,  # noqa: F401
                   InvalidArgumentError, Max, Min, MismatchError, PeerLostError, Product,
                   ShutDownError, Sum, cross_rank, cross_size, init, is_homogeneous,
                   is_initialized, local_rank, local_size, rank, size, start_timeline,
                   stop_timeline)
from cerar import (ccl_built, cuda_built, ddl_built, gloo_built, gloo_enabled,  # noqa: F401
                   mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rocm_built)
from cerar import _keras_optimizer
from cerar._frontend import auto_name, resolve_op
from cerar._process_sets import (ProcessSet, _membership, add_process_set,  # noqa: F401
                                 global_process_set, remove_process_set)

BACKEND = keras.backend.backend()
if BACKEND == "tensorflow":
    from cerar.keras import _tensorflow as _backend
elif BACKEND == "jax":
    from cerar.keras import _jax as _backend
elif BACKEND == "torch":
    from cerar.keras import _torch as _backend
else:
    raise ImportError(f"cerar.keras runs on Keras's tensorflow, jax and torch backends, not "
                      f"{BACKEND!r} (set KERAS_BACKEND)")

# Horovod code catches HorovodInternalError when a collective fails (as cerar.torch's).
HorovodInternalError = CerarError
Compression = _backend.Compression
shutdown, barrier, join = _backend.shutdown, _backend.barrier, _backend.join


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set):
    """A copy of the Keras 3 `optimizer` (from its config) whose apply() -- which Keras's train
    step calls on every backend -- reduces the gradients across ranks first. op: Average, Sum
    or Adasum (Adasum: TensorFlow backend only). backward_passes_per_step > 1 is Keras's
    gradient_accumulation_steps (the gradients are reduced every pass: the mean of reduced
    gradients is the reduced mean). device_*, sparse_as_dense, num_groups, groups and
    average_aggregated_gradients are Horovod's, accepted and unused here: every dense gradient
    goes in one fused reduction."""
    if op not in (Average, Sum, Adasum) or (op == Adasum and BACKEND != "tensorflow"):
        raise InvalidArgumentError(f"cerar.keras.DistributedOptimizer: gradients reduce with "
                                   f"Average or Sum (Adasum on TensorFlow), not {op!r}")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise InvalidArgumentError("cerar.keras: gradient_predivide_factor needs op=Average")
    reducer = _backend.make_reducer(compression, op, gradient_predivide_factor, process_set)
    return _keras_optimizer.wrap(optimizer, reducer, "cerar.keras.DistributedOptimizer",
                                 name=name, accumulation_steps=backward_passes_per_step)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                backward_passes_per_step=1, op=Average,
                                gradient_predivide_factor=1.0,
                                average_aggregated_gradients=False, groups=None,
                                process_set=global_process_set, scale_local_gradients=True,
                                local_layers=None):
    """DistributedOptimizer whose gradients of `local_layers`' trainable weights (Keras
    layers: this rank's own) are not reduced, as Horovod's: divided by the process set's size
    when scale_local_gradients."""
    local = _keras_optimizer.local_weights(local_layers, keras.layers.Layer, "keras.layers.Layer")
    wrapped = DistributedOptimizer(
        optimizer, name=name, compression=compression, op=op,
        gradient_predivide_factor=gradient_predivide_factor,
        backward_passes_per_step=backward_passes_per_step, groups=groups,
        process_set=process_set)
    size = _membership(None if process_set is global_process_set else process_set)[2]
    wrapped._cerar_reducer = _keras_optimizer.LocalSources(wrapped._cerar_reducer, local,
                                                           size if scale_local_gradients else 1)
    return wrapped


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none, process_set=global_process_set):
    """`value` (a backend tensor, array or Keras variable) reduced across ranks, as a tensor of
    the backend (Average by default)."""
    return _backend.allreduce(_tensor(value), resolve_op(op, average, "cerar.keras"),
                              auto_name("keras.allreduce", name), process_set, compression,
                              float(prescale_factor), float(postscale_factor))


def allgather(value, name=None, process_set=global_process_set):
    """Every rank's `value` concatenated along the first dimension."""
    return _backend.allgather(_tensor(value), auto_name("keras.allgather", name), process_set)


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """root_rank's `value` on every rank."""
    return _backend.broadcast(_tensor(value), root_rank, auto_name("keras.broadcast", name),
                              process_set)


def _tensor(value):
    return keras.ops.convert_to_tensor(value)


from cerar.keras._variables import (broadcast_global_variables,  # noqa: E402,F401
                                    broadcast_variables, load_model)
from cerar.keras import callbacks, elastic  # noqa: E402,F401
