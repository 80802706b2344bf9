"""Rank 1 dies after init; the others wait on an all-reduce it never joins."""
import os
import sys

import numpy as np

import cerar
import cerar.numpy as cn

cerar.init()
cn.allreduce(np.ones(8, np.float32), name="warmup")
if cerar.rank() == 1:
    print("dying", flush=True)
    os._exit(5)
cn.allreduce(np.ones(8, np.float32), name="never")
print("should not get here", flush=True)
sys.exit(0)
