"""Agree once: rank 0's job-wide settings are the job's (a rank with other init() overrides
warns and computes exactly what it would have with rank 0's), and init/shutdown/init works
under cerarrun and under torchrun's variables."""
import os
import re
import subprocess
import sys

import pytest

from conftest import WORKERS, assert_ok, needs_runtime, run_job
from ports import free_port

pytestmark = needs_runtime

CERAR_ENV = {"CERAR_ALGORITHM": "cerar", "CERAR_COMPONENTS": "8", "CERAR_MEASURE_LINK": "0"}


def digests(output):
    """{rank: [(digest, c) per start]} from the workers' lines."""
    found = {}
    for rank, _, digest, c in re.findall(r"\[(\d)\] start (\d) (\w+) c=(\d+)", output):
        found.setdefault(int(rank), []).append((digest, int(c)))
    return found


def test_differing_init_overrides_adopt_rank_zeros_and_warn():
    same = run_job("restart_job.py", np=4, env=CERAR_ENV)
    assert_ok(same, "restart OK")
    differ = run_job("restart_job.py", np=4, args=["differ"], env=CERAR_ENV)
    assert_ok(differ, "restart OK")
    a, b = digests(same.stdout), digests(differ.stdout)
    assert len(a) == 4 and all(len(v) == 3 for v in a.values()), same.stdout
    assert a == b, f"results differ:\n{same.stdout}\n{differ.stdout}"
    assert all(c == 8 for v in b.values() for _, c in v)
    # One warning per differing setting, on rank 1 only, at every start (cerarrun passes
    # the ranks' stderr through with their prefixes).
    log, quiet = differ.stdout + differ.stderr, same.stdout + same.stderr
    for setting, mine, job in (("CERAR_COMPONENTS", "4", "8"), ("CERAR_EPS", "0.01", "0"),
                               ("CERAR_FUSION_THRESHOLD", "4096", "67108864")):
        line = f"job-wide setting {setting}: this rank had {mine}, the job uses rank 0's {job}"
        assert log.count(line) == 3, f"{line!r} not 3 times in:\n{log}"
    assert re.findall(r"\[(\d)\][^\n]*job-wide setting", log) == ["1"] * 9, log
    assert "job-wide setting" not in quiet


def torchrun_env(rank, port):
    return {"RANK": str(rank), "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port - 1)}


def open_mpi_env(rank, port):
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "4",
            "CERAR_RENDEZVOUS_PORT": str(port)}


@pytest.mark.parametrize("launcher_env", [torchrun_env, open_mpi_env])
def test_restart_three_times_where_rank_zero_hosts_the_store(launcher_env):
    port = free_port()
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("CERAR_", "OMPI_", "SLURM_", "MASTER_"))
            and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    procs = [subprocess.Popen(
        [sys.executable, str(WORKERS / "restart_job.py")],
        env={**base, **CERAR_ENV, **launcher_env(r, port), "CERAR_SECRET": "s3cret",
             "CERAR_TIMEOUT_SECONDS": "30"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(4)]
    outputs = []
    try:
        outputs = [p.communicate(timeout=90)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for rank, (proc, output) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0 and "restart OK" in output, f"rank {rank}:\n{output}"
        assert output.count(" c=8") == 3, output
