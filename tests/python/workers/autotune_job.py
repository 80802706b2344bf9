"""Trains a stand-in step (five float32 gradients) under CERAR_AUTOTUNE with different local
tuning settings per rank (init() overrides; the job uses rank 0's) until the tuner freezes,
checking every result. Prints the parameters in force at the end. Argument: the log folder."""
import json
import os
import sys

import numpy as np

import cerar
import cerar.numpy as cn

rank = int(os.environ["CERAR_RANK"])
folder = sys.argv[1]
local = [
    dict(autotune=True, autotune_warmup_samples=1, autotune_steps_per_sample=2,
         autotune_log=os.path.join(folder, "rank0.csv"),
         timeline=os.path.join(folder, "timeline{rank}.json")),
    dict(autotune=False, fusion_threshold_bytes=4096, cycle_time_ms=7.0),
    dict(autotune=True, autotune_warmup_samples=5, autotune_steps_per_sample=9,
         autotune_log=os.path.join(folder, "rank2.csv"), cycle_time_ms=0.25),
    dict(timeline=os.path.join(folder, "timeline{rank}.json")),
][rank]
cerar.init(algorithm="cerar", **local)
size = cerar.size()
sizes = [300_000, 1000, 120_000, 64, 50_000]
base = [np.linspace(-1, 1, n, dtype=np.float32) for n in sizes]
for step in range(400):
    grads = [(b * (rank + 1 + step % 3)).astype(np.float32) for b in base]
    handles = [cn.allreduce_async_(g, op=cerar.Sum, name=f"grad.{i}") for i, g in enumerate(grads)]
    for h in handles:
        cn.synchronize(h)
    factor = sum(r + 1 + step % 3 for r in range(size))
    for g, b in zip(grads, base):
        # CERAR is approximate: within its error bound, far below a wrong or missing rank.
        np.testing.assert_allclose(g, b * factor, atol=1e-2 * factor)
    # Whether to stop, agreed: the ranks see the freeze in the same response sequence but may
    # look at different moments, so they take the maximum of what they saw.
    frozen = np.array([int(cerar.stats()["autotune_frozen"])], dtype=np.int32)
    if cn.allreduce(frozen, op=cerar.Max, name="frozen")[0]:
        break
stats = cerar.stats()
keys = ["fusion_threshold_bytes", "cycle_time_ms", "components_scale", "autotuning",
        "autotune_frozen"]
print("PARAMS " + json.dumps({k: stats[k] for k in keys}) + f" steps={step + 1}", flush=True)
cerar.shutdown()
print("autotune OK", flush=True)
