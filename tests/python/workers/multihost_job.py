"""One rank of a multi-host job: all-reduces with the exact ring flat, the exact ring host by
host and CERAR host by host (flat where the hosts are not layered), checks each against an fp64
reference, checks the hosts the ranks agreed on, and prints where it ran. Usage:
    multihost_job.py                 run and exit 0
    multihost_job.py fail R CODE     rank R exits with CODE after the first init; the others
                                     sleep (so R's is the job's first failure)
    multihost_job.py hang            after init print READY and sleep (for interruption tests)
"""
import os
import socket
import sys
import time

import numpy as np

import cerar
import cerar.numpy as cn
from common import check, check_close

mode = sys.argv[1] if len(sys.argv) > 1 else "run"
for algorithm, layered in (("ring", "0"), ("ring", "1"), ("cerar", "1")):
    cerar.init(algorithm=algorithm, hierarchical_allreduce=layered)
    r, n = cerar.rank(), cerar.size()
    per_host = cerar.local_size()
    # Ranks fill the hosts in order, as many on each.
    check("topology", (cerar.local_rank(), cerar.cross_rank(), cerar.cross_size(),
                       cerar.is_homogeneous()) == (r % per_host, r // per_host, n // per_host,
                                                   True),
          f"{cerar.local_rank()} {cerar.cross_rank()} {cerar.cross_size()}")
    if mode == "fail" and r == int(sys.argv[2]):
        print(f"rank {r} fails on purpose", flush=True)
        sys.exit(int(sys.argv[3]))
    if mode in ("hang", "fail"):
        print(f"READY {r}", flush=True)
        time.sleep(600)
    # Integers: the exact ring's sum is exact in float32.
    ints = np.arange(50_000, dtype=np.float32) % 97 + r
    expected = n * (np.arange(50_000, dtype=np.float64) % 97) + n * (n - 1) / 2
    x = np.random.default_rng(r).normal(1.0, 1.0, 200_000).astype(np.float32)
    reference = sum(np.random.default_rng(q).normal(1.0, 1.0, 200_000).astype(np.float32)
                    .astype(np.float64) for q in range(n))
    exact = algorithm == "ring"
    check_close(f"{algorithm} ints", cn.allreduce(ints, op=cerar.Sum, name="ints"), expected,
                rtol=0.0 if exact else 1e-2)
    check_close(f"{algorithm} normal", cn.allreduce(x, op=cerar.Sum, name="normal"), reference,
                rtol=1e-5 if exact else 1e-2, atol=1e-4)
    stats = cerar.stats()
    check(f"{algorithm} ran", (stats["cerar_buffers"] > 0) == (not exact), str(stats))
    host_by_host = layered == "1" and 1 < per_host < n
    check(f"{algorithm} host by host", (stats["hierarchical_buffers"] > 0) == host_by_host,
          str(stats))
    # Each host's level moves through its own shared memory.
    check("host memory", stats["shared_memory"] == (per_host > 1) or layered == "0", str(stats))
    local = f"{cerar.local_rank()}/{cerar.local_size()}"
    cerar.shutdown()
    label = algorithm + ("-hosts" if layered == "1" else "")
    print(f"multihost {label} OK {r}/{n} on {socket.gethostname()} local {local}", flush=True)
print(f"rank {r} sees PROBE_VAR={os.environ.get('PROBE_VAR')} "
      f"LAUNCHER_ONLY={os.environ.get('LAUNCHER_ONLY')}", flush=True)
