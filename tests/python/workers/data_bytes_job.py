"""Every kind of collective that moves data (tests/python/test_metrics.py): all-reduce (the
algorithm CERAR_ALGORITHM chooses, and Adasum), allgather, reducescatter, broadcast, alltoall
and an all-reduce in process set [0, 1]; then writes stats() to DIR/stats.<rank>.json.
Usage: data_bytes_job.py DIR (with CERAR_DYNAMIC_PROCESS_SETS=1)"""
import json
import os
import sys

import numpy as np

import cerar
import cerar.numpy as cn

folder = sys.argv[1]
cerar.init()
rank, size = cerar.rank(), cerar.size()
for i in range(3):
    cn.allreduce(np.full(50_000 + i, float(rank), np.float32), op=cerar.Sum, name=f"sum.{i}")
cn.allreduce(np.full(4096, rank + 1.0, np.float32), op=cerar.Adasum, name="adasum")
cn.allgather(np.ones((rank + 1, 3), np.float32), name="gathered")
cn.reducescatter(np.ones((4 * size, 5), np.float32), op=cerar.Sum, name="scattered")
cn.broadcast(np.arange(1000, dtype=np.float32), root_rank=1, name="broadcast")
cn.alltoall(np.ones((2 * size, 2), np.float32), splits=[2] * size, name="exchanged")
pair = cerar.add_process_set([0, 1])
if rank in (0, 1):
    cn.allreduce(np.ones(777, np.float32), op=cerar.Sum, name="pair", process_set=pair)
cn.allreduce(np.ones(1, np.float32), op=cerar.Sum, name="fence")  # ranks 2, 3 wait for 0, 1
stats = cerar.stats()
path = os.path.join(folder, f"stats.{rank}.json")
with open(path + ".tmp", "w") as f:
    json.dump(stats, f)
os.rename(path + ".tmp", path)
cerar.shutdown()
