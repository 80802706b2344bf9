"""The package's surface, without other ranks."""
import os
import subprocess
import sys

import pytest

from conftest import needs_runtime

# Without the extension the session fails (conftest.py) unless skipping is asked for.
cerar = pytest.importorskip("cerar")


def test_surface():
    import cerar.numpy as cn
    for name in ("init", "shutdown", "size", "rank", "local_rank", "local_size",
                 "is_initialized", "start_timeline", "stop_timeline", "CerarError"):
        assert callable(getattr(cerar, name)), name
    assert {cerar.Sum, cerar.Average, cerar.Min, cerar.Max, cerar.Adasum} == set(
        cerar.Op.__members__.values())
    assert issubclass(cerar.CerarError, RuntimeError)
    for name in ("allreduce", "allreduce_async", "grouped_allreduce", "allgather", "broadcast",
                 "barrier", "join", "poll", "synchronize"):
        assert callable(getattr(cn, name)), name


def test_wire_carries_is_the_runtimes_rule():
    from cerar import _cerar
    D = _cerar.DType
    assert _cerar.wire_carries("int8", D.float16, cerar.Sum)
    assert _cerar.wire_carries("fp16", D.float32, cerar.Average)
    assert not _cerar.wire_carries("fp16", D.float16, cerar.Sum)  # 16-bit data: int8 only
    assert not _cerar.wire_carries("bf16", D.float32, cerar.Max)
    assert not _cerar.wire_carries("int8", D.float32, cerar.Adasum)
    assert not _cerar.wire_carries("int8", D.float64, cerar.Sum)
    with pytest.raises(ValueError):
        _cerar.wire_carries("fp8", D.float32, cerar.Sum)


def test_torch_surface():
    torch = pytest.importorskip("torch")
    import cerar.torch as ct
    for name in ("allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
                 "grouped_allreduce", "allgather", "broadcast", "broadcast_", "join",
                 "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state",
                 "broadcast_object", "synchronize", "poll", "SyncBatchNorm"):
        assert callable(getattr(ct, name)), name
    model = torch.nn.Linear(3, 2)
    opt = ct.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters())
    assert isinstance(opt, torch.optim.SGD) and type(opt).__name__ == "SGD"
    with pytest.raises(ValueError, match="missing"):
        ct.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                named_parameters=[("weight", model.weight)])


def test_not_initialized():
    assert not cerar.is_initialized()
    with pytest.raises(ValueError, match="init"):
        cerar.rank()
    with pytest.raises(TypeError, match="unknown setting"):
        cerar.init(no_such_setting=1)


def test_auto_names_are_deterministic():
    cerar._counters.clear()
    assert [cerar._auto_name("allreduce") for _ in range(3)] == [
        "allreduce.noname.0", "allreduce.noname.1", "allreduce.noname.2"]
    assert cerar._auto_name("broadcast") == "broadcast.noname.0"
    assert cerar._auto_name("allreduce", "grad.w") == "grad.w"


def test_store_server():
    from cerar._cerar import StoreServer
    server = StoreServer("127.0.0.1", 0, "secret")
    server.start()
    assert server.port > 0 and server.try_get("missing") is None


@needs_runtime
def test_single_process_job():
    code = ("import numpy as np, cerar, cerar.numpy as cn\n"
            "cerar.init()\n"
            "assert (cerar.rank(), cerar.size(), cerar.local_rank(), cerar.local_size()) == (0, 1, 0, 1)\n"
            "out = cn.allreduce(np.arange(4.0), op=cerar.Sum)\n"
            "assert (out == np.arange(4.0)).all(), out\n"
            "cerar.shutdown(); cerar.shutdown()\n"
            "print('single OK')\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CERAR_", "OMPI_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0 and "single OK" in result.stdout, result.stdout + result.stderr
