"""cerar.numpy across 4 ranks on loopback, with the exact ring and with CERAR."""
import pytest

from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


@pytest.mark.parametrize("algorithm", ["ring", "cerar"])
def test_numpy_semantics(algorithm):
    assert_ok(run_job("numpy_ops.py", np=4, args=[algorithm]), "numpy OK")


def test_numpy_two_ranks_small_fusion():
    result = run_job("numpy_ops.py", np=2, args=["ring"],
                     launcher_args=["--fusion-threshold-mb", "0.001"])
    assert_ok(result, "numpy OK", np=2)


def test_non_finite_stays_in_its_element_under_cerar():
    result = run_job("nonfinite_job.py", np=4)
    assert_ok(result, "nonfinite OK skipped=[False, True, False]")
