"""A LightningModule trained by Lightning's Trainer on 4 CPU processes with DDP on the backend
given (`lightning_train.py cerar|gloo OUT`); Lightning starts the other 3 processes itself. Each
rank writes OUT/<rank>.json (one file each: their prints would interleave): "first" and
"loss", the first and the last epoch's mean training loss over every rank, and on the cerar
backend "calls", its runtime's counters."""
import json
import os
import sys

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule, Trainer, seed_everything
from lightning.pytorch.strategies import DDPStrategy

import cerar.torch  # noqa: F401 -- registers the backend

backend, out = sys.argv[1], sys.argv[2]


class Regression(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                       torch.nn.Linear(16, 1))
        self.losses, self.first = [], None

    def training_step(self, batch, _):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.losses.append(loss.detach())
        return loss

    def on_train_epoch_end(self):
        if self.first is None:
            self.first = torch.stack(self.losses).mean()
        self.last, self.losses = torch.stack(self.losses).mean(), []

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 8, generator=g)
    y = torch.tanh(x @ torch.linspace(-1, 1, 8).view(8, 1))
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)


torch.set_num_threads(1)
seed_everything(0, verbose=False)
model = Regression()
trainer = Trainer(accelerator="cpu", devices=4, strategy=DDPStrategy(process_group_backend=backend),
                  max_epochs=3, logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, data())
result = {key: float(trainer.strategy.reduce(value, reduce_op="mean"))
          for key, value in (("first", model.first), ("loss", model.last))}
if backend == "cerar":
    from cerar.torch.backend import stats
    counters = stats()
    result["calls"] = {k: counters[k] for k in ("ring_buffers", "allgather_buffers")}
with open(os.path.join(out, f"{trainer.global_rank}.json"), "w") as f:
    json.dump(result, f)
