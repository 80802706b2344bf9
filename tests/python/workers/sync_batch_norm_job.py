"""cerar.torch.SyncBatchNorm on 4 ranks with uneven batches (one empty) against one
torch.nn.BatchNorm on the concatenated batch: outputs, running statistics, input gradients, and
the ranks' weight and bias gradients summed; eval mode without communication; the error for a
single value per channel on every rank."""
import numpy as np
import torch

import cerar.torch as hvd
from common import check, check_close

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 4, "written for 4 ranks"
rng = np.random.default_rng(11)


def rows(batches):
    start = sum(batches[:r])
    return slice(start, start + batches[r])


def compare(tag, shape_tail, batches_per_step, dtype, tol, momentum=0.1, affine=True):
    channels = shape_tail[0]
    kind = torch.nn.BatchNorm2d if len(shape_tail) == 3 else torch.nn.BatchNorm1d
    reference = kind(channels, momentum=momentum, affine=affine).to(dtype)
    if affine:
        with torch.no_grad():
            reference.weight.copy_(torch.from_numpy(rng.normal(1, 0.2, channels)))
            reference.bias.copy_(torch.from_numpy(rng.normal(0, 0.2, channels)))
    mine = hvd.SyncBatchNorm(channels, momentum=momentum, affine=affine).to(dtype)
    mine.load_state_dict(reference.state_dict())
    for step, batches in enumerate(batches_per_step):
        total = sum(batches)
        x = torch.from_numpy(rng.normal(2.0, 3.0, (total, *shape_tail))).to(dtype)
        weights = torch.from_numpy(rng.normal(size=(total, *shape_tail))).to(dtype)
        full = x.clone().requires_grad_()
        reference.zero_grad()
        expected = reference(full)
        (expected * weights).sum().backward()

        part = x[rows(batches)].clone().requires_grad_()
        mine.zero_grad()
        out = mine(part)
        (out * weights[rows(batches)]).sum().backward()
        name = f"{tag} step {step}"
        check_close(f"{name} output", out.detach(), expected.detach()[rows(batches)], rtol=tol)
        check_close(f"{name} running mean", mine.running_mean, reference.running_mean, rtol=tol)
        check_close(f"{name} running var", mine.running_var, reference.running_var, rtol=tol)
        check("batches tracked", int(mine.num_batches_tracked) == step + 1,
              str(mine.num_batches_tracked))
        check_close(f"{name} input grad", part.grad, full.grad[rows(batches)], rtol=tol)
        pairs = (("weight", mine.weight, reference.weight), ("bias", mine.bias, reference.bias))
        for label, got, want in pairs if affine else ():
            got, want = got.grad, want.grad
            share = got if got is not None else torch.zeros_like(want)
            summed = hvd.allreduce(share, op=hvd.Sum, name=f"{name}.{label}")
            check_close(f"{name} {label} grad", summed, want, rtol=tol)
    return mine, reference


# (N, C, H, W) and (N, C) in float64, uneven batches, rank 1 empty in the first step.
compare("2d f64", (3, 4, 2), [[3, 0, 5, 2], [1, 4, 2, 3]], torch.float64, 1e-10)
compare("1d f64", (5,), [[2, 3, 0, 7], [4, 4, 4, 4]], torch.float64, 1e-10)
compare("1d cumulative", (2,), [[2, 3, 1, 1], [5, 0, 0, 2]], torch.float64, 1e-10,
        momentum=None)
compare("1d no affine", (3, 5), [[4, 1, 0, 2]], torch.float64, 1e-10, affine=False)
mine, reference = compare("2d f32", (3, 4, 2), [[3, 2, 5, 2]], torch.float32, 1e-4)

# Eval mode: the running statistics, and no collective (only rank 0 calls it).
mine.eval()
reference.eval()
if r == 0:
    x = torch.randn(4, 3, 4, 2)
    check_close("eval", mine(x).detach(), reference(x).detach(), rtol=1e-5)
hvd.barrier()

# convert_sync_batchnorm keeps the layer's parameters and buffers.
model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.BatchNorm2d(3))
converted = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
check("converted", isinstance(converted[1], hvd.SyncBatchNorm), type(converted[1]).__name__)
check("same weight", converted[1].weight is model[1].weight, "weight not kept")

# One value per channel over all ranks cannot be normalized: every rank raises.
layer = hvd.SyncBatchNorm(2)
try:
    layer(torch.ones(1 if r == 2 else 0, 2))
except ValueError as error:
    check("message", "more than 1 value" in str(error), str(error))
else:
    check("single value", False, "no error for one value per channel")
print(f"[{r}] sync batch norm OK", flush=True)
hvd.shutdown()
