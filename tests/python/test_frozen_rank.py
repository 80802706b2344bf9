"""A rank frozen (SIGSTOP) past the timeout and then resumed says that it was the silent one,
while the others name it; none blames a live peer (core/blame.h, the stall watch)."""
import json
import os
import select
import signal
import subprocess
import sys
import time

from conftest import WORKERS, needs_runtime
from ports import free_port

pytestmark = needs_runtime

TIMEOUT_SECONDS = 2
SIZE = 3
VICTIM = 2


def test_a_resumed_frozen_rank_names_itself():
    port = free_port()
    procs = []
    for rank in range(SIZE):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CERAR_", "OMPI_", "SLURM_"))}
        env.update(RANK=str(rank), WORLD_SIZE=str(SIZE), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(SIZE), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port - 1), CERAR_SECRET="frozen",
                   CERAR_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS), CERAR_LOG_LEVEL="fatal",
                   PYTHONPATH=os.pathsep.join(
                       p for p in (str(WORKERS), os.environ.get("PYTHONPATH")) if p))
        procs.append(subprocess.Popen([sys.executable, str(WORKERS / "lost_rank.py")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, stdin=subprocess.DEVNULL))
    results = {}
    try:
        deadline = time.monotonic() + 60
        for rank, proc in enumerate(procs):
            ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
            assert ready, f"rank {rank} did not start within 60 s"
            line = proc.stdout.readline()
            assert line.startswith("ready"), line + proc.stdout.read()
        time.sleep(0.3)
        procs[VICTIM].send_signal(signal.SIGSTOP)
        time.sleep(TIMEOUT_SECONDS + 2)  # past the timeout: the others give up on it
        procs[VICTIM].send_signal(signal.SIGCONT)
        for rank, proc in enumerate(procs):
            output, _ = proc.communicate(timeout=TIMEOUT_SECONDS + 30)
            lines = [l for l in output.splitlines() if l.startswith("RESULT ")]
            assert lines, f"rank {rank} printed no result:\n{output}"
            results[rank] = json.loads(lines[-1][len("RESULT "):])
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    for rank, result in results.items():
        assert result["class"] == "CerarTimeoutError", result
        assert result["peer"] == VICTIM, result
    assert f"rank {VICTIM} (this process) was the silent one" in results[VICTIM]["message"], \
        results[VICTIM]
    for rank in range(SIZE):
        if rank != VICTIM:
            assert f"rank {VICTIM} stopped answering" in results[rank]["message"], results[rank]
