"""Drift control (cerar.torch.DriftControl), CERAR forced, Adam: with the default settings the
replicas' drift after N steps stays under the tolerance, right after the resync parameters and
Adam's moments are bit-identical on every rank; with drift_check_every=0 nothing is checked or
sent and the drift grows past the tolerance. Then the job-wide environment settings: ranks
started with different CERAR_DRIFT_* adopt rank 0's at the first check, though their first
checks were launched at different steps, and still resync at the same step;
CERAR_DRIFT_CHECK_EVERY=0 everywhere turns it off after that first check."""
import os

import torch
import torch.nn.functional as F

import cerar.torch as hvd
from cerar.torch import drift
from common import check

hvd.init(algorithm="cerar", components=4 * 4)
r, n = hvd.rank(), hvd.size()
torch.set_num_threads(1)


class Net(torch.nn.Module):
    """An embedding whose rows most steps leave without a gradient: CERAR's error there is
    all Adam sees, so the ranks' copies drift apart as in a language model."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(256, 16)
        self.head = torch.nn.Linear(16, 8)

    def forward(self, tokens):
        return self.head(self.embed(tokens).mean(1))


def make(seed=0):
    torch.manual_seed(seed)
    return Net()


def batch(step):
    g = torch.Generator().manual_seed(1000 * step + r)
    tokens = torch.randint(0, 256, (8, 4), generator=g)
    return tokens, (tokens[:, :1].float() / 64).sin().expand(8, 8)


def train_step(model, optimizer, step):
    optimizer.zero_grad()
    x, y = batch(step)
    F.mse_loss(model(x), y).backward()
    optimizer.step()


def identical(name, tensors):
    """Every rank's tensors equal rank 0's, bit for bit."""
    flat = torch.cat([t.detach().reshape(-1).double() for t in tensors])
    gathered = hvd.allgather(flat.unsqueeze(0), name=f"test.identical.{name}")
    worst = (gathered - gathered[0]).abs().max().item()
    check(name, worst == 0, f"largest difference from rank 0: {worst:g}")


def named(model, prefix):
    return [(f"{prefix}.{k}", p) for k, p in model.named_parameters()]


# 1. Adam with the defaults against drift control off, side by side in one job.
on, off = make(), make()
opt_on = hvd.DistributedOptimizer(torch.optim.Adam(on.parameters(), lr=1e-2), named(on, "on"))
opt_off = hvd.DistributedOptimizer(torch.optim.Adam(off.parameters(), lr=1e-2),
                                   named(off, "off"), drift_check_every=0)
control = opt_on.drift_control
K, tolerance = drift.DEFAULT_CHECK_EVERY, drift.DEFAULT_TOLERANCE
check("defaults", (control.every, control.tolerance, control.enabled) == (K, tolerance, True),
      control.stats)
# Checks are launched after steps K and 2K; the first (Adam's fast start) resyncs at K + lag,
# the second as its drift says. The drift is compared after 2K + lag + 3 steps.
resync_step = K + drift.RESYNC_LAG
for step in range(1, 2 * K + drift.RESYNC_LAG + 4):
    train_step(on, opt_on, step)
    train_step(off, opt_off, step)
    if step <= resync_step:
        check("first resync at its step", control.stats["resyncs"] == (step == resync_step),
              (step, control.stats))
    if step == resync_step:
        check("drift measured over the tolerance", control.stats["last_drift"] > tolerance,
              control.stats)
        identical("parameters after resync", list(on.parameters()))
        moments = [opt_on.state[p][k] for p in on.parameters() for k in ("exp_avg", "exp_avg_sq")]
        identical("Adam moments after resync", moments)
        identical("Adam steps after resync", [torch.as_tensor(opt_on.state[p]["step"]).double()
                                              for p in on.parameters()])
check("checked", control.stats["checks"] == 2, control.stats)
drift_on = hvd.parameter_drift(on, exact=True, name="test.drift_on")["l2_rel"]
drift_off = hvd.parameter_drift(off, exact=True, name="test.drift_off")["l2_rel"]
check("under the tolerance with the defaults", drift_on < tolerance, (drift_on, drift_off))
check("over the tolerance with drift control off", drift_off > tolerance, (drift_on, drift_off))
stats = opt_off.drift_control.stats
check("off: nothing checked or sent", stats["checks"] == 0 and stats["resyncs"] == 0 and
      opt_off.drift_control._launched == 0 and not opt_off.drift_control.enabled, stats)
check("stats by prefix", hvd.drift_stats()[control.prefix]["checks"] == 2, hvd.drift_stats())
print(f"defaults OK drift on {drift_on:.2e} off {drift_off:.2e}", flush=True)

# 2. Job-wide settings from the environment: rank 0 checks every 5 steps with a tiny
# tolerance, the others every 7 with a huge one. Check 0 is launched at step 5 on rank 0 and
# at step 7 on the others; every rank resyncs at step 7 + lag with rank 0's settings.
os.environ.update(CERAR_DRIFT_CHECK_EVERY="5" if r == 0 else "7",
                  CERAR_DRIFT_TOLERANCE="1e-12" if r == 0 else "1")
model = make(1)
sgd = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                               named(model, "env"))
control = sgd.drift_control
target = 7 + drift.RESYNC_LAG
for step in range(1, target + 1):
    train_step(model, sgd, step)
    check("resync at the agreed step", control.stats["resyncs"] == (step == target),
          (step, control.stats))
check("rank 0's settings", (control.every, control.tolerance) == (5, 1e-12), control.stats)
identical("parameters after the env resync", list(model.parameters()))
identical("momentum after the env resync",
          [sgd.state[p]["momentum_buffer"] for p in model.parameters()])
for name in ("CERAR_DRIFT_CHECK_EVERY", "CERAR_DRIFT_TOLERANCE"):
    del os.environ[name]

# 3. CERAR_DRIFT_CHECK_EVERY=0 everywhere: one check (the settings' agreement) at the default
# K, no resync, then nothing.
os.environ["CERAR_DRIFT_CHECK_EVERY"] = "0"
model = make(2)
sgd = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                               named(model, "env_off"))
del os.environ["CERAR_DRIFT_CHECK_EVERY"]
control = sgd.drift_control
for step in range(1, 2 * K + 3):
    train_step(model, sgd, step)
check("env off: agreed once, then off", control.stats["checks"] == 1 and
      control.stats["resyncs"] == 0 and not control.enabled and control._launched == 1,
      control.stats)
print("env settings OK", flush=True)
hvd.shutdown()
