"""Starts, uses and shuts down the runtime three times in one process. With argument "differ",
rank 1 passes init() overrides that differ from the other ranks' (the job uses rank 0's).
Prints one digest of its results per start."""
import hashlib
import os
import sys

import numpy as np

import cerar
import cerar.numpy as cn

rank = int(next((os.environ[k] for k in ("CERAR_RANK", "RANK", "OMPI_COMM_WORLD_RANK")
                 if k in os.environ), "0"))
differ = len(sys.argv) > 1 and sys.argv[1] == "differ"
overrides = {"components": 4, "eps": 0.01, "fusion_threshold_bytes": 4096} \
    if differ and rank == 1 else {}
for start in range(3):
    cerar.init(**overrides)
    assert cerar.rank() == rank
    g = np.random.default_rng(100 * start + rank).normal(1.0, 1.0, 300_000).astype(np.float32)
    out = cn.allreduce(g, op=cerar.Sum, name="g")
    stats = cerar.stats()
    assert stats["cerar_buffers"] == 1, stats
    cerar.shutdown()
    print(f"start {start} {hashlib.sha256(out.tobytes()).hexdigest()[:16]} "
          f"c={stats['last_components']}", flush=True)
print("restart OK", flush=True)
