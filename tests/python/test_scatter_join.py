"""reducescatter, alltoall, join and sparse gradients as horovod.torch defines them
(workers/torch_scatter.py, workers/torch_join_sparse.py; 4 ranks, the exact ring)."""
from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


def test_reducescatter_alltoall_against_numpy_gradients_and_mismatches():
    assert_ok(run_job("torch_scatter.py", np=4, timeout=300), "scatter OK")


def test_join_with_uneven_steps_and_sparse_gradients():
    assert_ok(run_job("torch_join_sparse.py", np=4, timeout=300), "join sparse OK")
