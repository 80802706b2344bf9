"""cerar.torch with CUDA tensors: results equal the same calls on CPU tensors, the optimizer
steps on GPU gradients, and broadcasts reach device parameters. Needs a CUDA device."""
import torch

import cerar.torch as hvd
from common import check, check_close

hvd.init()
r, n = hvd.rank(), hvd.size()
device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(device)

# Produced on the current stream right before the call: the runtime waits for it on the device.
for algorithm_name, count in (("small", 1000), ("large", 1 << 21)):
    cpu = torch.randn(count, generator=torch.Generator().manual_seed(r)) + 1
    gpu = cpu.to(device, non_blocking=True) * 1.0
    out_cpu = hvd.allreduce(cpu, name=f"cpu.{algorithm_name}")
    out_gpu = hvd.allreduce(gpu, name=f"gpu.{algorithm_name}")
    check("device kept", out_gpu.is_cuda, str(out_gpu.device))
    check("bit-identical", torch.equal(out_gpu.cpu(), out_cpu), "CUDA result differs from CPU")

group = [torch.full((k,), float(r), device=device) for k in (3, 50, 7)]
hvd.grouped_allreduce_(group, op=hvd.Sum, name="group")
for t in group:
    check_close("grouped", t.cpu(), torch.full(t.shape, n * (n - 1) / 2.0))

model = torch.nn.Linear(16, 4).to(device)
with torch.no_grad():
    model.weight.fill_(float(r))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
check_close("broadcast", model.weight.detach().cpu(), torch.zeros(4, 16))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
x = torch.randn(8, 16, device=device, generator=torch.Generator(device=device).manual_seed(r))
loss = model(x).pow(2).sum()
loss.backward()
opt.step()
gathered = hvd.allgather(model.weight.detach().reshape(1, -1), name="weights")
check("same weights", all(torch.equal(gathered[0], row) for row in gathered), "ranks diverged")

# reducescatter, alltoall and grouped_allgather of device tensors (staged through host memory)
# equal the same calls on CPU tensors, and stay on the device.
cpu = torch.arange(6 * (2 * n + 1), dtype=torch.float32).reshape(2 * n + 1, 6) + r
for label, call in (
        ("reducescatter", lambda t, tag: hvd.reducescatter(t, op=hvd.Sum, name=f"rs.{tag}")),
        ("alltoall", lambda t, tag: hvd.alltoall(t[:n], name=f"a2a.{tag}")),
        ("grouped_allgather",
         lambda t, tag: hvd.grouped_allgather([t, t[:1]], name=f"gag.{tag}")[0])):
    on_gpu = call(cpu.to(device), "gpu")
    check(f"{label} device kept", on_gpu.is_cuda, str(on_gpu.device))
    check(f"{label} equals CPU", torch.equal(on_gpu.cpu(), call(cpu, "cpu")), label)
print(f"[{r}] torch cuda OK", flush=True)
hvd.shutdown()
