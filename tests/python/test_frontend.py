"""One misuse, one error class, whichever framework it comes through (cerar._frontend)."""
import importlib.util

from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


def test_each_misuse_raises_the_same_class_in_numpy_torch_and_jax():
    result = run_job("frontend_job.py", np=2, env={"JAX_PLATFORMS": "cpu"})
    assert_ok(result, "frontend OK", np=2)
    if importlib.util.find_spec("jax") is not None:  # else numpy and torch alone, said so
        assert "frontend OK (numpy, torch, jax)" in result.stdout, result.stdout
