"""reduce_scatter and all_to_all of torch.distributed's backend "cerar" (cerar.torch.backend)
as the runtime's exact reducescatter and alltoall: each function takes the arguments torch
hands the backend, checks them, submits the runtime's call and returns (handle, finish), where
finish(handle) writes the outputs once the handle is done. Arguments cerar cannot express
return None (the backend hands them to Gloo)."""
import torch

from cerar.torch._tensors import from_numpy


def _rows(runtime, names, wires, outputs, op, view):
    """reducescatter of each `wires[i]` ([size, k]: row j is rank j's share) into `outputs[i]`
    (k elements), as one unit. With one row per rank, the runtime's split (rows // size, the
    first rows % size ranks one more) is torch's: rank r gets the reduction of every rank's
    row r."""
    targets = [out.view(1, -1) if out.is_contiguous() else
               torch.empty((1, out.numel()), dtype=out.dtype, device=out.device)
               for out in outputs]
    handle = runtime.reducescatter(names, [view(w) for w in wires], [view(t) for t in targets],
                                   op)

    def finish(_):
        for out, target in zip(outputs, targets):
            if not out.is_contiguous():
                out.copy_(target.view(out.shape))
    return handle, finish


def reduce_scatter(runtime, name, output, inputs, op, view):
    """torch's list form: rank r gets the reduction over ranks of inputs[r]; None when the
    pieces differ in size (an uneven split cerar's row split cannot give)."""
    if len(inputs) != runtime.size or any(t.numel() != output.numel() for t in inputs):
        return None
    wire = torch.stack([t.detach().reshape(-1) for t in inputs])  # rank-major, contiguous
    return _rows(runtime, [name], [wire], [output], op, view)


def _flat_rows(runtime, output, input, what):  # noqa: A002 -- torch's name
    """The flat form's `input` as [size, output's elements], contiguous."""
    if input.numel() != runtime.size * output.numel():
        raise ValueError(f"cerar: {what} of {input.numel()} elements into "
                         f"{output.numel()} on {runtime.size} ranks: the input must hold "
                         f"size x output elements")
    wire = input.detach().reshape(runtime.size, output.numel())
    return wire if wire.is_contiguous() else wire.contiguous()


def reduce_scatter_flat(runtime, name, output, input, op, view):  # noqa: A002 -- torch's name
    """torch's flat form (_reduce_scatter_base, reduce_scatter_tensor): `input` holds size
    pieces of output's size back to back."""
    wire = _flat_rows(runtime, output, input, "reduce_scatter_tensor")
    return _rows(runtime, [name], [wire], [output], op, view)


def reduce_scatter_coalesced(runtime, name, outputs, inputs, op, view):
    """torch 2.x's reduce_scatter_tensor_coalesced (FSDP2's gradients): the flat form of each
    pair, all in one reducescatter unit."""
    if len(outputs) != len(inputs):
        raise ValueError(f"cerar: reduce_scatter_tensor_coalesced of {len(inputs)} inputs "
                         f"into {len(outputs)} outputs")
    wires = [_flat_rows(runtime, out, t, "reduce_scatter_tensor_coalesced")
             for out, t in zip(outputs, inputs)]
    return _rows(runtime, [f"{name}.{i}" for i in range(len(wires))], wires, outputs, op, view)


def all_gather_coalesced(runtime, name, outputs, inputs, view):
    """torch 2.x's allgather_into_tensor_coalesced: each input gathered (rank order) into its
    output, all in one grouped allgather."""
    if len(outputs) != len(inputs) or any(o.numel() != runtime.size * t.numel()
                                          for o, t in zip(outputs, inputs)):
        raise ValueError(f"cerar: allgather_into_tensor_coalesced needs one output of size x "
                         f"its input's elements per input, got {[t.numel() for t in inputs]} "
                         f"into {[o.numel() for o in outputs]}")
    sources = [t.detach().reshape(-1).contiguous() for t in inputs]
    handle = runtime.grouped_allgather([f"{name}.{i}" for i in range(len(sources))],
                                       [view(s) for s in sources])

    def finish(h):
        flat = from_numpy(h.output(), sources[0].dtype).reshape(-1)
        if flat.numel() != sum(o.numel() for o in outputs):
            raise ValueError(f"cerar: allgather_into_tensor_coalesced of {flat.numel()} "
                             f"elements into {sum(o.numel() for o in outputs)}: sizes differ "
                             f"across ranks")
        offset = 0
        for out in outputs:  # tensor 0 of every rank, then tensor 1, ...
            out.copy_(flat[offset:offset + out.numel()].view(out.shape))
            offset += out.numel()
    return handle, finish


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
