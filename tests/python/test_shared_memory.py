"""A one-host job on shared memory (docs/shared-memory.md; core/config/shm_links.cc sets it up):
the collectives right, the same bits as over TCP, and nothing left in /dev/shm after a normal
end or a killed rank."""
import glob
import os
import re
import signal
import subprocess
import sys
import time

from conftest import WORKERS, assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


def segments():
    return set(glob.glob("/dev/shm/cerar-*"))


def descendants(root, marker):
    """The processes below `root` whose command line names `marker`."""
    parents, lines = {}, {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            pid = int(stat.split("/")[2])
            parents[pid] = int(open(stat).read().rsplit(")", 1)[1].split()[1])
            lines[pid] = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    found = []
    for pid in parents:
        up = parents.get(pid)
        while up and up != root:
            up = parents.get(up)
        if up == root and marker in lines.get(pid, ""):
            found.append(pid)
    return found


def digests(result):
    return set(re.findall(r"shm OK \d+ ([0-9a-f]{64})", result.stdout))


def test_shared_memory_gives_the_tcp_rings_bits_and_leaves_nothing():
    before = segments()
    runs = {}
    for shm in ("1", "0"):
        result = run_job("shm_job.py", np=4, env={"CERAR_SHARED_MEMORY": shm,
                                                  "CERAR_ALGORITHM": "ring"})
        assert_ok(result, "shm OK")
        runs[shm] = digests(result)
        assert len(runs[shm]) == 1, result.stdout  # every rank the same bits
    assert runs["1"] == runs["0"]
    assert segments() <= before


def test_a_killed_rank_leaves_no_segment_and_the_others_stop():
    before = segments()
    command = [sys.executable, "-m", "cerar.run", "-np", "3", sys.executable,
               str(WORKERS / "job_sum.py")]
    env = {**os.environ, "CERAR_SHARED_MEMORY": "1", "CERAR_TIMEOUT_SECONDS": "10",
           "JOB_VALUE": "1", "JOB_STEPS": "100000"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    time.sleep(3.0)  # running its steps, the segment mapped and unlinked
    assert segments() <= before
    os.kill(max(descendants(proc.pid, "job_sum.py")), signal.SIGKILL)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode != 0, output
    assert segments() <= before
