"""Collectives on numpy arrays (zero-copy: the runtime reads and writes the arrays' memory).

Out-of-place calls (allreduce, broadcast, allgather) return new arrays; the ones ending in "_"
work in place. The *_async forms return a Handle; ``synchronize(handle)`` returns the result.
Names match operations across ranks; unnamed calls get "<op>.noname.<n>" in call order.
"""
import numpy as np

from cerar import (BUILD_FLAGS, ERRORS, Adasum, Average, CerarError,  # noqa: F401
                   CerarTimeoutError, InternalError, InvalidArgumentError, Max, Min,
                   MismatchError, PeerLostError, ShutDownError, Sum, _rt, ccl_built,
                   cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
                   is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                   mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown,
                   size)
from cerar._cerar import DType, RawTensor
from cerar._frontend import (alltoall_splits, barrier, begin,  # noqa: F401
                             check_first_dimension, check_in_place, join)
from cerar._process_sets import (ProcessSet, _membership,  # noqa: F401
                                 add_process_set, global_process_set, remove_process_set)
from cerar._handle import Handle, poll, synchronize
from cerar import elastic  # noqa: F401  (hvd.elastic: ObjectState, run, ...)

__all__ = [
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "allgather",
    "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "reducescatter", "reducescatter_async", "alltoall", "alltoall_async",
    "barrier", "join", "poll", "synchronize", "Handle", "init", "shutdown", "is_initialized",
    "size", "rank", "local_rank", "local_size", "cross_rank", "cross_size", "is_homogeneous",
    "Sum", "Average", "Min", "Max", "Adasum", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", *BUILD_FLAGS, *ERRORS,
]


def _view(array):
    """What the bindings take: the array itself, or (bfloat16, which has no buffer format) its
    address."""
    if array.dtype.name == "bfloat16":  # ml_dtypes / jax
        return RawTensor(array, array.ctypes.data, DType.bfloat16, list(array.shape))
    return array


def _fresh(tensor):
    """A C-contiguous copy of `tensor` (anything np.asarray takes)."""
    return np.array(np.asarray(tensor), order="C", copy=True)


def _writable(array):
    if not isinstance(array, np.ndarray):
        raise TypeError(f"cerar.numpy: in-place operations need a numpy array, got {type(array)}")
    check_in_place(array.flags.c_contiguous and array.flags.writeable, "cerar.numpy")
    return array


def allreduce_async_(array, op=Average, name=None,
                     prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduces `array` in place across ranks; returns a Handle whose result is `array`."""
    _writable(array)
    name, set_id = begin("allreduce", name, process_set)
    handle = _rt().allreduce(name, _view(array), None, op, prescale_factor, postscale_factor,
                             "none", set_id)
    return Handle(handle, lambda _: array)


def allreduce_async(tensor, op=Average, name=None,
                    prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduces a copy of `tensor`; the Handle's result is the new array."""
    return allreduce_async_(_fresh(tensor), op, name, prescale_factor, postscale_factor,
                            process_set)


def allreduce(tensor, op=Average, name=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return allreduce_async(tensor, op, name, prescale_factor, postscale_factor,
                           process_set).wait()


def allreduce_(array, op=Average, name=None,
               prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return allreduce_async_(array, op, name, prescale_factor, postscale_factor,
                            process_set).wait()


def grouped_allreduce_async_(arrays, op=Average, name=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None):
    """Reduces a list of arrays in place as one fused unit (names "<name>.<i>")."""
    arrays = [_writable(a) for a in arrays]
    base, set_id = begin("grouped_allreduce", name, process_set)
    names = [f"{base}.{i}" for i in range(len(arrays))]
    handle = _rt().grouped_allreduce(names, [_view(a) for a in arrays], None, op,
                                     prescale_factor, postscale_factor, "none", set_id)
    return Handle(handle, lambda _: arrays)


def grouped_allreduce_async(tensors, op=Average, name=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None):
    return grouped_allreduce_async_([_fresh(t) for t in tensors], op, name, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce(tensors, op=Average, name=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return grouped_allreduce_async(tensors, op, name, prescale_factor, postscale_factor,
                                   process_set).wait()


def grouped_allreduce_(arrays, op=Average, name=None,
                       prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return grouped_allreduce_async_(arrays, op, name, prescale_factor, postscale_factor,
                                    process_set).wait()


def allgather_async(tensor, name=None, process_set=None):
    """Concatenates every rank's `tensor` along the first dimension (sizes may differ)."""
    array = np.ascontiguousarray(np.asarray(tensor))
    if array.ndim == 0:
        array = array.reshape(1)
    dtype = array.dtype
    name, set_id = begin("allgather", name, process_set)
    handle = _rt().allgather(name, _view(array), set_id)

    def finish(h):
        out = h.output()
        return out.view(dtype) if out.dtype != dtype else out
    return Handle(handle, finish)


def allgather(tensor, name=None, process_set=None):
    return allgather_async(tensor, name, process_set).wait()


def broadcast_async_(array, root_rank, name=None, process_set=None):
    """Overwrites `array` with root_rank's (a global rank, also in a process set), in place."""
    _writable(array)
    name, set_id = begin("broadcast", name, process_set)
    handle = _rt().broadcast(name, _view(array), int(root_rank), set_id)
    return Handle(handle, lambda _: array)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(_fresh(tensor), root_rank, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=None):
    return broadcast_async(tensor, root_rank, name, process_set).wait()


def broadcast_(array, root_rank, name=None, process_set=None):
    return broadcast_async_(array, root_rank, name, process_set).wait()


def reducescatter_async(tensor, op=Average, name=None, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=None):
    """Reduces `tensor` across ranks; the Handle's result is this rank's share of the first
    dimension (rows // size, one more for the first rows % size ranks), a new array."""
    from cerar._cerar import scatter_rows
    array = np.asarray(tensor)
    check_first_dimension(array.ndim, "cerar.numpy.reducescatter")
    array = np.ascontiguousarray(array)  # (which would make a scalar one row)
    name, set_id = begin("reducescatter", name, process_set)
    _, set_rank, set_size = _membership(set_id)
    shape = (scatter_rows(array.shape[0], set_rank, set_size), *array.shape[1:])
    out = np.empty(shape, dtype=array.dtype)
    handle = _rt().reducescatter([name], [_view(array)], [_view(out)], op, prescale_factor,
                                 postscale_factor, set_id)
    return Handle(handle, lambda _: out)


def reducescatter(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=None):
    return reducescatter_async(tensor, op, name, prescale_factor, postscale_factor,
                               process_set).wait()


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    """Sends splits[j] rows of `tensor` to rank j (equal parts without splits); the Handle's
    result is (the rows received from every rank in rank order, the received splits)."""
    array = np.asarray(tensor)
    check_first_dimension(array.ndim, "cerar.numpy.alltoall")
    array = np.ascontiguousarray(array)
    dtype = array.dtype
    name, set_id = begin("alltoall", name, process_set)
    wanted = alltoall_splits(splits, array.shape[0], _membership(set_id)[2],
                             "cerar.numpy.alltoall")
    handle = _rt().alltoall(name, _view(array), wanted, set_id)

    def finish(h):
        out = h.output()
        return (out.view(dtype) if out.dtype != dtype else out,
                np.asarray(h.received_splits(), dtype=np.int32))
    return Handle(handle, finish)


def alltoall(tensor, splits=None, name=None, process_set=None):
    output, received = alltoall_async(tensor, splits, name, process_set).wait()
    return output if splits is None else (output, received)
