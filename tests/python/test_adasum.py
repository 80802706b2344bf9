"""op=Adasum on 2 and 4 ranks against a numpy reference of the rule (workers/adasum_job.py),
and the error of a non-power-of-two job on every rank."""
import pytest

from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_adasum(np_):
    assert_ok(run_job("adasum_job.py", np=np_, timeout=150), "adasum OK", np=np_)
