"""cerar.jax: arrays and pytrees across ranks."""
import pytest

from conftest import assert_ok, needs_runtime, run_job

pytest.importorskip("jax")
pytestmark = needs_runtime


def test_jax_collectives():
    assert_ok(run_job("jax_ops.py", np=4, env={"JAX_PLATFORMS": "cpu"}), "jax OK")


@pytest.mark.parametrize("mode", ["ring", "cerar"])
def test_jax_inside_jit(mode):
    """cerar.jax's collectives in jitted code (workers/jax_jit.py says what each mode checks)."""
    assert_ok(run_job("jax_jit.py", np=4, args=[mode], env={"JAX_PLATFORMS": "cpu"}),
              "jax jit OK")
