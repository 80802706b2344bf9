"""Data-parallel training of a small MLP on scikit-learn's digits (8x8 images, 10 classes;
the data ships with scikit-learn, nothing is downloaded).

    cerarrun -np 4 python examples/torch_train.py --algorithm cerar
    cerarrun -np 4 python examples/torch_train.py --algorithm ring

Each rank trains on its shard; cerar.torch.DistributedOptimizer averages the gradients while
backward() runs. Rank 0 prints per epoch: train and validation loss, validation accuracy,
samples/s (all ranks), and the all-reduce time per step that the step still waited for
(communication not hidden behind backward). The last line is "RESULT {json}".
"""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

import cerar.torch as hvd


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.1,
                        help="SGD learning rate (momentum 0.9) on the averaged gradients")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--algorithm", choices=["auto", "ring", "cerar"], default=None,
                        help="overrides CERAR_ALGORITHM / cerarrun --algorithm")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    return parser.parse_args()


def load_data(seed):
    digits = load_digits()
    X = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    X, y = X[order], y[order]
    split = int(0.8 * len(y))
    return (X[:split], y[:split]), (X[split:], y[split:])


def make_model(hidden):
    return torch.nn.Sequential(
        torch.nn.Linear(64, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10))


def evaluate(model, X, y):
    """(sum of losses, correct, count) over this rank's validation shard, summed over ranks."""
    with torch.no_grad():
        logits = model(X)
        local = torch.tensor([F.cross_entropy(logits, y, reduction="sum").item(),
                              (logits.argmax(1) == y).sum().item(), len(y)], dtype=torch.float64)
    return hvd.allreduce(local, op=hvd.Sum, name="eval").tolist()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    hvd.init(**({"algorithm": args.algorithm} if args.algorithm else {}))
    rank, size = hvd.rank(), hvd.size()
    algorithm = args.algorithm or os.environ.get("CERAR_ALGORITHM", "auto")
    (X_train, y_train), (X_val, y_val) = load_data(args.seed)
    X_train, y_train = X_train[rank::size], y_train[rank::size]
    X_val, y_val = X_val[rank::size], y_val[rank::size]
    steps = len(y_train) // args.batch_size
    steps = int(hvd.allreduce(torch.tensor([steps]), op=hvd.Min, name="steps").item())

    torch.manual_seed(args.seed + rank)  # different on purpose: the broadcast aligns them
    model = make_model(args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    if rank == 0:
        print(f"{size} ranks, {steps} steps/epoch of {args.batch_size} samples per rank, "
              f"algorithm {algorithm}", flush=True)
        print(f"{'epoch':>5} {'train loss':>10} {'val loss':>9} {'val acc':>8} "
              f"{'samples/s':>10} {'allreduce ms/step':>17}", flush=True)
    history, start = [], time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(epoch))
        epoch_start, wait, loss_sum = time.perf_counter(), 0.0, 0.0
        for step in range(steps):
            index = perm[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(X_train[index]), y_train[index])
            loss.backward()
            t0 = time.perf_counter()
            optimizer.synchronize()  # waits for the all-reduces still running
            wait += time.perf_counter() - t0
            with optimizer.skip_synchronize():
                optimizer.step()
            loss_sum += loss.item()
        elapsed = time.perf_counter() - epoch_start
        train_loss = hvd.allreduce(torch.tensor([loss_sum / steps]), name="train_loss").item()
        model.eval()
        val_loss, correct, count = evaluate(model, X_val, y_val)
        row = {"epoch": epoch + 1, "train_loss": train_loss, "val_loss": val_loss / count,
               "val_acc": correct / count, "samples_per_s": size * steps * args.batch_size / elapsed,
               "allreduce_ms_per_step": 1000 * wait / steps}
        history.append(row)
        if rank == 0:
            print(f"{row['epoch']:>5} {row['train_loss']:>10.4f} {row['val_loss']:>9.4f} "
                  f"{row['val_acc']:>8.4f} {row['samples_per_s']:>10.0f} "
                  f"{row['allreduce_ms_per_step']:>17.3f}", flush=True)
    stats = hvd.stats()
    if rank == 0:
        result = dict(history[-1], algorithm=algorithm, ranks=size,
                      seconds=time.perf_counter() - start,
                      ring_buffers=stats.get("ring_buffers"),
                      cerar_buffers=stats.get("cerar_buffers"),
                      links="memory" if stats.get("shared_memory") else "TCP")
        print("RESULT " + json.dumps(result), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
