"""cerar.torch.SyncBatchNorm on 4 ranks with uneven batches against single-process batch norm
on the concatenated batch (workers/sync_batch_norm_job.py)."""
from conftest import assert_ok, needs_runtime, run_job

pytestmark = needs_runtime


def test_sync_batch_norm():
    assert_ok(run_job("sync_batch_norm_job.py", np=4, timeout=150), "sync batch norm OK")
