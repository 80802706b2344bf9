"""cerar.torch's version-specific branches (frameworks/cerar/torch/_compat.py), each exercised
on whichever torch runs the suite: in CI Debian's 1.13 and the pinned 2.x of
scripts/torch2-env.sh."""
import os
import re
import subprocess
import sys
import types

import pytest

from conftest import needs_runtime

pytestmark = needs_runtime
torch = pytest.importorskip("torch")
TORCH_VERSION = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
HOOK_KINDS = ["accumulator", "post_accumulate"]


@pytest.fixture
def compat():
    from cerar.torch import _compat
    return _compat


def skip_unless_available(compat, kind):
    if kind == "post_accumulate" and not compat.HAS_POST_ACCUMULATE_GRAD_HOOK:
        pytest.skip(f"torch {torch.__version__} has no register_post_accumulate_grad_hook")


def test_hook_kind_follows_the_torch_version(compat):
    assert compat.HAS_POST_ACCUMULATE_GRAD_HOOK == (TORCH_VERSION >= (2, 1))
    p = torch.nn.Parameter(torch.ones(2))
    kept = compat.on_gradient_ready(p, lambda: None)
    if TORCH_VERSION >= (2, 1):
        assert isinstance(kept, torch.utils.hooks.RemovableHandle), type(kept)
    else:
        assert "AccumulateGrad" in kept.name()


@pytest.mark.parametrize("kind", HOOK_KINDS)
def test_gradient_ready_hook_sees_the_accumulated_gradient(compat, kind):
    skip_unless_available(compat, kind)
    p = torch.nn.Parameter(torch.ones(3))
    seen = []
    kept = compat.on_gradient_ready(p, lambda: seen.append(p.grad.clone()),
                                    post_accumulate=(kind == "post_accumulate"))
    (p * 2).sum().backward()
    (p * 2 + p * 3).sum().backward()  # two uses of p, still one call with their sum
    assert kept is not None
    assert [g.tolist() for g in seen] == [[2.0] * 3, [7.0] * 3]


def test_stream_of_a_host_tensor_leaves_torch_cuda_alone(compat, monkeypatch):
    def refuse(*_):
        raise AssertionError("torch.cuda touched for a host tensor")
    monkeypatch.setattr(torch.cuda, "current_stream", refuse)
    assert compat.stream_of(torch.ones(2)) == 0


def test_stream_of_a_cuda_tensor_is_its_devices_current_stream(compat, monkeypatch):
    asked = []

    def current_stream(device=None):
        asked.append(device)
        return types.SimpleNamespace(cuda_stream=0x5EED)
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    tensor = types.SimpleNamespace(is_cuda=True, device=torch.device("cuda", 1))
    assert compat.stream_of(tensor) == 0x5EED and asked == [torch.device("cuda", 1)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_stream_of_follows_torch_cuda_stream(compat):
    tensor = torch.ones(2, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert compat.stream_of(tensor) == side.cuda_stream
    assert compat.stream_of(tensor) == torch.cuda.current_stream().cuda_stream


# One rank, no launcher: DistributedOptimizer on each hook kind must train exactly as the plain
# optimizer, and no call of cerar.torch may warn about a deprecated API of this torch.
SINGLE_RANK_JOB = """
import sys, warnings
import torch
import cerar.torch as hvd
from cerar.torch import _compat
_compat.HAS_POST_ACCUMULATE_GRAD_HOOK = sys.argv[1] == "post_accumulate"
warnings.simplefilter("error", DeprecationWarning)
warnings.simplefilter("error", PendingDeprecationWarning)
warnings.simplefilter("error", FutureWarning)
warnings.filterwarnings("error", ".*deprecat", UserWarning)

hvd.init(algorithm="ring")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
reference = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
reference.load_state_dict(model.state_dict())
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=model.named_parameters(),
                               backward_passes_per_step=2)
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
for step in range(3):
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(step))
    opt.zero_grad()
    ref_opt.zero_grad()
    for half in (x[:4], x[4:]):
        model(half).pow(2).mean().backward()
        reference(half).pow(2).mean().backward()
    opt.step()
    ref_opt.step()
for p, q in zip(model.parameters(), reference.parameters()):
    assert torch.allclose(p, q, rtol=1e-6, atol=1e-7), (p, q)
assert hvd.allreduce(torch.arange(4.0), name="t").tolist() == [0.0, 1.0, 2.0, 3.0]
assert hvd.allgather(torch.ones(2, dtype=torch.bfloat16)).dtype == torch.bfloat16
assert hvd.broadcast_object({"a": 1}) == {"a": 1} and hvd.allgather_object(3) == [3]
assert hvd.parameter_drift(model, exact=True)["max_abs"] == 0.0
hvd.shutdown()
print("single rank OK", sys.argv[1])
"""


@pytest.mark.parametrize("kind", HOOK_KINDS)
def test_distributed_optimizer_on_one_rank_without_deprecations(compat, kind):
    skip_unless_available(compat, kind)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CERAR_", "OMPI_", "SLURM_", "MASTER_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    result = subprocess.run([sys.executable, "-c", SINGLE_RANK_JOB, kind], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"single rank OK {kind}" in result.stdout, result.stdout + result.stderr


def test_torch_imports_after_cerar():
    """`import cerar` first, then torch: the extension's libraries must not stop torch's."""
    result = subprocess.run([sys.executable, "-c", "import cerar, torch; print('imported')"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "imported" in result.stdout, result.stderr[-2000:]
