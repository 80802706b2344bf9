"""A rank started with horovodrun's flags: prints the agreed fusion threshold and cycle time and
whether the HOROVOD_ aliases the flags replace reached it."""
import os

import numpy as np

import cerar
import cerar.numpy as cn

cerar.init()
for step in range(3):
    cn.allreduce(np.ones(4, dtype=np.float32), op=cerar.Sum, name="grad.w")
stats = cerar.stats()
print(f"fusion_threshold_bytes={stats['fusion_threshold_bytes']} "
      f"cycle_time_ms={stats['cycle_time_ms']:g} "
      f"HOROVOD_FUSION_THRESHOLD={os.environ.get('HOROVOD_FUSION_THRESHOLD', '-')}", flush=True)
cerar.shutdown()
