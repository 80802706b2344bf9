"""Jobs across emulated hosts (emulated_hosts.py: a network namespace, host name and sshd each;
every host name resolves to 127.0.1.1 on its own host, as on a fresh Debian host), two ranks per
host, started as each launcher would: cerarrun -H / --hostfile over ssh, Open MPI's mpirun over
ssh, srun's variables and torchrun's variables (started here). Every job all-reduces with the
exact ring and with CERAR and checks the results (workers/multihost_job.py).

Ports: the rendezvous ports below are in namespaces of this run, where nothing else listens.
"""
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import WORKERS, needs_runtime
from emulated_hosts import EmulatedHosts, unavailable

WHY_NOT = unavailable()
pytestmark = [needs_runtime, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]

JOB = str(WORKERS / "multihost_job.py")
MARKER = "multihost_job.py"
LAUNCHER_VARIABLES = ("CERAR_", "OMPI_", "SLURM_", "MASTER_", "PMIX_")
_ports = itertools.count(29400, 10)


@pytest.fixture(scope="module")
def hosts():
    with EmulatedHosts(4) as made:
        yield made


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARIABLES)
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    # Generous limits: eight ranks start on a loaded machine (no timing is asserted).
    env.update({"CERAR_LOG_LEVEL": "warning", "CERAR_TIMEOUT_SECONDS": "60",
                "CERAR_RENDEZVOUS_TIMEOUT_SECONDS": "120",
                "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def placement(host_count, per_host=2):
    """[(rank, host, local_rank)] with ranks filling the hosts in order."""
    return [(h * per_host + l, h, l) for h in range(host_count) for l in range(per_host)]


def assert_job_ok(hosts, output, np, per_host=2):
    for rank in range(np):
        node = hosts.names[rank // per_host]
        for algorithm in ("ring", "ring-hosts", "cerar-hosts"):
            line = f"multihost {algorithm} OK {rank}/{np} on {node} local {rank % per_host}/{per_host}"
            assert line in output, f"missing {line!r}\n{output}"


def assert_no_ranks_left(hosts):
    """No rank of the job on any host (polled: a terminated rank may take a moment to go)."""
    deadline = time.monotonic() + 30
    left = None
    while time.monotonic() < deadline:
        left = {hosts.names[h]: hosts.processes(h, MARKER) for h in range(hosts.count)}
        if not any(left.values()):
            return
        time.sleep(0.2)
    pytest.fail(f"ranks left running: {left}")


def run_ranks(hosts, envs, args=(), timeout=120):
    """Starts rank r on host envs[r][0] with environment envs[r][1], as srun or torchrun would;
    returns every rank's output after all have exited 0."""
    procs = [hosts.popen(host, [sys.executable, JOB, *args], env=clean_env(env),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for host, env in envs]
    outputs = [""] * len(procs)
    deadline = time.monotonic() + timeout
    try:
        for rank, proc in enumerate(procs):
            outputs[rank] = proc.communicate(timeout=max(1, deadline - time.monotonic()))[0]
    except subprocess.TimeoutExpired:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        outputs = [proc.communicate()[0] for proc in procs]
        pytest.fail("ranks did not finish:\n" + "\n".join(
            f"--- rank {rank}\n{output}" for rank, output in enumerate(outputs)))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    for rank, proc in enumerate(procs):
        assert proc.returncode == 0, f"rank {rank} exited {proc.returncode}:\n{outputs[rank]}"
    return "\n".join(outputs)


def test_torchrun_variables_across_hosts_whose_names_resolve_to_loopback(hosts):
    # torchrun (or a Kubernetes PyTorchJob) on 4 hosts: only torchrun's variables. Each host's
    # name is on 127.0.1.1; the ranks must publish 10.77.0.x, the route to MASTER_ADDR.
    port = next(_ports)
    envs = [(host, {"MASTER_ADDR": hosts.addresses[0], "MASTER_PORT": str(port),
                    "RANK": str(rank), "WORLD_SIZE": "8", "LOCAL_RANK": str(local),
                    "LOCAL_WORLD_SIZE": "2", "CERAR_SECRET": "torchrun-job-secret",
                    "CERAR_LOG_LEVEL": "info"})
            for rank, host, local in placement(4)]
    output = run_ranks(hosts, envs)
    assert_job_ok(hosts, output, 8)
    for host in range(4):  # the choice is logged at info
        assert (f"data links on {hosts.addresses[host]} (veth0), the local address of the "
                f"route to the rendezvous host {hosts.addresses[0]}") in output, output


def test_torchrun_master_addr_as_a_host_name(hosts):
    # MASTER_ADDR=node01 resolves to 127.0.1.1 on node01 itself: its ranks take the only
    # non-loopback interface; the others route to node01's address.
    port = next(_ports)
    envs = [(host, {"MASTER_ADDR": hosts.names[0], "MASTER_PORT": str(port), "RANK": str(rank),
                    "WORLD_SIZE": "4", "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": "2",
                    "GLOO_SOCKET_IFNAME": "veth0" if host == 1 else "",
                    "CERAR_SECRET": "torchrun-job-secret", "CERAR_LOG_LEVEL": "info"})
            for rank, host, local in placement(2)]
    output = run_ranks(hosts, envs)
    assert_job_ok(hosts, output, 4)
    assert "this host's only non-loopback interface" in output, output
    assert "interface veth0 (10.77.0.2), named by GLOO_SOCKET_IFNAME" in output, output


def test_pytorchjob_pods_one_rank_per_host(hosts):
    # As Kubeflow's PyTorchJob sets them: one process per pod, no LOCAL_* variables, and
    # MASTER_ADDR the master pod's name.
    port = next(_ports)
    envs = [(host, {"MASTER_ADDR": hosts.names[0], "MASTER_PORT": str(port), "RANK": str(host),
                    "WORLD_SIZE": "3", "CERAR_SECRET": "pytorchjob-secret"})
            for host in range(3)]
    assert_job_ok(hosts, run_ranks(hosts, envs), 3, per_host=1)


def test_slurm_variables_across_hosts(hosts):
    # As srun sets them for `srun -N3 --ntasks-per-node=2`; the rendezvous host is the first
    # of the step's node list (node01, on 127.0.1.1 there).
    job = 4242
    envs = [(host, {"SLURM_PROCID": str(rank), "SLURM_NTASKS": "6", "SLURM_LOCALID": str(local),
                    "SLURM_NODEID": str(host), "SLURM_STEP_NODELIST": "node[01-03]",
                    "SLURM_JOB_NODELIST": "node[01-03]", "SLURM_NNODES": "3",
                    "SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_TASKS_PER_NODE": "2(x3)",
                    "SLURM_JOB_ID": str(job), "CERAR_SECRET": "slurm-job-secret"})
            for rank, host, local in placement(3)]
    assert_job_ok(hosts, run_ranks(hosts, envs), 6)


def test_a_rank_that_would_publish_loopback_to_remote_peers_stops_with_the_fix(hosts):
    port = next(_ports)
    torchrun = {"MASTER_PORT": str(port), "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "1", "CERAR_SECRET": "s"}
    # Rank 1, its peer on node01, with the loopback interface named.
    result = hosts.run(1, [sys.executable, JOB], timeout=120, env=clean_env(
        {**torchrun, "RANK": "1", "MASTER_ADDR": hosts.addresses[0], "CERAR_IFACE": "lo"}))
    assert result.returncode != 0
    assert "rank 1: CERAR_IFACE=lo is a loopback interface, but peers run on other hosts; " \
           "name one of veth0 (10.77.0.2)" in result.stderr, result.stdout + result.stderr
    # Rank 0 on a host with two interfaces, MASTER_ADDR its own name (127.0.1.1 there): which
    # interface the hosts share cannot be told.
    namespace = hosts.namespace(0)
    for step in (["link", "add", "cerar9", "type", "veth", "peer", "name", "cerar9p"],
                 ["addr", "add", "10.78.0.1/24", "dev", "cerar9"], ["link", "set", "cerar9", "up"]):
        subprocess.run(["ip", "-n", namespace, *step], check=True)
    try:
        result = hosts.run(0, [sys.executable, JOB], timeout=120, env=clean_env(
            {**torchrun, "RANK": "0", "MASTER_ADDR": hosts.names[0]}))
    finally:
        subprocess.run(["ip", "-n", namespace, "link", "del", "cerar9"], check=True)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "rank 0: the rendezvous host 'node01' is loopback on this host" in output, output
    assert "set CERAR_IFACE to the interface the hosts share (this host has veth0 (10.77.0.1), " \
           "cerar9 (10.78.0.1))" in output, output


def _launch(hosts, host, argv, env=None, timeout=240):
    result = hosts.run(host, argv, env=hosts.client_env(clean_env(env)), timeout=timeout,
                       cwd=str(WORKERS))
    return result, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_open_mpi_across_hosts(hosts):
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
              "-H", f"{hosts.names[0]}:2,{hosts.names[1]}:2", "--mca", "btl", "self,tcp",
              "-x", "PYTHONPATH", "-x", "CERAR_SECRET", "-x", "CERAR_TIMEOUT_SECONDS",
              "-x", "CERAR_RENDEZVOUS_TIMEOUT_SECONDS"]
    env = {"CERAR_SECRET": "mpi-job-secret", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    # Open MPI's variables do not name rank 0's host: without CERAR_RENDEZVOUS_ADDR every rank
    # says so.
    result, output = _launch(hosts, 0, [*mpirun, sys.executable, JOB], env)
    assert result.returncode != 0
    assert "CERAR_RENDEZVOUS_ADDR is not set" in output, output
    result, output = _launch(hosts, 0, [*mpirun, "-x", f"CERAR_RENDEZVOUS_ADDR={hosts.names[0]}",
                                        sys.executable, JOB], env)
    assert result.returncode == 0, output
    assert_job_ok(hosts, output, 4)
    assert_no_ranks_left(hosts)


def cerarrun(*args):
    return [sys.executable, "-m", "cerar.run", *args]


def test_cerarrun_hosts_over_ssh(hosts):
    # From node01: its ranks start here, node02's over ssh. -x forwards a variable; the rest
    # of the launcher's environment reaches local ranks only (docs/multihost.md's rule).
    result, output = _launch(hosts, 0, cerarrun(
        "-np", "4", "-H", f"{hosts.names[0]}:2,{hosts.names[1]}:2", "-x", "PROBE_VAR=fwd",
        sys.executable, JOB), {"LAUNCHER_ONLY": "here"})
    assert result.returncode == 0, output
    assert_job_ok(hosts, output, 4)
    for rank in range(4):
        seen = "here" if rank < 2 else "None"
        assert f"rank {rank} sees PROBE_VAR=fwd LAUNCHER_ONLY={seen}" in output, output
    assert_no_ranks_left(hosts)


def test_cerarrun_hostfile_from_a_host_without_ranks(hosts, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"{name} slots=2\n" for name in hosts.names[1:4]))
    result, output = _launch(hosts, 0, cerarrun("-np", "6", "--hostfile", str(hostfile),
                                                sys.executable, JOB))
    assert result.returncode == 0, output
    for rank in range(6):
        node = hosts.names[1 + rank // 2]
        assert f"multihost cerar-hosts OK {rank}/6 on {node} local {rank % 2}/2" in output, output
    assert_no_ranks_left(hosts)


def test_cerarrun_remote_failure_stops_the_job_with_its_code(hosts):
    result, output = _launch(hosts, 0, cerarrun(
        "-np", "4", "-H", f"{hosts.names[0]}:2,{hosts.names[1]}:2", sys.executable, JOB,
        "fail", "3", "7"))
    assert result.returncode == 7, output
    assert f"rank 3 exited with code 7 (on {hosts.names[1]})" in output, output
    assert_no_ranks_left(hosts)


def _interruptible():
    # A launcher started from a terminal takes Ctrl-C; one started by a background job (`cmd &`
    # in a script, as CI runners may) inherits SIGINT ignored, and Python keeps it ignored.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_cerarrun_interrupted_leaves_no_rank_on_any_host(hosts):
    proc = hosts.popen(0, cerarrun("-np", "6", "-H", ",".join(f"{n}:2" for n in hosts.names[:3]),
                                   sys.executable, JOB, "hang"),
                       env=hosts.client_env(clean_env()), cwd=str(WORKERS),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       preexec_fn=_interruptible)
    lines, ready = [], threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if sum("READY" in l for l in lines) == 6:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(180), "".join(lines)
        assert all(hosts.processes(h, MARKER) for h in range(3))
        # Ctrl-C reaches the launcher (the foreground process group: the ranks and their ssh
        # have sessions of their own). `ip netns exec`, unshare and sh exec it: same pid.
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 130, "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(10)
    assert_no_ranks_left(hosts)

