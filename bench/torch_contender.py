#!/usr/bin/env python3
"""One rank of the torch contenders; launched once per rank by bench/runner.py (CERAR_RANK,
CERAR_SIZE, CERAR_RENDEZVOUS_ADDR/PORT, CERAR_NETNS_IFACE). Rank 0 prints one JSON line per
(size, contender) in cerar-bench-net's format: per run the slowest rank's seconds.

  torch_contender.py --mode allreduce [--sizes 1M,64M] [--repeats R]   torch.distributed (gloo)
  torch_contender.py --mode ddp [--hook none|fp16|cerar] [--repeats R]
                                      ResNet-50 gradients through DDP (gloo; DDP's fp16
                                      compression hook; cerar.torch.ddp's hook, cerar's runtime
                                      on the next port)
  torch_contender.py --mode cerar --algorithm ring|cerar|auto --fusion on|off [--repeats R]
                                      the same gradients through cerar's runtime (cerar.torch)
  torch_contender.py --mode lossy [--sizes ...]   torch.distributed (gloo) on Gaussian data:
                                      float32, cast to half around the sum (as DDP's fp16
                                      compression hook, without its division by N), and DDP
                                      itself with its fp16, bf16 (torch 2.x) and PowerSGD (rank
                                      1, 4) hooks on the buffer as one bucket
  torch_contender.py --mode cerar-lossy --algorithm ring|cerar|auto [--max-error X]
                                      the same data through cerar's runtime; with ring also its
                                      fp16/bf16/int8 wires and the 16-bit casts done in Python
The lossy modes give every rank g = mu + noise (standard normal; mu shared, noise per rank) and
measure each result against the float64 sum of every rank's float32 inputs.
"""
import argparse, datetime, json, os, statistics, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from resnet50_sizes import SHAPES  # noqa: E402
from tcp_ring import parse_bytes  # noqa: E402

RANK, SIZE = int(os.environ["CERAR_RANK"]), int(os.environ["CERAR_SIZE"])
ADDR = os.environ.get("CERAR_RENDEZVOUS_ADDR", "127.0.0.1")
PORT = int(os.environ.get("CERAR_RENDEZVOUS_PORT", "29500"))
IFACE = os.environ.get("CERAR_NETNS_IFACE", "lo")


def report(contender, nbytes, times, err, c=None, **extra):
    """Slowest rank per run (an all-reduce MAX over the group), printed by rank 0."""
    t = torch.tensor(times + [err], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    else:  # cerar mode: reduce with the runtime itself
        import cerar.torch as hvd
        t = hvd.allreduce(t, op=hvd.Max, name=f"report.{contender}")
    runs = [round(x, 6) for x in t[:-1].tolist()]
    if RANK == 0:
        print(json.dumps(dict(contender=contender, impl="torch", n=SIZE, bytes=nbytes, c=c,
                              runs_s=runs, best_s=min(runs), median_s=statistics.median(runs),
                              max_rel_err=float(t[-1]), **extra)), flush=True)


def timed(barrier, fn, repeats):
    """Run 0 warms up (and its result is what the caller checks); then `repeats` timed runs."""
    times = []
    for rep in range(repeats + 1):
        barrier()
        start = time.perf_counter()
        fn()
        if rep:
            times.append(time.perf_counter() - start)
    return times


def init_gloo(timeout_s):
    os.environ["GLOO_SOCKET_IFNAME"] = IFACE
    dist.init_process_group("gloo", init_method=f"tcp://{ADDR}:{PORT}", rank=RANK,
                            world_size=SIZE, timeout=datetime.timedelta(seconds=timeout_s))


def mode_allreduce(a):
    init_gloo(a.timeout)
    for nbytes in a.sizes:
        mine = torch.full((nbytes // 4,), float(RANK + 1))
        data = torch.empty_like(mine)
        times = timed(dist.barrier, lambda: (data.copy_(mine), dist.all_reduce(data)), a.repeats)
        want = SIZE * (SIZE + 1) / 2  # small integers: the sum is exact
        err = float((data - want).abs().max()) / want
        report("torch-gloo", nbytes, times, err)


class Grads(torch.nn.Module):
    """Parameters of ResNet-50's shapes; backward of forward(x) gives every one a gradient x."""

    def __init__(self):
        super().__init__()
        self.params = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(s)) for s in SHAPES)

    def forward(self, x):
        return sum(p.sum() * x for p in self.params)


def mode_ddp(a):
    init_gloo(a.timeout)
    model = torch.nn.parallel.DistributedDataParallel(Grads())
    contender = {"none": "torch-ddp-gloo", "fp16": "torch-ddp-fp16-hook"}.get(a.hook)
    if a.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif a.hook == "cerar":
        os.environ.setdefault("CERAR_SECRET", "cerar-bench")
        import cerar
        from cerar.torch.ddp import register_cerar_hook
        register_cerar_hook(model, rank=RANK, size=SIZE, rendezvous_addr=ADDR,
                            rendezvous_port=PORT + 1, host_store=RANK == 0, iface=IFACE,
                            secret=os.environ["CERAR_SECRET"], algorithm=a.algorithm,
                            timeout_seconds=float(a.timeout))
        contender = f"torch-ddp-cerar-hook-{a.algorithm}"
    x = torch.tensor(float(RANK + 1))
    nbytes = 4 * sum(p.numel() for p in model.parameters())

    def step(sync=True):
        model.zero_grad(set_to_none=False)
        if sync:
            model(x).backward()  # DDP waits for every bucket's all-reduce before it returns
        else:
            with model.no_sync():  # the forward decides whether the backward all-reduces
                model(x).backward()
    for _ in range(2):  # DDP rebuilds its buckets after the first iteration
        step()
    local = timed(dist.barrier, lambda: step(sync=False), a.repeats)
    times = timed(dist.barrier, step, a.repeats)
    want = (SIZE + 1) / 2  # DDP averages
    err = max(float((p.grad - want).abs().max()) for p in model.parameters()) / want
    report(contender, nbytes, times, err, tensors=len(SHAPES),
           local_backward_s=round(min(local), 6))
    if a.hook == "cerar":
        cerar.shutdown()


def gaussian(rank, n):
    """Rank `rank`'s input: mu + noise, mu shared by all ranks (correlated gradients)."""
    mu = torch.randn(n, generator=torch.Generator().manual_seed(12345))
    return mu + torch.randn(n, generator=torch.Generator().manual_seed(1000 + rank))


def reference(n):
    """The float64 sum of every rank's float32 input (each rank regenerates them)."""
    total = torch.zeros(n, dtype=torch.float64)
    for r in range(SIZE):
        total += gaussian(r, n).double()
    return total


def rel_err(out, ref):
    """max |out - sum| / max |sum|."""
    return float((out.double() - ref).abs().max() / ref.abs().max())


def mode_lossy(a):
    init_gloo(a.timeout)
    for nbytes in a.sizes:
        n = nbytes // 4
        mine, ref = gaussian(RANK, n), reference(n)
        data, out = torch.empty_like(mine), [None]
        times = timed(dist.barrier, lambda: (data.copy_(mine), dist.all_reduce(data)), a.repeats)
        report("torch-gloo-f32", nbytes, times, rel_err(data, ref), data="gaussian")

        def half():  # the cast is part of what the hook costs
            h = mine.half()
            dist.all_reduce(h)
            out[0] = h.float()
        times = timed(dist.barrier, half, a.repeats)
        report("torch-gloo-fp16", nbytes, times, rel_err(out[0], ref), data="gaussian",
               wire_bytes=2)
        for hook in ddp_hooks():
            ddp_hook_contender(a, hook, nbytes, mine, ref)


def ddp_hooks():
    """DDP's own compression hooks that this torch's gloo can run (bf16 sums need torch 2.x)."""
    hooks = ["fp16", "powersgd1", "powersgd4"]
    if int(torch.__version__.split(".")[0]) >= 2:
        hooks.insert(1, "bf16")
    return hooks


class OneGradient(torch.nn.Module):
    """One parameter, a matrix (PowerSGD compresses matrices) of the buffer's n elements, whose
    gradient from forward(g).backward() is g: the lossy data as DDP's one bucket."""

    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1024, n // 1024))

    def forward(self, g):
        return (self.weight * g.view_as(self.weight)).sum()


def ddp_hook_contender(a, hook, nbytes, mine, ref):
    """DDP (one bucket holding the whole buffer) with its `hook`: the gradient it averages is
    this rank's lossy input, so the sum is N times the result. PowerSGD (with its error
    feedback, rank 1 or 4) runs 10 vanilla all-reduces first, as start_powerSGD_iter=10 says;
    the timed steps come after them."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    model = torch.nn.parallel.DistributedDataParallel(OneGradient(mine.numel()),
                                                      bucket_cap_mb=nbytes / 2**20 + 1)
    if hook in ("fp16", "bf16"):
        model.register_comm_hook(None, getattr(default_hooks, f"{hook}_compress_hook"))
    else:
        state = powerSGD_hook.PowerSGDState(process_group=None, start_powerSGD_iter=10,
                                            matrix_approximation_rank=int(hook[len("powersgd"):]))
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)

    def step():
        model.zero_grad(set_to_none=False)
        model(mine).backward()  # DDP waits for the bucket's all-reduce before it returns
    for _ in range(11 if hook.startswith("powersgd") else 1):
        step()
    times = timed(dist.barrier, step, a.repeats)
    out = model.module.weight.grad.reshape(-1) * SIZE
    ran = (f"DDP, {hook} hook" if hook in ("fp16", "bf16") else
           f"DDP, PowerSGD rank {hook[len('powersgd'):]}")
    report(f"torch-ddp-{hook}-hook", nbytes, times, rel_err(out, ref), data="gaussian",
           wire_bytes={"fp16": 2, "bf16": 2}.get(hook), last_choice=ran)


def mode_cerar_lossy(a):
    os.environ.setdefault("CERAR_SECRET", "cerar-bench")
    import cerar.torch as hvd
    # Every lossy wire the budget may choose (allow: the 16-bit ones; int8 fits budgets >~ N/250)
    overrides = dict(max_error=a.max_error, compression="fp16,bf16,int8") if a.max_error else {}
    hvd.init(rendezvous_addr=ADDR, rendezvous_port=PORT, host_store=RANK == 0, iface=IFACE,
             secret=os.environ["CERAR_SECRET"], algorithm=a.algorithm,
             timeout_seconds=float(a.timeout), **overrides)

    def barrier():
        hvd.allreduce(torch.zeros(1), name="barrier")
    if a.algorithm == "ring":
        contenders = [("cerar-ring-f32", None, None), ("cerar-wire-fp16", hvd.Compression.fp16, None),
                      ("cerar-wire-bf16", hvd.Compression.bf16, None),
                      ("cerar-pycast-fp16", None, torch.float16),
                      ("cerar-pycast-bf16", None, torch.bfloat16), ("cerar-wire-int8", "int8", None),
                      # 16-bit tensors on the int8 wire (over a float32 copy): beside pycast's
                      ("cerar-int8-of-fp16", "int8", torch.float16),
                      ("cerar-int8-of-bf16", "int8", torch.bfloat16)]
    else:
        name = f"cerar-budget-{a.max_error:g}" if a.max_error else f"cerar-lossy-{a.algorithm}"
        contenders = [(name, None, None)]
    for nbytes in a.sizes:
        n = nbytes // 4
        mine, ref = gaussian(RANK, n), reference(n)
        for contender, compression, cast in contenders:
            out = [None]
            label = f"lossy.{contender}.{nbytes}"

            def run():
                if compression == "int8":  # the runtime's int8 wire, asked for by name
                    t = mine if cast is None else mine.to(cast)
                    out[0] = hvd.synchronize(hvd.allreduce_async(t, op=hvd.Sum, name=label,
                                                                 wire="int8")).float()
                elif cast is not None:  # a cast in Python: the runtime sums 16-bit tensors
                    out[0] = hvd.allreduce(mine.to(cast), op=hvd.Sum, name=label).float()
                else:
                    out[0] = hvd.allreduce(mine, op=hvd.Sum, name=label, compression=compression)
            times = timed(barrier, run, a.repeats)
            s = hvd.stats()
            # The runtime's bound of what it decided (none for its plain rings).
            bounded = s["last_choice"] != "ring" or a.max_error
            extra = dict(data="gaussian", last_choice=s["last_choice"],
                         predicted_error=s["predicted_error_last"] if bounded else None)
            if compression is not None or cast is not None or s["last_choice"].startswith("ring-"):
                extra["wire_bytes"] = 1 if s["last_choice"] == "ring-int8" else 2
            if cast is not None:
                extra["last_choice"] = (f"int8 ring of {str(cast)[6:]} tensors"
                                        if compression == "int8" else
                                        f"ring of {str(cast)[6:]} tensors")
            # CERAR's limit follows the c the runtime ran.
            c = s["last_components"] if s["last_choice"] == "cerar" else None
            report(contender, nbytes, times, rel_err(out[0], ref), c=c, **extra)
    hvd.shutdown()


def mode_cerar(a):
    os.environ.setdefault("CERAR_SECRET", "cerar-bench")  # the runtime checks it is set
    import cerar.torch as hvd
    hvd.init(rendezvous_addr=ADDR, rendezvous_port=PORT, host_store=RANK == 0, iface=IFACE,
             secret=os.environ["CERAR_SECRET"], algorithm=a.algorithm,
             fusion_threshold_bytes=(64 << 20) if a.fusion == "on" else 0,
             timeout_seconds=float(a.timeout))
    grads = [torch.zeros(s) for s in SHAPES]
    mine = float(RANK + 1)
    step_no = [0]

    def step():
        for g in grads:
            g.fill_(mine)
        # Backward produces the last layer's gradient first; names are stable across steps.
        handles = [hvd.allreduce_async_(g, op=hvd.Average, name=f"grad.{i}")
                   for i, g in reversed(list(enumerate(grads)))]
        for h in handles:
            hvd.synchronize(h)
        step_no[0] += 1

    def barrier():
        hvd.allreduce(torch.zeros(1), name="barrier")
    times = timed(barrier, step, a.repeats)
    want = (SIZE + 1) / 2
    err = max(float((g - want).abs().max()) for g in grads) / want
    nbytes = 4 * sum(g.numel() for g in grads)
    report(f"cerar-rt-{a.algorithm}-fusion-{a.fusion}", nbytes, times, err, tensors=len(SHAPES),
           stats=dict(hvd.stats()))
    hvd.shutdown()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["allreduce", "ddp", "cerar", "lossy", "cerar-lossy"],
                   default="allreduce")
    p.add_argument("--max-error", type=float, default=0,
                   help="--mode cerar-lossy: CERAR_MAX_ERROR, with lossy wires allowed")
    p.add_argument("--sizes", default="1M,64M", type=lambda s: [parse_bytes(x) for x in s.split(",") if x])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=int, default=300, help="seconds, per operation")
    p.add_argument("--algorithm", choices=["ring", "cerar", "auto"], default="auto")
    p.add_argument("--fusion", choices=["on", "off"], default="on")
    p.add_argument("--hook", choices=["none", "fp16", "cerar"], default="none",
                   help="--mode ddp: DDP's communication hook")
    a = p.parse_args()
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    {"allreduce": mode_allreduce, "ddp": mode_ddp, "cerar": mode_cerar, "lossy": mode_lossy,
     "cerar-lossy": mode_cerar_lossy}[a.mode](a)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
