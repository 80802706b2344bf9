"""Ray Train (torch 2.x, ray[train] from PyPI): TorchTrainer(..., ScalingConfig(num_workers=4),
TorchConfig(backend="cerar")) on a local Ray cluster (workers/ray_train_driver.py, one cluster
for the module): each worker's DDP on the backend Ray set up trains as the same DDP on a Gloo
group, with its all-reduces counted on the runtime."""
import json
import subprocess
import sys

import pytest

from conftest import WORKERS, needs_runtime
from torch_ranks import clean_env, needs_package, needs_torch2

pytestmark = [needs_runtime, needs_torch2("Ray Train"),
              needs_package("ray.train.torch", "ray[train]")]
STEPS = 20


def test_torch_trainer_on_cerar_trains_as_on_gloo(tmp_path):
    try:
        result = subprocess.run([sys.executable, str(WORKERS / "ray_train_driver.py"), tmp_path],
                                env=clean_env(), capture_output=True, text=True, timeout=300,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"Ray Train did not finish in 300 s\n{error.stdout}\n{error.stderr}")
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "ray train: done" in output, output[-6000:]
    for rank in range(4):
        worker = json.loads((tmp_path / f"{rank}.json").read_text())
        assert worker["backend"] == "cerar", worker
        assert worker["ring_buffers"] >= STEPS, worker  # one gradient bucket a step
        assert worker["apart"] <= 1e-5 * worker["largest"], worker
        (first, _), (last, last_gloo) = worker["losses"][0], worker["losses"][-1]
        assert last < 0.1 * first and abs(last - last_gloo) <= 1e-4 * last_gloo, worker
