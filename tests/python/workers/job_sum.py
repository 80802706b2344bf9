"""One rank of a two-rank job that all-reduces its own value (JOB_VALUE) and prints the sum:
two such jobs started on one port must never sum each other's values."""
import os
import time

import numpy as np

import cerar
import cerar.numpy as cn

cerar.init()
total = cn.allreduce(np.array([float(os.environ["JOB_VALUE"])]), op=cerar.Sum, name="v")
for step in range(int(os.environ.get("JOB_STEPS", "1")) - 1):  # a job that keeps running,
    time.sleep(0.001)  # at a pace that does not depend on how fast a lone all-reduce is
    again = cn.allreduce(np.array([float(os.environ["JOB_VALUE"])]), op=cerar.Sum, name="v")
    assert again[0] == total[0], (step, again[0], total[0])
print(f"sum {total[0]}", flush=True)
cerar.shutdown()
