"""cerar.torch across ranks on loopback: collectives, DistributedOptimizer, broadcasts."""
import pytest

from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


@pytest.mark.parametrize("algorithm", ["ring", "cerar"])
def test_torch_collectives(algorithm):
    assert_ok(run_job("torch_ops.py", np=4, args=[algorithm]), "torch OK")


def test_distributed_optimizer_and_broadcasts():
    assert_ok(run_job("torch_optimizer.py", np=4, timeout=150), "optimizer OK")


def test_distributed_optimizer_three_ranks():
    assert_ok(run_job("torch_optimizer.py", np=3, timeout=150), "optimizer OK", np=3)


def test_drift_resync_and_error_reporting():
    assert_ok(run_job("torch_drift.py", np=4, timeout=150), "drift OK")


def test_drift_control_on_by_default_resyncs_parameters_and_optimizer_state():
    result = run_job("torch_drift_control.py", np=4, timeout=150)
    assert_ok(result, "defaults OK")
    assert_ok(result, "env settings OK")
