"""cerar.torch collectives on every rank. Usage: torch_ops.py [ring|cerar]"""
import sys

import torch

import cerar.torch as hvd
from common import check, check_close

algorithm = sys.argv[1] if len(sys.argv) > 1 else "ring"
hvd.init(algorithm=algorithm)
r, n = hvd.rank(), hvd.size()
rtol = 0.0 if algorithm == "ring" else 1e-2
ranks_sum = n * (n - 1) / 2
base = torch.arange(500, dtype=torch.float32)

x = base + r
check_close("sum", hvd.allreduce(x, op=hvd.Sum, name="sum"), n * base + ranks_sum, rtol=rtol)
check_close("input untouched", x, base + r)
check_close("average", hvd.allreduce(x, name="avg"), base + ranks_sum / n, rtol=rtol, atol=1e-4)
check_close("average flag", hvd.allreduce(x, average=False, name="avgflag"),
            n * base + ranks_sum, rtol=rtol)
ints = torch.tensor([r, -r, 3], dtype=torch.int64)
check_close("min", hvd.allreduce(ints, op=hvd.Min, name="min"), [0, -(n - 1), 3])
check_close("max", hvd.allreduce(ints, op=hvd.Max, name="max"), [n - 1, 0, 3])
scaled = hvd.allreduce(x, op=hvd.Sum, name="scaled", prescale_factor=3.0, postscale_factor=0.5)
check_close("pre/postscale", scaled, (n * base + ranks_sum) * 1.5, rtol=rtol, atol=1e-3)

# in place on a 2-d tensor, a Parameter, a tensor that requires grad
y = torch.full((4, 5), float(r + 1), dtype=torch.float64)
check("in place", hvd.allreduce_(y, op=hvd.Sum, name="inplace") is y, "returned another tensor")
check_close("in place value", y, torch.full((4, 5), n * (n + 1) / 2.0), rtol=rtol)
p = torch.nn.Parameter(torch.full((3,), float(r)))
hvd.allreduce_(p, op=hvd.Sum, name="param")
check_close("parameter", p.detach(), torch.full((3,), ranks_sum), rtol=rtol)
w = torch.ones(3, requires_grad=True)
rg = hvd.allreduce(w * 2, op=hvd.Sum, name="rg")
check("differentiable", rg.requires_grad, "the result of a differentiable input has no grad_fn")
check_close("requires_grad", rg.detach(), torch.full((3,), 2.0 * n), rtol=rtol)
# the common call's way by address: a view at an offset into its storage, a scalar; a
# non-contiguous tensor in place is refused as any other call's
whole = torch.full((10,), -1.0)
whole[4:].fill_(float(r))
hvd.allreduce_(whole[4:], op=hvd.Sum, name="offset")
check_close("view at an offset", whole, torch.tensor([-1.0] * 4 + [ranks_sum] * 6), rtol=rtol)
scalar = torch.tensor(float(r + 1), dtype=torch.float64)
hvd.allreduce_(scalar, op=hvd.Sum, name="scalar")
check_close("scalar", scalar, torch.tensor(n * (n + 1) / 2.0, dtype=torch.float64), rtol=rtol)
try:
    hvd.allreduce_(torch.zeros(3, 4).t(), op=hvd.Sum, name="nc_inplace")
    check("non-contiguous in place", False, "was accepted")
except hvd.InvalidArgumentError:
    pass

# non-contiguous input, bfloat16 and float16
t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * (r + 1)
check_close("non-contiguous", hvd.allreduce(t, op=hvd.Sum, name="nc"),
            torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * n * (n + 1) / 2, rtol=rtol)
b = hvd.allreduce(torch.full((7,), 0.5, dtype=torch.bfloat16), op=hvd.Sum, name="bf16")
check("bf16 dtype", b.dtype == torch.bfloat16, str(b.dtype))
check_close("bf16", b.float(), torch.full((7,), 0.5 * n), rtol=1e-2)
h = hvd.allreduce(torch.full((7,), 0.25, dtype=torch.float16), op=hvd.Sum, name="f16")
check_close("f16", h.float(), torch.full((7,), 0.25 * n), rtol=1e-3)

# async, grouped
handles = [hvd.allreduce_async(torch.full((10 + i,), float(r)), op=hvd.Sum, name=f"a.{i}")
           for i in range(5)]
for i, handle in enumerate(handles):
    check_close(f"async {i}", hvd.synchronize(handle), torch.full((10 + i,), ranks_sum),
                rtol=rtol)
outs = hvd.grouped_allreduce([torch.full((2, 2), float(r)), torch.full((5,), 1.0)], op=hvd.Sum)
check_close("grouped 0", outs[0], torch.full((2, 2), ranks_sum), rtol=rtol)
check_close("grouped 1", outs[1], torch.full((5,), float(n)), rtol=rtol)

# broadcast from the last rank, allgather with uneven first dimensions
root = n - 1
check_close("broadcast", hvd.broadcast(torch.full((3, 2), float(r)), root, name="bc"),
            torch.full((3, 2), float(root)))
gathered = hvd.allgather(torch.full((r + 1, 2), float(r)), name="gather")
expected = torch.cat([torch.full((k + 1, 2), float(k)) for k in range(n)])
check_close("allgather", gathered, expected)
g16 = hvd.allgather(torch.full((r + 1,), float(r), dtype=torch.bfloat16), name="gather_bf16")
check("allgather bf16", g16.dtype == torch.bfloat16 and g16.shape[0] == n * (n + 1) // 2,
      f"{g16.dtype} {tuple(g16.shape)}")

# objects
obj = hvd.broadcast_object({"rank": r, "list": list(range(r + 3))}, root_rank=1 % n)
check("broadcast_object", obj == {"rank": 1 % n, "list": list(range(1 % n + 3))}, str(obj))
everyone = hvd.allgather_object(("rank", r))
check("allgather_object", everyone == [("rank", k) for k in range(n)], str(everyone))

hvd.barrier()
if r == 0:
    last = hvd.join()
else:
    check_close("after join", hvd.allreduce(torch.ones(4), op=hvd.Sum, name="aj"),
                torch.full((4,), n - 1.0), rtol=rtol)
    last = hvd.join()
check("join", 0 <= last < n, f"last joined rank {last}")
hvd.shutdown()
print("torch OK", flush=True)
