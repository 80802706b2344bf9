"""FSDP on the "cerar" backend against the same FSDP on Gloo, one small transformer each, in one
process per rank. `fsdp_job.py full_shard|shard_grad_op|hybrid_shard|fsdp2`; RANK, WORLD_SIZE
and CERAR_TEST_STORE (a file:// init method) come from the test. Prints "[rank] <mode> OK" and
"[rank] calls <json>" (the runtime's counters of the cerar groups). With an error budget
(CERAR_MAX_ERROR) the gradients may differ by it, relative to their largest, as well."""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import cerar.torch  # noqa: F401 -- registers the backend
from cerar.torch.backend import group_backend, stats

mode = sys.argv[1]
r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
STEPS, LR, U = 20, 0.05, torch.finfo(torch.float32).eps / 2
torch.set_num_threads(1)
dist.init_process_group("cerar", init_method=os.environ["CERAR_TEST_STORE"], rank=r,
                        world_size=n, timeout=datetime.timedelta(seconds=60))
gloo = dist.new_group(backend="gloo")  # the reference, same ranks


def check(name, condition, detail=""):
    if not condition:
        print(f"FAIL rank {r}: {name}: {detail}", flush=True)
        sys.exit(1)


class Tiny(nn.Module):
    """A two-layer transformer encoder over 16 tokens of a 50-word vocabulary."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            for _ in range(2))
        self.head = nn.Linear(32, 50)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def make():
    torch.manual_seed(0)
    return Tiny()


def batch(step):
    g = torch.Generator().manual_seed(100 * step + r)
    tokens = torch.randint(0, 50, (4, 16), generator=g)
    return tokens, (tokens * 7 + 3) % 50  # a learnable map


def loss_of(model, step):
    tokens, target = batch(step)
    return F.cross_entropy(model(tokens).reshape(-1, 50), target.reshape(-1))


# --- the four ways of sharding, each given its process group(s) ------------------------------
def groups(backend):
    """HYBRID_SHARD's two groups: shards within {0,1} and {2,3}, replicas across them. Every
    rank makes every group (torch's rule), in one order."""
    halves = [dist.new_group([0, 1], backend=backend), dist.new_group([2, 3], backend=backend)]
    pairs = [dist.new_group([0, 2], backend=backend), dist.new_group([1, 3], backend=backend)]
    return halves[r // 2], pairs[r % 2]


def wrap_fsdp1(strategy, group):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    return FSDP(make(), process_group=group, sharding_strategy=getattr(ShardingStrategy, strategy),
                auto_wrap_policy=ModuleWrapPolicy({nn.TransformerEncoderLayer}),
                use_orig_params=True, device_id=torch.device("cpu"))


def wrap_fsdp2(group):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    mesh = DeviceMesh.from_group(group, "cpu")
    model = make()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def full_grads_and_params(model):
    """Every parameter and gradient unsharded, by name (gathered through the model's groups)."""
    if mode == "fsdp2":
        return {name: (p.full_tensor().detach().clone(), p.grad.full_tensor().clone())
                for name, p in model.named_parameters()}
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    with FSDP.summon_full_params(model, with_grads=True):
        return {name.replace("_fsdp_wrapped_module.", ""):
                (p.detach().clone(), p.grad.clone()) for name, p in model.named_parameters()}


def build(backend):
    if mode == "fsdp2":
        return wrap_fsdp2(dist.group.WORLD if backend == "cerar" else gloo)
    if mode == "hybrid_shard":
        return wrap_fsdp1("HYBRID_SHARD", groups(backend))
    return wrap_fsdp1(mode.upper(), dist.group.WORLD if backend == "cerar" else gloo)


# sum over ranks of |g_k|, each rank's local gradient (on a plain copy). FSDP averages: each of
# the two sums is within (N-1)*u*sum|g_k|/N of the exact mean (its divisions by 2 are exact), so
# they are within 2(N-1)*u*sum|g_k|/N <= (N-1)*u*sum|g_k| of each other, DDP's bound.
local = make()
loss_of(local, 0).backward()
magnitude = {name: p.grad.abs().double() for name, p in local.named_parameters()}
for m in magnitude.values():
    dist.all_reduce(m, group=gloo)
budget = float(os.environ.get("CERAR_MAX_ERROR", "0"))

models = {backend: build(backend) for backend in ("cerar", "gloo")}
optimizers = {b: torch.optim.SGD(m.parameters(), lr=LR) for b, m in models.items()}
for step in range(STEPS):
    for backend, model in models.items():
        optimizers[backend].zero_grad()
        loss_of(model, step).backward()
    if step == 0:  # the first step's gradients: within (N-1)*u*sum|g| of Gloo's
        got, want = (full_grads_and_params(models[b]) for b in ("cerar", "gloo"))
        largest = max(float(g.abs().max()) for _, g in want.values())
        for name, (_, grad) in got.items():
            bound = (n - 1) * U * magnitude[name] + budget * largest
            error = (grad.double() - want[name][1].double()).abs()
            check("gradients", bool((error <= bound).all()),
                  f"{name}: {float(error.max()):.3g} against the bound {float(bound.max()):.3g}")
    for opt in optimizers.values():
        opt.step()
got, want = (full_grads_and_params(models[b]) for b in ("cerar", "gloo"))
largest = max(float(p.abs().max()) for p, _ in want.values())
worst = max(float((got[k][0] - p).abs().max()) for k, (p, _) in want.items())
check("parameters", worst <= (1e-4 + budget) * largest,
      f"{worst:.3g} apart, largest {largest:.3g}")
print(f"[{r}] parameters apart {worst / largest:.3g} of the largest", flush=True)

if mode == "fsdp2":  # torch's coalesced forms, as FSDP2 may call them: Gloo's results exactly
    def coalesced(group):
        ins = [torch.arange(8 * n, dtype=torch.int64) * (r + 1) + k for k in range(2)]
        scattered, gathered = [torch.empty(8, dtype=torch.int64) for _ in ins], \
            [torch.empty(8 * n * n, dtype=torch.int64) for _ in ins]
        with dist._coalescing_manager(group):
            for out, t in zip(scattered, ins):
                dist.reduce_scatter_tensor(out, t, group=group)
        with dist._coalescing_manager(group):
            for out, t in zip(gathered, ins):
                dist.all_gather_into_tensor(out, t, group=group)
        return scattered + gathered
    for a, b in zip(coalesced(dist.group.WORLD), coalesced(gloo)):
        check("coalesced", torch.equal(a, b), f"{a} != {b}")

# What ran on the runtime: the counters of every cerar group this rank is in, and no Gloo
cerar_pgs = [dist.group.WORLD] + [g for g in getattr(dist.distributed_c10d, "_world").pg_map
                                  if g is not dist.group.WORLD]
counted = {}
for pg in cerar_pgs:
    try:
        backend = group_backend(pg)
    except ValueError:
        continue  # a Gloo group
    check("no gloo fallback", backend._gloo_group is None, "a collective went to Gloo")
    for key, value in stats(pg).items():
        if key in ("allgather_buffers", "reducescatter_buffers", "tensors_scattered",
                   "ring_buffers", "cerar_buffers", "budget_buffers", "wire_buffers"):
            counted[key] = counted.get(key, 0) + value
print(f"[{r}] calls {json.dumps(counted, sort_keys=True)}", flush=True)
print(f"[{r}] {mode} OK", flush=True)
dist.destroy_process_group()
