"""A job that Prometheus scrapes (tests/python/test_metrics.py): every rank runs `steps` steps of
all-reduces (of values no 16-bit wire holds exactly, so that a lossy wire's error shows), the
slow rank sleeping before each; then writes its stats() to DIR/stats.<rank>.json
and serves its metrics until DIR/done appears.
Usage: metrics_job.py DIR SLOW_RANK STEPS"""
import json
import os
import sys
import time

import numpy as np

import cerar
import cerar.numpy as cn

folder, slow_rank, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cerar.init()
rank = cerar.rank()
for step in range(steps):
    if rank == slow_rank:
        time.sleep(0.03)
    handles = [cn.allreduce_async(np.full(1000 * (i + 1), rank + 0.1, np.float32),
                                  op=cerar.Sum, name=f"grad.{i}") for i in range(3)]
    for handle in handles:
        cn.synchronize(handle)
cn.allgather(np.ones(4, np.float32), name="gathered")
stats = cerar.stats()
with open(os.path.join(folder, f"stats.{rank}.json.tmp"), "w") as f:
    json.dump(stats, f)
os.rename(os.path.join(folder, f"stats.{rank}.json.tmp"), os.path.join(folder, f"stats.{rank}.json"))
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(folder, "done")) and time.monotonic() < deadline:
    time.sleep(0.1)
print("metrics job done", flush=True)
cerar.shutdown()
