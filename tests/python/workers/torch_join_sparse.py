"""join as Horovod defines it, with uneven step counts: a joined rank contributes the identity
to all-reduces (average still divides by the size) and barriers pass, while an allgather,
broadcast, reducescatter or alltoall fails on every rank that calls it; join returns the
rank that joined last, the same everywhere. Then sparse gradients: sparse_allreduce_async
against the dense sum, and an nn.Embedding(sparse=True) model trained with and without
sparse_as_dense."""
import numpy as np
import torch

import cerar.torch as hvd
from common import check, check_close, fail

hvd.init(algorithm="ring")
r, n = hvd.rank(), hvd.size()


def data_of(rank, step, shape=(5, 3)):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randint(-9, 10, shape, generator=g).to(torch.float32)


# --- uneven steps: rank i runs i + 1 steps, then joins. Names repeat, so later steps hit the
# response cache.
for step in range(r + 1):
    active = [i for i in range(n) if i >= step]
    x = data_of(r, step)
    total = sum(data_of(i, step) for i in active)
    check_close(f"join sum step {step}", hvd.allreduce(x, op=hvd.Sum, name="j.sum"), total)
    check_close(f"join average step {step}", hvd.allreduce(x, name="j.avg"), total / n,
                rtol=1e-6)
    check_close(f"join min step {step}", hvd.allreduce(x, op=hvd.Min, name="j.min"),
                torch.stack([data_of(i, step) for i in active]).min(0).values)
    ints = data_of(r, step).to(torch.int64)
    grouped = hvd.grouped_allreduce([ints, 2 * ints], op=hvd.Sum, name="j.group")
    check_close(f"join grouped step {step}", grouped[1], 2 * total.to(torch.int64))
    hvd.barrier()
last = hvd.join()
check("join returns the last rank", last == n - 1, str(last))
check("join agrees", hvd.allgather_object(last) == [last] * n, "")

# --- rank 0 joins at once; the others find which collectives still run -----------------------
if r == 0:
    last = hvd.join()
else:
    x = torch.ones(2 * n, 2)
    check_close("allreduce beside a joined rank", hvd.allreduce(x, op=hvd.Sum, name="p.sum"),
                torch.full((2 * n, 2), float(n - 1)))
    hvd.barrier()
    refused = {
        "allgather": lambda: hvd.allgather(x, name="p.gather"),
        "broadcast": lambda: hvd.broadcast(x, 1, name="p.bcast"),
        "reducescatter": lambda: hvd.reducescatter(x, name="p.rs"),
        "grouped_reducescatter": lambda: hvd.grouped_reducescatter([x, x], name="p.grs"),
        "alltoall": lambda: hvd.alltoall(x, name="p.a2a"),
        "alltoall with splits": lambda: hvd.alltoall(
            x, torch.full((n,), 1, dtype=torch.int32), name="p.a2a.splits"),
        "sparse allreduce": lambda: hvd.sparse_allreduce_async(
            x.to_sparse(), name="p.sparse", op=hvd.Sum)(),
    }
    for label, call in refused.items():
        try:
            call()
            fail(f"{label} ran while rank 0 had joined")
        except hvd.InvalidArgumentError as error:
            check(f"{label} names the joined rank", error.peer == 0 and "joined" in str(error),
                  f"{error.peer}: {error}")
    # and the runtime goes on
    check_close("allreduce after refusals", hvd.allreduce(x, op=hvd.Sum, name="p.sum2"),
                torch.full((2 * n, 2), float(n - 1)))
    last = hvd.join()
check("second join agrees", hvd.allgather_object(last) == [last] * n and last != 0, str(last))

# --- sparse_allreduce_async: allgathered indices and values, summed like the dense tensors -------
dense = torch.zeros(6, 3)
rows = [(r + k) % 6 for k in range(2)]
dense[rows] = torch.arange(6, dtype=torch.float32).reshape(2, 3) + r
expected = torch.zeros(6, 3)
for i in range(n):
    other = torch.zeros(6, 3)
    other[[(i + k) % 6 for k in range(2)]] = torch.arange(6, dtype=torch.float32).reshape(2, 3) + i
    expected = expected + other
for op, scale in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / n)):
    result = hvd.sparse_allreduce_async(dense.to_sparse(), name=f"sparse.{op}", op=op)()
    check(f"sparse {op} is sparse", result.is_sparse, str(result.layout))
    check_close(f"sparse {op}", result.to_dense(), expected * scale, rtol=1e-6)


# --- nn.Embedding(sparse=True) trains, with sparse and dense reduction of its gradient -----------
def train(sparse_as_dense):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8, sparse=True), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 4, 1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0,
                             prefix=f"emb.{sparse_as_dense}")
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters(),
                                         sparse_as_dense=sparse_as_dense)
    g = torch.Generator().manual_seed(r)
    tokens = torch.randint(0, 50, (32, 4), generator=g)
    target = (tokens.float().mean(1, keepdim=True) / 25.0) - 1.0
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(tokens), target)
        loss.backward()
        check("embedding gradient is sparse", model[0].weight.grad.is_sparse, "")
        optimizer.step()
        losses.append(float(hvd.allreduce(loss.detach(), name=f"loss.{sparse_as_dense}")))
    check(f"loss falls (sparse_as_dense={sparse_as_dense})", losses[-1] < 0.5 * losses[0],
          f"{losses[0]} -> {losses[-1]}")
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    spread = hvd.allreduce(weights, op=hvd.Max, name=f"max.{sparse_as_dense}") - \
        hvd.allreduce(weights, op=hvd.Min, name=f"min.{sparse_as_dense}")
    check(f"ranks agree (sparse_as_dense={sparse_as_dense})", float(spread.abs().max()) < 1e-6,
          str(float(spread.abs().max())))
    return weights


by_allgather, as_dense = train(False), train(True)
check_close("sparse and dense reductions train alike", by_allgather.numpy(), as_dense.numpy(),
            rtol=1e-4)
print(f"[{r}] join sparse OK", flush=True)
hvd.shutdown()
