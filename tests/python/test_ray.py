"""cerar.ray: ranks as Ray actors on a local single-node Ray cluster (docs/ray.md)."""
import _thread
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

from conftest import WORKERS, needs_runtime
from emulated_hosts import EmulatedHosts, unavailable

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cerar[ray]')")
cerar_ray = pytest.importorskip("cerar.ray")
sys.path.insert(0, str(WORKERS))
from ray_jobs import (Trainer, allreduce_job, blocking_job, dying_job,  # noqa: E402
                      failing_job)

pytestmark = needs_runtime


@pytest.fixture(scope="module")
def cluster():
    # Small: four CPUs for four one-CPU actors, a 100 MB object store, no dashboard; the
    # actors import the jobs from workers/ray_jobs.py, so they get that folder on their path.
    temp = tempfile.mkdtemp(prefix="cerar-ray-")
    path = os.pathsep.join(filter(None, [str(WORKERS), os.environ.get("PYTHONPATH")]))
    env = {"PYTHONPATH": path, "CERAR_LOG_LEVEL": "error", "CERAR_TIMEOUT_SECONDS": "60"}
    ray.init(num_cpus=4, object_store_memory=100 * 1024 * 1024, include_dashboard=False,
             log_to_driver=False, _temp_dir=temp, runtime_env={"env_vars": env})
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def actors_alive(workers):
    alive = 0
    for worker in workers:
        try:
            ray.get(worker.node.remote(), timeout=30)
            alive += 1
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
    return alive


def assert_gone(pids):
    """The processes have ended (polled: a killed process takes a moment to go)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
        if not left:
            return
        time.sleep(0.1)
    pytest.fail(f"actor processes left running: {left}")


def ray_node_env():
    # Every node and the driver share one cluster token (Ray's token authentication), given
    # in the environment rather than in the user's ~/.ray.
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32), "PYTHONPATH": str(WORKERS)}


@pytest.mark.skipif(unavailable() is not None, reason=f"emulated hosts: {unavailable()}")
def test_one_ray_node_per_emulated_host(tmp_path):
    """Two emulated hosts (namespaces; emulated_hosts.py), a Ray node on each, two ranks per
    host: the store on the driver's node address, the ranks' local ranks per node. First in
    the file, so that the local cluster of the other tests is not up meanwhile."""
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    env = ray_node_env()
    short = tempfile.mkdtemp(prefix="crh-")  # Ray's socket paths must stay under 108 bytes
    with EmulatedHosts(2) as hosts:
        head = f"{hosts.addresses[0]}:6379"  # a port in this run's namespace
        nodes = []
        try:
            for host in range(2):
                role = ["--head", "--port", "6379", "--include-dashboard", "false"] \
                    if host == 0 else ["--address", head]
                log = open(tmp_path / f"node{host}.log", "wb")
                nodes.append(hosts.popen(host, [
                    ray_cli, "start", "--block", "--node-ip-address", hosts.addresses[host],
                    "--num-cpus", "2", "--object-store-memory", str(100 << 20),
                    "--temp-dir", os.path.join(short, str(host)), "--disable-usage-stats", *role],
                    env=env, stdout=log, stderr=log))
                if host == 0:
                    wait_for_head(hosts, nodes[0], ray_cli, head, env, tmp_path)
            result = hosts.run(0, [sys.executable, str(WORKERS / "ray_hosts_driver.py"), head,
                                   "2", "2"], env=env, timeout=300)
        finally:
            for node in nodes:
                try:
                    os.killpg(node.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for node in nodes:
                try:
                    node.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(node.pid, signal.SIGKILL)
                    node.wait()
            shutil.rmtree(short, ignore_errors=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    line = next(l for l in result.stdout.splitlines() if l.startswith("RAYHOSTS "))
    seen = json.loads(line[len("RAYHOSTS "):])
    # One bundle per node: each node's two ranks are consecutive (which node comes first is
    # the scheduler's choice).
    names = seen["hosts"]
    assert names[0] == names[1] and names[2] == names[3], seen
    assert sorted(set(names)) == sorted(hosts.names), seen
    assert seen["ranks"] == [[0, 4, 0, 2], [1, 4, 1, 2], [2, 4, 0, 2], [3, 4, 1, 2]], seen
    assert seen["correct"], seen


def wait_for_head(hosts, node, ray_cli, head, env, logs):
    deadline = time.monotonic() + 120
    while True:
        check = hosts.run(0, [ray_cli, "health-check", "--address", head], env=env, timeout=60)
        if check.returncode == 0:
            return
        if node.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the Ray head did not come up: {check.stdout}{check.stderr}\n"
                        f"{(logs / 'node0.log').read_text(errors='replace')}")
        time.sleep(0.5)


def test_placement_arguments_are_checked():
    with pytest.raises(ValueError, match="either num_workers"):
        cerar_ray.RayExecutor(num_workers=2, num_hosts=2)
    with pytest.raises(ValueError, match="num_workers must be a positive integer"):
        cerar_ray.RayExecutor(num_workers=0)
    settings = cerar_ray.RayExecutor.create_settings(timeout_s=7, nics={"eth1"},
                                                     placement_group_timeout_s=5)
    executor = cerar_ray.RayExecutor(settings, num_hosts=2, num_workers_per_host=3,
                                     env={"CERAR_ALGORITHM": "ring"})
    assert executor.num_workers == 6
    assert executor.job_env({"CERAR_ALGORITHM": "cerar"}) == {
        "CERAR_RENDEZVOUS_TIMEOUT_SECONDS": "7.0", "CERAR_IFACE": "eth1",
        "CERAR_ALGORITHM": "cerar"}
    assert cerar_ray.plan_ranks(["b", "a", "b", "a"]) == [(0, 0, 2), (2, 0, 2), (1, 1, 2),
                                                          (3, 1, 2)]


def test_four_actors_allreduce(cluster):
    with cerar_ray.RayExecutor(num_workers=4, cpus_per_worker=1) as executor:
        executor.start(executable_cls=Trainer, executable_args=[10])
        workers = list(executor.workers)
        results = executor.run(allreduce_job, args=[1000])
        assert executor.execute(Trainer.scaled_rank) == [0, 10, 20, 30]
        assert executor.execute_single(Trainer.scaled_rank) == 0
        expected = np.arange(1000, dtype=np.float64) * (1 + 2 + 3 + 4)
        assert [r[:4] for r in results] == [(rank, 4, rank, 4) for rank in range(4)]
        for result in results:
            np.testing.assert_array_equal(result[4], expected)
        assert len({r[5] for r in results}) == 4  # four processes
        assert os.getpid() not in {r[5] for r in results}
    assert actors_alive(workers) == 0
    assert_gone([r[5] for r in results])


def test_a_failing_actor_stops_the_job(cluster):
    executor = cerar_ray.RayExecutor(num_workers=4)
    executor.start()
    workers = list(executor.workers)
    with pytest.raises(cerar_ray.WorkerError, match="rank 2 failed: ValueError: rank 2 refuses") \
            as caught:
        executor.run(failing_job, args=[2])
    assert caught.value.rank == 2
    assert isinstance(caught.value.cause, ValueError)
    assert "failing_job" in str(caught.value)  # the worker's traceback
    assert actors_alive(workers) == 0  # the others were stopped, not left in the collective
    with pytest.raises(RuntimeError, match="not running"):
        executor.run(allreduce_job, args=[4])
    executor.shutdown()  # idempotent


def test_a_dying_actor_stops_the_job(cluster):
    executor = cerar_ray.RayExecutor(num_workers=2)
    executor.start()
    workers = list(executor.workers)
    with pytest.raises(cerar_ray.WorkerError, match="rank 1 failed") as caught:
        executor.run(dying_job, args=[1])
    assert caught.value.rank == 1
    assert isinstance(caught.value.cause, ray.exceptions.RayActorError)
    assert actors_alive(workers) == 0


def test_ctrl_c_in_the_driver_stops_every_actor(cluster, tmp_path):
    executor = cerar_ray.RayExecutor(num_workers=2)
    executor.start()
    workers = list(executor.workers)

    def interrupt_once_running():  # Ctrl-C while run() waits on both workers
        while len(list(tmp_path.iterdir())) < 2:
            threading.Event().wait(0.05)
        _thread.interrupt_main()

    # A run started as a background job inherits SIGINT ignored, and then interrupt_main()
    # does nothing: take Ctrl-C as a terminal's Python would, for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            threading.Thread(target=interrupt_once_running, daemon=True).start()
            executor.run(blocking_job, args=[str(tmp_path)])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not executor.workers
    assert actors_alive(workers) == 0
    assert_gone([int(p.name) for p in tmp_path.iterdir()])
