#!/usr/bin/env python3
"""One rank of the time-to-accuracy run; launched once per rank by bench/runner.py (CERAR_RANK,
CERAR_SIZE, CERAR_RENDEZVOUS_ADDR/PORT, CERAR_NETNS_IFACE), normally through
bench/time_to_accuracy.py.

Trains tta_model's language model data-parallel with one communication variant until rank 0's
validation loss reaches --target-loss or the training clock reaches --max-seconds. The clock
counts training steps only (validation is excluded, and costs every variant the same). Rank 0
prints one "TTA {json}" line per validation and a final "TTA_RESULT {json}".

Variants: ddp (torch DDP, gloo), ddp-fp16 and ddp-bf16 (DDP with its fp16 / bf16 compression
hook; bf16 needs a torch whose gloo sums bfloat16, 2.x), ddp-powersgd1 and ddp-powersgd4 (DDP
with its PowerSGD hook, rank 1 / 4, vanilla all-reduces for the first 10 steps), cerar-ring,
cerar-auto, cerar-cerar (cerar.torch.DistributedOptimizer with that algorithm), cerar-budget
(auto with the job-wide error budget CERAR_MAX_ERROR=--max-error and CERAR_COMPRESSION=allow:
per buffer the fastest of the ring, CERAR and the 16-bit wires whose error bound fits),
cerar-int8 and cerar-int8-ef (the exact ring with the int8 wire on every float32 buffer,
CERAR_COMPRESSION=int8; -ef adds CERAR_ERROR_FEEDBACK=1).
"""
import argparse, datetime, json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import tta_model  # noqa: E402

RANK, SIZE = int(os.environ["CERAR_RANK"]), int(os.environ["CERAR_SIZE"])
ADDR = os.environ.get("CERAR_RENDEZVOUS_ADDR", "127.0.0.1")
PORT = int(os.environ.get("CERAR_RENDEZVOUS_PORT", "29500"))
IFACE = os.environ.get("CERAR_NETNS_IFACE", "lo")
VARIANTS = ["ddp", "ddp-fp16", "ddp-bf16", "ddp-powersgd1", "ddp-powersgd4", "cerar-ring",
            "cerar-auto", "cerar-cerar", "cerar-budget", "cerar-int8", "cerar-int8-ef"]


def tx_bytes():
    """Bytes this rank's link has sent (its namespace's veth), or None on shared loopback."""
    if IFACE == "lo":
        return None
    with open(f"/sys/class/net/{IFACE}/statistics/tx_bytes") as f:
        return int(f.read())


class Ddp:
    def __init__(self, a):
        import torch.distributed as dist
        self.dist = dist
        os.environ["GLOO_SOCKET_IFNAME"] = IFACE
        dist.init_process_group("gloo", init_method=f"tcp://{ADDR}:{PORT}", rank=RANK,
                                world_size=SIZE, timeout=datetime.timedelta(seconds=a.timeout))
        self.hook = a.variant[len("ddp-"):] if a.variant != "ddp" else None

    def wrap(self, model, optimizer):
        # PowerSGD gets one bucket: with several in flight, torch 2.x's hook over gloo issued
        # its chained all-reduces in different orders on different ranks (gloo aborted on a
        # size mismatch at the first compressed step).
        one = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20 + 1
        buckets = {"bucket_cap_mb": one} if self.hook and "powersgd" in self.hook else {}
        ddp = torch.nn.parallel.DistributedDataParallel(model, **buckets)  # rank 0's weights
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
        if self.hook in ("fp16", "bf16"):
            ddp.register_comm_hook(None, getattr(default_hooks, f"{self.hook}_compress_hook"))
        elif self.hook:  # powersgdR: PowerSGD of rank R, after 10 vanilla steps
            state = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=int(self.hook[len("powersgd"):]),
                start_powerSGD_iter=10)
            ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return ddp, optimizer

    def broadcast(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        self.dist.broadcast(t, 0)
        return t.tolist()

    def stats(self):
        return {}

    def close(self):
        self.dist.barrier()
        self.dist.destroy_process_group()


class Cerar:
    def __init__(self, a):
        os.environ.setdefault("CERAR_SECRET", "cerar-bench")
        if a.variant == "cerar-budget":
            os.environ["CERAR_MAX_ERROR"] = str(a.max_error)
            os.environ["CERAR_COMPRESSION"] = "allow"
        if a.variant.startswith("cerar-int8"):
            os.environ["CERAR_COMPRESSION"] = "int8"
            os.environ["CERAR_ERROR_FEEDBACK"] = "1" if a.variant.endswith("-ef") else "0"
        import cerar.torch as hvd
        self.hvd = hvd
        algorithm = ("auto" if a.variant == "cerar-budget" else
                     "ring" if a.variant.startswith("cerar-int8") else a.variant[len("cerar-"):])
        hvd.init(rendezvous_addr=ADDR, rendezvous_port=PORT, host_store=RANK == 0, iface=IFACE,
                 secret=os.environ["CERAR_SECRET"], algorithm=algorithm,
                 timeout_seconds=float(a.timeout))

    def wrap(self, model, optimizer):
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        return model, self.hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters())

    def broadcast(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        return self.hvd.broadcast(t, 0, name="tta.control").tolist()

    def stats(self):
        return dict(self.hvd.stats())

    def close(self):
        self.hvd.shutdown()


def train(a, comm):
    torch.manual_seed(a.seed)  # the same initial weights on every rank and variant
    corpus = tta_model.Corpus(tta_model.load_corpus())
    model = tta_model.LanguageModel(corpus.vocab, a.d_model, a.layers, a.heads, a.seq)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=a.lr)
    model, optimizer = comm.wrap(model, optimizer)
    plain = getattr(model, "module", model)
    data = torch.Generator().manual_seed(1000 * a.seed + RANK)  # each rank its own windows
    clock, step, reached_at, tx0, log = 0.0, 0, None, tx_bytes(), []
    while True:
        step += 1
        for group in optimizer.param_groups:  # linear warm-up, then constant
            group["lr"] = a.lr * min(1.0, step / a.warmup)
        start = time.perf_counter()
        inputs, targets = corpus.batch("train", a.batch, a.seq, data)
        optimizer.zero_grad()
        loss = tta_model.loss_of(model, inputs, targets)
        loss.backward()
        optimizer.step()
        clock += time.perf_counter() - start
        if step % a.eval_every and step < a.max_steps:
            continue
        val = (tta_model.validation_loss(plain, corpus, a.val_batches, a.batch, a.seq, a.seed)
               if RANK == 0 else 0.0)
        # Rank 0's clock and verdict for all: it took part in every all-reduce.
        val, clock, stop = comm.broadcast(
            [val, clock, float(val <= a.target_loss or clock >= a.max_seconds
                               or step >= a.max_steps)])
        if reached_at is None and val <= a.target_loss:
            reached_at = clock
        point = dict(step=step, train_s=round(clock, 3), val_loss=round(val, 4),
                     train_loss=round(float(loss), 4))
        log.append(point)
        if RANK == 0:
            print("TTA " + json.dumps(point), flush=True)
        if stop:
            break
    tx1 = tx_bytes()
    return dict(variant=a.variant, seed=a.seed, ranks=SIZE, params=params, steps=step,
                reached=reached_at is not None, seconds_to_target=reached_at,
                target_loss=a.target_loss, final_val_loss=log[-1]["val_loss"],
                train_s=log[-1]["train_s"], tx_bytes_rank0=None if tx0 is None else tx1 - tx0,
                stats=comm.stats(), log=log)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", choices=VARIANTS, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target-loss", type=float, default=2.8)
    p.add_argument("--max-seconds", type=float, default=600.0, help="training clock limit")
    p.add_argument("--max-steps", type=int, default=100000)
    p.add_argument("--eval-every", type=int, default=2, help="steps between validations")
    p.add_argument("--val-batches", type=int, default=8)
    p.add_argument("--d-model", type=int, default=320)
    p.add_argument("--layers", type=int, default=10)
    p.add_argument("--heads", type=int, default=5)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=2, help="sequences per rank and step")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=10, help="steps")
    p.add_argument("--max-error", type=float, default=3e-3, help="cerar-budget's CERAR_MAX_ERROR")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--timeout", type=int, default=300, help="seconds, per operation")
    a = p.parse_args(argv)
    if a.d_model % a.heads:
        p.error("--d-model must be a multiple of --heads")
    return a


def main():
    a = parse()
    torch.set_num_threads(a.threads)
    comm = Ddp(a) if a.variant.startswith("ddp") else Cerar(a)
    result = train(a, comm)
    comm.close()
    if RANK == 0:
        print("TTA_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
