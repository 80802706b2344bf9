"""Ray Train's TorchTrainer on the "cerar" backend: `ray_train_driver.py OUT` starts a local Ray
cluster of 4 CPUs and trains with ScalingConfig(num_workers=4) and TorchConfig(backend="cerar").
Each worker trains a DDP model on the default group (cerar) and, as the reference, the same
model on a Gloo group of the same ranks, and writes OUT/<rank>.json: both losses per step, how
far the parameters ended apart, and its runtime's counters."""
import json
import os
import sys
import tempfile

import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer


def train_loop(config):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from ray import train
    from torch.nn.parallel import DistributedDataParallel as DDP

    from cerar.torch.backend import stats

    torch.set_num_threads(1)
    rank = train.get_context().get_world_rank()
    gloo = dist.new_group(backend="gloo")
    models = []
    for group in (None, gloo):  # None: the default group, on the backend Ray was given
        torch.manual_seed(0)
        models.append(DDP(torch.nn.Linear(8, 1), process_group=group))
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    losses = []
    for step in range(config["steps"]):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(16, 8, generator=g)
        y = x @ torch.linspace(-1, 1, 8).view(8, 1)
        step_losses = []
        for model, optimizer in zip(models, optimizers):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            step_losses.append(float(loss.detach()))
        losses.append(step_losses)
    apart = max(float((p - q).abs().max()) for p, q in zip(models[0].parameters(),
                                                            models[1].parameters()))
    result = {"backend": dist.get_backend(), "losses": losses, "apart": apart,
              "largest": max(float(q.abs().max()) for q in models[1].parameters()),
              "ring_buffers": stats()["ring_buffers"]}
    with open(os.path.join(config["out"], f"{rank}.json"), "w") as f:
        json.dump(result, f)
    train.report({"loss": losses[-1][0]})


if __name__ == "__main__":
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    trainer = TorchTrainer(train_loop, train_loop_config={"steps": 20, "out": sys.argv[1]},
                           scaling_config=ScalingConfig(num_workers=4),
                           torch_config=TorchConfig(backend="cerar"),
                           run_config=RunConfig(storage_path=tempfile.mkdtemp()))
    trainer.fit()
    ray.shutdown()
    print("ray train: done", flush=True)
