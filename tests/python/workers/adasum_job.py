"""op=Adasum across ranks, against a numpy reference of the rule computed here: random inputs
in f64/f32/f16, single, grouped (fused) and concurrently launched tensors; orthogonal inputs
add, equal inputs average; the pair tree's symmetries leave the result unchanged; the
optimizer combines local steps. On a non-power-of-two job every rank gets the same clear error.
"""
import numpy as np
import torch

import cerar.torch as hvd
from common import check, check_close

hvd.init()
r, n = hvd.rank(), hvd.size()

if n & (n - 1):
    for call in (lambda: hvd.allreduce(torch.ones(4), op=hvd.Adasum, name="odd"),
                 lambda: hvd.grouped_allreduce([torch.ones(2)], op=hvd.Adasum, name="odd.g")):
        try:
            call()
        except hvd.InvalidArgumentError as error:
            check("message", "power-of-two" in str(error) and str(n) in str(error), str(error))
        else:
            check("non power of two", False, f"no error for Adasum on {n} ranks")
    model = torch.nn.Linear(3, 2)
    before = [p.detach().clone() for p in model.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    model(torch.ones(4, 3)).sum().backward()
    try:
        opt.step()
    except hvd.InvalidArgumentError as error:
        check("optimizer message", "power-of-two" in str(error), str(error))
    else:
        check("optimizer", False, f"no error for the Adasum optimizer on {n} ranks")
    for p, b in zip(model.parameters(), before):
        check("parameters kept", torch.equal(p.detach(), b), "a failed step moved them")
    # the runtime goes on
    check_close("after", hvd.allreduce(torch.ones(3), op=hvd.Sum, name="ok"), np.full(3, n))
    print(f"[{r}] adasum OK", flush=True)
    hvd.shutdown()
    raise SystemExit(0)


def reference(vectors, sizes):
    """The pair tree of the rule, tensor by tensor, in float64."""
    v = [np.asarray(x, np.float64).copy() for x in vectors]
    distance = 1
    while distance < len(v):
        for g in range(0, len(v), 2 * distance):
            a, b = v[g], v[g + distance]
            start = 0
            for size in sizes:
                x, y = a[start:start + size].copy(), b[start:start + size]
                dot, aa, bb = x @ y, x @ x, y @ y
                ca = 1 - dot / (2 * aa) if aa > 0 else 1.0
                cb = 1 - dot / (2 * bb) if bb > 0 else 1.0
                a[start:start + size] = ca * x + cb * y
                start += size
        distance *= 2
    return v[0]


def inputs(seed, shapes, dtype, mean=0.3):
    """Every rank's tensors (the same draw on every rank; rank q uses row q)."""
    rng = np.random.default_rng(seed)
    return [[torch.from_numpy(rng.normal(mean, 1.0, s)).to(dtype) for s in shapes]
            for _ in range(n)]


def flat(tensors):
    return np.concatenate([t.double().reshape(-1).numpy() for t in tensors])


shapes = [(5, 3), (7,), (2, 2, 2), (1,)]
sizes = [int(np.prod(s)) for s in shapes]
for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5), (torch.float16, 1e-2),
                   (torch.bfloat16, 3e-2)):
    tag = str(dtype).split(".")[1]
    data = inputs(len(tag), shapes, dtype)
    # one tensor at a time (the rule over each tensor alone)
    single = [hvd.allreduce(t, op=hvd.Adasum, name=f"single.{tag}.{i}")
              for i, t in enumerate(data[r])]
    for i, t in enumerate(single):
        check("dtype kept", t.dtype == dtype, str(t.dtype))
        expected = reference([flat([data[q][i]]) for q in range(n)], [sizes[i]])
        check_close(f"single {tag} {i}", t.double().reshape(-1).numpy(), expected, rtol=tol)
    # one fused buffer: dot products and norms stay per tensor
    grouped = hvd.grouped_allreduce(data[r], op=hvd.Adasum, name=f"grouped.{tag}")
    expected = reference([flat(data[q]) for q in range(n)], sizes)
    check_close(f"grouped {tag}", flat(grouped), expected, rtol=tol)
    check_close(f"fused = unfused {tag}", flat(grouped), flat(single), rtol=tol)
    # launched together: the runtime may fuse any of them, with the same result
    copies = [t.clone() for t in data[r]]
    handles = [hvd.allreduce_async_(t, op=hvd.Adasum, name=f"async.{tag}.{i}")
               for i, t in enumerate(copies)]
    check_close(f"async {tag}", flat([hvd.synchronize(h) for h in handles]), expected, rtol=tol)
# cerar.numpy takes the op as well.
import cerar.numpy as cn  # noqa: E402
data = inputs(4, [(9,)], torch.float64)
check_close("numpy", cn.allreduce(data[r][0].numpy(), op=cn.Adasum, name="numpy"),
            reference([flat(data[q]) for q in range(n)], [9]), rtol=1e-12)
# Per tensor is not the same as over the whole buffer: the check above can tell them apart.
data = inputs(1, shapes, torch.float64)
whole = reference([flat(data[q]) for q in range(n)], [sum(sizes)])
per_tensor = reference([flat(data[q]) for q in range(n)], sizes)
check("per tensor matters", np.max(np.abs(whole - per_tensor)) > 1e-3, "inputs too tame")

# Orthogonal gradients add; equal gradients average (exactly: the coefficients are 1 and 1/2).
orthogonal = torch.zeros(4 * n, dtype=torch.float64)
orthogonal[4 * r:4 * r + 4] = torch.arange(1.0, 5.0, dtype=torch.float64) * (r + 1)
check_close("orthogonal add", hvd.allreduce(orthogonal, op=hvd.Adasum, name="orthogonal"),
            torch.cat([torch.arange(1.0, 5.0, dtype=torch.float64) * (q + 1) for q in range(n)]))
equal = torch.from_numpy(np.random.default_rng(5).normal(size=37))
for dtype in (torch.float64, torch.float32):
    got = hvd.allreduce(equal.to(dtype), op=hvd.Adasum, name=f"equal.{dtype}")
    check("equal average", torch.equal(got, equal.to(dtype)), f"{got} != {equal}")

# The tree pairs rank 2k with 2k+1, then the pairs: permutations that keep that tree (swap
# within pairs, swap pairs) give the same result within rounding.
data = inputs(9, [(11,), (6,)], torch.float64)
base = flat(hvd.grouped_allreduce(data[r], op=hvd.Adasum, name="order.base"))
for k, perm in enumerate([[q ^ 1 for q in range(n)], [q ^ (n // 2) for q in range(n)],
                          [n - 1 - q for q in range(n)]]):
    got = flat(hvd.grouped_allreduce(data[perm[r]], op=hvd.Adasum, name=f"order.{k}"))
    check_close(f"rank order {perm}", got, base, rtol=1e-12)

# Ranks that disagree on the op: MismatchError everywhere; integers are refused.
try:
    hvd.allreduce(torch.ones(3), op=hvd.Adasum if r == 0 else hvd.Sum, name="mixed.op")
except hvd.MismatchError as error:
    check("names the op", "adasum" in str(error), str(error))
else:
    check("mismatch", False, "no MismatchError for Adasum against Sum")
try:
    hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum, name="ints")
except hvd.InvalidArgumentError as error:
    check("dtype message", "floating-point" in str(error), str(error))
else:
    check("int", False, "no error for Adasum on int32")

# The optimizer combines each rank's local step (momentum SGD: the steps are not linear in the
# gradients). Replicas of every rank's model and optimizer give the reference here.
torch.manual_seed(0)
template = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
rng = np.random.default_rng(3)
batches = [[(torch.from_numpy(rng.normal(size=(8, 6))).float(),
             torch.from_numpy(rng.normal(size=(8, 2))).float()) for _ in range(n)]
           for _ in range(3)]


def make(model_state):
    m = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    m.load_state_dict(model_state)
    return m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)


model, local = make(template.state_dict())
opt = hvd.DistributedOptimizer(local, named_parameters=model.named_parameters(), op=hvd.Adasum)
replicas = [make(template.state_dict()) for _ in range(n)]
for step, batch in enumerate(batches):
    x, y = batch[r]
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    deltas = []
    for q, (m, o) in enumerate(replicas):
        before = [p.detach().clone() for p in m.parameters()]
        o.zero_grad()
        torch.nn.functional.mse_loss(m(batch[q][0]), batch[q][1]).backward()
        o.step()
        deltas.append([(p.detach() - b).double().reshape(-1).numpy()
                       for p, b in zip(m.parameters(), before)])
    for i, start in enumerate(before):  # every replica started from these parameters
        combined = reference([deltas[q][i] for q in range(n)], [start.numel()])
        value = start.double().reshape(-1).numpy() + combined
        for m, _ in replicas:
            with torch.no_grad():
                list(m.parameters())[i].copy_(torch.from_numpy(value).reshape(start.shape))
    for i, p in enumerate(model.parameters()):
        check_close(f"optimizer step {step} param {i}", p.detach(),
                    list(replicas[0][0].parameters())[i].detach(), rtol=1e-5)
print(f"[{r}] adasum OK", flush=True)
hvd.shutdown()
