"""cerar.torch.ddp: DistributedDataParallel's buckets through cerar (4 ranks, started with
torchrun's variables so that the gloo process group and cerar share one launch)."""
import os
import subprocess
import sys

import pytest

from conftest import WORKERS, needs_runtime
from ports import free_ports
from torch_ranks import finish

pytestmark = needs_runtime
torch = pytest.importorskip("torch")
NP = 4


def run_ddp(mode, timeout=90):
    port = free_ports(2)  # MASTER_PORT for torch's store; cerar's rendezvous takes the next
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("CERAR_", "OMPI_", "SLURM_", "MASTER_"))
            and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    base.update(CERAR_LOG_LEVEL="error", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(
        [sys.executable, str(WORKERS / "ddp_job.py"), mode],
        env={**base, "RANK": str(r), "WORLD_SIZE": str(NP), "LOCAL_RANK": str(r),
             "LOCAL_WORLD_SIZE": str(NP), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        for r in range(NP)]
    codes, output = finish(procs, timeout, f"ddp_job.py {mode}")
    for rank, code in enumerate(codes):
        assert code == 0, f"rank {rank} exited {code}:\n{output}"
    return output


@pytest.fixture(scope="module")
def ring_job():
    return run_ddp("ring")


def assert_every_rank(output, marker):
    for rank in range(NP):
        assert f"[{rank}] {marker} OK" in output, f"rank {rank}: no {marker!r}\n{output}"


def test_ring_hook_is_bit_identical_to_cerars_ring_and_close_to_gloo(ring_job):
    assert_every_rank(ring_job, "ring identical")
    assert_every_rank(ring_job, "ring vs gloo")


def test_hook_returns_before_the_last_bucket_is_reduced(ring_job):
    assert_every_rank(ring_job, "non-blocking")


def test_no_sync_accumulation_with_bucket_views(ring_job):
    assert_every_rank(ring_job, "no_sync")


def test_unused_parameters_and_static_graph(ring_job):
    assert_every_rank(ring_job, "unused")
    if "static_graph" in torch.nn.parallel.DistributedDataParallel.__init__.__code__.co_varnames:
        assert_every_rank(ring_job, "static graph")


def test_uneven_inputs_through_join(ring_job):
    assert_every_rank(ring_job, "join")


def test_autocast_and_nonfinite_skip_agree_on_every_rank(ring_job):
    assert_every_rank(ring_job, "amp skip")


def test_drift_control_sends_nothing_with_the_ring(ring_job):
    assert_every_rank(ring_job, "drift control")


def test_cerar_within_the_selections_bound_and_nonfinite_skip():
    output = run_ddp("cerar")
    assert_every_rank(output, "cerar bound")
    assert_every_rank(output, "amp skip")
    assert_every_rank(output, "drift control")  # resync of parameters and momentum


def test_bucket_size_mismatch_fails_on_every_rank():
    assert_every_rank(run_ddp("mismatch"), "mismatch")


class _Bucket:
    """A stand-in for GradBucket: index() and the flat tensor under either API."""

    def __init__(self, tensor, modern=True):
        self._tensor = tensor
        if modern:
            self.buffer = lambda: self._tensor
        else:
            self.get_tensor = lambda: self._tensor

    def index(self):
        return 0


@pytest.mark.parametrize("modern", [True, False])
def test_bucket_buffer_on_either_api(modern):
    from cerar.torch._compat import bucket_buffer
    tensor = torch.ones(3)
    assert bucket_buffer(_Bucket(tensor, modern)) is tensor


def test_hook_without_init_fails_through_the_future():
    import cerar
    from cerar.torch.ddp import CerarHookState, cerar_hook
    if cerar.is_initialized():
        pytest.skip("cerar runs in this process")
    future = cerar_hook(CerarHookState(prefix="t"), _Bucket(torch.ones(3)))
    with pytest.raises(Exception, match="not been initialized"):
        future.wait()
