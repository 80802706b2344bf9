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


def start_peers(rank, n, fanout, lazy=True):
    """The peers a rank connects at start (core/config/bootstrap.cc): every one, or with links
    on demand the ring's two and the control tree's, for the job's fanout and the default 8
    (the link probe's tree)."""
    if not lazy:
        return set(range(n)) - {rank}
    peers = {(rank + 1) % n, (rank - 1) % n}
    for k in {fanout, 8}:
        if rank > 0:
            peers.add((rank - 1) // k)
        peers |= {c for c in range(k * rank + 1, k * rank + k + 1) if c < n}
    return peers - {rank}


def rendezvous_requests(links, lazy=True):
    """A rank's fewest requests to the store: hello, its start count, the job settings, its loss
    mark (4); the data links' start (ops/transport/gloo_start.cc): per link made at start the
    address of its end, and a wait and a get of the address the peer made for it (3 per link),
    with links on demand its own "published" key and one wait for every rank's (2); the links'
    agreement (core/config/bootstrap.cc): its outcome and its count (2), then polls of the count
    (0 to AGREEMENT_POLLS more)."""
    return 4 + 3 * links + (2 if lazy else 0) + 2


def assert_rendezvous_requests(got, links, what, lazy=True):
    fewest = rendezvous_requests(links, lazy)
    assert fewest <= got <= fewest + AGREEMENT_POLLS, (what, got, fewest)


def scale_stats(n, count=100, fanout=None, lazy=True):
    env = {"CERAR_LAZY_LINKS": "1" if lazy else "0"}
    if fanout:
        env["CERAR_CONTROL_FANOUT"] = str(fanout)
    result = run_job("scale_job.py", np=n, args=(count, "ring"), timeout=300, env=env)
    assert_ok(result, "SCALE", np=n)
    stats = {}
    for line in result.stdout.splitlines():
        if "SCALE " in line:
            entry = json.loads(line.split("SCALE ", 1)[1])
            stats[entry["rank"]] = entry
    assert sorted(stats) == list(range(n)), result.stdout
    return stats


def tree_links(rank, n, fanout):
    """The control tree's links of `rank` (ops/control_tree.h): children, parent."""
    children = [c for c in range(fanout * rank + 1, fanout * rank + fanout + 1) if c < n]
    return len(children) + (0 if rank == 0 else 1)


@needs_runtime
@pytest.mark.parametrize("n,fanout,lazy", [(2, 8, True), (4, 8, True), (8, 8, True),
                                           (8, 2, True), (8, 8, False)])
def test_control_and_rendezvous_traffic_grow_as_designed(n, fanout, lazy):
    stats = scale_stats(n, fanout=fanout, lazy=lazy)
    cycles = stats[0]["cycles"]
    assert cycles > 0
    for rank, s in stats.items():
        # Every cycle goes up the control tree and back down, so after shutdown every rank has
        # run the same cycles, and each rank has one message each way per tree link.
        assert s["cycles"] == cycles, (rank, s["cycles"], cycles)
        per_cycle = tree_links(rank, n, fanout)  # at most fanout + 1, whatever n
        assert s["control_messages_sent"] == per_cycle * cycles, (rank, s)
        assert s["control_messages_received"] == per_cycle * cycles, (rank, s)
        for way in ("sent", "received"):
            messages, sent = s[f"control_messages_{way}"], s[f"control_bytes_{way}"]
            assert FRAME_BYTES * messages <= sent <= MAX_AVERAGE_MESSAGE_BYTES * messages, \
                (rank, way, s)
        # Links made at start, and none later: the job's all-reduces take the ring's.
        peers = start_peers(rank, n, fanout, lazy)
        assert s["data_links"] == len(peers), (rank, s["data_links"], sorted(peers))
        assert_rendezvous_requests(s["rendezvous_requests"], len(peers), (rank, s), lazy)
    # Every byte sent is received: the reports up the tree, the answer down.
    assert sum(s["control_bytes_sent"] for s in stats.values()) == \
        sum(s["control_bytes_received"] for s in stats.values())
    # The answer is the same bytes on every link: a rank receives what rank 0 sends each child.
    answer = stats[0]["control_bytes_sent"] // tree_links(0, n, fanout)
    for rank in range(1, n):
        assert stats[rank]["control_bytes_received"] - answer == \
            sum(stats[c]["control_bytes_sent"] - answer * (tree_links(c, n, fanout) - 1)
                for c in range(fanout * rank + 1, fanout * rank + fanout + 1) if c < n), rank


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
    assert_rendezvous_requests(row["rdv_requests_min"], 1, row)
    assert_rendezvous_requests(row["rdv_requests_max"], 1, row)
    assert row["links_max"] == 1
