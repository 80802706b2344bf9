"""cerar.torch with CUDA tensors. Without a CUDA device only the refusal is checked."""
import subprocess
import sys

import pytest

from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime
torch = pytest.importorskip("torch")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_torch_cuda_tensors():
    assert_ok(run_job("torch_cuda.py", np=2, timeout=180), "torch cuda OK", np=2)


def test_cuda_tensor_without_a_device_is_refused_clearly():
    """A CUDA tensor where no GPU is usable: a CerarError naming the cause, not a crash."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    code = (
        "import cerar, cerar._cerar as c\n"
        "cerar.init()\n"
        "t = c.RawTensor(None, 4096, c.DType.float32, [4], 0, 0)\n"
        "try:\n"
        "    cerar._rt().allreduce('g', t, None, cerar.Sum, 1.0, 1.0).wait()\n"
        "except cerar.CerarError as e:\n"
        "    print('refused:', e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    from cerar._cerar import cuda_built
    expected = "no CUDA device" if cuda_built else "no CUDA support"
    assert "refused:" in result.stdout and expected in result.stdout, result.stdout
