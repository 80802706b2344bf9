"""Elastic synthetic benchmark: a job that keeps training while workers die and hosts come and go.

    cerarrun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./discover.sh \\
        python examples/elastic_train.py

An MLP on random "images" (nothing to download), trained with cerar.torch's elastic API: the
training function is wrapped in @hvd.elastic.run, everything it needs to resume lives in a
TorchState (the model, the optimizer and the loop's counters), and the state is committed every
--batches-per-commit batches. When a worker fails, every survivor rolls back to the last commit,
the job re-forms without it and the loop continues; when the discovery script lists a new host,
the job grows at the next commit (or host check). Each iteration prints its throughput; the last
lines give the mean over the iterations and the whole job's. docs/elastic.md explains it.
"""
import argparse
import timeit

import numpy as np
import torch
import torch.nn.functional as F

import cerar.torch as hvd

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--batch-size", type=int, default=32, help="per worker")
parser.add_argument("--features", type=int, default=1024, help="inputs per sample")
parser.add_argument("--hidden", type=int, default=512)
parser.add_argument("--num-warmup-batches", type=int, default=5)
parser.add_argument("--num-batches-per-iter", type=int, default=10)
parser.add_argument("--num-iters", type=int, default=10)
parser.add_argument("--batches-per-commit", type=int, default=1)
parser.add_argument("--batches-per-host-check", type=int, default=10,
                    help="between commits: how often to look for new hosts")
parser.add_argument("--fp16-allreduce", action="store_true", help="16-bit wire for gradients")
parser.add_argument("--lr", type=float, default=0.01, help="per worker; scaled by the size")
args = parser.parse_args()

hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU(),
                            torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                            torch.nn.Linear(args.hidden, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression)
data = torch.randn(args.batch_size, args.features)
target = torch.randint(0, 10, (args.batch_size,))


def log(text):
    if hvd.rank() == 0:
        print(text, flush=True)


def step(state):
    optimizer.zero_grad()
    F.cross_entropy(model(data), target).backward()
    optimizer.step()
    state.batch += 1
    if state.batch % args.batches_per_commit == 0:
        state.commit()  # saves the state, then raises HostsUpdatedInterrupt if hosts changed
    elif state.batch % args.batches_per_host_check == 0:
        state.check_host_updates()


@hvd.elastic.run
def benchmark(state):
    if not state.warm:
        timeit.timeit(lambda: step(state), number=args.num_warmup_batches)
        state.warm = True
    while state.iter < args.num_iters:
        seconds = timeit.timeit(lambda: step(state), number=args.num_batches_per_iter)
        rate = args.batch_size * args.num_batches_per_iter / seconds
        log(f"Iter #{state.iter}: {rate:.1f} img/sec per CPU on {hvd.size()} workers")
        state.rates.append(rate)
        state.iter += 1
        state.commit()


def on_reset():
    """The job's size changed: keep the learning rate proportional to it."""
    for group in optimizer.param_groups:
        group["lr"] = args.lr * hvd.size()
    log(f"RESET: now {hvd.size()} workers")


state = hvd.elastic.TorchState(model, optimizer, rates=[], iter=0, batch=0, warm=False)
state.register_reset_callbacks([on_reset])
benchmark(state)
mean, spread = np.mean(state.rates), 1.96 * np.std(state.rates)
log(f"Img/sec per CPU: {mean:.1f} +-{spread:.1f}")
log(f"Total img/sec on {hvd.size()} CPU(s): {hvd.size() * mean:.1f} +-{hvd.size() * spread:.1f}")
