"""One cerarrun job of a benchmark's own worker mode, and the JSON lines its rank 0 printed.

Shared by bench/shm_allreduce.py and bench/idle_cost.py: each runs itself with --worker on N
local ranks and reads back rank 0's figures, one JSON object per line.
"""
import json
import os
import subprocess
import sys


def rank_zero_rows(script, np_, worker_args, env, failure):
    """Runs `script --worker worker_args` on np_ ranks; exits with `failure` if the job fails."""
    command = [sys.executable, "-m", "cerar.run", "-np", str(np_), sys.executable,
               os.path.abspath(script), "--worker", *worker_args]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"{failure}:\n{out.stdout}\n{out.stderr}")
    return [json.loads(line.split("] ", 1)[1]) for line in out.stdout.splitlines()
            if line.startswith("[0] {")]
