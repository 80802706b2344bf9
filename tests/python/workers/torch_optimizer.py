"""DistributedOptimizer with the exact ring reproduces single-process training on the
concatenated batch; a parameter without gradient on some ranks does not hang the job;
broadcast_parameters / broadcast_optimizer_state make all ranks identical."""
import copy

import torch
import torch.nn.functional as F

import cerar.torch as hvd
from common import check, check_close

hvd.init(algorithm="ring")
r, n = hvd.rank(), hvd.size()
torch.set_num_threads(1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 32)
        self.fc2 = torch.nn.Linear(32, 5)
        self.side = torch.nn.Linear(5, 5)  # used only where the batch asks for it

    def forward(self, x, use_side=False):
        out = self.fc2(torch.tanh(self.fc1(x)))
        return self.side(out) if use_side else out


def batch(step, per_rank=8):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(n * per_rank, 20, generator=g), torch.randint(0, 5, (n * per_rank,), generator=g)


# 1. equivalence with one process on the whole batch (momentum SGD, equal shards)
torch.manual_seed(0)
model = Net()
reference = copy.deepcopy(model)
# drift control asked to check after every step: with the ring it must never do anything
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=model.named_parameters(),
                               drift_check_every=1, drift_tolerance=1e-12)
check("isinstance", isinstance(opt, torch.optim.SGD), type(opt).__mro__)
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
for step in range(6):
    X, y = batch(step)
    local = slice(r * 8, (r + 1) * 8)
    opt.zero_grad()
    F.cross_entropy(model(X[local]), y[local]).backward()
    opt.step()
    ref_opt.zero_grad()
    F.cross_entropy(reference(X), y).backward()
    ref_opt.step()
for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    check_close(f"equivalence {name}", p.detach(), q.detach(), rtol=1e-5, atol=1e-6)
stats = opt.drift_control.stats
check("ring: no drift check", stats["steps"] == 6 and stats["cerar_steps"] == 0 and
      stats["checks"] == 0 and stats["resyncs"] == 0 and opt.drift_control._launched == 0, stats)

# 2. backward_passes_per_step=2 with gradient_predivide_factor: two half batches per step
model2 = copy.deepcopy(reference)
ref2 = copy.deepcopy(reference)
opt2 = hvd.DistributedOptimizer(torch.optim.SGD(model2.parameters(), lr=0.05),
                                named_parameters=[("m2." + k, v) for k, v in model2.named_parameters()],
                                backward_passes_per_step=2, gradient_predivide_factor=2.0)
ref_opt2 = torch.optim.SGD(ref2.parameters(), lr=0.05)
for step in range(3):
    X, y = batch(100 + step)
    opt2.zero_grad()
    for half in range(2):
        s = slice(r * 8 + half * 4, r * 8 + half * 4 + 4)
        (0.5 * F.cross_entropy(model2(X[s]), y[s])).backward()
    opt2.step()
    ref_opt2.zero_grad()
    F.cross_entropy(ref2(X), y).backward()
    ref_opt2.step()
for (name, p), q in zip(model2.named_parameters(), ref2.parameters()):
    check_close(f"accumulation {name}", p.detach(), q.detach(), rtol=1e-5, atol=1e-6)

# 3. 'side' gets a gradient on rank 0 only: the others contribute zeros instead of hanging
model3 = copy.deepcopy(reference)
opt3 = hvd.DistributedOptimizer(torch.optim.SGD(model3.parameters(), lr=0.1),
                                named_parameters=[("m3." + k, v) for k, v in model3.named_parameters()])
for step in range(3):
    X, y = batch(200 + step)
    opt3.zero_grad()
    F.cross_entropy(model3(X[r * 8:(r + 1) * 8], use_side=(r == 0)), y[r * 8:(r + 1) * 8]).backward()
    opt3.step()
states = hvd.allgather_object({k: v.detach().clone() for k, v in model3.state_dict().items()})
for k, v in states[0].items():
    for other in states[1:]:
        check_close(f"no-grad parameter {k}", other[k], v)

# 4. broadcast_parameters / broadcast_optimizer_state from rank 1
torch.manual_seed(10 + r)  # every rank starts different
model4 = Net()
opt4 = torch.optim.Adam(model4.parameters(), lr=0.001 * (r + 1))
X, y = batch(300 + r)
F.cross_entropy(model4(X), y).backward()
opt4.step()  # creates per-parameter state, different on every rank
root = 1 % n
hvd.broadcast_parameters(model4.state_dict(), root_rank=root)
hvd.broadcast_optimizer_state(opt4, root_rank=root)
check("lr", abs(opt4.param_groups[0]["lr"] - 0.001 * (root + 1)) < 1e-12, str(opt4.param_groups[0]))
params = hvd.allgather_object([p.detach().clone() for p in model4.parameters()])
moments = hvd.allgather_object([opt4.state[p]["exp_avg"].clone() for p in model4.parameters()
                                 if "exp_avg" in opt4.state[p]])
check("optimizer state", len(moments[0]) == 4, f"{len(moments[0])} parameters with state")
for k in range(1, n):
    for i in range(len(params[0])):
        check_close(f"broadcast_parameters {i}", params[k][i], params[0][i])
    for i in range(len(moments[0])):
        check_close(f"broadcast_optimizer_state {i}", moments[k][i], moments[0][i])

hvd.shutdown()
print("optimizer OK", flush=True)
