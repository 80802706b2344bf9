"""FSDP on the "cerar" backend (torch 2.x): FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD with two
groups and FSDP2's fully_shard train a small transformer on 4 CPU ranks as the same FSDP on a
Gloo group of the same ranks does (workers/fsdp_job.py): the first step's gradients within
(N-1)*u*sum|g| of Gloo's, the parameters after 20 steps within 1e-4 of the largest, and every
collective on the runtime (its counters; no Gloo group made)."""
import json
import re

import pytest

from conftest import needs_runtime
from torch_ranks import assert_ranks, needs_torch2, run_ranks

pytestmark = [needs_runtime, needs_torch2("FSDP")]


def counters(output, rank=0):
    return json.loads(re.search(rf"^\[{rank}\] calls (.*)$", output, re.M).group(1))


@pytest.mark.parametrize("mode", ["full_shard", "shard_grad_op", "hybrid_shard", "fsdp2"])
def test_fsdp_trains_as_on_gloo(tmp_path, mode):
    codes, output = run_ranks(tmp_path, "fsdp_job.py", [mode])
    assert_ranks(codes, output, f"{mode} OK")
    calls = counters(output)
    # parameters gathered and gradients reduce-scattered by the runtime, one per step at least
    assert calls["allgather_buffers"] >= 20 and calls["reducescatter_buffers"] >= 20, calls
    if mode == "hybrid_shard":  # the replicas' all-reduce of the shards, on the exact ring
        assert calls["ring_buffers"] >= 20, calls


def test_error_budget_governs_fsdp_collectives(tmp_path):
    # The budget picks per all-reduced buffer (HYBRID_SHARD's replicas); the reduce-scatter stays
    # the exact ring: every all-reduce the budget may choose sends at least its bytes
    # Over TCP: on shared memory auto takes the exact ring, and no budget is consulted.
    codes, output = run_ranks(tmp_path, "fsdp_job.py", ["hybrid_shard"],
                              env={"CERAR_MAX_ERROR": "2e-3", "CERAR_COMPRESSION": "allow",
                                   "CERAR_SHARED_MEMORY": "0"})
    assert_ranks(codes, output, "hybrid_shard OK")
    calls = counters(output)
    assert calls["budget_buffers"] >= 20 and calls["reducescatter_buffers"] >= 20, calls
