"""Collectives on torch tensors, Horovod's API (works with torch 1.13 and 2.x).

    import cerar.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Tensors are passed by address (zero-copy; CPU or CUDA, any contiguous layout; bfloat16 too).
Out-of-place calls return new tensors; the ones ending in "_" work in place. Unnamed calls
get "<op>.noname.<n>" in call order, which must then be the same on every rank.
"""
import torch

from cerar import (Average, CerarError, CerarTimeoutError, InternalError,
                   InvalidArgumentError, Max, Min, MismatchError, Op, PeerLostError,
                   ShutDownError, Sum, _auto_name, _rt, init, is_initialized, local_rank,
                   local_size, rank, shutdown, size, start_timeline, stop_timeline, stats)
from cerar._cerar import DType, RawTensor
from cerar._handle import Handle, poll, synchronize
from cerar.torch._compat import stream_of

# Horovod code catches HorovodInternalError when a collective fails (elastic training restores
# its state then); Horovod raises it for every failed collective, so here it is CerarError
# itself: a lost peer (PeerLostError) and a silent one (CerarTimeoutError) are instances.
HorovodInternalError = CerarError

_DTYPES = {
    torch.float32: DType.float32, torch.float64: DType.float64, torch.float16: DType.float16,
    torch.bfloat16: DType.bfloat16, torch.int32: DType.int32, torch.int64: DType.int64,
    torch.uint8: DType.uint8,
}


def _view(tensor):
    """The runtime's view of a contiguous tensor; the view holds the tensor alive."""
    if tensor.dtype not in _DTYPES:
        raise TypeError(f"cerar.torch: unsupported dtype {tensor.dtype}")
    if not tensor.is_contiguous():
        raise ValueError("cerar.torch: in-place operations need a contiguous tensor")
    if tensor.is_sparse:
        raise ValueError("cerar.torch: sparse tensors are not supported")
    # For a CUDA tensor the runtime's device work waits for what is queued on its current
    # stream so far (an event, not a host synchronisation); the result is complete when the
    # handle is.
    device = tensor.device.index if tensor.is_cuda else -1
    return RawTensor(tensor, tensor.data_ptr(), _DTYPES[tensor.dtype], list(tensor.shape),
                     device, stream_of(tensor))


def _fresh(tensor):
    return tensor.detach().clone(memory_format=torch.contiguous_format)


def _op(op, average):
    if average is not None:  # Horovod's older flag
        return Average if average else Sum
    return Average if op is None else op


# --- allreduce ----------------------------------------------------------------------------------
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0):
    """Reduces `tensor` in place across ranks; the Handle's result is `tensor`."""
    data = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
    handle = _rt().allreduce(_auto_name("allreduce", name), _view(data), None,
                             _op(op, average), prescale_factor, postscale_factor)
    return Handle(handle, lambda _: tensor)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0):
    """Reduces a copy of `tensor`; the Handle's result is the new tensor."""
    return allreduce_async_(_fresh(tensor), average, name, op, prescale_factor, postscale_factor)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0):
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                       postscale_factor))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0):
    """Reduces a list of tensors in place as one fused unit (names "<name>.<i>")."""
    tensors = list(tensors)
    base = _auto_name("grouped_allreduce", name)
    names = [f"{base}.{i}" for i in range(len(tensors))]
    views = [_view(t.data if isinstance(t, torch.nn.Parameter) else t) for t in tensors]
    handle = _rt().grouped_allreduce(names, views, None, _op(op, average), prescale_factor,
                                     postscale_factor)
    return Handle(handle, lambda _: tensors)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0):
    return grouped_allreduce_async_([_fresh(t) for t in tensors], average, name, op,
                                    prescale_factor, postscale_factor)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0):
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor))


# --- allgather, broadcast -----------------------------------------------------------------------
def allgather_async(tensor, name=None):
    """Concatenates every rank's tensor along dimension 0 (its size may differ per rank)."""
    source = _fresh(tensor) if not tensor.is_contiguous() else tensor.detach()
    if source.dim() == 0:
        source = source.reshape(1)
    dtype, device = source.dtype, source.device
    handle = _rt().allgather(_auto_name("allgather", name), _view(source))

    def finish(h):
        array = h.output()
        if dtype == torch.bfloat16:  # numpy has no bfloat16: its bits come back as uint16
            out = torch.from_numpy(array.view("int16")).view(torch.bfloat16)
        else:
            out = torch.from_numpy(array)
        return out.to(device)
    return Handle(handle, finish)


def allgather(tensor, name=None):
    return synchronize(allgather_async(tensor, name))


def broadcast_async_(tensor, root_rank, name=None):
    """Overwrites `tensor` with root_rank's, in place."""
    data = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
    handle = _rt().broadcast(_auto_name("broadcast", name), _view(data), int(root_rank))
    return Handle(handle, lambda _: tensor)


def broadcast_async(tensor, root_rank, name=None):
    return broadcast_async_(_fresh(tensor), root_rank, name)


def broadcast(tensor, root_rank, name=None):
    return synchronize(broadcast_async(tensor, root_rank, name))


def broadcast_(tensor, root_rank, name=None):
    return synchronize(broadcast_async_(tensor, root_rank, name))


def barrier():
    """Returns once every rank has called barrier()."""
    _rt().barrier().wait()


def join(device=-1):
    """This rank has no more data; returns the rank that joined last once all have joined."""
    handle = _rt().join()
    handle.wait()
    return handle.last_joined_rank()


from cerar.torch.functions import (allgather_object, broadcast_object,  # noqa: E402
                                   broadcast_optimizer_state, broadcast_parameters)
from cerar.torch.drift import parameter_drift, resync_parameters  # noqa: E402
from cerar.torch.optimizer import DistributedOptimizer  # noqa: E402
from cerar.torch.ddp import CerarHookState, cerar_hook, register_cerar_hook  # noqa: E402,F401
