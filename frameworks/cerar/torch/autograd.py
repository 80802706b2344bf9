"""Differentiable allreduce, grouped allreduce, allgather, broadcast, reducescatter and
alltoall, with Horovod's gradients: an allreduce's gradient is the same allreduce of the
incoming gradients; an allgather's is this rank's slice of the averaged gradient; a
broadcast's is the averaged gradient on the root and zero elsewhere; a reducescatter's is the
allgather of the incoming gradients, times the size for Sum and times the scale factors; an
alltoall's is the alltoall that sends every received row back to its sender. Backward passes
call collectives, so every rank must run them (as the forward ones). With a process set, all
of it happens in the set (sizes and ranks are the set's)."""
import torch

from cerar import Average, Sum, _rt
from cerar._frontend import auto_name
from cerar._handle import synchronize
from cerar._process_sets import _membership
from cerar.torch import ops
from cerar.torch.compression import runtime_wire


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, wire=None, process_set=None):
        ctx.args = (op, prescale, postscale, process_set, wire)
        return synchronize(ops.allreduce_async(tensor, None, name, op, prescale, postscale,
                                               process_set, wire=wire))

    @staticmethod
    def backward(ctx, grad):
        op, prescale, postscale, process_set, wire = ctx.args
        reduced = synchronize(ops.allreduce_async(grad.contiguous(), None, None, op, prescale,
                                                  postscale, process_set, wire=wire))
        return reduced, None, None, None, None, None, None


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, wire, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set, wire)
        ctx.shapes = [(t.shape, t.dtype, t.device) for t in tensors]
        return tuple(synchronize(ops.grouped_allreduce_async(tensors, None, name, op, prescale,
                                                             postscale, process_set,
                                                             wire=wire)))

    @staticmethod
    def backward(ctx, *grads):
        op, prescale, postscale, process_set, wire = ctx.args
        grads = [torch.zeros(s, dtype=d, device=v) if g is None else g.contiguous()
                 for g, (s, d, v) in zip(grads, ctx.shapes)]
        reduced = synchronize(ops.grouped_allreduce_async(grads, None, None, op, prescale,
                                                          postscale, process_set, wire=wire))
        return (None, None, None, None, None, None, *reduced)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set=None):
        ctx.shape = tensor.shape
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        ctx.process_set = process_set
        return synchronize(ops.allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        process_set = ctx.process_set
        reduced = synchronize(ops.allreduce_async(grad.contiguous(), op=Average,
                                                  process_set=process_set))
        rows = synchronize(ops.allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                                               process_set=process_set))
        offset = int(rows[:_membership(process_set)[1]].sum())
        return reduced.narrow(0, offset, ctx.rows).reshape(ctx.shape), None, None


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set=None):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(ops.broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = synchronize(ops.allreduce_async(grad.contiguous(), op=Average,
                                                  process_set=ctx.process_set))
        if _rt().rank != ctx.root_rank:
            reduced.zero_()
        return reduced, None, None, None


def _scatter_gradient(grad, op, prescale, postscale, process_set=None):
    """Horovod's reducescatter gradient: the ranks' shares gathered, scaled as the forward."""
    factor = (_membership(process_set)[2] if op == Sum else 1.0) * prescale * postscale
    grad = grad.contiguous()
    if factor != 1.0:
        grad = grad * factor
    return synchronize(ops.allgather_async(grad, process_set=process_set))


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set=None):
        ctx.args = (op, prescale, postscale, process_set)
        return synchronize(ops.reducescatter_async(tensor, name, op, process_set, prescale,
                                                   postscale))

    @staticmethod
    def backward(ctx, grad):
        return _scatter_gradient(grad, *ctx.args), None, None, None, None, None


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        ctx.shapes = [(t.shape, t.dtype, t.device) for t in tensors]
        return tuple(synchronize(ops.grouped_reducescatter_async(tensors, name, op, process_set,
                                                                 prescale, postscale)))

    @staticmethod
    def backward(ctx, *grads):
        from cerar._cerar import scatter_rows
        _, rank, size = _membership(ctx.args[3])
        grads = [torch.zeros([scatter_rows(s[0], rank, size), *s[1:]], dtype=d, device=v)
                 if g is None else g for g, (s, d, v) in zip(grads, ctx.shapes)]
        return (None, None, None, None, None,
                *[_scatter_gradient(g, *ctx.args) for g in grads])


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set=None):
        output, received = synchronize(ops.alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        ctx.rows = tensor.shape[0]
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad, _):
        back, _ = synchronize(ops.alltoall_async(grad.contiguous(), ctx.received,
                                                 process_set=ctx.process_set))
        if back.shape[0] < ctx.rows:  # rows past the splits were not sent: no gradient
            pad = back.new_zeros((ctx.rows - back.shape[0], *back.shape[1:]))
            back = torch.cat([back, pad])
        return back, None, None, None


def _tracks_grad(*tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """Reduces `tensor` across ranks (averages by default); returns a new tensor.
    `compression`: a Compressor (e.g. Compression.fp16) applied around the reduction; fp16 and
    bf16 of a float32 CPU tensor are the runtime's 16-bit wire (float32 adds, docs/wires.md)."""
    op = ops.resolve_op(op, average)
    fmt = runtime_wire(compression, [tensor]) if op in (Sum, Average) else None
    if fmt:
        compression = None
    wire, context = compression.compress(tensor) if compression else (tensor, None)
    if _tracks_grad(wire):
        out = _Allreduce.apply(wire, name, op, prescale_factor, postscale_factor, fmt,
                               process_set)
    else:
        out = synchronize(ops.allreduce_async(wire, None, name, op, prescale_factor,
                                              postscale_factor, process_set, wire=fmt))
    return compression.decompress(out, context) if compression else out


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    op = ops.resolve_op(op, average)
    tensors = list(tensors)
    fmt = runtime_wire(compression, tensors) if op in (Sum, Average) else None
    if fmt:
        compression = None
    pairs = [compression.compress(t) if compression else (t, None) for t in tensors]
    wires = [w for w, _ in pairs]
    if _tracks_grad(*wires):
        outs = list(_GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, fmt,
                                            process_set, *wires))
    else:
        outs = synchronize(ops.grouped_allreduce_async(wires, None, name, op, prescale_factor,
                                                       postscale_factor, process_set, wire=fmt))
    if compression:
        outs = [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]
    return outs


def allgather(tensor, name=None, process_set=None):
    """Concatenates every rank's tensor along dimension 0 (its size may differ per rank)."""
    if _tracks_grad(tensor):
        return _Allgather.apply(tensor, name, process_set)
    return synchronize(ops.allgather_async(tensor, name, process_set))


def grouped_allgather(tensors, name=None, process_set=None):
    tensors = list(tensors)
    if _tracks_grad(*tensors):
        base = auto_name("grouped_allgather", name)
        return [_Allgather.apply(t, f"{base}.{i}", process_set) for i, t in enumerate(tensors)]
    return synchronize(ops.grouped_allgather_async(tensors, name, process_set))


def broadcast(tensor, root_rank, name=None, process_set=None):
    """root_rank's `tensor` on every rank, as a new tensor."""
    if _tracks_grad(tensor):
        return _Broadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(ops.broadcast_async(tensor, root_rank, name, process_set))


def reducescatter(tensor, name=None, compression=None, op=Average, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` across ranks (averages by default) and returns this rank's share of the
    first dimension, a new tensor (the first rows % size ranks get one row more)."""
    op = Average if op is None else op
    wire, context = compression.compress(tensor) if compression else (tensor, None)
    if _tracks_grad(wire):
        out = _Reducescatter.apply(wire, name, op, prescale_factor, postscale_factor,
                                   process_set)
    else:
        out = synchronize(ops.reducescatter_async(wire, name, op, process_set, prescale_factor,
                                                  postscale_factor))
    return compression.decompress(out, context) if compression else out


def grouped_reducescatter(tensors, name=None, compression=None, op=Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    op = Average if op is None else op
    pairs = [compression.compress(t) if compression else (t, None) for t in tensors]
    wires = [w for w, _ in pairs]
    if _tracks_grad(*wires):
        outs = list(_GroupedReducescatter.apply(name, op, prescale_factor, postscale_factor,
                                                process_set, *wires))
    else:
        outs = synchronize(ops.grouped_reducescatter_async(wires, name, op, process_set,
                                                           prescale_factor, postscale_factor))
    if compression:
        outs = [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]
    return outs


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Sends splits[j] rows of `tensor` to rank j (equal parts without splits) and returns the
    rows received from every rank in rank order; with splits, also the received splits."""
    if _tracks_grad(tensor):
        output, received = _Alltoall.apply(tensor, splits, name, process_set)
    else:
        output, received = synchronize(ops.alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)
