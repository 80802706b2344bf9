"""torch.distributed code on the "cerar" backend, checked against a Gloo group on the same ranks.
`dist_backend_job.py collectives|ddp|cerar|dead`; RANK, WORLD_SIZE and CERAR_TEST_STORE (a
file:// init method: no port to pick) come from the test. Each check prints "[rank] <name> OK"."""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import cerar
import cerar.torch  # noqa: F401 -- registers the backend
from cerar.torch.backend import group_backend, stats

mode = sys.argv[1]
r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
TIMEOUT = datetime.timedelta(seconds=10 if mode in ("dead", "frozen") else 60)
# The one-line change: "cerar" where the code said "gloo" (or "cpu:cerar" on torch 2.x).
dist.init_process_group(os.environ.get("CERAR_TEST_BACKEND", "cerar"),
                        init_method=os.environ["CERAR_TEST_STORE"], rank=r, world_size=n,
                        timeout=TIMEOUT)
gloo = dist.new_group(backend="gloo")  # the reference, same ranks
torch.set_num_threads(1)
U = {torch.float32: torch.finfo(torch.float32).eps / 2,
     torch.float64: torch.finfo(torch.float64).eps / 2}


def check(name, condition, detail=""):
    if not condition:
        print(f"FAIL rank {r}: {name}: {detail}", flush=True)
        sys.exit(1)


def ok(name):
    print(f"[{r}] {name} OK", flush=True)


def data(seed, shape=(1000,), dtype=torch.float32, rank=None, grid=False):
    """Rank `rank`'s (default: this rank's) tensor; `grid`: multiples of 2^-10 under 2^10,
    whose float64 sums are exact in any order."""
    g = torch.Generator().manual_seed(1000 * seed + (r if rank is None else rank))
    if dtype.is_floating_point:
        values = torch.randn(shape, generator=g, dtype=torch.float64) * 10
        return ((values * 1024).round() / 1024 if grid else values).to(dtype)
    return torch.randint(-1000, 1000, shape, generator=g).to(dtype)


def both(fn, tensor, **kwargs):
    """fn on the cerar group and on the Gloo group, each on its own copy."""
    mine, theirs = tensor.clone(), tensor.clone()
    fn(mine, **kwargs)
    fn(theirs, group=gloo, **kwargs)
    return mine, theirs


def within_ring_bound(got, tensor, ranks):
    """|got - exact sum| <= (N-1)*u*sum|x| element-wise (the exact ring's bound)."""
    magnitude = tensor.abs().double()
    dist.all_reduce(magnitude, group=gloo)
    exact = tensor.double()
    dist.all_reduce(exact, group=gloo)  # float64 sums of float32 data: exact enough here
    excess = (got.double() - exact).abs() - (ranks - 1) * U[tensor.dtype] * magnitude
    return float(excess.max()), float((got.double() - exact).abs().max())


if mode == "collectives":
    # sums and extrema: integers and min/max bit-identical; floats within the ring's bound
    # (bit-identical where the reduction order is Gloo's: two ranks, below)
    for dtype in (torch.int32, torch.int64, torch.uint8):
        mine, theirs = both(dist.all_reduce, data(1, dtype=dtype))
        check("int sum", torch.equal(mine, theirs), str(dtype))
    for op in (dist.ReduceOp.MIN, dist.ReduceOp.MAX):
        mine, theirs = both(dist.all_reduce, data(2), op=op)
        check("min/max", torch.equal(mine, theirs), str(op))
    tensor = data(3, (1 << 19,))  # 2 MiB: CERAR's size under auto
    mine = tensor.clone()
    dist.all_reduce(mine)
    excess, _ = within_ring_bound(mine, tensor, n)
    check("float sum", excess <= 0, f"{excess:g} over the ring's bound")
    mine, theirs = both(dist.all_reduce, data(3, (1 << 18,), torch.float64, grid=True))
    check("exact float64 sum", torch.equal(mine, theirs))
    counters = stats()
    check("ring only", counters["cerar_buffers"] == 0 and counters["ring_buffers"] > 0,
          str(counters))
    ok("all_reduce")

    # async: Work.wait(), get_future(), a non-contiguous tensor, coalesced
    tensor = data(4, (40, 30)).t()
    mine, theirs = both(dist.all_reduce, tensor, op=dist.ReduceOp.MAX)
    check("non-contiguous", torch.equal(mine, theirs))
    tensors = [data(5 + i, dtype=torch.int64) for i in range(3)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    futures = [w.get_future() for w in works]
    for w in works:
        w.wait()
        # torch 2.x's wrapper of a Python Work forwards wait() and get_future() only
        check("done after wait", w.get_future().done())
    for t, f, i in zip(tensors, futures, range(3)):
        expected = data(5 + i, dtype=torch.int64)
        dist.all_reduce(expected, group=gloo)
        check("async", torch.equal(t, expected) and torch.equal(f.wait()[0], expected))
    if hasattr(dist, "all_reduce_coalesced"):
        tensors = [data(9, dtype=torch.int64), data(10, (7,), dtype=torch.int64)]
        expected = [t.clone() for t in tensors]
        for t in expected:
            dist.all_reduce(t, group=gloo)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in torch 2.x, still there
            dist.all_reduce_coalesced(tensors)
        check("coalesced", all(torch.equal(a, b) for a, b in zip(tensors, expected)))
    if hasattr(dist.ReduceOp, "AVG"):  # Gloo has no AVG: its exact sum, scaled by 1/N
        mine, total = data(11, dtype=torch.float64, grid=True), data(11, dtype=torch.float64,
                                                                     grid=True)
        dist.all_reduce(mine, op=dist.ReduceOp.AVG)
        dist.all_reduce(total, group=gloo)
        check("average", bool(((mine - total / n).abs() <= 2 * U[torch.float64] *
                               (total / n).abs()).all()))
    ok("async")

    # broadcast, all_gather, all_gather_into_tensor, barrier: exact copies
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        def of(rank):
            wide = torch.int64 if dtype == torch.int64 else torch.float32
            return data(12, (33, 3), wide, rank=rank).to(dtype)
        mine = of(r)
        dist.broadcast(mine, src=n - 1)
        check("broadcast", torch.equal(mine, of(n - 1)), str(dtype))
        outputs = [torch.empty_like(mine) for _ in range(n)]
        dist.all_gather(outputs, of(r))
        for k in range(n):
            check("all_gather", torch.equal(outputs[k], of(k)), f"{dtype} from {k}")
    if hasattr(dist, "all_gather_into_tensor"):
        tensor = data(13, (5, 2))
        out = torch.empty(5 * n, 2)
        dist.all_gather_into_tensor(out, tensor)
        expected = torch.cat([data(13, (5, 2), rank=k) for k in range(n)])
        check("all_gather_into_tensor", torch.equal(out, expected))
    dist.barrier()
    ok("broadcast all_gather barrier")

    # what goes to the Gloo group: reduce_scatter, all_to_all, reduce, other dtypes and ops;
    # where this torch's Gloo lacks one (reduce_scatter on 1.13), cerar fails alike
    def like_gloo(name, call):
        try:
            theirs = call(gloo)
        except RuntimeError as gloo_error:
            try:
                call(dist.group.WORLD)
            except RuntimeError:
                return
            check(name, False, f"Gloo raised {gloo_error} and cerar did not")
        check(name, torch.equal(call(dist.group.WORLD), theirs))

    def reduce_scatter(group):
        out = torch.empty(1000)
        dist.reduce_scatter(out, [data(20 + k) for k in range(n)], group=group)
        return out

    def all_to_all(group):
        out = torch.empty(4 * n)
        dist.all_to_all_single(out, data(21, (4 * n,)), group=group)
        return out
    like_gloo("reduce_scatter", reduce_scatter)
    like_gloo("all_to_all_single", all_to_all)
    for dtype, op in ((torch.int8, dist.ReduceOp.SUM), (torch.float32, dist.ReduceOp.PRODUCT),
                      (torch.bool, dist.ReduceOp.MAX)):
        def reduce(group, dtype=dtype, op=op):
            tensor = data(22, dtype=torch.int64).remainder(3).to(dtype)
            dist.all_reduce(tensor, op=op, group=group)
            return tensor
        like_gloo(f"all_reduce {dtype} {op}", reduce)
    mine, theirs = both(dist.reduce, data(23), dst=0)
    check("reduce", r != 0 or torch.equal(mine, theirs))
    ok("gloo fallback")

    # a two-rank group: every float sum has one order, so cerar's ring equals Gloo's bit for bit
    pair = dist.new_group(ranks=[0, 1], backend="cerar")
    pair_gloo = dist.new_group(ranks=[0, 1], backend="gloo")
    if r < 2:
        tensor = data(30, (100003,))
        mine, theirs = tensor.clone(), tensor.clone()
        dist.all_reduce(mine, group=pair)
        dist.all_reduce(theirs, group=pair_gloo)
        check("pair", torch.equal(mine, theirs))
        ok("pair identical")
    dist.barrier()

elif mode == "cerar":
    # CERAR_ALGORITHM=cerar on rank 0 only: rank 0's setting is the job's; the sums are
    # approximate (over the exact ring's bound) and within CERAR's
    tensor = data(3, (1 << 19,))
    mine = tensor.clone()
    dist.all_reduce(mine)
    excess, error = within_ring_bound(mine, tensor, n)
    scale = tensor.abs().double()
    dist.all_reduce(scale, group=gloo)
    check("approximate", excess > 0 and stats()["cerar_buffers"] > 0,
          f"as exact as the ring: CERAR was not used {stats()}")
    check("cerar bound", error <= 4 * 2.0 ** -11 * float(scale.max()),
          f"{error:g} vs max sum|x| {float(scale.max()):g}")
    ok("cerar setting")

elif mode == "ddp":
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(),
                                            torch.nn.Linear(64, 4))

        def forward(self, x):
            return self.body(x)

    def make():
        torch.manual_seed(0)
        return Net()

    on_cerar, on_gloo, local = DDP(make()), DDP(make(), process_group=gloo), make()
    lr = 0.1
    optimizers = [torch.optim.SGD(m.parameters(), lr=lr) for m in (on_cerar, on_gloo)]
    for step in range(5):
        g = torch.Generator().manual_seed(100 * step + r)
        x, y = torch.randn(32, 16, generator=g), torch.randn(32, 4, generator=g)
        for model in (on_cerar, on_gloo, local):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
        for a, b, c in zip(on_cerar.parameters(), on_gloo.parameters(), local.parameters()):
            magnitude = c.grad.abs().double()  # sum over ranks of |local gradient|
            dist.all_reduce(magnitude, group=gloo)
            bound = (n - 1) * U[torch.float32] * magnitude
            error = (a.grad.double() - b.grad.double()).abs()
            check("ddp gradients", bool((error <= bound).all()),
                  f"step {step}: {float(error.max()):g} over the bound")
        before = [p.detach().clone() for p in on_gloo.parameters()]
        for opt in optimizers:
            opt.step()
        for a, b, p in zip(on_cerar.parameters(), on_gloo.parameters(), before):
            check("ddp step", bool(((a - b).abs() <= lr * (a.grad - b.grad).abs() +
                                    4 * U[torch.float32] * p.abs()).all()), f"step {step}")
            with torch.no_grad():  # the next step starts both from the same parameters
                b.copy_(a)
        for p, q in zip(local.parameters(), on_cerar.parameters()):
            with torch.no_grad():
                p.copy_(q)
    ok("ddp")

elif mode in ("dead", "frozen"):  # rank n-1 is killed, or stops (torch's timeout then)
    tensor = torch.ones(1 << 16)
    dist.all_reduce(tensor)  # every rank is up
    dist.barrier()  # and nothing is left in flight to the victim
    if r == n - 1:
        os.kill(os.getpid(), signal.SIGKILL if mode == "dead" else signal.SIGSTOP)
    try:
        dist.all_reduce(tensor, async_op=True).wait()
        check("dead peer", False, "all_reduce succeeded without rank n-1")
    except RuntimeError as error:
        # rank 0's process hosts cerar's store, where the survivors agree on whom to blame:
        # no survivor leaves before every survivor has its error (torch's store is a file)
        store = dist.distributed_c10d._get_default_store()
        store.add("survivors failed", 1)
        while store.add("survivors failed", 0) < n - 1:
            time.sleep(0.05)
        torch_type = getattr(dist, "DistBackendError", RuntimeError)
        check("torch's type", isinstance(error, torch_type), type(error).__mro__)
        print(f"[{r}] raised {type(error).__name__}: {str(error)[:300]}", flush=True)
        check("names the rank", f"rank {n - 1}" in str(error), str(error))
        # killed: its links close (PeerLostError); on a loaded machine a survivor may time out
        # on a neighbour first, and the agreed blame still names the victim
        check("cerar's class", isinstance(error, (cerar.PeerLostError, cerar.CerarTimeoutError)),
              type(error).__mro__)
        ok("dead peer")
    sys.stdout.flush()
    os._exit(0)  # the group has failed: nothing to shut down cleanly

backend = group_backend()
dist.destroy_process_group()
# torch 2.x shuts the backend down with the group; torch 1.13 leaves it to exit (atexit)
if hasattr(torch._C._distributed_c10d, "Backend"):
    check("destroyed", backend._runtime is None)
