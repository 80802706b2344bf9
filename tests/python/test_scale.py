"""Control traffic as a function of the number of ranks (docs/scale.md): the counters of
tests/python/workers/scale_job.py at N = 2, 4, 8 against the design's formulas."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_ok, needs_runtime, run_job

ROOT = Path(__file__).resolve().parents[2]
# Frame of a control message (ops/control_frame.h): a message costs at least this much.
FRAME_BYTES = 256
# The largest average control message this workload may produce: a cycle carries at most one
# batch (10 tensors) of descriptions or cache bits, whatever the number of ranks.
MAX_AVERAGE_MESSAGE_BYTES = 2048


# The link start-up's agreement polls one counter every 10 ms until every rank has reported
# (core/config/bootstrap.cc): none for the last to report, a few for the others; allowed up to 2 s.
AGREEMENT_POLLS = 200


def rendezvous_requests(n):
    """A rank's fewest requests to the store: hello, its start count, the job settings, its loss
    mark (4); the data links' start (ops/transport/gloo_start.cc): the address of its end of each
    link (n - 1) and a wait and a get of the address each peer made for it (2 (n - 1)); the links'
    agreement (core/config/bootstrap.cc): its outcome and its count (2), then polls of the count
    (0 to AGREEMENT_POLLS more)."""
    return 4 + 3 * (n - 1) + 2


def assert_rendezvous_requests(got, n, what):
    fewest = rendezvous_requests(n)
    assert fewest <= got <= fewest + AGREEMENT_POLLS, (what, got, fewest)


def scale_stats(n, count=100):
    result = run_job("scale_job.py", np=n, args=(count, "ring"), timeout=300)
    assert_ok(result, "SCALE", np=n)
    stats = {}
    for line in result.stdout.splitlines():
        if "SCALE " in line:
            entry = json.loads(line.split("SCALE ", 1)[1])
            stats[entry["rank"]] = entry
    assert sorted(stats) == list(range(n)), result.stdout
    return stats


@needs_runtime
@pytest.mark.parametrize("n", [2, 4, 8])
def test_control_and_rendezvous_traffic_grow_as_designed(n):
    stats = scale_stats(n)
    cycles = stats[0]["cycles"]
    assert cycles > 0
    for rank, s in stats.items():
        # Every cycle is one gather to rank 0 and one broadcast from it, so after shutdown
        # every rank has run the same cycles.
        assert s["cycles"] == cycles, (rank, s["cycles"], cycles)
        per_cycle = n - 1 if rank == 0 else 1  # O(N) at the coordinator, O(1) at a worker
        assert s["control_messages_sent"] == per_cycle * cycles, (rank, s)
        assert s["control_messages_received"] == per_cycle * cycles, (rank, s)
        for way in ("sent", "received"):
            messages, sent = s[f"control_messages_{way}"], s[f"control_bytes_{way}"]
            assert FRAME_BYTES * messages <= sent <= MAX_AVERAGE_MESSAGE_BYTES * messages, \
                (rank, way, s)
        assert_rendezvous_requests(s["rendezvous_requests"], n, (rank, s))
    # What rank 0 receives is what the workers sent; each worker receives rank 0's broadcast.
    workers = [stats[rank] for rank in range(1, n)]
    assert stats[0]["control_bytes_received"] == sum(w["control_bytes_sent"] for w in workers)
    for w in workers:
        assert w["control_bytes_received"] * (n - 1) == stats[0]["control_bytes_sent"]


@needs_runtime
def test_bench_command_runs_on_loopback(tmp_path):
    """bench/scale.py, the documented 32-rank command, here with 2 ranks on loopback."""
    out = tmp_path / "scale.json"
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--hosts", "0",
                             "--ranks", "2", "--count", "10", "--json", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    row = json.loads(out.read_text())["rows"][0]
    assert row["ranks"] == 2 and row["coord_msgs_per_cycle"] == 2
    assert_rendezvous_requests(row["rdv_requests_min"], 2, row)
    assert_rendezvous_requests(row["rdv_requests_max"], 2, row)
