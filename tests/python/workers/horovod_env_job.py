"""A rank of a job script written for Horovod: its HOROVOD_* variables set the runtime."""
import numpy as np

import cerar
import cerar.numpy as cn

cerar.init()
cn.allreduce(np.ones(4, dtype=np.float32), op=cerar.Sum, name="x")
stats = cerar.stats()
print(f"[{cerar.rank()}] fusion_threshold_bytes={stats['fusion_threshold_bytes']} "
      f"cycle_time_ms={stats['cycle_time_ms']:g}", flush=True)
cerar.shutdown()
