"""Lightning (torch 2.x, lightning from PyPI): Trainer(accelerator="cpu", devices=4,
strategy=DDPStrategy(process_group_backend="cerar")) trains a LightningModule to the loss that
the same Trainer reaches on Gloo (workers/lightning_train.py; Lightning starts the ranks), with
DDP's all-reduces counted on the runtime."""
import json
import subprocess
import sys

import pytest

from conftest import WORKERS, needs_runtime
from ports import free_port
from torch_ranks import clean_env, finish, needs_package, needs_torch2

pytestmark = [needs_runtime, needs_torch2("Lightning"),
              needs_package("lightning", "lightning")]
STEPS = 3 * 512 // (16 * 4)  # epochs x batches per rank


def test_trainer_on_cerar_reaches_the_loss_of_gloo(tmp_path):
    for backend in ("cerar", "gloo"):
        (tmp_path / backend).mkdir()
    procs = {backend: subprocess.Popen(
        [sys.executable, str(WORKERS / "lightning_train.py"), backend, tmp_path / backend],
        env=clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        for backend in ("cerar", "gloo")}
    codes, output = finish(list(procs.values()), 420, "Lightning")
    assert codes == [0, 0], output[-6000:]
    results = {b: [json.loads((tmp_path / b / f"{r}.json").read_text()) for r in range(4)]
               for b in procs}
    target = results["gloo"][0]["loss"]
    assert target < 0.5 * results["gloo"][0]["first"], results["gloo"]  # it learned
    for result in results["cerar"]:
        assert abs(result["loss"] - target) <= 1e-5 * target, results
        assert result["calls"]["ring_buffers"] >= STEPS, result  # a gradient bucket a step
