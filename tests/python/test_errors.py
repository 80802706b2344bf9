"""Errors: disagreeing ranks get MismatchError everywhere; a dead rank fails the job, and
every survivor names it with the same error class; each status code has its Python class."""
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from conftest import WORKERS, assert_ok, needs_runtime, run_job
from ports import free_port

pytestmark = needs_runtime


def test_mismatched_tensors_raise_on_all_ranks():
    result = run_job("mismatch.py", np=4, timeout=90)
    assert_ok(result, "mismatch OK")
    for rank in range(4):
        assert f"[{rank}] CerarError: " in result.stdout, result.stdout


def test_dying_rank_fails_the_job_quickly():
    start = time.monotonic()
    result = run_job("dying_rank.py", np=4, launcher_args=["--timeout", "10"], timeout=60)
    assert result.returncode == 5, result.stdout + result.stderr
    assert "rank 1 exited with code 5" in result.stderr
    assert "should not get here" not in result.stdout
    assert time.monotonic() - start < 30


def test_each_status_code_has_its_class():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CERAR_", "OMPI_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = str(WORKERS)
    result = subprocess.run([sys.executable, str(WORKERS / "status_codes.py")],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0 and "codes OK" in result.stdout, result.stdout + result.stderr


def _init_failure(variables, error_class):
    """The stdout of a process whose init(), under `variables` alone (no launcher's, MPI's,
    SLURM's or torchrun's own), raised cerar.<error_class>; fails if it did not."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CERAR_", "OMPI_", "SLURM_", "MASTER_"))}
    env.update(variables)
    script = ("import cerar\n"
              "try:\n"
              "    cerar.init()\n"
              f"except cerar.{error_class} as e:\n"
              "    print('raised:', e)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "raised:" in result.stdout, result.stdout
    return result.stdout


def test_a_missing_secret_across_hosts_is_the_users_setting():
    output = _init_failure(dict(RANK="1", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2",
                                MASTER_ADDR="node1"), "InvalidArgumentError")
    assert "CERAR_SECRET" in output, output


def test_a_store_that_never_answers_is_a_timeout():
    # Nothing listens on the rendezvous port: the store client's wait runs out (inside, Gloo's
    # own exception type) and init() raises cerar's class for a silent peer.
    output = _init_failure(dict(CERAR_RANK="1", CERAR_SIZE="2", CERAR_LOCAL_RANK="1",
                                CERAR_LOCAL_SIZE="2", CERAR_RENDEZVOUS_ADDR="127.0.0.1",
                                CERAR_RENDEZVOUS_PORT=str(free_port()),
                                CERAR_RENDEZVOUS_TIMEOUT_SECONDS="1", CERAR_SECRET="none"),
                           "CerarTimeoutError")
    assert "rendezvous" in output, output


TIMEOUT_SECONDS = 3


def _lost_rank_job(strike):
    """4 ranks started directly (torchrun's variables; no launcher ends the survivors), all in
    the all-reduce loop; `strike(procs)` then strikes and returns its time. Returns that time
    and each survivor's result, by rank (the struck rank's is missing)."""
    port = free_port()
    procs = []
    for rank in range(4):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CERAR_", "OMPI_", "SLURM_"))}
        env.update(RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="4",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port - 1), CERAR_SECRET="lost",
                   CERAR_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS), CERAR_LOG_LEVEL="fatal",
                   PYTHONPATH=str(WORKERS))
        procs.append(subprocess.Popen([sys.executable, str(WORKERS / "lost_rank.py")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, stdin=subprocess.DEVNULL))
    try:
        deadline = time.monotonic() + 60
        for rank, proc in enumerate(procs):  # every rank is in the all-reduce loop
            ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
            assert ready, f"rank {rank} did not start within 60 s"
            line = proc.stdout.readline()
            assert line.startswith("ready"), line + proc.stdout.read()
        time.sleep(0.3)
        struck, victim = strike(procs)
        results = {}
        for rank, proc in enumerate(procs):
            if rank == victim:
                continue
            output, _ = proc.communicate(timeout=TIMEOUT_SECONDS + 30)
            lines = [l for l in output.splitlines() if l.startswith("RESULT ")]
            assert lines, f"rank {rank} printed no result:\n{output}"
            results[rank] = json.loads(lines[-1][len("RESULT "):])
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return struck, results


def _assert_named(results, victim, expected):
    for result in results.values():
        assert result["class"] == expected, result
        assert result["peer"] == victim and f"rank {victim} " in result["message"], result
        assert result["cerar"], result


@pytest.mark.parametrize("victim,signal_,expected", [
    (2, signal.SIGKILL, "PeerLostError"),
    (2, signal.SIGSTOP, "CerarTimeoutError"),
    (0, signal.SIGKILL, "PeerLostError"),  # rank 0 hosts the store and the coordinator
    (0, signal.SIGSTOP, "CerarTimeoutError"),  # ... which then stops answering
])
def test_every_survivor_names_the_lost_rank(victim, signal_, expected):
    """One rank killed or frozen mid-all-reduce: each survivor raises `expected`, naming the
    victim, within the timeout plus the agreement window (core/control/blame.h) and some slack."""
    def strike(procs):
        procs[victim].send_signal(signal_)
        return time.time(), victim

    struck, results = _lost_rank_job(strike)
    _assert_named(results, victim, expected)
    for result in results.values():
        # Frozen: detected after the timeout; the agreement adds its window (1.5 s, half the
        # timeout) when the store itself is frozen, and at most 1.5 windows. The slack
        # absorbs wake-ups delayed by a loaded machine; a hang still fails.
        assert result["time"] - struck < TIMEOUT_SECONDS + 1.5 + 5, result


def test_a_survivor_too_slow_to_post_is_not_named():
    """Rank 2 killed and rank 1 frozen for longer than the agreement window just after, before
    it could post: the survivors that posted in time still name rank 2, not the slow rank 1
    that the lowest missing rank would be (a survivor's process starved on a loaded machine)."""
    def strike(procs):
        procs[2].send_signal(signal.SIGKILL)
        struck = time.time()
        time.sleep(0.002)
        procs[1].send_signal(signal.SIGSTOP)
        time.sleep(TIMEOUT_SECONDS * 2 / 3)  # past the window, short of the others' timeout
        procs[1].send_signal(signal.SIGCONT)
        return struck, 2

    _, results = _lost_rank_job(strike)
    _assert_named(results, 2, "PeerLostError")


def test_a_resumed_frozen_rank_names_itself():
    """Rank 2 frozen past the timeout, then resumed: the others name it, and it says that it
    was the silent one (core/control/blame.h, the stall watch) instead of blaming a live peer whose
    links it finds closed on waking."""
    def strike(procs):
        procs[2].send_signal(signal.SIGSTOP)
        struck = time.time()
        time.sleep(TIMEOUT_SECONDS + 2)  # past the timeout: the others give up on it
        procs[2].send_signal(signal.SIGCONT)
        return struck, None  # every rank's result, rank 2's included

    _, results = _lost_rank_job(strike)
    _assert_named(results, 2, "CerarTimeoutError")
    assert "rank 2 (this process) was the silent one" in results[2]["message"], results[2]
