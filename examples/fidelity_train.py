"""One data-parallel training run for the fidelity study (examples/fidelity_suite.py runs the
matrix): the same model, data, seeds and steps whichever all-reduce averages the gradients.

    cerarrun -np 4 python examples/fidelity_train.py --task digits --out run.json
    CERAR_ALGORITHM=cerar CERAR_COMPONENTS=16 cerarrun -np 4 python examples/fidelity_train.py
    torchrun --nproc_per_node 4 examples/fidelity_train.py --backend ddp   # torch DDP (gloo)
    torchrun --nproc_per_node 4 examples/fidelity_train.py --backend ddp-cerar  # DDP + cerar hook

Tasks (data from Debian packages, nothing is downloaded): "digits", an MLP on scikit-learn's
8x8 digits; "charlm", a character-level transformer language model on the license texts of
base-files (/usr/share/common-licenses). Every --error-every steps the local gradients are
gathered and the reduced gradient is compared with their fp64 mean (that step is left out of
the timing). Rank 0 writes a JSON history: losses, validation, all-reduce error, drift, time.
"""
import argparse
import gc
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", choices=["digits", "charlm"], default="digits")
    p.add_argument("--backend", choices=["cerar", "ddp", "ddp-cerar"], default="cerar",
                   help="ddp-cerar: DDP with cerar.torch.ddp's hook")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--error-every", type=int, default=5, help="0: never measure the error")
    p.add_argument("--drift-every", type=int, default=50)
    p.add_argument("--resync-every", type=int, default=0, help="cerar: DistributedOptimizer knob")
    p.add_argument("--drift-check-every", type=int, default=None,
                   help="cerar: drift control's K (0: off; default: the library's)")
    p.add_argument("--drift-tolerance", type=float, default=None)
    p.add_argument("--ab-blocks", type=int, default=0,
                   help="cerar: toggle drift control on/off every this many steps and time "
                        "both modes side by side (the overhead measurement)")
    p.add_argument("--out", default=None)
    return p.parse_args()


# --- data and models ------------------------------------------------------------------------
def digits_task(seed):
    from sklearn.datasets import load_digits
    digits = load_digits()
    X = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))  # fixed split
    X, y = X[order], y[order]
    split = int(0.8 * len(y))
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))

    def batch(step, rank, size, per_rank=32):
        g = torch.Generator().manual_seed(seed * 100003 + step)
        index = torch.randperm(split, generator=g)[rank * per_rank:(rank + 1) * per_rank]
        return X[index], y[index]
    return model, batch, (X[split:], y[split:]), dict(lr=0.05, momentum=0.9)


class CharLM(torch.nn.Module):
    def __init__(self, vocab, width=64, layers=2, context=32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Parameter(torch.zeros(context, width))
        layer = torch.nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0,
                                                 batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(width, vocab)
        mask = torch.triu(torch.full((context, context), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, tokens):
        n = tokens.shape[1]
        h = self.embed(tokens) + self.position[:n]
        return self.head(self.encoder(h, mask=self.mask[:n, :n]))


def charlm_task(seed, context=32):
    root = Path("/usr/share/common-licenses")
    files = sorted({p.resolve() for p in root.iterdir() if p.is_file()})
    text = "\n".join(p.read_text(errors="replace") for p in files)
    vocab = sorted(set(text))
    data = torch.tensor([vocab.index(ch) for ch in text], dtype=torch.int64)
    split = int(0.9 * len(data))
    starts = torch.arange(split, len(data) - context - 1, context)[:512]
    val = (torch.stack([data[s:s + context] for s in starts]),
           torch.stack([data[s + 1:s + context + 1] for s in starts]))
    torch.manual_seed(seed)
    model = CharLM(len(vocab), context=context)

    def batch(step, rank, size, per_rank=16):
        g = torch.Generator().manual_seed(seed * 100003 + step * 131 + rank)
        s = torch.randint(0, split - context - 1, (per_rank,), generator=g)
        x = torch.stack([data[i:i + context] for i in s])
        y = torch.stack([data[i + 1:i + context + 1] for i in s])
        return x, y
    return model, batch, val, dict(lr=3e-3)


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)), logits


# --- the two backends behind one small interface ------------------------------------------
class CerarBackend:
    def __init__(self):
        import cerar.torch as hvd
        self.hvd = hvd
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()

    def wrap(self, model, optimizer, args):
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = self.hvd.DistributedOptimizer(
            optimizer, model.named_parameters(), resync_every=args.resync_every,
            drift_check_every=args.drift_check_every, drift_tolerance=args.drift_tolerance)
        return model, optimizer

    def drift_control(self, model, optimizer):
        return optimizer.drift_control

    def finish_backward(self, optimizer):
        optimizer.synchronize()  # waits for the all-reduces still running

    def step(self, optimizer):
        with optimizer.skip_synchronize():
            optimizer.step()

    def allgather(self, flat):
        return self.hvd.allgather(flat.unsqueeze(0), name="fidelity.gather")

    def reduce(self, values, op):
        values = torch.tensor(values, dtype=torch.float64)
        if op == "max":  # min/max always take the exact ring
            return self.hvd.allreduce(values, op=self.hvd.Max).tolist()
        # A forced CERAR would also approximate the sums of the metrics: gather them instead.
        return self.hvd.allgather(values.unsqueeze(0), name="fidelity.metrics").sum(0).tolist()

    def drift(self, model):
        return self.hvd.parameter_drift(model, exact=True)

    def costs(self, model, repeat=10):
        """Seconds per call of the cheap drift check, the exact one and a resync."""
        out = {}
        for key, fn in [("drift_check_s", lambda: self.hvd.parameter_drift(model)),
                        ("drift_exact_s", lambda: self.hvd.parameter_drift(model, exact=True)),
                        ("resync_s", lambda: self.hvd.resync_parameters(model))]:
            fn()
            start = time.perf_counter()
            for _ in range(repeat):
                fn()
            out[key] = (time.perf_counter() - start) / repeat
        return out

    def stats(self):
        return self.hvd.stats()

    def close(self):
        self.hvd.shutdown()


class DdpBackend:
    def __init__(self):
        import torch.distributed as dist
        self.dist = dist
        dist.init_process_group("gloo")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def wrap(self, model, optimizer, args):
        return torch.nn.parallel.DistributedDataParallel(model), optimizer

    def drift_control(self, model, optimizer):
        return None

    def finish_backward(self, optimizer):
        pass  # DDP's reducer has averaged the gradients by the end of backward()

    def step(self, optimizer):
        optimizer.step()

    def allgather(self, flat):
        parts = [torch.empty_like(flat) for _ in range(self.size)]
        self.dist.all_gather(parts, flat)
        return torch.stack(parts)

    def reduce(self, values, op):
        t = torch.tensor(values, dtype=torch.float64)
        self.dist.all_reduce(t, op={"sum": self.dist.ReduceOp.SUM,
                                    "max": self.dist.ReduceOp.MAX}[op])
        return t.tolist()

    def drift(self, model):
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        root = flat.clone()
        self.dist.broadcast(root, 0)
        worst = self.reduce([(flat - root).abs().max().item()], "max")[0]
        return {"max_abs": worst, "max_rel": worst / root.abs().max().item()}

    def costs(self, model, repeat=10):
        return {}

    def stats(self):
        return {}

    def close(self):
        self.dist.destroy_process_group()


class DdpCerarBackend(DdpBackend):
    """DDP whose buckets cerar's runtime averages (cerar.torch.ddp), started from the same
    torchrun variables as the process group."""

    def wrap(self, model, optimizer, args):
        import cerar.torch.ddp as cddp
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        self.state = cddp.register_cerar_hook(ddp, optimizer=optimizer,
                                              drift_check_every=args.drift_check_every,
                                              drift_tolerance=args.drift_tolerance)
        return ddp, optimizer

    def drift_control(self, model, optimizer):
        return self.state.drift_control

    def stats(self):
        import cerar
        return cerar.stats()

    def close(self):
        import cerar
        cerar.shutdown()
        super().close()


# --- training -------------------------------------------------------------------------------
def measure_error(backend, params, local, history_row):
    """Compares the reduced gradients with the fp64 mean of the gathered local ones."""
    reduced = torch.cat([p.grad.reshape(-1) for p in params]).double()
    gathered = backend.allgather(torch.cat([g.reshape(-1) for g in local])).double()
    exact = gathered.mean(0)
    scale = exact.abs().max().item()
    worst = (reduced - exact).abs().max().item() / scale
    mean = (reduced - exact).abs().mean().item() / exact.abs().mean().item()
    worst, mean = backend.reduce([worst, mean], "max")
    centred = gathered - gathered.mean(1, keepdim=True)
    corr = (centred @ centred.T) / torch.outer(centred.norm(dim=1), centred.norm(dim=1))
    n = corr.shape[0]
    history_row.update(error_max=worst, error_mean=mean,
                       rank_correlation=((corr.sum() - n) / max(1, n * (n - 1))).item())


def evaluate(backend, model, val):
    x, y = val[0][backend.rank::backend.size], val[1][backend.rank::backend.size]
    with torch.no_grad():
        loss, logits = loss_of(model, x, y)
        local = [loss.item() * y.numel(), (logits.argmax(-1) == y).sum().item(), y.numel()]
    total, correct, count = backend.reduce(local, "sum")
    return total / count, correct / count


def ab_summary(ab):
    """Mean step ms per mode and per block (blocks alternate on, off, on, ...)."""
    out = {}
    for mode, rows in ab.items():
        blocks = {}
        for block, seconds in rows:
            blocks.setdefault(block, []).append(seconds)
        means = [1000 * sum(v) / len(v) for _, v in sorted(blocks.items())]
        key = "on" if mode else "off"
        out[key + "_mean_ms"] = 1000 * sum(s for _, s in rows) / max(1, len(rows))
        out[key + "_block_means_ms"] = means
    return out


def main():
    args = parse_args()
    torch.set_num_threads(1)
    backend = {"cerar": CerarBackend, "ddp": DdpBackend, "ddp-cerar": DdpCerarBackend}[
        args.backend]()
    train(args, backend)
    # A DDP model still alive keeps torch's Gloo group (and its worker threads) past
    # destroy_process_group; torch 2.x can then abort at interpreter exit. train()'s locals are
    # gone by now; collect any cycles still holding them before closing.
    gc.collect()
    backend.close()


def train(args, backend):
    make = digits_task if args.task == "digits" else charlm_task
    model, batch, val, hyper = make(args.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = (torch.optim.SGD(params, lr=hyper["lr"], momentum=hyper["momentum"])
                 if "momentum" in hyper else torch.optim.Adam(params, lr=hyper["lr"]))
    model, optimizer = backend.wrap(model, optimizer, args)
    control = backend.drift_control(model, optimizer)
    history, drift, step_seconds, comm_seconds = [], [], [], []
    ab = {True: [], False: []}  # --ab-blocks: (block, seconds) per mode
    checks = 0
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        mode = True
        if args.ab_blocks and control is not None:
            mode = ((step - 1) // args.ab_blocks) % 2 == 0
            control.active = mode
        x, y = batch(step, backend.rank, backend.size)
        measured = args.error_every > 0 and step % args.error_every == 0
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss, _ = loss_of(model, x, y)
        local = torch.autograd.grad(loss, params, retain_graph=True) if measured else None
        loss.backward()
        t1 = time.perf_counter()
        backend.finish_backward(optimizer)
        t2 = time.perf_counter()
        backend.step(optimizer)
        row = {"step": step, "train_loss": loss.item()}
        if measured:
            measure_error(backend, params, local, row)
        else:
            step_seconds.append(time.perf_counter() - t0)
            comm_seconds.append(t2 - t1)
            ab[mode].append(((step - 1) // max(1, args.ab_blocks), step_seconds[-1]))
        if control is not None and control.stats["checks"] != checks:
            checks = control.stats["checks"]
            row.update(drift_estimate=control.stats["last_drift"],
                       resyncs=control.stats["resyncs"])
        if step % args.eval_every == 0 or step == args.steps:
            row["val_loss"], row["val_acc"] = evaluate(backend, model, val)
        if step % args.drift_every == 0 or step == args.steps:
            drift.append(dict(step=step, **backend.drift(model)))
        history.append(row)
    seconds = time.perf_counter() - start
    if control is not None:
        control.active = False  # the cost probes below are not training steps
    costs = backend.costs(model)
    stats = backend.stats()
    if backend.rank == 0:
        evals = [r for r in history if "val_loss" in r]
        errors = [r for r in history if "error_max" in r]
        result = {
            "task": args.task, "backend": args.backend, "seed": args.seed, "steps": args.steps,
            "ranks": backend.size, "parameters": sum(p.numel() for p in params),
            "env": {k: v for k, v in os.environ.items() if k.startswith("CERAR_") and
                    k not in ("CERAR_SECRET", "CERAR_RANK", "CERAR_LOCAL_RANK")},
            "resync_every": args.resync_every,
            "final_val_loss": evals[-1]["val_loss"], "final_val_acc": evals[-1]["val_acc"],
            "best_val_loss": min(r["val_loss"] for r in evals),
            "best_val_acc": max(r["val_acc"] for r in evals),
            "error_max": max((r["error_max"] for r in errors), default=None),
            "error_max_median": sorted(r["error_max"] for r in errors)[len(errors) // 2]
            if errors else None,
            "error_mean": sum(r["error_mean"] for r in errors) / len(errors) if errors else None,
            "rank_correlation": sum(r["rank_correlation"] for r in errors) / len(errors)
            if errors else None,
            "final_drift": drift[-1], "drift": drift,
            "step_ms": 1000 * sorted(step_seconds)[len(step_seconds) // 2],
            "allreduce_wait_ms": 1000 * sorted(comm_seconds)[len(comm_seconds) // 2],
            "seconds": seconds, "costs": costs,
            "predicted_error_max": stats.get("predicted_error_max"),
            "cerar_buffers": stats.get("cerar_buffers"), "ring_buffers": stats.get("ring_buffers"),
            "drift_control": dict(control.stats, every=control.every,
                                  tolerance=control.tolerance) if control is not None else None,
            "max_drift_rel": max(d["max_rel"] for d in drift),
            "ab": ab_summary(ab) if args.ab_blocks else None,
            "history": history,
        }
        print("RESULT " + json.dumps({k: v for k, v in result.items()
                                      if k not in ("history", "drift")}), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
