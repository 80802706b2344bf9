"""Collectives on jax arrays and pytrees, through numpy (host memory).

    import cerar.jax as cj
    grads = cj.allreduce_tree(grads)            # averaged in one fused grouped call per dtype
    params = cj.broadcast_tree(params, root_rank=0)

allreduce, allreduce_tree, allgather, broadcast and broadcast_tree also work inside jax.jit, as
ordered host callbacks (cerar/_jax_jit.py; docs/collectives.md, "JAX inside jit"). Either way
the arrays go through host memory. Each takes process_set= (docs/process-sets.md).
"""
import jax
import jax.numpy as jnp
import numpy as np

import cerar.numpy as cn
from cerar import _jax_jit
from cerar import (BUILD_FLAGS, ERRORS, Adasum, Average, CerarError,  # noqa: F401
                   CerarTimeoutError, InternalError, InvalidArgumentError, Max, Min,
                   MismatchError, PeerLostError, ShutDownError, Sum, ccl_built,
                   cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
                   is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                   mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, size)
from cerar import shutdown as _shutdown
from cerar import elastic  # noqa: F401  (hvd.elastic: ObjectState, run, ...)
from cerar import _frontend
from cerar._frontend import auto_name
from cerar._process_sets import (ProcessSet, add_process_set,  # noqa: F401
                                 global_process_set, remove_process_set)

__all__ = [
    "allreduce", "allreduce_tree", "allgather", "broadcast", "broadcast_tree", "barrier",
    "join", "init", "shutdown", "size", "rank", "local_rank", "local_size", "is_initialized",
    "cross_rank", "cross_size", "is_homogeneous", "Sum", "Average", "Min", "Max", "Adasum",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    *BUILD_FLAGS, *ERRORS,
]


# jax returns from a jitted call before its callbacks have run (asynchronous dispatch): these
# first wait for the collectives of the jitted calls made so far.
def shutdown():
    """Stops the runtime (after the collectives of pending jitted calls)."""
    jax.effects_barrier()
    _shutdown()


def barrier(process_set=None):
    """Returns once every rank of the set has called barrier() (after this rank's pending
    jitted collectives)."""
    jax.effects_barrier()
    _frontend.barrier(process_set)


def join():
    """cerar.join(), after this rank's pending jitted collectives."""
    jax.effects_barrier()
    return _frontend.join()


def _host(x):
    return np.array(np.asarray(x), order="C", copy=True)


def _back(array, like):
    out = jnp.asarray(array)
    devices = getattr(like, "devices", None)
    if callable(devices):
        out = jax.device_put(out, next(iter(devices())))
    return out


def allreduce(x, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=None):
    """Reduces a jax array across ranks; returns a new jax array."""
    def host(array, name):
        return cn.allreduce_(_host(array), op, name, prescale_factor, postscale_factor,
                             process_set)
    if _jax_jit.traced(x):
        return _jax_jit.allreduce(host, x, name)
    return _back(host(x, name), x)


def _reduce_arrays(arrays, base, op, prescale_factor, postscale_factor, process_set):
    """Reduces host arrays in place: one grouped all-reduce per dtype, in a fixed order."""
    by_dtype = {}
    for index, array in enumerate(arrays):
        by_dtype.setdefault(array.dtype.name, []).append(index)
    handles = []
    for dtype_name in sorted(by_dtype):
        group = [arrays[i] for i in by_dtype[dtype_name]]
        handles.append(cn.grouped_allreduce_async_(group, op, f"{base}.{dtype_name}",
                                                   prescale_factor, postscale_factor,
                                                   process_set))
    for handle in handles:
        handle.wait()
    return arrays


def allreduce_tree(tree, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                   process_set=None):
    """Reduces every leaf of a pytree (e.g. gradients), fused: one grouped all-reduce per
    dtype, in a fixed order. Returns a pytree of the same structure."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)

    def host(arrays, base):
        return _reduce_arrays([_host(a) for a in arrays], base, op, prescale_factor,
                              postscale_factor, process_set)
    if leaves and _jax_jit.traced(leaves):
        return jax.tree_util.tree_unflatten(
            treedef, _jax_jit.tree("allreduce_tree", host, leaves, name))
    arrays = host(leaves, auto_name("allreduce_tree", name))
    return jax.tree_util.tree_unflatten(
        treedef, [_back(a, leaf) for a, leaf in zip(arrays, leaves)])


def allgather(x, name=None, process_set=None):
    """Concatenates every rank's array along the first dimension. Inside jit every rank's
    first dimension must be the same (the result's shape is fixed when tracing)."""
    def host(array, name):
        return cn.allgather(_host(array), name, process_set)
    if _jax_jit.traced(x):
        return _jax_jit.allgather(host, x, name, process_set)
    return _back(host(x, name), x)


def broadcast(x, root_rank=0, name=None, process_set=None):
    def host(array, name):
        return cn.broadcast_(_host(array), root_rank, name, process_set)
    if _jax_jit.traced(x):
        return _jax_jit.broadcast(host, x, name)
    return _back(host(x, name), x)


def broadcast_tree(tree, root_rank=0, name=None, process_set=None):
    """Every leaf of `tree` from root_rank (e.g. initial parameters)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)

    def host(arrays, base):
        arrays = [_host(a) for a in arrays]
        handles = [cn.broadcast_async_(a, root_rank, f"{base}.{i}", process_set)
                   for i, a in enumerate(arrays)]
        for handle in handles:
            handle.wait()
        return arrays
    if leaves and _jax_jit.traced(leaves):
        return jax.tree_util.tree_unflatten(
            treedef, _jax_jit.tree("broadcast_tree", host, leaves, name))
    arrays = host(leaves, auto_name("broadcast_tree", name))
    return jax.tree_util.tree_unflatten(
        treedef, [_back(a, leaf) for a, leaf in zip(arrays, leaves)])
