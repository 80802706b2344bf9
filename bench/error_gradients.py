"""Writes tests/data/gradients.npy, the real gradients of the error calibration
(bench/error_calibration.cc, tests/cpp/error_calibration_test.cc): 32 rows, each the local
gradient of one rank's minibatch at the same parameters (after --steps steps of training), of
the two models of examples/fidelity_train.py: 1024 contiguous parameters of the digits MLP
(its second layer's weights) then 1024 of the character transformer (its first encoder layer's
attention weights), float32, 256 KiB.

    python bench/error_gradients.py [--steps 50] [--out tests/data/gradients.npy]
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import fidelity_train  # noqa: E402

ROWS, WIDTH = 32, 1024


def flat_grad(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def gradients(task, steps, offset):
    model, batch, _, hyper = task(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=hyper["lr"], momentum=hyper.get("momentum", 0))
    for step in range(steps):  # a few steps of plain training: gradients of a trained model
        opt.zero_grad()
        x, y = batch(step, 0, 1)
        fidelity_train.loss_of(model, x, y)[0].backward()
        opt.step()
    rows = []
    for rank in range(ROWS):
        model.zero_grad()
        x, y = batch(steps, rank, ROWS)
        fidelity_train.loss_of(model, x, y)[0].backward()
        rows.append(flat_grad(model)[offset:offset + WIDTH].numpy())
    return np.stack(rows)


def offset_of(model, name):
    start = 0
    for n, p in model.named_parameters():
        if n == name:
            return start
        start += p.numel()
    raise KeyError(name)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--out", default="tests/data/gradients.npy")
    a = p.parse_args()
    torch.set_num_threads(1)
    digits = gradients(fidelity_train.digits_task, a.steps,
                       offset_of(fidelity_train.digits_task(0)[0], "2.weight"))
    charlm = gradients(fidelity_train.charlm_task, a.steps,
                       offset_of(fidelity_train.charlm_task(0)[0],
                                 "encoder.layers.0.self_attn.in_proj_weight"))
    out = np.concatenate([digits, charlm], axis=1).astype("<f4")
    np.save(a.out, out)
    print(f"{a.out}: {out.shape}, mean |g| {np.abs(out).mean():.3g}")


if __name__ == "__main__":
    main()
