"""A rank started with horovodrun's flags: prints the agreed fusion threshold and cycle time,
whether the HOROVOD_ alias the flag replaces reached it, and horovodrun's HOROVOD_RANK/SIZE."""
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
      f"HOROVOD_FUSION_THRESHOLD={os.environ.get('HOROVOD_FUSION_THRESHOLD', '-')} "
      f"HOROVOD_RANK={os.environ['HOROVOD_RANK']} HOROVOD_SIZE={os.environ['HOROVOD_SIZE']}",
      flush=True)
cerar.shutdown()
