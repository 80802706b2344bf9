"""cerar.torch.backend: torch.distributed's backend "cerar" (3 ranks started with torch's
variables and a file:// store, checked against a Gloo group on the same ranks)."""
import os
import subprocess
import sys

import pytest

from conftest import WORKERS, needs_runtime

pytestmark = needs_runtime
torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
NP = 3
TORCH2 = hasattr(torch._C._distributed_c10d, "Backend")


def run_ranks(tmp_path, mode, rank0_env=None, backend="cerar", timeout=120, stopped=None):
    launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    base = {k: v for k, v in os.environ.items() if k not in launcher and (
        not k.startswith(("CERAR_", "OMPI_", "SLURM_", "MASTER_"))
        or k == "CERAR_WARNING_FILTERS")}  # torch2-env.sh's strict warnings
    base.update(CERAR_LOG_LEVEL="fatal", OMP_NUM_THREADS="1", CERAR_TEST_BACKEND=backend,
                CERAR_TEST_STORE=f"file://{tmp_path / 'store'}")
    procs = [subprocess.Popen(
        [sys.executable, str(WORKERS / "dist_backend_job.py"), mode],
        env={**base, **(rank0_env if r == 0 and rank0_env else {}), "RANK": str(r),
             "WORLD_SIZE": str(NP)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        for r in range(NP)]
    outputs = []
    try:
        for rank, proc in enumerate(procs):
            if rank == stopped:  # waits for the others, then is ended from here
                continue
            outputs.append(proc.communicate(timeout=timeout)[0])
        if stopped is not None:
            procs[stopped].kill()
            outputs.append(procs[stopped].communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        pytest.fail(f"dist_backend_job.py {mode} did not finish in {timeout} s:\n"
                    + "\n".join(outputs))
    return procs, "\n".join(outputs)


def assert_ranks(procs, output, marker, ranks=range(NP)):
    for rank in ranks:
        assert procs[rank].returncode == 0, f"rank {rank} exited {procs[rank].returncode}\n{output}"
        assert f"[{rank}] {marker} OK" in output, f"rank {rank}: no {marker!r}\n{output}"


def test_collectives_match_gloo(tmp_path):
    # with c fixed, `auto` would take CERAR for the 2 MiB sum: the backend's default is exact
    procs, output = run_ranks(tmp_path, "collectives", {"CERAR_COMPONENTS": str(4 * NP)})
    for marker in ("all_reduce", "async", "broadcast all_gather barrier",
                   "reduce_scatter all_to_all", "gloo fallback"):
        assert_ranks(procs, output, marker)
    assert_ranks(procs, output, "pair identical", ranks=(0, 1))


def test_ddp_trains_as_on_gloo(tmp_path):
    # torch 2.x: the backend serves one device inside torch's ProcessGroup ("cpu:cerar")
    procs, output = run_ranks(tmp_path, "ddp", backend="cpu:cerar" if TORCH2 else "cerar")
    assert_ranks(procs, output, "ddp")


def test_rank_zeros_algorithm_setting_is_the_jobs(tmp_path):
    procs, output = run_ranks(tmp_path, "cerar", {"CERAR_ALGORITHM": "cerar",
                                                  "CERAR_COMPONENTS": str(4 * NP)})
    assert_ranks(procs, output, "cerar setting")


def test_killed_rank_raises_torchs_error_on_the_others(tmp_path):
    procs, output = run_ranks(tmp_path, "dead")
    assert_ranks(procs, output, "dead peer", ranks=range(NP - 1))
    assert procs[NP - 1].returncode != 0
    assert "raised PeerLostError" in output or "raised CerarTimeoutError" in output, output


def test_silent_rank_times_out_with_torchs_error_on_the_others(tmp_path):
    procs, output = run_ranks(tmp_path, "frozen", stopped=NP - 1)  # torch's timeout: 10 s
    assert_ranks(procs, output, "dead peer", ranks=range(NP - 1))
    assert "raised CerarTimeoutError" in output, output


def test_registered_on_import_and_idempotent():
    import cerar.torch as ct
    assert "CERAR" in dist.Backend._plugins
    ct.register_backend()  # a second time: nothing happens
    assert dist.Backend("cerar").lower() == "cerar"


def test_error_is_torchs_type_and_cerars():
    import cerar
    from cerar.torch._dist_work import torch_error
    error = torch_error(cerar.PeerLostError("lost"))
    assert isinstance(error, cerar.PeerLostError) and isinstance(error, RuntimeError)
    if hasattr(dist, "DistBackendError"):
        assert isinstance(error, dist.DistBackendError)
    assert str(error) == "lost"


def test_a_torch_without_the_api_gets_a_clear_error(monkeypatch):
    from cerar.torch import backend
    monkeypatch.setattr(backend, "missing_api", lambda: "no trampolines")
    with pytest.raises(RuntimeError, match="cannot be registered: no trampolines"):
        backend.register_backend()


def test_work_raises_the_collectives_error_and_is_released_once_used():
    import threading

    import cerar
    from cerar.torch._dist_work import _Completer
    completer = _Completer()
    gate = threading.Event()
    tensor = torch.ones(2)

    def fails():
        gate.wait(30)
        raise cerar.PeerLostError("rank 2 was lost")
    failing = completer.work(fails, [tensor])
    passing = completer.work(lambda: [tensor], [tensor])
    assert not failing.is_completed()
    gate.set()
    with pytest.raises(cerar.PeerLostError, match="rank 2 was lost") as raised:
        failing.wait()
    if hasattr(dist, "DistBackendError"):
        assert isinstance(raised.value, dist.DistBackendError)
    with pytest.raises(RuntimeError, match="rank 2 was lost"):
        failing.get_future().wait()  # what DDP's reducer reads
    assert passing.wait() and passing.get_future().wait()[0] is tensor
    assert len(completer._held) == 2  # held until the next submission sees them done and used
    completer.work(lambda: [], []).wait()
    assert len(completer._held) == 1
    completer.close()


def test_entry_point_registers_without_the_import(tmp_path):
    """An installed cerar (pip install .) on a torch that reads backend entry points: naming
    the backend is enough, no `import cerar.torch`."""
    from importlib.metadata import entry_points
    if not hasattr(dist.Backend, "_ensure_backend_registered"):
        pytest.skip("this torch does not read torch.distributed.backends entry points")
    if not any(e.name == "cerar" for e in entry_points(group="torch.distributed.backends")):
        pytest.skip("cerar is not installed here (its entry point is declared by pip install)")
    code = ("import sys, torch, torch.distributed as dist\n"
            f"dist.init_process_group('cerar', init_method='file://{tmp_path / 'store'}', "
            "rank=0, world_size=1)\n"
            "t = torch.ones(3); dist.all_reduce(t)\n"
            "backend = dist.group.WORLD._get_backend(torch.device('cpu'))\n"
            "print(type(backend).__name__, t.tolist())\n"
            "dist.destroy_process_group()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CERAR_", "MASTER_"))
           or k == "CERAR_WARNING_FILTERS"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ProcessGroupCerar [1.0, 1.0, 1.0]" in result.stdout, result.stdout + result.stderr


def test_exchange_arguments_cerar_cannot_express_or_that_do_not_add_up():
    from types import SimpleNamespace

    from cerar.torch import _dist_exchange as exchange
    runtime = SimpleNamespace(size=3)  # nothing reaches it: every call below stops before
    assert exchange._split_sizes([], 6, 3, "input") == [2, 2, 2]
    assert exchange._split_sizes([0, 4, 1], 5, 3, "input") == [0, 4, 1]
    for sizes, rows in (([], 5), ([1, 2], 3), ([1, 1, 1], 4), ([2, -1, 2], 3)):
        with pytest.raises(ValueError, match="split sizes"):
            exchange._split_sizes(sizes, rows, 3, "input")
    # uneven pieces, and rows unlike the input's: Gloo's (None)
    assert exchange.reduce_scatter(runtime, "rs", torch.empty(2),
                                   [torch.ones(2), torch.ones(3), torch.ones(2)], None,
                                   None) is None
    assert exchange.all_to_all_single(runtime, "a", torch.empty(3, 2), torch.ones(3, 4), [],
                                      [], None) is None
    with pytest.raises(ValueError, match="size x output"):
        exchange.reduce_scatter_flat(runtime, "rs", torch.empty(2), torch.ones(7), None, None)
    with pytest.raises(ValueError, match="3 input and output"):
        exchange.all_to_all(runtime, "a", [torch.empty(1)] * 2, [torch.ones(1)] * 3, None)
