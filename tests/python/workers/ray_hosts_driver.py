"""The driver of test_ray.py's multi-node test, run on the first emulated host: joins the Ray
cluster at argv[1] (one Ray node per host), runs a RayExecutor job of argv[2] hosts x argv[3]
ranks, and prints what each rank saw."""
import json
import os
import sys
import time

import numpy as np
import ray

from cerar.ray import RayExecutor
from ray_jobs import allreduce_job

address, hosts, per_host = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
here = os.path.dirname(os.path.abspath(__file__))
ray.init(address=address, log_to_driver=False,
         runtime_env={"env_vars": {"PYTHONPATH": here, "CERAR_LOG_LEVEL": "error"}})
deadline = time.monotonic() + 120
while sum(node["Alive"] for node in ray.nodes()) < hosts:
    if time.monotonic() > deadline:
        sys.exit(f"only {sum(n['Alive'] for n in ray.nodes())} of {hosts} Ray nodes joined")
    time.sleep(0.5)
try:
    with RayExecutor(num_hosts=hosts, num_workers_per_host=per_host) as executor:
        executor.start()
        results = executor.run(allreduce_job, args=[100])
        n = hosts * per_host
        expected = np.arange(100, dtype=np.float64) * (n * (n + 1) // 2)
        print("RAYHOSTS " + json.dumps({
            "hosts": executor.hosts(), "ranks": [list(r[:4]) for r in results],
            "correct": all(np.array_equal(r[4], expected) for r in results)}), flush=True)
finally:
    ray.shutdown()
