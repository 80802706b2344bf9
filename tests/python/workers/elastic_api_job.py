"""An elastic worker for test_elastic_api.py (started by its fake driver): trains a tiny model
over a fixed dataset with ElasticSampler, committing after every step, and prints one JSON line
at the end: its parameters' bytes, the samples processed in committed steps per epoch (every
rank's, gathered each step), and how many resets and restores it went through."""
import json
import os
import sys
import time

import torch

import cerar.torch as hvd
from common import count_resets

SAMPLES, BATCH, EPOCHS = 48, 2, 2
STEP_SECONDS = float(os.environ.get("ELASTIC_STEP_SECONDS", "0.05"))

hvd.init()
torch.manual_seed(0)
data = torch.randn(SAMPLES, 4)
target = data.sum(1, keepdim=True)
torch.manual_seed(1 + hvd.rank())  # different replicas: the first sync must make them equal
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
# ELASTIC_DISTRIBUTED=1: DistributedOptimizer reduces the gradients (whose reductions in flight
# when a peer is lost must not outlive the reset); else explicit all-reduces.
DISTRIBUTED = os.environ.get("ELASTIC_DISTRIBUTED") == "1"
if DISTRIBUTED:
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(list(range(SAMPLES)), shuffle=True, seed=7)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0,
                               log={e: [] for e in range(EPOCHS)})
counts = count_resets(state)


def step(indices):
    optimizer.zero_grad()
    loss = (model(data[indices]) - target[indices]).pow(2).mean()
    loss.backward()
    for name, parameter in model.named_parameters():
        if not DISTRIBUTED:
            hvd.allreduce_(parameter.grad, name=f"grad.{name}")
    optimizer.step()


@hvd.elastic.run
def train(state):
    while state.epoch < EPOCHS:
        batches = (len(sampler) + BATCH - 1) // BATCH  # of what is left of the epoch
        for batch in range(batches):
            indices = sampler.get_indices(batch, BATCH)
            step(indices)
            everyone = hvd.allgather_object(indices, name="elastic_api_job.log")
            state.log[state.epoch].extend(i for part in everyone for i in part)
            sampler.record_batch(batch, BATCH)
            state.commit()
            print(f"step {state.epoch} {batch} size {hvd.size()}", flush=True)
            time.sleep(STEP_SECONDS)
        state.epoch += 1
        sampler.set_epoch(state.epoch)
        state.commit()


train(state)
parameters = [p.detach().numpy().tobytes().hex() for p in model.parameters()]
momenta = [optimizer.state[p]["momentum_buffer"].numpy().tobytes().hex()
           for p in model.parameters()]
print(json.dumps({"id": os.environ.get("CERAR_ELASTIC_ID"), "rank": hvd.rank(),
                  "size": hvd.size(), "parameters": parameters, "momenta": momenta,
                  "log": {str(e): sorted(v) for e, v in state.log.items()}, **counts}),
      flush=True)
sys.exit(0)
