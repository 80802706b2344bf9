"""cerar.numpy semantics on every rank. Usage: numpy_ops.py [ring|cerar]"""
import sys

import numpy as np

import cerar
import cerar.numpy as cn
from common import check, check_close

algorithm = sys.argv[1] if len(sys.argv) > 1 else "ring"
cerar.init(algorithm=algorithm)
r, n = cerar.rank(), cerar.size()
exact = algorithm == "ring"
rtol = 0.0 if exact else 1e-2  # CERAR is approximate (error O(eps) relative to max |S|)
base = np.arange(1000, dtype=np.float32)
ranks_sum = n * (n - 1) / 2

# sum, average, min, max; out-of-place leaves the input alone
x = base + r
total = cn.allreduce(x, op=cerar.Sum, name="sum")
check_close("sum", total, n * base + ranks_sum, rtol=rtol, atol=1e-4)
check_close("input untouched", x, base + r)
check_close("average", cn.allreduce(x, name="avg"), base + ranks_sum / n, rtol=rtol, atol=1e-4)
ints = np.array([r, -r, 7 * r, 3], dtype=np.int32)
check_close("min", cn.allreduce(ints, op=cerar.Min), [0, -(n - 1), 0, 3])
check_close("max", cn.allreduce(ints, op=cerar.Max), [n - 1, 0, 7 * (n - 1), 3])
doubles = np.full(17, float(r), dtype=np.float64)
check_close("f64 max", cn.allreduce(doubles, op=cerar.Max, name="f64max"), np.full(17, n - 1.0))

# prescale / postscale
scaled = cn.allreduce(x, op=cerar.Sum, name="scaled", prescale_factor=2.0, postscale_factor=0.25)
check_close("pre/postscale", scaled, (n * base + ranks_sum) * 0.5, rtol=rtol, atol=1e-4)

# in place, and several handles in flight synchronized in reverse order
y = np.ones(64, dtype=np.float64) * (r + 1)
check("in place", cn.allreduce_(y, op=cerar.Sum, name="inplace") is y, "returned another array")
check_close("in place value", y, np.full(64, n * (n + 1) / 2), rtol=rtol)
handles = [cn.allreduce_async(np.full(100 + i, float(i + r), np.float32), op=cerar.Sum,
                              name=f"async.{i}") for i in range(8)]
for i, handle in reversed(list(enumerate(handles))):
    check_close(f"async {i}", cn.synchronize(handle), np.full(100 + i, n * i + ranks_sum),
                rtol=rtol, atol=1e-4)
check("poll", all(cn.poll(h) for h in handles), "poll() False after synchronize")

# grouped (fused as one unit), several shapes
group = [base[:10] + r, np.full((3, 4), float(r), np.float32), np.zeros(0, np.float32)]
out = cn.grouped_allreduce(group, op=cerar.Sum, name="group")
check_close("grouped 0", out[0], n * base[:10] + ranks_sum, rtol=rtol, atol=1e-4)
check_close("grouped 1", out[1], np.full((3, 4), ranks_sum), rtol=rtol, atol=1e-4)
check("grouped 2", out[2].shape == (0,), str(out[2].shape))

# unnamed calls get deterministic names
check_close("noname", cn.allreduce(np.ones(5, np.float32), op=cerar.Sum), np.full(5, n),
            rtol=rtol)

# dtypes the exact ring handles
check_close("f16", cn.allreduce(np.full(33, 0.5, np.float16), op=cerar.Sum, name="f16"),
            np.full(33, 0.5 * n), rtol=1e-3)
check_close("i64", cn.allreduce(np.arange(9, dtype=np.int64) * r, op=cerar.Sum, name="i64"),
            np.arange(9) * ranks_sum)
check_close("u8", cn.allreduce(np.array([r, 200], np.uint8), op=cerar.Max, name="u8"),
            [n - 1, 200])

# broadcast from the last rank, out of place and in place
root = n - 1
check_close("broadcast", cn.broadcast(np.full((2, 3), float(r)), root, name="bc"),
            np.full((2, 3), float(root)))
z = np.arange(6, dtype=np.int64) * (r + 1)
cn.broadcast_(z, 0, name="bc_")
check_close("broadcast_", z, np.arange(6))

# allgather with uneven first dimensions
mine = np.full((r + 1, 3), float(r), np.float32)
gathered = cn.allgather(mine, name="gather")
expected = np.concatenate([np.full((k + 1, 3), float(k), np.float32) for k in range(n)])
check_close("allgather", gathered, expected)
check("allgather dtype", gathered.dtype == np.float32, str(gathered.dtype))
check_close("allgather 1d", cn.allgather(np.array([r], np.int64)), np.arange(n))

cn.barrier()
stats = cerar.stats()
check("stats", stats["tensors_reduced"] > 0, str(stats))
check("algorithm used", (stats["cerar_buffers"] > 0) == (algorithm == "cerar"), str(stats))

# join: rank 0 runs out of data first; the others' all-reduce completes without it
if r == 0:
    last = cn.join()
else:
    got = cn.allreduce(np.ones(10, np.float32), op=cerar.Sum, name="after_join")
    check_close("after join", got, np.full(10, n - 1.0), rtol=rtol)
    last = cn.join()
check("join", 0 <= last < n and (n == 1 or last != 0), f"last joined rank {last}")

# reducescatter (the exact ring whatever the algorithm) and alltoall
rows = 2 * n + 1
share = rows // n + (1 if r < rows % n else 0)
start = r * (rows // n) + min(r, rows % n)
table = np.arange(rows * 3, dtype=np.float64).reshape(rows, 3)
scattered = cn.reducescatter(table + r, op=cerar.Sum, name="rs")
check_close("reducescatter", scattered, (n * table + ranks_sum)[start:start + share])
splits = [(r + j) % 2 for j in range(n)]
rows_out = np.arange(sum(splits), dtype=np.int64) + 100 * r
got, received = cn.alltoall(rows_out, splits, name="a2a")
expected = [100 * i + sum((i + j) % 2 for j in range(r)) for i in range(n) if (i + r) % 2]
check_close("alltoall", got, expected)
check("alltoall splits", list(received) == [(i + r) % 2 for i in range(n)], str(received))

cerar.shutdown()
print("numpy OK", flush=True)
