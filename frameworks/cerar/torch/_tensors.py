"""How torch tensors meet the runtime, shared by cerar.torch's collectives (ops.py) and the
torch.distributed backend (backend.py): the dtypes it reduces, its view of a tensor, and the
tensors its outputs (numpy arrays) come back as."""
import torch

from cerar._cerar import DType, RawTensor
from cerar._frontend import check_in_place
from cerar.torch._compat import stream_of

DTYPES = {
    torch.float32: DType.float32, torch.float64: DType.float64, torch.float16: DType.float16,
    torch.bfloat16: DType.bfloat16, torch.int32: DType.int32, torch.int64: DType.int64,
    torch.uint8: DType.uint8,
}
WIDENED = {torch.int8: torch.int32, torch.int16: torch.int32}  # on the wire as int32


def view(tensor):
    """The runtime's view of a contiguous tensor; the view holds the tensor alive."""
    if tensor.dtype not in DTYPES:
        raise TypeError(f"cerar.torch: unsupported dtype {tensor.dtype}")
    check_in_place(tensor.is_contiguous(), "cerar.torch")
    if tensor.is_sparse:
        raise ValueError("cerar.torch: sparse tensors are not supported")
    # For a CUDA tensor the runtime's device work waits for what is queued on its current
    # stream so far (an event, not a host synchronisation); the result is complete when the
    # handle is.
    device = tensor.device.index if tensor.is_cuda else -1
    return RawTensor(tensor, tensor.data_ptr(), DTYPES[tensor.dtype], list(tensor.shape),
                     device, stream_of(tensor))


def fresh(tensor):
    """A contiguous copy, detached from autograd."""
    return tensor.detach().clone(memory_format=torch.contiguous_format)


def wire_source(tensor):
    """What an allgather or alltoall sends of `tensor`: contiguous, at least one dimension,
    int8/int16 widened (cast back by from_numpy's caller)."""
    source = fresh(tensor) if not tensor.is_contiguous() else tensor.detach()
    if source.dim() == 0:
        source = source.reshape(1)
    return source.to(WIDENED[source.dtype]) if source.dtype in WIDENED else source


def from_numpy(array, dtype):
    """The tensor of a runtime output holding `dtype` elements (sharing its memory)."""
    if dtype == torch.bfloat16:  # numpy has no bfloat16: its bits come back as uint16
        return torch.from_numpy(array.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(array)
