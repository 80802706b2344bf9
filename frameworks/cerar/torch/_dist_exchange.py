"""reduce_scatter and all_to_all of torch.distributed's backend "cerar" (cerar.torch.backend)
as the runtime's exact reducescatter and alltoall: each function takes the arguments torch
hands the backend, checks them, submits the runtime's call and returns (handle, finish), where
finish(handle) writes the outputs once the handle is done. Arguments cerar cannot express
return None (the backend hands them to Gloo)."""
import torch

from cerar.torch._tensors import from_numpy


def _rows(runtime, name, wire, output, op, view):
    """reducescatter of `wire` ([size, k]: row j is rank j's share) into `output` (k elements).
    With one row per rank, the runtime's split (rows // size, the first rows % size ranks one
    more) is torch's: rank r gets the reduction of every rank's row r."""
    direct = output.is_contiguous()
    target = output.view(1, -1) if direct else torch.empty((1, output.numel()),
                                                           dtype=output.dtype,
                                                           device=output.device)
    handle = runtime.reducescatter([name], [view(wire)], [view(target)], op)

    def finish(_):
        if not direct:
            output.copy_(target.view(output.shape))
    return handle, finish


def reduce_scatter(runtime, name, output, inputs, op, view):
    """torch's list form: rank r gets the reduction over ranks of inputs[r]; None when the
    pieces differ in size (an uneven split cerar's row split cannot give)."""
    if len(inputs) != runtime.size or any(t.numel() != output.numel() for t in inputs):
        return None
    wire = torch.stack([t.detach().reshape(-1) for t in inputs])  # rank-major, contiguous
    return _rows(runtime, name, wire, output, op, view)


def reduce_scatter_flat(runtime, name, output, input, op, view):  # noqa: A002 -- torch's name
    """torch's flat form (_reduce_scatter_base, reduce_scatter_tensor): `input` holds size
    pieces of output's size back to back."""
    if input.numel() != runtime.size * output.numel():
        raise ValueError(f"cerar: reduce_scatter_tensor of {input.numel()} elements into "
                         f"{output.numel()} on {runtime.size} ranks: the input must hold "
                         f"size x output elements")
    wire = input.detach().reshape(runtime.size, output.numel())
    wire = wire if wire.is_contiguous() else wire.contiguous()
    return _rows(runtime, name, wire, output, op, view)


def _exchange(runtime, name, source, splits, view):
    """The runtime's alltoall of `source` (contiguous) with `splits` rows per rank; finish
    returns (the received rows, flat, as a torch tensor; the rows received from each rank)."""
    handle = runtime.alltoall(name, view(source), splits)

    def received(h):
        return from_numpy(h.output(), source.dtype).reshape(-1), list(h.received_splits())
    return handle, received


def all_to_all(runtime, name, outputs, inputs, view):
    """torch's list form: inputs[j] goes to rank j, outputs[j] comes from rank j; the pieces
    travel flattened, so any shapes whose sizes agree pairwise."""
    if len(inputs) != runtime.size or len(outputs) != runtime.size:
        raise ValueError(f"cerar: all_to_all needs {runtime.size} input and output tensors, "
                         f"got {len(inputs)} and {len(outputs)}")
    source = torch.cat([t.detach().reshape(-1) for t in inputs])
    handle, received = _exchange(runtime, name, source, [t.numel() for t in inputs], view)

    def finish(h):
        flat, splits = received(h)
        wanted = [t.numel() for t in outputs]
        if splits != wanted:
            raise ValueError(f"cerar: all_to_all received {splits} elements from the ranks "
                             f"into outputs of {wanted}: sizes differ across ranks")
        offset = 0
        for out in outputs:
            out.copy_(flat[offset:offset + out.numel()].view(out.shape))
            offset += out.numel()
    return handle, finish


def _split_sizes(sizes, rows, size, what):
    """torch's split sizes (empty: equal) as rows per rank, checked against `rows`."""
    sizes = [int(v) for v in sizes]
    if not sizes:
        if rows % size != 0:
            raise ValueError(f"cerar: all_to_all_single without {what} split sizes needs a "
                             f"first dimension ({rows}) divisible by the size ({size})")
        return [rows // size] * size
    if len(sizes) != size or any(v < 0 for v in sizes) or sum(sizes) != rows:
        raise ValueError(f"cerar: all_to_all_single {what} split sizes {sizes} do not divide "
                         f"a first dimension of {rows} among {size} ranks")
    return sizes


def all_to_all_single(runtime, name, output, input, output_splits, input_splits,  # noqa: A002
                      view):
    """torch's flat form (alltoall_base, all_to_all_single): input_splits[j] rows of `input` to
    rank j, output_splits[j] rows of `output` from rank j (empty: equal shares). None for a
    scalar or an output whose rows differ from the input's (Gloo decides then)."""
    if input.dim() == 0 or output.dim() == 0 or output.shape[1:] != input.shape[1:]:
        return None
    send = _split_sizes(input_splits, input.shape[0], runtime.size, "input")
    expect = _split_sizes(output_splits, output.shape[0], runtime.size, "output")
    source = input.detach()
    source = source if source.is_contiguous() else source.contiguous()
    # rows keep their shape: the runtime checks that every rank's rows are alike
    handle, received = _exchange(runtime, name, source, send, view)

    def finish(h):
        flat, splits = received(h)
        if splits != expect:
            raise ValueError(f"cerar: all_to_all_single received {splits} rows from the ranks "
                             f"where the output split sizes say {expect}")
        output.copy_(flat.view(output.shape))
    return handle, finish
