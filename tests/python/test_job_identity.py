"""Two jobs on one host and one rendezvous port never meet (docs/rendezvous.md, "One job, one
store"): every rank ends with its own job's exact sum or fails within seconds with the
documented message, whatever order the four ranks start in."""
import os
import subprocess
import sys
import time

import pytest

from conftest import WORKERS, needs_runtime
from ports import free_port

pytestmark = needs_runtime

VALUES = {"A": (0.0, 1.0), "B": (100.0, 101.0)}
SUMS = {job: sum(values) for job, values in VALUES.items()}
CLASH = "each job needs a rendezvous port of its own"
LIMIT = 10.0  # seconds within which a rank that cannot join fails


def launcher_env(launcher, job, rank, port):
    """The variables `launcher` gives rank `rank` of a 2-rank job `job` on this host."""
    if launcher == "mpirun":
        return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                "PMIX_NAMESPACE": f"prterun-host-{job}@1", "CERAR_RENDEZVOUS_PORT": str(port)}
    if launcher == "srun":
        return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(rank),
                "SLURM_NNODES": "1", "SLURM_JOB_ID": str(4000 + ord(job)), "SLURM_STEP_ID": "0",
                "CERAR_RENDEZVOUS_ADDR": "127.0.0.1", "CERAR_RENDEZVOUS_PORT": str(port)}
    identity = {"TORCHELASTIC_RUN_ID": f"run-{job}"} if launcher == "torchrun" else {}
    return {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port - 1),
            **identity}


def start_in_order(order, launcher, port, extra=None, gap=0.3):
    """Starts the ranks named in `order` ("A0", "B1", ...) 0.3 s apart (`gap` s between the
    two jobs' first ranks); each rank's output, exit code and seconds to exit."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("CERAR_", "OMPI_", "SLURM_", "MASTER_", "PMIX_", "TORCHELASTIC_"))
            and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    base.update({"CERAR_TIMEOUT_SECONDS": "8", "CERAR_MEASURE_LINK": "0", **(extra or {})})
    procs = {}
    for name in order:
        job, rank = name[0], int(name[1])
        if procs and job not in {n[0] for n in procs}:
            time.sleep(gap - 0.3)
        env = {**base, **launcher_env(launcher, job, rank, port),
               "JOB_VALUE": str(VALUES[job][rank])}
        procs[name] = (time.monotonic(), subprocess.Popen(
            [sys.executable, str(WORKERS / "job_sum.py")], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
        time.sleep(0.3)
    results = {}
    for name, (started, proc) in procs.items():
        try:
            output = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            output = proc.communicate()[0] + "\n(killed after 60 s)"
        results[name] = (output, proc.returncode, time.monotonic() - started)
    return results


def check(results, order):
    """No rank prints a sum with the other job's values; each finishes with its own job's sum
    or fails within LIMIT s with the clash message; a job whose ranks all started before the
    other job's first rank finishes."""
    for name, (output, code, seconds) in results.items():
        sums = [line.split()[1] for line in output.splitlines() if line.startswith("sum ")]
        for value in sums:
            assert float(value) == SUMS[name[0]], f"{name} summed with the other job: {output}"
        if code == 0:
            assert sums, f"{name} exited 0 without a sum:\n{output}"
        else:
            assert CLASH in output or "belongs to another job" in output, f"{name}:\n{output}"
            assert seconds < LIMIT + 5, f"{name} failed after {seconds:.1f} s:\n{output}"
    for job in "AB":
        first_other = min(order.index(n) for n in order if n[0] != job)
        if all(order.index(f"{job}{r}") < first_other for r in (0, 1)):
            assert all(results[f"{job}{r}"][1] == 0 for r in (0, 1)), results


# A foreign rank first, between and last; rank 0s together; the non-zero ranks first.
ORDERS = [("A0 B1 A1 B0", "mpirun"), ("B1 A0 A1 B0", "srun"), ("A0 A1 B0 B1", "torchrun"),
          ("A1 B1 A0 B0", "mpirun"), ("A0 B0 A1 B1", "srun"), ("B0 A1 A0 B1", "torchrun"),
          ("A1 A0 B1 B0", "mpirun"), ("B1 B0 A1 A0", "torchrun")]


@pytest.mark.parametrize("order,launcher", ORDERS)
def test_two_jobs_on_one_port_never_sum_together(order, launcher):
    names = order.split()
    results = start_in_order(names, launcher, free_port())
    check(results, names)
    # Jobs with their launchers' identities have stores of their own: both finish.
    assert all(code == 0 for _, code, _ in results.values()), results


def test_plain_variables_a_second_rank_zero_fails_at_once():
    # RANK and WORLD_SIZE set by hand name no job: the second rank 0 on the port cannot listen
    # and says why; its rank 1, a second process as rank 1 once job A has sealed, fails alone.
    names = ["A0", "A1", "B0", "B1"]
    results = start_in_order(names, "plain", free_port(), {"JOB_STEPS": "3000"}, gap=2.5)
    assert results["A0"][1] == 0 and results["A1"][1] == 0, results
    output, code, seconds = results["B0"]
    assert code != 0 and CLASH in output and "already listens" in output, output
    assert "CERAR_JOB_ID" in output and seconds < LIMIT, (seconds, output)
    output, code, seconds = results["B1"]
    assert code != 0 and "to start as rank 1" in output and "goes on" in output, output
    assert seconds < LIMIT, (seconds, output)


# Interleaved plain starts (0.3 s apart): no identity tells the jobs apart, but a second
# process as one rank before a job's start is sealed fails that start.
PLAIN_ORDERS = ["A0 B1 A1 B0", "B1 A0 A1 B0", "A1 B1 A0 B0", "A0 B0 B1 A1"]


@pytest.mark.parametrize("order,secret", [(order, "") for order in PLAIN_ORDERS]
                         + [("A0 B1 A1 B0", "one-secret-for-both")])
def test_plain_variables_interleaved_never_sum_together(order, secret):
    # With a secret the store is the TCP one (the way across hosts): the same guarantee.
    names = order.split()
    results = start_in_order(names, "plain", free_port(),
                             {"CERAR_SECRET": secret} if secret else None)
    for name, (output, code, seconds) in results.items():
        sums = [line.split()[1] for line in output.splitlines() if line.startswith("sum ")]
        assert all(float(value) == SUMS[name[0]] for value in sums), f"{name}: {output}"
        if code != 0 and not (CLASH in output and "CERAR_JOB_ID" in output):
            # A rank started after its whole job failed on the clash (on a loaded machine the
            # others may be gone before it starts) finds no one to join: it times out.
            partner = results[f"{name[0]}{1 - int(name[1])}"][0]
            assert CLASH in partner and "timed out" in output, f"{name}:\n{output}"
        if code != 0:
            assert seconds < LIMIT + 5, f"{name} failed after {seconds:.1f} s:\n{output}"


def test_a_foreign_hello_leaves_the_job_running():
    """A third process presenting another job's identity to a running job's store is refused;
    the job's sums stay exact."""
    from cerar import _cerar
    port = free_port()
    base_dir = os.environ.get("XDG_RUNTIME_DIR")
    procs = start_in_background(port)
    time.sleep(2.0)  # the job is running its steps
    sockets = [p for p in _socket_dirs(base_dir) if f"cerar-store-{port}-" in p]
    assert sockets, "the job's store socket was not found"
    for job in ("Open MPI job other", ""):
        with pytest.raises(_cerar.InvalidArgumentError, match="belongs to another job"):
            _cerar.StoreClient("unix:" + sockets[0], port, "", 5.0, job)
    for name, proc in procs.items():
        output = proc.communicate(timeout=60)[0]
        assert proc.returncode == 0 and f"sum {SUMS['A']}" in output, f"{name}:\n{output}"


def start_in_background(port):
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("CERAR_", "OMPI_", "SLURM_", "MASTER_", "PMIX_"))}
    base.update({"CERAR_TIMEOUT_SECONDS": "8", "CERAR_MEASURE_LINK": "0", "JOB_STEPS": "3000"})
    return {f"A{r}": subprocess.Popen(
        [sys.executable, str(WORKERS / "job_sum.py")],
        env={**base, **launcher_env("mpirun", "A", r, port), "JOB_VALUE": str(VALUES["A"][r])},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)}


def _socket_dirs(runtime_dir):
    dirs = [d for d in (runtime_dir, f"/tmp/cerar-{os.getuid()}") if d and os.path.isdir(d)]
    return [os.path.join(d, f) for d in dirs for f in os.listdir(d)]
