"""DistributedDataParallel training of a small CNN on scikit-learn's digits (8x8 images, 10
classes; nothing is downloaded). One script for plain DDP and DDP + cerar:

    python -m torch.distributed.run --nproc_per_node 4 examples/ddp_train.py --comm gloo
    python -m torch.distributed.run --nproc_per_node 4 examples/ddp_train.py --comm cerar
    python -m torch.distributed.run --nproc_per_node 4 examples/ddp_train.py --backend cerar
    python -m torch.distributed.run --nproc_per_node 4 examples/ddp_train.py --comm cerar \\
        --algorithm cerar --components 16 --amp

Without torchrun (Debian's torch 1.13 under Python 3.11 cannot start it), the same variables
by hand: for r in 0 1 2 3; do RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
python examples/ddp_train.py --comm cerar & done; wait

--backend cerar makes the process group torch.distributed's "cerar" backend (cerar.torch
registers it), so DDP's own all-reduces run on cerar's runtime (the exact ring unless
CERAR_ALGORITHM or CERAR_MAX_ERROR says otherwise). --comm cerar registers cerar.torch.ddp's hook: every DDP bucket is averaged by cerar's runtime,
which starts from the same torchrun variables as the gloo process group. --comm fp16 is DDP's
own fp16-compression hook. --amp runs the forward under CPU autocast (bfloat16) and skips a
step, on every rank alike, when a reduced gradient is not finite. Rank 0 prints per epoch the
train and validation loss, validation accuracy and samples/s; the last line is "RESULT {json}".
"""
import argparse
import gc
import json
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--comm", choices=["gloo", "fp16", "cerar"], default=None,
                        help="gloo: DDP's own all-reduce on the group's backend; default "
                             "cerar, or gloo with --backend cerar")
    parser.add_argument("--backend", choices=["gloo", "cerar"], default="gloo",
                        help="the process group's backend (cerar: torch.distributed's 'cerar')")
    parser.add_argument("--algorithm", choices=["auto", "ring", "cerar"], default=None,
                        help="--comm cerar: overrides CERAR_ALGORITHM")
    parser.add_argument("--components", type=int, default=None,
                        help="--comm cerar: CERAR's c (e.g. 16 with --algorithm cerar)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--amp", action="store_true", help="CPU autocast to bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    args = parser.parse_args()
    if args.comm is None:  # with the cerar backend, DDP's own all-reduce already runs on cerar
        args.comm = "gloo" if args.backend == "cerar" else "cerar"
    return args


def load_data(seed):
    digits = load_digits()
    X = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    split = int(0.8 * len(y))
    return (X[order[:split]], y[order[:split]]), (X[order[split:]], y[order[split:]])


def make_model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 16, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))


def wrap(model, args):
    ddp = DDP(model)  # DDP broadcasts rank 0's parameters here
    if args.comm == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    elif args.comm == "cerar":
        from cerar.torch.ddp import register_cerar_hook
        overrides = {"algorithm": args.algorithm, "components": args.components}
        register_cerar_hook(ddp, **{k: v for k, v in overrides.items() if v is not None})
    return ddp


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.backend == "cerar":
        import cerar.torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend)  # torchrun's (or any env://) variables
    rank, size = dist.get_rank(), dist.get_world_size()
    (X_train, y_train), (X_val, y_val) = load_data(args.seed)
    X_train, y_train = X_train[rank::size], y_train[rank::size]
    X_val, y_val = X_val[rank::size], y_val[rank::size]
    steps = torch.tensor([len(y_train) // args.batch_size])
    dist.all_reduce(steps, op=dist.ReduceOp.MIN)
    steps = int(steps)

    torch.manual_seed(args.seed)
    model = wrap(make_model(), args)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if rank == 0:
        print(f"{size} ranks, {steps} steps/epoch, backend {args.backend}, comm {args.comm}, "
              f"amp {args.amp}", flush=True)
    history, skipped, start = [], 0, time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(epoch))
        epoch_start, loss_sum = time.perf_counter(), 0.0
        for step in range(steps):
            index = perm[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                logits = model(X_train[index])
            loss = F.cross_entropy(logits.float(), y_train[index])
            loss.backward()
            # the reduced gradients are the same on every rank, so is this decision
            if all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()):
                optimizer.step()
            else:
                skipped += 1
            loss_sum += loss.item()
        elapsed = time.perf_counter() - epoch_start
        model.eval()
        with torch.no_grad():
            logits = model(X_val)
            totals = torch.tensor([loss_sum / steps / size,
                                   F.cross_entropy(logits, y_val, reduction="sum").item(),
                                   (logits.argmax(1) == y_val).sum().item(), len(y_val)],
                                  dtype=torch.float64)
        dist.all_reduce(totals)
        train_loss, val_loss, correct, count = totals.tolist()
        row = {"epoch": epoch + 1, "train_loss": train_loss, "val_loss": val_loss / count,
               "val_acc": correct / count,
               "samples_per_s": size * steps * args.batch_size / elapsed}
        history.append(row)
        if rank == 0:
            print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                           for k, v in row.items()), flush=True)
    buffers = {}
    if args.comm == "cerar":
        import cerar
        stats = cerar.stats()
        buffers = {k: stats[k] for k in ("ring_buffers", "cerar_buffers")}
        cerar.shutdown()
    elif args.backend == "cerar":
        import cerar.torch.backend
        stats = cerar.torch.backend.stats(dist.group.WORLD)
        buffers = {k: stats[k] for k in ("ring_buffers", "cerar_buffers")}
    if rank == 0:
        print("RESULT " + json.dumps(dict(history[-1], comm=args.comm, backend=args.backend,
                                          amp=args.amp,
                                          ranks=size, skipped_steps=skipped, **buffers,
                                          seconds=time.perf_counter() - start)), flush=True)
    # Alive, the DDP model keeps torch's Gloo worker threads past destroy_process_group and
    # torch 2.x can abort at interpreter exit.
    model = optimizer = logits = loss = None
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
