"""Process sets (Horovod's): disjoint and overlapping sets at once, sets added and removed
while others reduce, CERAR in sets of 2 and 3, non-member calls and mismatches confined to a
set (workers/process_sets_job.py, 4 ranks)."""
from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


def test_process_sets_static_dynamic_cerar_and_errors():
    env = {"CERAR_ALGORITHM": "cerar", "CERAR_COMPONENTS": "4",
           "CERAR_DYNAMIC_PROCESS_SETS": "1"}
    assert_ok(run_job("process_sets_job.py", np=4, timeout=300, env=env), "process sets OK")


def test_changes_need_the_dynamic_switch():
    assert_ok(run_job("process_sets_static.py", np=2, timeout=120), "static only OK", np=2)
