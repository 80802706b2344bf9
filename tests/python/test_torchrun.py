"""torchrun (torch 2.x) starting a training script on the "cerar" backend
(workers/torchrun_train.py): --max-restarts with a rank killed mid-training, the group restarted
and resuming from the script's checkpoint on fresh runtime keys; and --nnodes=2 as two torchrun
launches on two emulated hosts (network namespaces, tests/python/emulated_hosts.py) meeting
through torchrun's c10d rendezvous on the first."""
import re
import subprocess
import sys

import pytest

from conftest import WORKERS, needs_runtime
from emulated_hosts import EmulatedHosts, unavailable
from torch_ranks import clean_env, finish, needs_torch2

pytestmark = [needs_runtime, needs_torch2("torchrun on the cerar backend")]
SCRIPT = str(WORKERS / "torchrun_train.py")


def torchrun(*args):
    return [sys.executable, "-m", "torch.distributed.run", *map(str, args)]


def launch(command):
    return subprocess.Popen(command, env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)


def test_killed_worker_restarts_from_the_checkpoint(tmp_path):
    codes, output = finish([launch(torchrun(
        "--standalone", "--nproc-per-node=4", "--max-restarts=2", SCRIPT,
        tmp_path / "checkpoint.pt", 12, 5))], 150, "torchrun --max-restarts=2")
    assert codes == [0], output[-6000:]
    starts = re.findall(r"^\[(\d)\] start attempt (\d) step (\d+) endpoint (.*)$", output, re.M)
    first = {rank: endpoint for rank, attempt, step, endpoint in starts if attempt == "0"}
    again = {rank: (int(step), endpoint) for rank, attempt, step, endpoint in starts
             if attempt == "1"}
    assert sorted(first) == sorted(again) == ["0", "1", "2", "3"], output[-6000:]
    for rank, (step, endpoint) in again.items():
        assert step >= 1, f"rank {rank} did not resume from the checkpoint\n{output[-6000:]}"
        assert endpoint != first[rank], "the restarted group met on the dead attempt's keys"
    assert len(set(again.values())) == 1, again  # one step, one runtime for every rank
    for rank in range(4):
        assert f"[{rank}] trained 12 steps" in output, output[-6000:]


def test_two_hosts_meet_through_the_c10d_rendezvous(tmp_path):
    why = unavailable()
    if why:
        pytest.skip(f"emulated hosts: {why}")
    with EmulatedHosts(2) as hosts:
        # The first host's name: itself there (torchrun hosts the store on it), its address on
        # the other, as on two real hosts.
        endpoint = f"{hosts.names[0]}:29400"
        procs = [hosts.popen(node, torchrun(
            "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}", "--rdzv-id=cerar-two-hosts", SCRIPT,
            tmp_path / f"checkpoint{node}.pt", 6), env=clean_env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL) for node in range(2)]
        codes, output = finish(procs, 150, "torchrun --nnodes=2 on two hosts")
    assert codes == [0, 0], output[-6000:]
    for rank in range(4):
        assert f"[{rank}] trained 6 steps, 6 on the runtime" in output, output[-6000:]
