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

    # reduce_scatter and all_to_all: the runtime's, checked against every rank's inputs (each
    # rank makes them all) and, where this torch's Gloo has the call, against Gloo
    before = stats()

    def gloo_agrees(name, call, got):
        try:
            theirs = call(gloo)
        except RuntimeError:  # torch 1.13's Gloo has no reduce_scatter
            return
        check(name + " as Gloo", torch.equal(got, theirs))

    def piece(seed, k, j, dtype, shape=(7, 11)):  # rank k's input for rank j
        return data(seed + j, shape, dtype, rank=k)

    def reduce_scatter(seed, dtype, op=dist.ReduceOp.SUM):
        def call(group):
            out = torch.empty(7, 11, dtype=dtype)
            dist.reduce_scatter(out, [piece(seed, r, j, dtype) for j in range(n)], op=op,
                                group=group)
            return out
        return call
    scattered = 0
    for dtype in (torch.int32, torch.int64, torch.float32):
        for op, fold in ((dist.ReduceOp.SUM, None), (dist.ReduceOp.MIN, torch.minimum),
                         (dist.ReduceOp.MAX, torch.maximum)):
            got = reduce_scatter(40, dtype, op)(dist.group.WORLD)
            scattered += 1
            pieces = [piece(40, k, r, dtype) for k in range(n)]
            if fold is None and dtype.is_floating_point:
                exact = torch.stack(pieces).double().sum(0)
                bound = (n - 1) * U[dtype] * torch.stack(pieces).double().abs().sum(0)
                check("reduce_scatter float sum", bool(((got.double() - exact).abs()
                                                        <= bound).all()))
            else:
                expected = pieces[0]
                for p in pieces[1:]:
                    expected = expected + p if fold is None else fold(expected, p)
                check("reduce_scatter", torch.equal(got, expected), f"{dtype} {op}")
                gloo_agrees(f"reduce_scatter {dtype} {op}", reduce_scatter(40, dtype, op), got)
    if hasattr(dist.ReduceOp, "AVG"):  # on a grid: sums exact; the mean scaled by 1/N: 2 u
        out = torch.empty(7, 11, dtype=torch.float64)
        dist.reduce_scatter(out, [data(41 + j, (7, 11), torch.float64, grid=True)
                                  for j in range(n)], op=dist.ReduceOp.AVG)
        scattered += 1
        mean = sum(data(41 + r, (7, 11), torch.float64, rank=k, grid=True)
                   for k in range(n)) / n
        check("reduce_scatter average", bool(((out - mean).abs() <= 2 * U[torch.float64] *
                                              mean.abs()).all()), f"{(out - mean).abs().max()}")
    # the flat form, into a non-contiguous output: rank r's share is rows [4r, 4r + 4)
    flat_form = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    out = torch.empty(3, 4, dtype=torch.int64).t()
    flat_form(out, data(42, (4 * n, 3), torch.int64))
    scattered += 1
    expected = sum(data(42, (4 * n, 3), torch.int64, rank=k) for k in range(n))
    check("reduce_scatter_tensor", torch.equal(out, expected[4 * r:4 * r + 4]))

    # all_to_all: pieces of rank-dependent sizes; all_to_all_single with uneven split sizes
    def sent(seed, k, j, dtype):  # what rank k sends rank j
        return data(seed, (k + 2 * j + 1,), dtype, rank=100 * k + j)
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        wide = torch.float32 if dtype == torch.bfloat16 else dtype
        outs = [torch.empty(j + 2 * r + 1, dtype=dtype) for j in range(n)]
        dist.all_to_all(outs, [sent(43, r, j, wide).to(dtype) for j in range(n)])
        for j in range(n):
            check("all_to_all", torch.equal(outs[j], sent(43, j, r, wide).to(dtype)),
                  f"{dtype} from {j}")

    def splits(k):  # rank k sends (k + j) % 3 rows to rank j: some empty, none alike
        return [(k + j) % 3 for j in range(n)]

    def rows(k):
        return data(44, (sum(splits(k)), 5), torch.float64, rank=k)

    def all_to_all_single(group):
        out = torch.empty(sum(splits(j)[r] for j in range(n)), 5, dtype=torch.float64)
        dist.all_to_all_single(out, rows(r), [splits(j)[r] for j in range(n)], splits(r),
                               group=group)
        return out
    got = all_to_all_single(dist.group.WORLD)
    expected = torch.cat([rows(j)[sum(splits(j)[:r]):sum(splits(j)[:r + 1])]
                          for j in range(n)])
    check("all_to_all_single uneven", torch.equal(got, expected))
    gloo_agrees("all_to_all_single uneven", all_to_all_single, got)
    out = torch.empty(2 * n, 3, dtype=torch.int32)
    dist.all_to_all_single(out, data(45, (2 * n, 3), torch.int32))
    check("all_to_all_single", torch.equal(out, torch.cat(
        [data(45, (2 * n, 3), torch.int32, rank=j)[2 * r:2 * r + 2] for j in range(n)])))

    # a mismatch fails on every rank with cerar's error, and the group goes on
    for name, call in (
            ("reduce_scatter", lambda: dist.reduce_scatter(
                torch.empty(3 + (r == 1)), [torch.ones(3 + (r == 1)) for _ in range(n)])),
            ("all_to_all_single", lambda: dist.all_to_all_single(
                torch.empty(n, 2 + (r == 1)), torch.ones(n, 2 + (r == 1))))):
        try:
            call()
            check(name + " mismatch", False, "no error")
        except cerar.MismatchError as error:
            check(name + " mismatch names the rank", "rank" in str(error), str(error))
    after = stats()
    check("through cerar", after["tensors_scattered"] - before["tensors_scattered"] == scattered
          and after["bytes_sent"] > before["bytes_sent"]
          and group_backend()._gloo_group is None, f"{before} -> {after}")
    ok("reduce_scatter all_to_all")

    # what goes to the Gloo group: reduce, other dtypes and ops (where this torch's Gloo lacks
    # one, cerar fails alike)
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
        # the runtime's reduce_scatter and all_to_all fail alike on the failed group
        for name, call in (("reduce_scatter", lambda: dist.reduce_scatter(
                torch.empty(4), [torch.ones(4) for _ in range(n)])),
                ("all_to_all_single", lambda: dist.all_to_all_single(
                    torch.empty(n), torch.ones(n), async_op=True).wait())):
            try:
                call()
                check(name + " after the loss", False, "succeeded without rank n-1")
            except RuntimeError as later:
                print(f"[{r}] {name} raised {type(later).__name__}: {str(later)[:200]}",
                      flush=True)
                check(name + " after the loss", isinstance(later, cerar.CerarError)
                      and isinstance(later, torch_type), type(later).__mro__)
        ok("dead peer")
    sys.stdout.flush()
    os._exit(0)  # the group has failed: nothing to shut down cleanly

backend = group_backend()
dist.destroy_process_group()
# torch 2.x shuts the backend down with the group; torch 1.13 leaves it to exit (atexit)
if hasattr(torch._C._distributed_c10d, "Backend"):
    check("destroyed", backend._runtime is None)
