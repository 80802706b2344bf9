"""horovod.torch's names and semantics (workers/torch_parity*.py, 4 ranks, the exact ring)."""
from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


def test_names_dtypes_compression_and_gradients():
    assert_ok(run_job("torch_parity.py", np=4), "parity OK")


def test_optimizer_options():
    assert_ok(run_job("torch_parity_optimizer.py", np=4), "parity optimizer OK")
