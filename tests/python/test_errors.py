"""Errors: disagreeing ranks get CerarError everywhere; a dead rank fails the job."""
import time

from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


def test_mismatched_tensors_raise_on_all_ranks():
    result = run_job("mismatch.py", np=4, timeout=90)
    assert_ok(result, "mismatch OK")
    for rank in range(4):
        assert f"[{rank}] CerarError: " in result.stdout, result.stdout


def test_dying_rank_fails_the_job_quickly():
    start = time.monotonic()
    result = run_job("dying_rank.py", np=4, launcher_args=["--timeout", "10"], timeout=60)
    assert result.returncode == 5, result.stdout + result.stderr
    assert "rank 1 exited with code 5" in result.stderr
    assert "should not get here" not in result.stdout
    assert time.monotonic() - start < 30
