"""DistributedOptimizer's Horovod options: groups, compression, op, sparse gradients (allgathered
or as dense), optimizers without named parameters, the warning for step() after synchronize(),
and broadcast_optimizer_state before any gradient exists."""
import warnings

import torch

import cerar
import cerar.torch as hvd
from common import check, check_close

hvd.init(algorithm="ring")
r, n = hvd.rank(), hvd.size()
torch.manual_seed(0)  # the same model everywhere, a different batch per rank


def local_grads(model, x):
    model.zero_grad()
    model(x).pow(2).sum().backward()
    return [p.grad.clone() for p in model.parameters()]


def reduced_grads(**options):
    """(gradients after the optimizer's synchronize(), the average computed by hand)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(r))
    expected = [hvd.allreduce(g, op=options.get("op", hvd.Average))
                for g in local_grads(model, x)]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), **options)
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    opt.synchronize()
    got = [p.grad.clone() for p in model.parameters()]
    with opt.skip_synchronize():
        opt.step()
    return got, expected, model


# Fused or not, the ring sums in another order per element: equal within rounding.
for label, options, tol in (("groups=2", {"groups": 2}, 1e-6),
                            ("num_groups=1", {"num_groups": 1}, 1e-6),
                            ("op=Sum", {"op": hvd.Sum}, 1e-6),
                            ("fp16", {"compression": hvd.Compression.fp16}, 1e-2)):
    wires = cerar.stats()["wire_buffers"]
    got, expected, _ = reduced_grads(**options)
    if label == "fp16":  # float32 CPU gradients: the runtime's fp16 wire, not a Python cast
        check("fp16 optimizer wire", cerar.stats()["wire_buffers"] > wires, "no wire buffer")
    for i, (g, e) in enumerate(zip(got, expected)):
        check_close(f"{label} grad {i}", g, e, rtol=tol)
# groups as lists of parameters (one group, the others one by one)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
x = torch.randn(5, 4, generator=torch.Generator().manual_seed(r))
expected = [hvd.allreduce(g) for g in local_grads(model, x)]
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters(),
                               groups=[[model[0].weight, model[1].bias]])
opt.zero_grad()
model(x).pow(2).sum().backward()
opt.synchronize()
for i, (p, e) in enumerate(zip(model.parameters(), expected)):
    check_close(f"list groups grad {i}", p.grad, e, rtol=1e-6)

# step() after synchronize() without skip_synchronize(): one warning naming the fix
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    opt.step()
messages = [str(w.message) for w in caught]
check("warning", len(messages) == 1 and "skip_synchronize()" in messages[0], str(messages))

# no named parameters: unique names, the same on every rank
model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
opt = hvd.DistributedOptimizer(torch.optim.SGD(
    [{"params": model[0].parameters()}, {"params": model[1].parameters()}], lr=0.1))
names = opt._parameter_names
check("unique names", len(set(names.values())) == 4, str(names))
everyone = hvd.allgather_object(sorted(names.values()))
check("same names", all(e == everyone[0] for e in everyone), str(everyone))

# sparse gradients: allgathered (SparseAdam keeps them sparse) or reduced densely
for as_dense in (False, True):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    ids = torch.tensor([[r, 4, 9], [1, 1, r + 5]])
    emb(ids).sum().backward()
    expected = hvd.allreduce(emb.weight.grad.to_dense(), name=f"sparse.expected.{as_dense}")
    emb.zero_grad()
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                   named_parameters=emb.named_parameters(),
                                   sparse_as_dense=as_dense)
    emb(ids).sum().backward()
    opt.synchronize()
    check(f"sparse_as_dense={as_dense} layout", emb.weight.grad.is_sparse, "")
    check_close(f"sparse_as_dense={as_dense}", emb.weight.grad.to_dense(), expected, atol=1e-6)
    with opt.skip_synchronize():
        opt.step()

# broadcast_optimizer_state before the first step: trainable parameters get zero gradients
model = torch.nn.Linear(2, 2)
model.bias.requires_grad_(False)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=model.named_parameters())
hvd.broadcast_optimizer_state(opt, root_rank=0)
check("grad of trainable", model.weight.grad is not None and not model.weight.grad.any(), "")
check("no grad of frozen", model.bias.grad is None, "")
hvd.broadcast(model.weight.grad, root_rank=0)

print("parity optimizer OK", flush=True)
hvd.shutdown()
