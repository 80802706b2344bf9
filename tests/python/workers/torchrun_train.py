"""A training script as torchrun starts it, on the "cerar" backend: DDP on a linear model,
rank 0 checkpointing after every step, every rank resuming from the checkpoint when torchrun
restarts the group. `torchrun_train.py CHECKPOINT STEPS [KILL_AT]`: in torchrun's first attempt
the last rank kills itself before step KILL_AT. Prints "[rank] start attempt A step S endpoint
E" (E: the group's runtime rendezvous, from torch's store) and, at the end, "[rank] trained
... OK" once the parameters equal a serial float64 run of the same steps within 1e-5."""
import datetime
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import cerar.torch  # noqa: F401 -- registers the backend
from cerar.torch._dist_runtime import round_prefix
from cerar.torch.backend import group_backend, stats

path, steps = sys.argv[1], int(sys.argv[2])
kill_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
LR = 0.1
torch.set_num_threads(1)
dist.init_process_group("cerar", timeout=datetime.timedelta(seconds=30))
r, n = dist.get_rank(), dist.get_world_size()


def say(line):
    """One write per line: on an unbuffered stdout (as the workers' is here) print writes the
    text and the newline apart, and another rank's line on the same pipe can come between."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 8, generator=g)
    return x, x @ torch.arange(1.0, 9.0).view(8, 1) + 0.5


torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=LR)
start = 0
if os.path.exists(path):  # written by rank 0 of an earlier attempt, whole (os.replace)
    saved = torch.load(path)
    model.module.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    start = saved["step"]
endpoint = group_backend()._store.get(round_prefix() + "endpoint").decode()
say(f"[{r}] start attempt {attempt} step {start} endpoint {endpoint}")

for step in range(start, steps):
    if attempt == 0 and step == kill_at and r == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    optimizer.zero_grad()
    F.mse_loss(model(batch(step, r)[0]), batch(step, r)[1]).backward()
    optimizer.step()
    if r == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step + 1}, path + ".tmp")
        os.replace(path + ".tmp", path)

# The same steps serially in float64: the mean over ranks of each rank's gradient
torch.manual_seed(0)
reference = torch.nn.Linear(8, 1).double()
for step in range(steps):
    reference.zero_grad()
    for k in range(n):
        x, y = batch(step, k)
        (F.mse_loss(reference(x.double()), y.double()) / n).backward()
    with torch.no_grad():
        for p in reference.parameters():
            p -= LR * p.grad
apart = max(float((p.double() - q).abs().max())
            for p, q in zip(model.module.parameters(), reference.parameters()))
largest = max(float(q.abs().max()) for q in reference.parameters())
reduced = stats()["ring_buffers"]
assert apart <= 1e-5 * largest and reduced >= steps - start, (apart, largest, reduced)
say(f"[{r}] trained {steps} steps, {reduced} on the runtime, apart {apart:.3g} OK")
dist.destroy_process_group()
