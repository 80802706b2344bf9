"""One rank of a job on shared memory (CERAR_SHARED_MEMORY=1) or TCP: the collectives' results
against numpy, and a digest of the largest sum, which the test compares between the two links."""
import hashlib
import os

import numpy as np

import cerar
import cerar.numpy as cn
from common import check, check_close

cerar.init()
r, n = cerar.rank(), cerar.size()
expected = os.environ.get("CERAR_SHARED_MEMORY") == "1"
check("links", cerar.stats()["shared_memory"] == expected, str(cerar.stats()["shared_memory"]))
for size in (1, 1000, 300_001):  # 300k floats: more than a ring, so transfers wrap
    x = np.random.default_rng(r).standard_normal(size).astype(np.float32)
    everyone = [np.random.default_rng(k).standard_normal(size).astype(np.float32)
                for k in range(n)]
    total = cn.allreduce(x, op=cerar.Sum, name=f"sum{size}")
    check_close(f"sum {size}", total, np.sum(np.stack(everyone).astype(np.float64), axis=0),
                rtol=1e-5, atol=1e-4)
    check_close(f"max {size}", cn.allreduce(x, op=cerar.Max, name=f"max{size}"),
                np.max(np.stack(everyone), axis=0))
digest = hashlib.sha256(total.tobytes()).hexdigest()
ints = np.arange(10, dtype=np.int64) * (r + 1)
check_close("int64 sum", cn.allreduce(ints, op=cerar.Sum, name="ints"),
            np.arange(10) * n * (n + 1) // 2)
gathered = cn.allgather(np.full((r + 1, 2), r, dtype=np.int32), name="gather")
check("allgather", gathered.shape == (n * (n + 1) // 2, 2), str(gathered.shape))
root = cn.broadcast(np.full(5, float(r)), root_rank=n - 1, name="bcast")
check_close("broadcast", root, np.full(5, n - 1.0))
print(f"shm OK {r} {digest}", flush=True)
cerar.shutdown()
