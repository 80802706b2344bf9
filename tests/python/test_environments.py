"""init() without cerarrun: torchrun's, Open MPI's and SLURM's variables (rank 0 hosts the
rendezvous store). Each test starts the ranks itself, as those launchers would."""
import os
import subprocess
import sys

import pytest

from conftest import WORKERS, needs_runtime
from ports import free_port

pytestmark = needs_runtime


def run_ranks(envs, timeout=60):
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("CERAR_", "OMPI_", "SLURM_", "MASTER_"))
            and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    procs = [subprocess.Popen([sys.executable, str(WORKERS / "env_job.py")],
                              env={**base, **env}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for env in envs]
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("ranks did not finish:\n" + "\n".join(outputs))
    for rank, (proc, output) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"rank {rank}:\n{output}"
        assert f"env OK {rank}/{len(envs)}" in output, output


def test_torchrun_variables():
    port = free_port()
    run_ranks([{"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r),
                "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port - 1)} for r in range(2)])


def test_open_mpi_variables():
    port = free_port()
    run_ranks([{"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "3",
                "OMPI_COMM_WORLD_LOCAL_RANK": str(r), "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
                "CERAR_RENDEZVOUS_ADDR": "127.0.0.1", "CERAR_RENDEZVOUS_PORT": str(port)}
               for r in range(3)])


def test_slurm_variables():
    port = free_port()
    run_ranks([{"SLURM_PROCID": str(r), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(r),
                "SLURM_NNODES": "1", "CERAR_RENDEZVOUS_ADDR": "127.0.0.1",
                "CERAR_RENDEZVOUS_PORT": str(port)} for r in range(2)])


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun", "srun"])
def test_across_hosts_without_a_secret_every_rank_fails_with_the_fix(launcher):
    # Local size 1 of size 2: the store must be reachable from another host.
    port = free_port()
    envs = {
        "torchrun": lambda r: {"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                               "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                               "MASTER_PORT": str(port - 1)},
        "mpirun": lambda r: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "2",
                             "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                             "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
                             "CERAR_RENDEZVOUS_ADDR": "127.0.0.1",
                             "CERAR_RENDEZVOUS_PORT": str(port)},
        "srun": lambda r: {"SLURM_PROCID": str(r), "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
                           "SLURM_NNODES": "2", "CERAR_RENDEZVOUS_ADDR": "127.0.0.1",
                           "CERAR_RENDEZVOUS_PORT": str(port)},
    }[launcher]
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("CERAR_", "OMPI_", "SLURM_", "MASTER_"))
            and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    for rank in range(2):
        result = subprocess.run([sys.executable, str(WORKERS / "env_job.py")],
                                env={**base, **envs(rank)}, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode != 0
        assert "export CERAR_SECRET=$(openssl rand -hex 16)" in result.stderr, result.stderr
    # With a secret the same job runs (the store on TCP, locked).
    run_ranks([{**envs(r), "CERAR_SECRET": "s3cret"} for r in range(2)])
