"""DistributedDataParallel with cerar's comm hook, started by torchrun's variables (the process
group and cerar from the same ones). `ddp_job.py ring|cerar|mismatch`; each check prints
"[rank] <name> OK"."""
import gc
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import cerar
import cerar.torch as ct
from cerar.torch.ddp import CerarHookState, cerar_hook, register_cerar_hook

mode = sys.argv[1]
dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)
U = torch.finfo(torch.float32).eps / 2
OVERRIDES = {"ring": dict(algorithm="ring", fusion_threshold_bytes=0),
             "cerar": dict(algorithm="cerar", components=16, debug_error=True),
             "mismatch": dict(timeout_seconds=20)}


def fail(message):
    print(f"FAIL rank {r}: {message}", flush=True)
    sys.exit(1)


def check(name, condition, detail=""):
    if not condition:
        fail(f"{name}: {detail}")


def ok(name):
    print(f"[{r}] {name} OK", flush=True)


class Net(torch.nn.Module):
    def __init__(self, extra):
        super().__init__()
        # over 1 MiB, DDP's first bucket's cap: three buckets or more with bucket_cap_mb=0.1
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.Tanh(),
                                        torch.nn.Linear(512, 512), torch.nn.Tanh(),
                                        torch.nn.Linear(512, 512), torch.nn.Tanh())
        self.head = torch.nn.Linear(512, 8)
        # a second head that some steps use instead of `head` (unused parameters)
        self.extra = torch.nn.Linear(512, 8) if extra else None

    def forward(self, x, extra=False):
        h = self.body(x)
        return self.extra(h) if extra else self.head(h)


def make_model(extra=False):
    torch.manual_seed(0)
    return Net(extra)


def batch(step):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(64, 32, generator=g), torch.randn(64, 8, generator=g)


def loss(model, step, extra=False):
    x, y = batch(step)
    return F.mse_loss(model(x, extra=extra), y)


def grads(model):
    return [p.grad.clone() if p.grad is not None else None for p in model.parameters()]


def local_magnitudes(model):
    """sum over ranks of |local gradient|, element-wise (float64 through gloo)."""
    out = []
    for p in model.parameters():
        g = p.grad.abs().double() if p.grad is not None else torch.zeros_like(p).double()
        dist.all_reduce(g)
        out.append(g)
    return out


def check_bound(name, got, expected, magnitudes, relative):
    for i, (a, b, s) in enumerate(zip(got, expected, magnitudes)):
        if a is None or b is None:
            check(name, a is None and b is None, f"parameter {i}: gradient None on one side")
            continue
        error = (a.double() - b.double()).abs()
        excess = error - relative * s
        check(name, float(excess.max()) <= 0,
              f"parameter {i}: error {float(error.max()):g} above {relative:g}*sum|g|")


def ddp(model, **kwargs):
    return DDP(model, bucket_cap_mb=0.1, **kwargs)


cerar.init(**OVERRIDES[mode])
check("identity", (cerar.rank(), cerar.size()) == (r, n), f"{cerar.rank()}/{cerar.size()}")

if mode in ("ring", "cerar"):
    # one step: DDP + hook, plain DDP (gloo), and the local gradients without DDP
    hooked, plain, local = ddp(make_model()), ddp(make_model()), make_model()
    state = CerarHookState()
    records = []

    def recording_hook(state, bucket):
        sent = bucket.buffer().clone()
        if bucket.is_last() and r != 0:
            # rank 0's last bucket cannot be reduced before the others submit theirs, so
            # a hook that returned only when done would return late and complete
            time.sleep(0.3)
        future = cerar_hook(state, bucket)
        records.append((bucket.index(), bucket.is_last(), sent, future, future.done(),
                        [id(p) for p in bucket.parameters()]))
        return future

    hooked.register_comm_hook(state, recording_hook)
    # DDP rebuilds its buckets after the first step (one bucket until then): check the second
    for step in (0, 1):
        records.clear()
        for model in (hooked, plain, local):
            model.zero_grad()
            loss(model, step).backward()
    check("buckets", len(records) >= 3, f"{len(records)} buckets")
    magnitudes = local_magnitudes(local)

if mode == "ring":
    # bit-identical to cerar's own ring on the same flat buckets, outside DDP
    index_of = {id(p): i for i, p in enumerate(hooked.parameters())}
    reference = make_model()
    for p, q in zip(reference.parameters(), local.parameters()):
        p.grad = q.grad.clone()
    ref_params = list(reference.parameters())
    for index, _, sent, future, _, ids in records:
        members = [ref_params[index_of[i]] for i in ids]
        flat = torch.cat([p.grad.reshape(-1) for p in members])
        check("bucket layout", torch.equal(flat, sent), f"bucket {index}")
        ct.allreduce_(flat, name=f"outside.{index}")
        check("ring identical", torch.equal(flat, future.value()), f"bucket {index}")
        offset = 0
        for p in members:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
    for model in (hooked, reference):
        torch.optim.SGD(model.parameters(), lr=0.5).step()
    check("ring parameters", all(torch.equal(a, b) for a, b in
                                 zip(hooked.parameters(), reference.parameters())))
    ok("ring identical")
    check_bound("ring vs gloo", grads(hooked), grads(plain), magnitudes, (n - 1) * U)
    ok("ring vs gloo")

    # the hook returns before the runtime has reduced the bucket, the last one included;
    # only rank 0 is sure of it: the others submit last, and a small bucket may be reduced
    # within microseconds of their call
    last = [rec for rec in records if rec[1]]
    check("non-blocking", len(last) == 1 and (r != 0 or not last[0][4]),
          "the last bucket's future was already complete when the hook returned")
    ok("non-blocking")

    # no_sync accumulation with gradient buckets as views: two local steps, then one synced
    views = {}
    for name, kwargs in (("cerar", {"gradient_as_bucket_view": True}), ("gloo", {})):
        model = ddp(make_model(), **kwargs)
        if name == "cerar":
            counting = CerarHookState()
            model.register_comm_hook(counting, cerar_hook)
        with model.no_sync():
            for step in (1, 2):
                loss(model, step).backward()
        if name == "cerar":
            check("no_sync calls", counting.buckets_submitted == 0,
                  f"{counting.buckets_submitted} buckets reduced inside no_sync()")
        loss(model, 3).backward()
        views[name] = model
    accumulated = make_model()
    for step in (1, 2, 3):
        loss(accumulated, step).backward()
    check("synced", counting.buckets_submitted > 0, "no bucket reduced after no_sync()")
    check_bound("no_sync", grads(views["cerar"]), grads(views["gloo"]),
                local_magnitudes(accumulated), (n - 1) * U)
    ok("no_sync")

    # unused parameters (`extra` on even steps, `head` on odd ones), then a static graph
    cases = [("unused", {"find_unused_parameters": True}, True)]
    if "static_graph" in DDP.__init__.__code__.co_varnames:
        cases.append(("static graph", {"static_graph": True}, False))
    for name, kwargs, extra in cases:
        models = [ddp(make_model(extra), **kwargs) for _ in range(2)]
        register_cerar_hook(models[0])
        for step in range(3):
            single = make_model(extra)
            for model in (*models, single):
                model.zero_grad()
                loss(model, step, extra and step % 2 == 0).backward()
            check_bound(name, grads(models[0]), grads(models[1]), local_magnitudes(single),
                        (n - 1) * U)
        ok(name)

if mode == "cerar":
    stats = cerar.stats()
    check("cerar ran", stats["cerar_buffers"] > 0, stats)
    check("measured within predicted",
          0 < stats["measured_error_max"] <= stats["predicted_error_max"], stats)
    largest = max(float(s.max()) for s in magnitudes)
    bound = (stats["predicted_error_max"] + 2 * (n - 1) * U) * largest / n
    for i, (a, b) in enumerate(zip(grads(hooked), grads(plain))):
        error = float((a.double() - b.double()).abs().max())
        check("cerar vs gloo", error <= bound, f"parameter {i}: {error:g} > {bound:g}")
    ok("cerar bound")

if mode == "ring":
    # uneven inputs: rank r runs 2 + r steps inside DDP's Join; joined ranks shadow the buckets
    # through the hook (zeros, same names). The hook and gloo must end alike.
    from torch.distributed.algorithms.join import Join
    ends = {}
    for name in ("cerar", "gloo"):
        model = ddp(make_model())
        if name == "cerar":
            register_cerar_hook(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with Join([model]):
            for step in range(2 + r):
                optimizer.zero_grad()
                loss(model, step).backward()
                optimizer.step()
        ends[name] = [p.detach().clone() for p in model.parameters()]
    for i, (a, b) in enumerate(zip(ends["cerar"], ends["gloo"])):
        error = float((a - b).abs().max())
        check("join", error <= 1e-5 * max(1.0, float(b.abs().max())), f"parameter {i}: {error:g}")
    ok("join")

if mode in ("ring", "cerar"):
    # CPU autocast (bfloat16) and a scaler-style skip: rank 1's step 1 has an Inf gradient;
    # every rank must see a non-finite reduced gradient and skip that step, and only that one
    model = ddp(make_model())
    register_cerar_hook(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    decisions = []
    for step in range(3):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x, y = batch(step)
            out = model(x)
        scale = float("inf") if (r == 1 and step == 1) else 1.0
        (F.mse_loss(out.float(), y) * scale).backward()
        finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
        if finite:
            optimizer.step()
        decisions.append(finite)
        agreed = torch.tensor([float(finite)])
        dist.all_reduce(agreed)
        check("same decision", float(agreed) in (0.0, float(n)), f"step {step}: {float(agreed)}")
    check("skipped step 1 only", decisions == [True, False, True], decisions)
    ok("amp skip")

if mode in ("ring", "cerar"):
    # drift control through the hook, checking after every backward pass with a tolerance
    # every drift exceeds: with the ring nothing is checked or sent. With CERAR check 0
    # (backward 1, before any step: no drift) is read by backward 1 + lag; check 1, launched
    # then, makes every rank resync inside backward 1 + 2 lag, before the optimizer's step:
    # parameters and momentum are then bit-identical
    from cerar.torch.drift import RESYNC_LAG
    model = ddp(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    control = register_cerar_hook(model, optimizer=optimizer, drift_check_every=1,
                                  drift_tolerance=1e-12).drift_control
    resync_step = 1 + 2 * RESYNC_LAG
    for step in range(1, resync_step + 1):
        optimizer.zero_grad()
        loss(model, step).backward()
        if mode == "cerar" and step == resync_step:
            check("resynced", control.stats["resyncs"] == 1, control.stats)
            state = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
            for name, tensors in (("parameters", list(model.parameters())), ("momentum", state)):
                flat = torch.cat([t.detach().reshape(-1) for t in tensors])
                root = flat.clone()
                dist.broadcast(root, 0)
                check(f"{name} identical after resync", torch.equal(flat, root))
        optimizer.step()
    if mode == "ring":
        check("ring: no drift check", control.stats["checks"] == 0 and
              control.stats["cerar_steps"] == 0 and control._launched == 0, control.stats)
    ok("drift control")

if mode == "mismatch":
    # one rank builds its buckets with another size cap: only cerar sees the shapes differ
    # (find_unused_parameters: DDP buckets by size from the first step, not after a rebuild
    # in which rank 0's assignment would be adopted by all)
    model = DDP(make_model(), bucket_cap_mb=0.1 if r == n - 1 else 25,
                find_unused_parameters=True)
    register_cerar_hook(model)
    start = time.monotonic()
    try:
        loss(model, 0).backward()
    except RuntimeError as error:
        check("message", "MismatchError" in str(error) and "ddp.0." in str(error), str(error))
        print(f"[{r}] error after {time.monotonic() - start:.1f} s: {error}", flush=True)
        ok("mismatch")
    else:
        fail("backward did not raise for buckets of different sizes")

# The DDP model must die before the group does: alive, it keeps torch's Gloo worker threads past
# destroy_process_group and torch 2.x can abort at interpreter exit.
model = None
gc.collect()
cerar.shutdown()
dist.destroy_process_group()
print(f"[{r}] done OK", flush=True)
