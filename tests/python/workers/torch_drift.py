"""parameter_drift sees a perturbation on one rank (cheap and exact modes), resync_parameters
and DistributedOptimizer(resync_every=K) remove it; CERAR with share correction and the error
counters of the runtime (CERAR_SHARE_CORRECTION, CERAR_DEBUG_ERROR) run end to end."""
import torch
import torch.nn.functional as F

import cerar.torch as hvd
from common import check

hvd.init(algorithm="cerar", components=4 * 4, share_correction=True, debug_error=True)
r, n = hvd.rank(), hvd.size()
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)

drift = hvd.parameter_drift(model, exact=True)
check("identical at start", drift["max_abs"] == 0 and drift["norm_spread_rel"] == 0, drift)

with torch.no_grad():
    if r == n - 1:
        model[0].weight[3, 5] += 1e-3
drift = hvd.parameter_drift(model, exact=True)
check("exact drift", abs(drift["max_abs"] - 1e-3) < 1e-6, drift)
check("cheap drift", drift["sum_spread"] > 5e-4 and drift["norm_spread_rel"] > 0, drift)
hvd.resync_parameters(model)
check("resynced", hvd.parameter_drift(model, exact=True)["max_abs"] == 0)

optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters(), resync_every=3)
g = torch.Generator().manual_seed(r)
for step in range(6):
    x = torch.randn(32, 16, generator=g)
    optimizer.zero_grad()
    F.mse_loss(model(x), x[:, :4]).backward()
    optimizer.step()
check("resync_every", hvd.parameter_drift(model, exact=True)["max_abs"] == 0)

stats = hvd.stats()
check("cerar ran", stats["cerar_buffers"] > 0, stats)
check("error measured", stats["measured_buffers"] == stats["cerar_buffers"] and
      0 < stats["measured_error_max"] <= 2 * stats["predicted_error_max"], stats)
print("drift OK", flush=True)
hvd.shutdown()
