"""horovod.torch's names and semantics in cerar.torch: flags, cross ranks, Product, int8/int16,
integer average and scaling, Compression, elastic (outside its mode), differentiable collectives,
duplicate names, grouped_allgather, sparse_allreduce_async, and the same basics in cerar.numpy / cerar.jax."""
import warnings

import torch

import cerar.jax as cj
import cerar.numpy as cn
import cerar.torch as hvd
from common import check, check_close

hvd.init(algorithm="ring")
r, n = hvd.rank(), hvd.size()

# names and flags
for flag, expected in (("gloo_built", True), ("gloo_enabled", True), ("mpi_built", False),
                       ("mpi_enabled", False), ("mpi_threads_supported", False),
                       ("ccl_built", False), ("ddl_built", False), ("rocm_built", False)):
    check(flag, getattr(hvd, flag)() is expected, f"{getattr(hvd, flag)()} != {expected}")
check("nccl_built", hvd.cuda_built() or hvd.nccl_built() == 0, "NCCL only with the CUDA build")
check("nccl version", not hvd.cuda_built() or hvd.nccl_built() >= 2000, str(hvd.nccl_built()))
check("cross", (hvd.cross_rank(), hvd.cross_size(), hvd.is_homogeneous()) == (0, 1, True),
      "one host: every rank is alone among those with its local rank")
for module in (cn, cj):
    for name in ("init", "shutdown", "rank", "size", "local_rank", "local_size", "Sum",
                 "Average", "gloo_built", "cross_rank"):
        check(f"{module.__name__}.{name}", hasattr(module, name), "missing")
    check(f"{module.__name__}.rank()", module.rank() == r and module.size() == n, "")
check("HorovodInternalError", issubclass(hvd.HorovodInternalError, RuntimeError), "")

# Product (exact, from every rank's tensor)
x = torch.tensor([r + 1.0, -1.0, 2.0])
check_close("product", hvd.allreduce(x, op=hvd.Product, name="prod"),
            [float(torch.arange(1, n + 1).prod()), (-1.0) ** n, 2.0 ** n])
half = torch.tensor([r + 1.0, 0.5], dtype=torch.float16)
check_close("product half", hvd.allreduce(half, op=hvd.Product, name="prodh").float(),
            [float(torch.arange(1, n + 1).prod()), 0.5 ** n])
ints = torch.tensor([r + 1, 2], dtype=torch.int64)
check_close("product int", hvd.allreduce(ints, op=hvd.Product, name="prodi"),
            [int(torch.arange(1, n + 1).prod()), 2 ** n])

# int8 / int16: sums wrap as in the narrow type; min and max
for dtype, big in ((torch.int8, 100), (torch.int16, 30000)):
    t = torch.tensor([big, -r, 1], dtype=dtype)
    out = hvd.allreduce(t, op=hvd.Sum, name=f"sum.{dtype}")
    check(f"{dtype} dtype", out.dtype == dtype, str(out.dtype))
    expected = torch.tensor([big * n, -n * (n - 1) // 2, n], dtype=torch.int64).to(dtype)
    check(f"{dtype} wrapping sum", torch.equal(out, expected), f"{out} != {expected}")
    check_close(f"{dtype} min", hvd.allreduce(t, op=hvd.Min, name=f"min.{dtype}"), [big, -(n - 1), 1])
    g = hvd.allgather(t, name=f"gather.{dtype}")
    check(f"{dtype} allgather", g.dtype == dtype and g.shape == (3 * n,), f"{g}")
    b = hvd.broadcast(torch.tensor([r], dtype=dtype), n - 1, name=f"bcast.{dtype}")
    check_close(f"{dtype} broadcast", b, [n - 1])

# integer average and scaling: float64, truncated toward zero
t = torch.tensor([7, -7, r], dtype=torch.int32)
avg = hvd.allreduce(t, op=hvd.Average, name="iavg")
check("int average dtype", avg.dtype == torch.int32, str(avg.dtype))
check_close("int average", avg, [7, -7, int((n * (n - 1) / 2) / n)])
pre = hvd.allreduce(torch.tensor([5, -5], dtype=torch.int64), op=hvd.Sum, name="ipre",
                    prescale_factor=0.5)
check_close("int prescale truncates each rank's value", pre, [2 * n, -2 * n])
post = hvd.allreduce(torch.tensor([5, -5], dtype=torch.int64), op=hvd.Sum, name="ipost",
                     postscale_factor=0.3)
check_close("int postscale truncates the sum", post, [int(5 * n * 0.3), -int(5 * n * 0.3)])

# Compression
for compressor, wire in ((hvd.Compression.fp16, torch.float16),
                         (hvd.Compression.bf16, torch.bfloat16)):
    c, ctx = compressor.compress(torch.ones(4, dtype=torch.float64))
    check("compress", c.dtype == wire, str(c.dtype))
    check("decompress", compressor.decompress(c, ctx).dtype == torch.float64, "")
    i, ctx = compressor.compress(torch.ones(4, dtype=torch.int32))
    check("integers pass", i.dtype == torch.int32 and compressor.decompress(i, ctx).dtype == torch.int32, "")
out = hvd.allreduce(torch.full((5,), float(r)), op=hvd.Sum, name="fp16",
                    compression=hvd.Compression.fp16)
check("compressed allreduce dtype", out.dtype == torch.float32, str(out.dtype))
check_close("compressed allreduce", out, [n * (n - 1) / 2] * 5)
check("none", hvd.Compression.none.compress(x)[0] is x, "")

# fp16/bf16 of float32 CPU tensors: the runtime's 16-bit wire, float32 adds at every hop
# (docs/wires.md): the same bits on every rank, within the bound of the fp64 sum, half the bytes
import cerar  # noqa: E402

g = torch.randn(4099, generator=torch.Generator().manual_seed(17 + r))
inputs = hvd.allgather(g.double().unsqueeze(0), name="wire.inputs")
exact, magnitude = inputs.sum(0), inputs.abs().sum(0)


def sent_by(call):
    before = cerar.stats()
    out = call()
    after = cerar.stats()
    return out, after["bytes_sent"] - before["bytes_sent"], \
        after["wire_buffers"] - before["wire_buffers"]


full, full_bytes, full_wires = sent_by(lambda: hvd.allreduce(g, op=hvd.Sum, name="wire.f32"))
check("float32 ring sends", full_bytes > 0 and full_wires == 0, f"{full_bytes} {full_wires}")
for compressor, unit in ((hvd.Compression.fp16, 2.0 ** -11), (hvd.Compression.bf16, 2.0 ** -8)):
    tag = compressor.runtime_wire
    out, sent, wires = sent_by(lambda: hvd.allreduce(g, op=hvd.Sum, name=f"wire.{tag}",
                                                     compression=compressor))
    check(f"{tag} wire dtype", out.dtype == torch.float32, str(out.dtype))
    check(f"{tag} wire halves the bytes", 2 * sent == full_bytes and wires == 1,
          f"{sent} * 2 != {full_bytes} or {wires} wire buffers")
    rows = hvd.allgather(out.unsqueeze(0), name=f"wire.{tag}.rows")
    check(f"{tag} wire: bit-identical on every rank",
          all(torch.equal(rows[i], rows[0]) for i in range(n)), "ranks differ")
    bound = 1.01 * (n * unit + (n - 1) * 2.0 ** -24) * magnitude
    error = (out.double() - exact).abs()
    check(f"{tag} wire within bound of the fp64 sum", bool((error <= bound).all()),
          f"max excess {float((error - bound).max())}")
    check(f"{tag} wire rounds", bool((error > 0).any()), "no element rounded: no wire?")
    s = cerar.stats()  # the choice and its predicted bound (docs/wires.md, "Error budget")
    u_pred = unit + (2.0 ** -15 if tag == "fp16" else 0)
    check(f"{tag} wire in the stats", s["last_choice"] == f"ring-{tag}" and s["budget_buffers"] == 0
          and abs(s["predicted_error_last"] - (n * u_pred + (n - 1) * 2.0 ** -24)) < 1e-12, str(s))
# int8 (wire="int8"): a quarter of the bytes and a scale per 256 elements, bit-identical on
# every rank, within its bound relative to the largest sum of magnitudes (docs/wires.md)
out, sent, wires = sent_by(lambda: hvd.synchronize(
    hvd.allreduce_async(g, op=hvd.Sum, name="wire.int8", wire="int8")))
check("int8 wire: a quarter of the bytes", 0.25 * full_bytes < sent < 0.26 * full_bytes
      and wires == 1, f"{sent} of {full_bytes}, {wires} wire buffers")
rows = hvd.allgather(out.unsqueeze(0), name="wire.int8.rows")
check("int8 wire: bit-identical on every rank",
      all(torch.equal(rows[i], rows[0]) for i in range(n)), "ranks differ")
u8 = (1 + 2.0 ** -24) / 254 + 2.0 ** -24
error = (out.double() - exact).abs()
check("int8 wire within bound of the fp64 sum",
      float(error.max()) <= 1.01 * (n * u8 + (n - 1) * 2.0 ** -24) * float(magnitude.max()),
      f"{float(error.max())} of {float(magnitude.max())}")
check("int8 wire in the stats", cerar.stats()["last_choice"] == "ring-int8", str(cerar.stats()))
# int8 also carries float16/bfloat16 tensors (over a float32 copy, rounded back once): the
# same bytes as float32's int8 ring, the dtype kept, the int8 bound plus one rounding
for dtype, unit in ((torch.float16, 2.0 ** -11), (torch.bfloat16, 2.0 ** -8)):
    h = g.to(dtype)
    inputs16 = hvd.allgather(h.double().unsqueeze(0), name=f"wire.int8.{dtype}.in")
    exact16, magnitude16 = inputs16.sum(0), inputs16.abs().sum(0)
    out16, sent16, _ = sent_by(lambda: hvd.synchronize(
        hvd.allreduce_async(h, op=hvd.Sum, name=f"wire.int8.{dtype}", wire="int8")))
    check(f"int8 wire on {dtype}: dtype and bytes", out16.dtype == dtype and sent16 == sent,
          f"{out16.dtype}, {sent16} against {sent}")
    rows = hvd.allgather(out16.unsqueeze(0), name=f"wire.int8.{dtype}.rows")
    check(f"int8 wire on {dtype}: bit-identical on every rank",
          all(torch.equal(rows[i], rows[0]) for i in range(n)), "ranks differ")
    error = float((out16.double() - exact16).abs().max())
    check(f"int8 wire on {dtype} within bound", error <= 1.01 * (
        n * u8 + (n - 1) * 2.0 ** -24 + unit) * float(magnitude16.max()),
        f"{error} of {float(magnitude16.max())}")
try:
    hvd.allreduce_async(g.double(), name="wire.f64", op=hvd.Sum, wire="int8")
    check("int8 wire refuses float64", False, "no error")
except TypeError as error:
    check("int8 wire refuses float64", "float32" in str(error), str(error))
avg = hvd.allreduce(g, name="wire.avg", compression=hvd.Compression.fp16)
check_close("fp16 wire average", avg, (exact / n).float(), atol=0.01)
# A wire asked for differently on one rank fails on every rank, and the runtime goes on.
try:
    hvd.allreduce(g, name="wire.mismatch",
                  compression=hvd.Compression.fp16 if r == 0 else hvd.Compression.none)
    check("wire mismatch raises", False, "no error")
except cerar.MismatchError as error:
    check("wire mismatch names the wire", "fp16" in str(error), str(error))

# elastic outside cerarrun's elastic mode: run syncs rank 0's state, then calls once
layer = torch.nn.Linear(2, 1)
torch.nn.init.constant_(layer.weight, float(r))
state = hvd.elastic.TorchState(layer, torch.optim.SGD(layer.parameters(), lr=0.1), step=r)
got = hvd.elastic.run(lambda s: (s.step, s.model.weight.sum().item()))(state)
check("elastic run syncs from rank 0", got == (0, 0.0), str(got))

# gradients (Horovod's): allreduce -> the same allreduce of the gradients
a = torch.full((3,), float(r), requires_grad=True)
hvd.allreduce(a, op=hvd.Sum, name="g.sum").backward(torch.full((3,), r + 1.0))
check_close("allreduce grad", a.grad, [n * (n + 1) / 2] * 3)
a = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
hvd.allreduce(a, name="g.avg").sum().backward()
check_close("average grad", a.grad, torch.ones(2, 2))
gs = [torch.ones(3, requires_grad=True), torch.ones(2, requires_grad=True)]
outs = hvd.grouped_allreduce(gs, op=hvd.Sum, name="g.grouped")
(outs[0].sum() * 2).backward()  # the second output gets no gradient: zeros in its place
check_close("grouped grad", gs[0].grad, [2.0 * n] * 3)
# allgather -> this rank's rows of the averaged gradient
rows = r + 1
a = torch.full((rows, 2), float(r), requires_grad=True)
gathered = hvd.allgather(a, name="g.gather")
check("gather shape", gathered.shape == (n * (n + 1) // 2, 2), str(gathered.shape))
weights = torch.cat([torch.full((k + 1, 2), float(k)) for k in range(n)]) * (r + 1)
(gathered * weights).sum().backward()
check_close("allgather grad", a.grad, torch.full((rows, 2), r * (n + 1) / 2))
# broadcast -> the averaged gradient on the root, zero elsewhere
a = torch.full((3,), float(r), requires_grad=True)
b = hvd.broadcast(a, 1, name="g.bcast")
check_close("broadcast value", b.detach(), [1.0] * 3)
b.backward(torch.full((3,), float(r)))
check_close("broadcast grad", a.grad, [(n - 1) / 2 if r == 1 else 0.0] * 3)

# a name already in flight is refused (the first one completes once every rank sends it)
first = hvd.allreduce_async(torch.ones(3), name="dup") if r == 0 else None
if r == 0:
    try:
        hvd.allreduce_async(torch.ones(3), name="dup")
        check("duplicate", False, "no error")
    except ValueError:
        pass
hvd.barrier()
if r > 0:
    first = hvd.allreduce_async(torch.ones(3), name="dup")
check_close("first dup completes", hvd.synchronize(first), [1.0] * 3)

# grouped_allgather, sparse_allreduce_async
ga = hvd.grouped_allgather([torch.full((1,), float(r)), torch.full((2, 2), r, dtype=torch.int64)],
                           name="gag")
check_close("grouped_allgather", ga[0], [float(k) for k in range(n)])
check("grouped_allgather 2", ga[1].shape == (2 * n, 2) and int(ga[1][-1, 0]) == n - 1, str(ga[1]))
dense = torch.zeros(6, 3)
dense[r % 6, :] = 1.0
dense[5, 1] = r
result = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse", op=hvd.Average)()
check("sparse result", result.is_sparse, "")
check_close("sparse average", result.to_dense(), hvd.allreduce(dense, name="dense"), atol=1e-6)

# as Horovod: while a rank has joined, allgather and broadcast fail on the others
if r == 0:
    hvd.join()
else:
    for what, call in (("allgather", lambda: hvd.allgather(torch.ones(2), name="aj.g")),
                       ("broadcast", lambda: hvd.broadcast(torch.ones(2), 1, name="aj.b"))):
        try:
            call()
            check(f"{what} after join raises", False, "no error")
        except hvd.InvalidArgumentError as e:
            check(f"{what} after join names rank 0", e.peer == 0 and "has joined" in str(e),
                  str(e))
    hvd.join()

with warnings.catch_warnings():
    warnings.simplefilter("error")
    hvd.barrier()
print("parity OK", flush=True)
hvd.shutdown()
