"""Process sets on 4 ranks, as Horovod defines them (tests/python/test_process_sets.py).

The job forces CERAR with c = 4 (CERAR_ALGORITHM=cerar, CERAR_COMPONENTS=4), so every float
sum below runs CERAR inside its set: c stays 4 in sets of 2 and 4, and becomes 6 in sets of 3
(rounded up to a multiple of the set's size). Integer sums take the exact ring.
Static sets: even = {0, 2}, odd = {1, 3}; dynamic (CERAR_DYNAMIC_PROCESS_SETS=1):
low = {0, 1, 2}, high = {1, 2, 3}, and {0, 3} added and removed while other sets reduce.
"""
import numpy as np
import torch

import cerar
import cerar.numpy as cn
import cerar.torch as hvd
from common import check, check_close, fail

even, odd = hvd.ProcessSet([2, 0]), hvd.ProcessSet([1, 3])
hvd.init(process_sets=[even, odd])
r, n = hvd.rank(), hvd.size()
check("size", n == 4, f"needs 4 ranks, got {n}")
mine = even if r % 2 == 0 else odd
other = odd if mine is even else even
check("ids", (even.process_set_id, odd.process_set_id) == (1, 2),
      f"{even} {odd}")
check("set api", (mine.size(), mine.rank(), mine.included(), other.included()) ==
      (2, r // 2, True, False), f"{mine.size()} {mine.rank()} {mine.included()}")
check("global set", hvd.global_process_set.size() == 4 and hvd.global_process_set.rank() == r,
      "")
rtol = 1e-2  # CERAR: error O(eps) relative to the largest sum


def values(seed, count, dtype=np.float64):
    return np.random.default_rng(seed).uniform(-1, 1, count).astype(dtype)


def reference(ranks, seed_of, count, dtype=np.float64):
    return sum(values(seed_of(k), count, dtype).astype(np.float64) for k in ranks)


# --- two disjoint sets at once, one name in both and in the global set ---------------------
before = hvd.stats()["cerar_buffers"]
members = mine.ranks
h_set = cn.allreduce_async(values(100 + r, 1000), op=cerar.Sum, name="g", process_set=mine)
h_all = cn.allreduce_async(values(200 + r, 1000), op=cerar.Sum, name="g")
h_int = cn.allreduce_async(np.full(7, r + 1, np.int32), op=cerar.Sum, name="i",
                           process_set=mine)
check_close("disjoint set sum", h_set.wait(), reference(members, lambda k: 100 + k, 1000),
            rtol=rtol, atol=1e-6)
check_close("global sum", h_all.wait(), reference(range(n), lambda k: 200 + k, 1000),
            rtol=rtol, atol=1e-6)
check_close("disjoint int sum", h_int.wait(), np.full(7, sum(k + 1 for k in members)))
check("cerar ran", hvd.stats()["cerar_buffers"] >= before + 1, str(hvd.stats()))
average = cn.allreduce(np.full(5, float(r)), name="avg", process_set=mine)
check_close("set average divides by the set's size", average, np.full(5, np.mean(members)),
            rtol=rtol)

# --- dynamic sets: overlapping, and CERAR in a set of 3 -------------------------------------
low = hvd.add_process_set([0, 1, 2])
high = hvd.add_process_set(hvd.ProcessSet([1, 2, 3]))
check("dynamic ids", (low.process_set_id, high.process_set_id) == (3, 4), f"{low} {high}")
try:
    hvd.add_process_set([1, 3])
    fail("a duplicate set was added")
except ValueError as e:
    check("duplicate message", "exists already" in str(e), str(e))
handles = {}
for ps in (low, high):
    if ps.included():
        handles[ps.process_set_id] = cn.allreduce_async(values(300 + r, 999), op=cerar.Sum,
                                                        name="overlap", process_set=ps)
for ps in (low, high):
    if ps.included():
        check_close(f"overlapping set {ps.ranks}", handles[ps.process_set_id].wait(),
                    reference(ps.ranks, lambda k: 300 + k, 999), rtol=rtol, atol=1e-6)
if low.included():
    cn.allreduce(values(400 + r, 3000), op=cerar.Sum, name="c3", process_set=low)
    check("c in a set of 3", hvd.stats()["last_components"] == 6, str(hvd.stats()))
cn.allreduce(values(500 + r, 3000), op=cerar.Sum, name="c2", process_set=mine)
check("c in a set of 2", hvd.stats()["last_components"] == 4, str(hvd.stats()))

# --- a set added and removed while other sets reduce ----------------------------------------
pending = [cn.allreduce_async(np.full(3, float(i + r)), op=cerar.Sum, name=f"busy.{i}",
                              process_set=mine) for i in range(8)]
corners = hvd.add_process_set([0, 3])
if corners.included():
    got = cn.allreduce(np.full(4, r + 1, np.int64), op=cerar.Sum, name="corners",
                       process_set=corners)
    check_close("added set", got, np.full(4, 1 + 4))
check("removed", hvd.remove_process_set(corners) is True, "")
check("removed twice", hvd.remove_process_set(corners) is False, "")
for i, h in enumerate(pending):
    check_close(f"reduced meanwhile {i}", h.wait(), np.full(3, sum(float(i + k) for k in members)),
                rtol=rtol)
try:
    cn.allreduce(np.ones(2), name="gone", process_set=3 + 2)  # the removed set's id
    fail("a removed set ran an operation")
except cerar.InvalidArgumentError as e:
    check("removed set message", "no process set 5" in str(e), str(e))

# --- a rank outside the set gets a clear error, at once -------------------------------------
for call in (lambda: cn.allreduce(np.ones(2), name="outside", process_set=other),
             lambda: hvd.allreduce(torch.ones(2), name="outside", process_set=other),
             lambda: hvd.allgather(torch.ones(2), process_set=other),
             lambda: hvd.broadcast(torch.ones(2), other.ranks[0], process_set=other),
             lambda: hvd.barrier(process_set=other)):
    try:
        call()
        fail("a non-member ran an operation of another set")
    except ValueError as e:  # InvalidArgumentError is a ValueError and a CerarError
        check("non-member error type", isinstance(e, cerar.InvalidArgumentError), repr(e))
        check("non-member message", f"rank {r} is not in process set" in str(e), str(e))

# --- a mismatch fails on the set's members only ---------------------------------------------
if mine is odd:
    try:
        cn.allreduce(np.ones(4 + r), name="mismatch", process_set=odd)
        fail("mismatched shapes were reduced")
    except cerar.MismatchError as e:
        check("mismatch names the set's ranks", "rank 1" in str(e) and "rank 3" in str(e), str(e))
else:
    got = cn.allreduce(np.ones(4), op=cerar.Sum, name="mismatch", process_set=even)
    check_close("the other set is untouched", got, np.full(4, 2.0), rtol=rtol)
check_close("global after the mismatch", cn.allreduce(np.full(3, 1.0), op=cerar.Sum,
                                                      name="after"), np.full(3, 4.0), rtol=rtol)

# --- every collective of cerar.torch in a set -----------------------------------------------
k = mine.rank()
t = torch.arange(6, dtype=torch.float32) + r
summed = hvd.allreduce(t, op=hvd.Sum, process_set=mine)
check_close("torch allreduce", summed.numpy(), sum(np.arange(6) + m for m in members), rtol=rtol)
grouped = hvd.grouped_allreduce([t, t * 2], op=hvd.Sum, process_set=mine)
check_close("torch grouped", grouped[1].numpy(), 2 * sum(np.arange(6) + m for m in members),
            rtol=rtol)
gathered = hvd.allgather(torch.full((k + 1, 2), r, dtype=torch.int64), process_set=mine)
check_close("torch allgather", gathered.numpy(),
            np.concatenate([np.full((i + 1, 2), m) for i, m in enumerate(members)]))
root = members[-1]
sent = hvd.broadcast(torch.full((3,), float(r)), root, process_set=mine)
check_close("torch broadcast from a global root", sent.numpy(), np.full(3, float(root)))
obj = hvd.broadcast_object({"from": r}, root_rank=root, process_set=mine)
check("broadcast_object", obj == {"from": root}, str(obj))
rows = hvd.alltoall(torch.full((4, 1), r, dtype=torch.int32), process_set=mine)
check_close("torch alltoall", rows.numpy().ravel(), np.repeat(members, 2))
share = hvd.reducescatter(torch.ones(5, 2) * (r + 1), op=hvd.Sum, process_set=mine)
check_close("torch reducescatter", share.numpy(),
            np.full((3 - k, 2), float(sum(m + 1 for m in members))), rtol=rtol)
hvd.barrier(process_set=mine)

# --- DistributedOptimizer in a set: the even ranks reduce, the odd ones step alone ----------
torch.manual_seed(r)
model = torch.nn.Linear(8, 2)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                               named_parameters=model.named_parameters(), process_set=even)
loss = model(torch.randn(16, 8)).pow(2).sum()
loss.backward()
opt.step()
weights = hvd.allgather(model.weight.detach().reshape(1, -1), process_set=mine)
same = torch.allclose(weights[0], weights[1], rtol=1e-3, atol=1e-5)
check("optimizer in a set", same == (mine is even), f"{weights}")

hvd.remove_process_set(low)
hvd.remove_process_set(high)
print(f"[{r}] process sets OK", flush=True)
hvd.shutdown()
