"""One worker of an elastic job (tests/python/test_elastic.py): a linear model with momentum SGD,
trained with cerar.torch's elastic API over a fixed dataset that ElasticSampler shards, one
commit per step. What the tests read from its output:

    SYNCED <commits> <size> <rank> <hash>   after every sync: equal hashes for one (commits, size)
    EPOCH <e> ONCE <size>                   rank 0: epoch e trained every sample exactly once
                                            in committed steps (else the job fails)
    FINAL <rank> <size> <epochs> <loss> <hash> <host>

Every sample's count of committed trainings travels in the state (an all-reduced histogram per
step), so steps lost to a failure are rolled back with it. While the file --hold names exists,
rank 0 adds epochs (agreed with a broadcast), so a test can keep the job alive through its
membership changes.
"""
import argparse
import hashlib
import os
import socket
import sys
import time

import numpy as np
import torch

import cerar.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=720)  # a multiple of 12: no padding at 4 or 6
parser.add_argument("--batch", type=int, default=6)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--step-seconds", type=float, default=0.02)
parser.add_argument("--hold", default=None)
args = parser.parse_args()

hvd.init()
generator = torch.Generator().manual_seed(1)
inputs = torch.randn(args.samples, 8, generator=generator)
truth = torch.randn(8, 1, generator=generator)
targets = inputs @ truth + 0.1 * torch.randn(args.samples, 1, generator=generator)
dataset = torch.utils.data.TensorDataset(inputs, targets, torch.arange(args.samples))

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=args.seed)
loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, sampler=sampler)


def digest():
    """Parameters and optimizer state, bit for bit."""
    h = hashlib.sha256()
    for tensor in model.state_dict().values():
        h.update(tensor.numpy().tobytes())
    for slot in optimizer.state_dict()["state"].values():
        for value in slot.values():
            if torch.is_tensor(value):
                h.update(value.numpy().tobytes())
    return h.hexdigest()[:16]


def full_loss():
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(inputs), targets))


def end_of_epoch(state):
    if not np.all(state.counts == 1):
        twice, never = int(np.sum(state.counts > 1)), int(np.sum(state.counts == 0))
        print(f"EPOCH {state.epoch} NOT ONCE: {twice} samples twice or more, {never} never",
              flush=True)
        sys.exit(3)
    if hvd.rank() == 0:
        print(f"EPOCH {state.epoch} ONCE {hvd.size()}", flush=True)
    hold = hvd.rank() == 0 and args.hold is not None and os.path.exists(args.hold)
    if hvd.broadcast_object(hold, root_rank=0, name="hold") and \
            state.epoch + 1 >= state.epochs_planned:
        state.epochs_planned += 1
    state.counts = np.zeros(args.samples)
    state.epoch += 1
    state.commit()


@hvd.elastic.run
def train(state):
    print(f"SYNCED {state.commits} {hvd.size()} {hvd.rank()} {digest()}", flush=True)
    while state.epoch < state.epochs_planned:
        if sampler.epoch != state.epoch:
            sampler.set_epoch(state.epoch)
        for batch_idx, (x, y, index) in enumerate(loader):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            seen = torch.from_numpy(np.bincount(index.numpy(), minlength=args.samples) * 1.0)
            state.counts = state.counts + hvd.allreduce(seen, op=hvd.Sum, name="seen").numpy()
            sampler.record_batch(batch_idx, args.batch)
            time.sleep(args.step_seconds)
            state.commits += 1
            state.commit()
        end_of_epoch(state)


def on_reset():
    print(f"RESET {hvd.rank()} {hvd.size()}", flush=True)


state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, commits=0,
                               epochs_planned=args.epochs, counts=np.zeros(args.samples))
state.register_reset_callbacks([on_reset])
train(state)
print(f"FINAL {hvd.rank()} {hvd.size()} {state.epoch} {full_loss():.6f} {digest()} "
      f"{socket.gethostname()}", flush=True)
