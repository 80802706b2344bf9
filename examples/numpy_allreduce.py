"""The smallest cerar program: all-reduce numpy arrays across ranks.

    cerarrun -np 4 python examples/numpy_allreduce.py
    cerarrun -np 4 --algorithm ring python examples/numpy_allreduce.py
"""
import numpy as np

import cerar
import cerar.numpy as cn

cerar.init()
rank, size = cerar.rank(), cerar.size()

# every rank contributes (rank + 1) * [1, 2, ..., 8]
x = (rank + 1) * np.arange(1, 9, dtype=np.float32)
total = cn.allreduce(x, op=cerar.Sum, name="x")
mean = cn.allreduce(x, op=cerar.Average, name="x.mean")
print(f"rank {rank}/{size}: sum {total} mean {mean}", flush=True)

# asynchronous: start several (the runtime fuses what is ready together), then wait
handles = [cn.allreduce_async(np.full(1000, float(rank)), op=cerar.Sum, name=f"grad.{i}")
           for i in range(10)]
sums = [cn.synchronize(h)[0] for h in handles]
assert all(s == size * (size - 1) / 2 for s in sums), sums

# broadcast from rank 0 and allgather of different lengths
config = cn.broadcast(np.array([0.1, 32.0]) if rank == 0 else np.zeros(2), root_rank=0)
everyone = cn.allgather(np.full(rank + 1, rank, dtype=np.int64))
if rank == 0:
    print(f"broadcast {config}; allgather {everyone}; stats {cerar.stats()}", flush=True)
cerar.shutdown()
