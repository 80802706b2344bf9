"""reducescatter, grouped_reducescatter, alltoall (and their async forms) against numpy
references on every dtype with uneven splits; their gradients (torch.autograd.gradcheck in
float64); mismatch errors on every rank. Every rank rebuilds every other rank's inputs from
seeds, so each checks its own result against the full reference."""
import numpy as np
import torch

import cerar.torch as hvd
from common import check, check_close, fail

hvd.init(algorithm="ring")
r, n = hvd.rank(), hvd.size()

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8]
NP = {torch.float32: np.float64, torch.float64: np.float64, torch.float16: np.float64,
      torch.bfloat16: np.float64, torch.int8: np.int8, torch.int16: np.int16,
      torch.int32: np.int32, torch.int64: np.int64, torch.uint8: np.uint8}


def inputs_of(rank, shape, dtype, seed):
    """Rank `rank`'s input: small integers (exact in every dtype and every summation order)."""
    g = torch.Generator().manual_seed(seed * 97 + rank)
    low = 0 if dtype == torch.uint8 else -20
    return torch.randint(low, 20, shape, generator=g).to(dtype)


def share(rows, rank):
    return rows // n + (1 if rank < rows % n else 0), rank * (rows // n) + min(rank, rows % n)


def reference_reduce(shape, dtype, seed, op):
    """numpy's reduction of every rank's input, in the dtype's own arithmetic for integers
    (sums wrap), float64 for floating types (exact here: small integers)."""
    stack = np.stack([inputs_of(i, shape, dtype, seed).double().numpy() for i in range(n)])
    if op == hvd.Min:
        return stack.min(0)
    if op == hvd.Max:
        return stack.max(0)
    total = stack.astype(np.int64).sum(0).astype(NP[dtype]) if not dtype.is_floating_point \
        else stack.sum(0)
    if op == hvd.Average:
        total = np.trunc(total.astype(np.float64) / n) if not dtype.is_floating_point \
            else total / n
    return total.astype(np.float64)


def as_numpy(t):
    return t.double().numpy() if t.dtype == torch.bfloat16 else t.to(torch.float64).numpy()


# --- reducescatter on every dtype, uneven first dimensions, every op ------------------------------
case = 0
for dtype in DTYPES:
    for shape in ([4 * n], [4 * n + 3, 2], [n - 1, 3, 2], [1, 5], [0, 2]):
        ops = [hvd.Sum, hvd.Min, hvd.Max] + ([hvd.Average] if dtype != torch.uint8 else [])
        for op in ops:
            case += 1
            x = inputs_of(r, shape, dtype, case)
            out = hvd.reducescatter(x, op=op, name=f"rs.{case}")
            rows, start = share(shape[0], r)
            expected = reference_reduce(shape, dtype, case, op)[start:start + rows]
            check(f"reducescatter {dtype} {shape} {op} dtype", out.dtype == dtype, str(out.dtype))
            check(f"reducescatter {dtype} {shape} {op} input untouched",
                  torch.equal(x, inputs_of(r, shape, dtype, case)), "")
            tolerance = 1e-2 if dtype in (torch.float16, torch.bfloat16) and op == hvd.Average \
                else 0.0
            check_close(f"reducescatter {dtype} {shape} {op}", as_numpy(out), expected,
                        rtol=tolerance)

# pre/postscale (floating types): sum(x * pre) * post; integers scale in float64, truncated
for dtype in (torch.float32, torch.float64, torch.int32):
    case += 1
    x = inputs_of(r, [2 * n + 1, 3], dtype, case)
    out = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0,
                            name=f"rs.scaled.{case}")
    rows, start = share(2 * n + 1, r)
    stack = np.stack([inputs_of(i, [2 * n + 1, 3], dtype, case).double().numpy()
                      for i in range(n)])
    if dtype.is_floating_point:
        expected = (stack * 0.5).sum(0) * 3.0
    else:
        expected = np.trunc(np.trunc(stack * 0.5).sum(0) * 3.0)
    check_close(f"reducescatter scaled {dtype}", as_numpy(out), expected[start:start + rows],
                rtol=1e-6)

# grouped: one fused unit (one buffer), several shapes and an uneven one
before = hvd.stats()
shapes = [[3 * n + 1, 2], [n], [2, 2, 2]]
case += 1
xs = [inputs_of(r, s, torch.float32, case + i) for i, s in enumerate(shapes)]
outs = hvd.grouped_reducescatter(xs, op=hvd.Average, name="grouped.rs")
after = hvd.stats()
check("grouped reducescatter is one buffer",
      after["reducescatter_buffers"] - before["reducescatter_buffers"] == 1
      and after["tensors_scattered"] - before["tensors_scattered"] == 3,
      f"{before} -> {after}")
for i, (s, out) in enumerate(zip(shapes, outs)):
    rows, start = share(s[0], r)
    check_close(f"grouped reducescatter {i}", out.numpy(),
                reference_reduce(s, torch.float32, case + i, hvd.Average)[start:start + rows],
                rtol=1e-6)
case += len(shapes)

# async: several in flight at once, every dtype; waited in reverse order
handles = []
for dtype in DTYPES:
    case += 1
    handles.append((dtype, case, hvd.reducescatter_async(inputs_of(r, [2 * n + 1], dtype, case),
                                                         op=hvd.Sum, name=f"rs.async.{case}")))
grouped = hvd.grouped_reducescatter_async(
    [inputs_of(r, [n + 2], torch.int64, 1000 + i) for i in range(3)], op=hvd.Sum,
    name="grouped.rs.async")
for dtype, seed, handle in reversed(handles):
    rows, start = share(2 * n + 1, r)
    check_close(f"reducescatter_async {dtype}", as_numpy(hvd.synchronize(handle)),
                reference_reduce([2 * n + 1], dtype, seed, hvd.Sum)[start:start + rows])
for i, out in enumerate(hvd.synchronize(grouped)):
    rows, start = share(n + 2, r)
    check_close(f"grouped_reducescatter_async {i}", out.numpy(),
                reference_reduce([n + 2], torch.int64, 1000 + i, hvd.Sum)[start:start + rows])

# Horovod's own figures: ones of every rank's share back as size for Sum, 1 for Average
for op, expected in ((hvd.Sum, n), (hvd.Average, 1)):
    x = torch.ones(4 * n, 3, dtype=torch.float64, requires_grad=True)
    hvd.reducescatter(x, op=op, name=f"rs.grad.{op}").backward(torch.ones(4, 3,
                                                                          dtype=torch.float64))
    check_close(f"reducescatter grad {op}", x.grad.numpy(), np.full((4 * n, 3), expected))


# --- grouped_allgather: one unit per dtype, rows differing per rank and tensor -------------------
before = hvd.stats()
mine = [inputs_of(r, [r % 3, 2], torch.float32, 700), inputs_of(r, [r + 1], torch.float32, 701),
        inputs_of(r, [1, 2, 2], torch.float32, 702)]
gathered = hvd.grouped_allgather(mine, name="gag.same")
after = hvd.stats()
check("grouped_allgather of one dtype is one buffer",
      after["allgather_buffers"] - before["allgather_buffers"] == 1, f"{before} -> {after}")
for k, (shape_of, seed) in enumerate(((lambda i: [i % 3, 2], 700), (lambda i: [i + 1], 701),
                                       (lambda i: [1, 2, 2], 702))):
    expected = np.concatenate([inputs_of(i, shape_of(i), torch.float32, seed).numpy()
                               for i in range(n)])
    check_close(f"grouped_allgather {k}", gathered[k].numpy(), expected)
for dtype in DTYPES:
    case += 1
    pair = [inputs_of(r, [r + 1, 2], dtype, case), inputs_of(r, [2], torch.int64, case)]
    outs = hvd.synchronize(hvd.grouped_allgather_async(pair, name=f"gag.{case}"))
    check(f"grouped_allgather {dtype} dtypes", [o.dtype for o in outs] == [dtype, torch.int64], "")
    check_close(f"grouped_allgather {dtype}", as_numpy(outs[0]), np.concatenate(
        [inputs_of(i, [i + 1, 2], dtype, case).double().numpy() for i in range(n)]))
    check_close(f"grouped_allgather {dtype} int64", outs[1].numpy(), np.concatenate(
        [inputs_of(i, [2], torch.int64, case).numpy() for i in range(n)]))

# --- alltoall ---------------------------------------------------------------------------------
def splits_of(rank):
    """Uneven rows from `rank` to every rank, zeros included."""
    return [(rank + j) % 3 for j in range(n)]


def alltoall_reference(dtype, seed, trailing, unsent):
    """What this rank receives: from each rank i, the rows i sends to it, in rank order."""
    parts, received = [], []
    for i in range(n):
        sp = splits_of(i)
        x = inputs_of(i, [sum(sp) + unsent, *trailing], dtype, seed).double().numpy()
        begin = sum(sp[:r])
        parts.append(x[begin:begin + sp[r]])
        received.append(sp[r])
    return np.concatenate(parts), received


for dtype in DTYPES:
    for trailing in ([], [2], [2, 3]):
        case += 1
        sp = splits_of(r)
        x = inputs_of(r, [sum(sp) + 1, *trailing], dtype, case)  # one trailing row unsent
        out, received = hvd.alltoall(x, torch.tensor(sp, dtype=torch.int32), name=f"a2a.{case}")
        expected, expected_received = alltoall_reference(dtype, case, trailing, 1)
        check(f"alltoall {dtype} {trailing} dtype", out.dtype == dtype, str(out.dtype))
        check_close(f"alltoall {dtype} {trailing}", as_numpy(out), expected)
        check(f"alltoall {dtype} received splits",
              received.dtype == torch.int32 and received.tolist() == expected_received,
              f"{received}")
        # equal split: rank i's block j goes to rank j
        case += 1
        x = inputs_of(r, [2 * n, *trailing], dtype, case)
        out = hvd.alltoall(x, name=f"a2a.equal.{case}")
        expected = np.concatenate([inputs_of(i, [2 * n, *trailing], dtype, case).double()
                                   .numpy()[2 * r:2 * r + 2] for i in range(n)])
        check_close(f"alltoall equal {dtype} {trailing}", as_numpy(out), expected)

handles = [hvd.alltoall_async(inputs_of(r, [n, 2], torch.float32, 500 + k), name=f"a2a.async.{k}")
           for k in range(4)]
for k, handle in enumerate(handles):
    out, received = hvd.synchronize(handle)
    expected = np.stack([inputs_of(i, [n, 2], torch.float32, 500 + k).numpy()[r]
                         for i in range(n)])
    check_close(f"alltoall_async {k}", out.numpy(), expected)
    check(f"alltoall_async {k} splits", received.tolist() == [1] * n, f"{received}")

# Horovod's figure: the gradient of ones is ones (each row goes back to its sender)
x = torch.ones(sum(splits_of(r)), 2, dtype=torch.float64, requires_grad=True)
out, received = hvd.alltoall(x, torch.tensor(splits_of(r), dtype=torch.int32), name="a2a.grad")
out.backward(torch.ones_like(out))
check_close("alltoall grad", x.grad.numpy(), np.ones((sum(splits_of(r)), 2)))

# --- gradcheck (float64). Every rank feeds the same input and gradcheck perturbs it alike, so
# each function is the whole job's function on every rank: what an allgather puts back
# together, or an alltoall sent back to where it came from.
torch.manual_seed(7)
base = torch.randn(2 * n + 1, 3, dtype=torch.float64)
counter = [0]


def fresh_name(kind):
    counter[0] += 1
    return f"gc.{kind}.{counter[0]}"


for op, pre, post in ((hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 0.5, 3.0)):
    def scattered(t, op=op, pre=pre, post=post):
        part = hvd.reducescatter(t, op=op, prescale_factor=pre, postscale_factor=post,
                                 name=fresh_name("rs"))
        return hvd.allgather(part, name=fresh_name("ag"))
    x = base.clone().requires_grad_()
    if not torch.autograd.gradcheck(scattered, (x,), eps=1e-6, atol=1e-5):
        fail(f"gradcheck reducescatter {op} {pre} {post}")


def grouped_scattered(a, b):
    parts = hvd.grouped_reducescatter([a, b], op=hvd.Sum, name=fresh_name("grs"))
    return tuple(hvd.allgather(p, name=fresh_name("ag")) for p in parts)


a = base.clone().requires_grad_()
b = torch.randn(n + 1, dtype=torch.float64).requires_grad_()
hvd.broadcast_(b.data, 0, name="gc.same.b")
if not torch.autograd.gradcheck(grouped_scattered, (a, b), eps=1e-6, atol=1e-5):
    fail("gradcheck grouped reducescatter")

# every rank sends the same uneven splits (so the inputs may be equal), with an unsent row
common_splits = [(j % 3) for j in range(n)]


def round_trip(t):
    out, received = hvd.alltoall(t, torch.tensor(common_splits, dtype=torch.int32),
                                 name=fresh_name("a2a"))
    back, _ = hvd.alltoall(out * 2.0, received, name=fresh_name("a2a"))
    return back


x = torch.randn(sum(common_splits) + 1, 2, dtype=torch.float64)
hvd.broadcast_(x, 0, name="gc.same.x")
out = round_trip(x.clone())
check_close("alltoall round trip", out.numpy(), 2.0 * x[:sum(common_splits)].numpy())
x = x[:sum(common_splits)].clone().requires_grad_()
if not torch.autograd.gradcheck(round_trip, (x,), eps=1e-6, atol=1e-5):
    fail("gradcheck alltoall")

# --- errors: bad arguments on this rank; mismatches on every rank -------------------------------
for bad, kind in (
        (lambda: hvd.alltoall(torch.zeros(n + 1)), ValueError),                  # not divisible
        (lambda: hvd.alltoall(torch.zeros(n - 1), torch.ones(n, dtype=torch.int32)), ValueError),
        (lambda: hvd.alltoall(torch.zeros(n), torch.ones(n)), ValueError),     # float splits
        (lambda: hvd.alltoall(torch.zeros(n), [1] * (n + 1)), ValueError),
        (lambda: hvd.reducescatter(torch.tensor(1.0)), ValueError),
        (lambda: hvd.reducescatter(torch.zeros(n), op=hvd.Product), RuntimeError)):
    try:
        bad()
        fail(f"no {kind.__name__} for a bad call")
    except kind:
        pass


def expect_mismatch(label, call):
    try:
        call()
    except hvd.MismatchError as error:
        message = str(error)
        gathered = hvd.allgather_object(message)
        check(f"{label}: the same error on every rank", len(set(gathered)) == 1, str(gathered))
        return
    fail(f"{label}: no MismatchError")


expect_mismatch("reducescatter shape",
                lambda: hvd.reducescatter(torch.zeros(n + r % 2, 2), name="mm.rs.shape"))
expect_mismatch("reducescatter dtype", lambda: hvd.reducescatter(
    torch.zeros(n, dtype=torch.int32 if r % 2 else torch.float32), name="mm.rs.dtype"))
expect_mismatch("reducescatter op", lambda: hvd.reducescatter(
    torch.zeros(n), op=hvd.Sum if r % 2 else hvd.Average, name="mm.rs.op"))
expect_mismatch("grouped reducescatter shapes", lambda: hvd.grouped_reducescatter(
    [torch.zeros(n), torch.zeros(n + r % 2)], name="mm.grs"))
expect_mismatch("alltoall trailing dimension",
                lambda: hvd.alltoall(torch.zeros(n, 2 + r % 2), name="mm.a2a.dim"))
expect_mismatch("alltoall dtype", lambda: hvd.alltoall(
    torch.zeros(n, dtype=torch.int32 if r % 2 else torch.float32), name="mm.a2a.dtype"))
# the runtime goes on after each
check_close("after mismatches", hvd.reducescatter(torch.ones(n), op=hvd.Sum, name="after"),
            [float(n)])
print(f"[{r}] scatter OK", flush=True)
hvd.shutdown()
