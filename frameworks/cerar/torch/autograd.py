"""Differentiable allreduce, grouped allreduce, allgather and broadcast, with Horovod's
gradients: an allreduce's gradient is the same allreduce of the incoming gradients; an
allgather's is this rank's slice of the averaged gradient; a broadcast's is the averaged
gradient on the root and zero elsewhere. Backward passes call collectives, so every rank must
run them (as the forward ones)."""
import torch

from cerar import Average, _rt
from cerar._handle import synchronize
from cerar.torch import ops


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale):
        ctx.args = (op, prescale, postscale)
        return synchronize(ops.allreduce_async(tensor, None, name, op, prescale, postscale))

    @staticmethod
    def backward(ctx, grad):
        op, prescale, postscale = ctx.args
        reduced = synchronize(ops.allreduce_async(grad.contiguous(), None, None, op, prescale,
                                                  postscale))
        return reduced, None, None, None, None


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, *tensors):
        ctx.args = (op, prescale, postscale)
        ctx.shapes = [(t.shape, t.dtype, t.device) for t in tensors]
        return tuple(synchronize(ops.grouped_allreduce_async(tensors, None, name, op, prescale,
                                                             postscale)))

    @staticmethod
    def backward(ctx, *grads):
        op, prescale, postscale = ctx.args
        grads = [torch.zeros(s, dtype=d, device=v) if g is None else g.contiguous()
                 for g, (s, d, v) in zip(grads, ctx.shapes)]
        reduced = synchronize(ops.grouped_allreduce_async(grads, None, None, op, prescale,
                                                          postscale))
        return (None, None, None, None, *reduced)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.shape = tensor.shape
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        return synchronize(ops.allgather_async(tensor, name))

    @staticmethod
    def backward(ctx, grad):
        reduced = synchronize(ops.allreduce_async(grad.contiguous(), op=Average))
        rows = synchronize(ops.allgather_async(torch.tensor([ctx.rows], dtype=torch.int64)))
        offset = int(rows[:_rt().rank].sum())
        return reduced.narrow(0, offset, ctx.rows).reshape(ctx.shape), None


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root_rank = root_rank
        return synchronize(ops.broadcast_async(tensor, root_rank, name))

    @staticmethod
    def backward(ctx, grad):
        reduced = synchronize(ops.allreduce_async(grad.contiguous(), op=Average))
        if _rt().rank != ctx.root_rank:
            reduced.zero_()
        return reduced, None, None


def _tracks_grad(*tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """Reduces `tensor` across ranks (averages by default); returns a new tensor.
    `compression`: a Compressor (e.g. Compression.fp16) applied around the reduction."""
    op = ops._op(op, average)
    wire, context = compression.compress(tensor) if compression else (tensor, None)
    if _tracks_grad(wire):
        out = _Allreduce.apply(wire, name, op, prescale_factor, postscale_factor)
    else:
        out = synchronize(ops.allreduce_async(wire, None, name, op, prescale_factor,
                                              postscale_factor))
    return compression.decompress(out, context) if compression else out


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    op = ops._op(op, average)
    tensors = list(tensors)
    pairs = [compression.compress(t) if compression else (t, None) for t in tensors]
    wires = [w for w, _ in pairs]
    if _tracks_grad(*wires):
        outs = list(_GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, *wires))
    else:
        outs = synchronize(ops.grouped_allreduce_async(wires, None, name, op, prescale_factor,
                                                       postscale_factor))
    if compression:
        outs = [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]
    return outs


def allgather(tensor, name=None, process_set=None):
    """Concatenates every rank's tensor along dimension 0 (its size may differ per rank)."""
    if _tracks_grad(tensor):
        return _Allgather.apply(tensor, name)
    return synchronize(ops.allgather_async(tensor, name))


def grouped_allgather(tensors, name=None, process_set=None):
    tensors = list(tensors)
    if _tracks_grad(*tensors):
        base = ops._auto_name("grouped_allgather", name)
        return [_Allgather.apply(t, f"{base}.{i}") for i, t in enumerate(tensors)]
    return synchronize(ops.grouped_allgather_async(tensors, name))


def broadcast(tensor, root_rank, name=None, process_set=None):
    """root_rank's `tensor` on every rank, as a new tensor."""
    if _tracks_grad(tensor):
        return _Broadcast.apply(tensor, root_rank, name)
    return synchronize(ops.broadcast_async(tensor, root_rank, name))
