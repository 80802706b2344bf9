"""All-reduces of mixed small sizes and dtypes, checked against numpy, then this rank's control
and rendezvous counters after shutdown (every rank has run the same cycles by then).
Then REPEAT passes of the same names (cached: the steady state of a training loop), whose
counters are reported apart ("steady").
Usage: scale_job.py [COUNT] [ALGORITHM] [REPEAT]; prints "SCALE <json>"
(tests/python/test_scale.py, bench/scale.py)."""
import json
import sys
import time

import numpy as np

import cerar
import cerar.numpy as cn
from common import check_close

count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
algorithm = sys.argv[2] if len(sys.argv) > 2 else "ring"
repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 0
SIZES = (1, 3, 17, 100, 1000, 4097)
DTYPES = (np.float32, np.float64, np.int32)
BATCH = 10  # in flight together, so that some share a cycle and a fusion buffer

started = time.perf_counter()
cerar.init(algorithm=algorithm)
init_seconds = time.perf_counter() - started
r, n = cerar.rank(), cerar.size()


def tensor(i, rank):
    """Tensor i of `rank`: every rank can rebuild every other rank's input."""
    rng = np.random.default_rng(1000 * i + rank)
    size, dtype = SIZES[i % len(SIZES)], DTYPES[(i // len(SIZES)) % len(DTYPES)]
    if dtype is np.int32:
        return rng.integers(-1000, 1000, size=size, dtype=np.int32)
    return rng.standard_normal(size).astype(dtype)


def one_pass():
    for first in range(0, count, BATCH):
        indices = range(first, min(first + BATCH, count))
        handles = {i: cn.allreduce_async(tensor(i, r), op=cerar.Sum, name=f"scale.{i}")
                   for i in indices}
        for i, handle in handles.items():
            inputs = [tensor(i, rank).astype(np.float64) for rank in range(n)]
            expected = np.sum(inputs, axis=0)
            unit = np.finfo(tensor(i, r).dtype).eps if tensor(i, r).dtype != np.int32 else 0.0
            # The ring's rounding: within (N-1) u sum|g| (cerar-protocol.md).
            atol = n * unit * float(np.max(np.sum(np.abs(inputs), axis=0)))
            check_close(f"scale.{i}", cn.synchronize(handle), expected, atol=atol)


started = time.perf_counter()
one_pass()
loop_seconds = time.perf_counter() - started
STEADY_KEYS = ("cycles", "control_messages_sent", "control_messages_received",
               "control_bytes_sent", "control_bytes_received", "cache_hits")
before = cerar._runtime.stats()
for _ in range(repeat):
    one_pass()
after = cerar._runtime.stats()
steady = {key: after[key] - before[key] for key in STEADY_KEYS}
runtime = cerar._runtime  # kept: its counters stay readable after shutdown
cerar.shutdown()
stats = runtime.stats()
print("SCALE " + json.dumps({"rank": r, "size": n, "init_s": init_seconds,
                             "allreduce_s": loop_seconds, "count": count, "steady": steady,
                             **stats}), flush=True)
