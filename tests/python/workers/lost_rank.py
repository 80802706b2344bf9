"""All-reduces until one rank is killed or frozen from outside; each survivor prints the class
of its error, the rank it names and when it failed (started without cerarrun, torchrun-style,
so rank 0 hosts the store and no launcher ends the survivors)."""
import json
import os
import sys
import time

import numpy as np

import cerar
import cerar.numpy as cn

cerar.init()
data = np.ones(1 << 20, np.float32)  # 4 MiB: a round trip of the ring takes a while
cn.allreduce_(data, name="warmup")
print(f"ready {cerar.rank()}", flush=True)
step = 0
try:
    while True:
        cn.allreduce_(data, name=f"step.{step}")
        step += 1
except RuntimeError as error:
    print("RESULT " + json.dumps({
        "rank": cerar.rank(), "class": type(error).__name__, "peer": getattr(error, "peer", None),
        "cerar": isinstance(error, cerar.CerarError),
        "message": str(error), "time": time.time(), "steps": step}), flush=True)
sys.stdout.flush()
os._exit(0)  # the runtime has failed; nothing is left to shut down cleanly
