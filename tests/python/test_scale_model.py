"""The scale model (bench/scale_model.py) against hand-computed values at small N, fanout 8, and
against docs/scale.md's measured store traffic. Pure Python: no cerar runtime."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("scale_model", ROOT / "bench" / "scale_model.py")
scale_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale_model)

K = 8
COSTS = scale_model.Costs()


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 9, 73, 1000])
def test_star_rank0_handles_two_messages_per_worker(n):
    cycle = scale_model.star_cycle(n)
    assert cycle["rank0_messages"] == 2 * (n - 1)
    assert cycle["busiest_messages"] == 2 * (n - 1)


# Depth by hand: a full 8-ary tree of depth d holds 1, 9, 73, 585 ranks for d = 0 .. 3.
@pytest.mark.parametrize("n,depth", [(1, 0), (2, 1), (4, 1), (8, 1), (9, 1), (10, 2), (73, 2),
                                     (74, 3), (585, 3), (586, 4), (4096, 4)])
def test_depth(n, depth):
    assert scale_model.depth(n, K) == depth


def test_depth_matches_the_logarithm():
    import math
    for n in range(2, 5000, 7):
        expected = math.ceil(math.log((K - 1) * n + 1, K) - 1e-12) - 1
        assert scale_model.depth(n, K) == expected, n


# (n, rank 0's messages, the busiest worker's, hops): N=4: rank 0 has 3 children, the others
# none; N=9: rank 0 has 8; N=10: rank 1 gets rank 9 (2 * (1 + 1)); N=73: ranks 1..8 have 8 each.
@pytest.mark.parametrize("n,rank0,worker,hops", [(4, 6, 2, 2), (8, 14, 2, 2), (9, 16, 2, 2),
                                                 (10, 16, 4, 4), (73, 16, 18, 4)])
def test_tree_cycle(n, rank0, worker, hops):
    cycle = scale_model.tree_cycle(n, K)
    assert (cycle["rank0_messages"], cycle["worker_messages"], cycle["hops"]) == (rank0, worker,
                                                                                 hops)
    assert cycle["busiest_messages"] == max(rank0, worker)


def test_tree_start_peers():
    # N=4: rank 0's ring neighbours 3 and 1 are also its children.
    assert [scale_model.start_peers(r, 4, K) for r in range(4)] == [
        {1, 2, 3}, {0, 2}, {0, 1, 3}, {0, 2}]
    # N=73: rank 8 has its ring neighbours 7 and 9, its parent 0 and children 65..72.
    assert scale_model.start_peers(8, 73, K) == {0, 7, 9, *range(65, 73)}
    assert scale_model.start_peers(9, 73, K) == {1, 8, 10}
    start = scale_model.tree_start(4, K, COSTS)
    assert start["sockets_max"] == 3 and start["sockets_total"] == 5
    assert start["store_requests_rank"] == 6 + 3 * 3
    assert scale_model.tree_start(73, K, COSTS)["sockets_max"] == 11


def test_star_start():
    start = scale_model.star_start(4, COSTS)
    assert start["sockets_max"] == 3 and start["sockets_total"] == 6
    # docs/scale.md: 6 + r + 2(N-1) for rank r; the last rank makes the most.
    assert start["store_requests_rank"] == 6 + 3 + 2 * 3
    assert start["store_requests_total"] == 6 * 4 + (0 + 1 + 2 + 3) + 4 * 2 * 3
    assert start["store_bytes_rank"] == 15 * COSTS.request_bytes + (3 + 9) * COSTS.address_bytes


# docs/scale.md's measured table: N, store requests of all ranks, store bytes of all ranks.
MEASURED_STORE = [(4, 54, 9604), (8, 188, 71200), (16, 696, 559395), (32, 2672, 4458251)]


@pytest.mark.parametrize("n,requests,bytes_", MEASURED_STORE)
def test_star_store_traffic_matches_the_measured_table(n, requests, bytes_):
    start = scale_model.star_start(n, COSTS)
    assert start["store_requests_total"] == requests
    assert abs(start["store_bytes_total"] / bytes_ - 1) < 0.05


def test_tree_scales_linearly_and_the_star_does_not():
    tree = [scale_model.model("tree", n, K, COSTS) for n in (64, 4096)]
    star = [scale_model.model("star", n, K, COSTS) for n in (64, 4096)]
    assert tree[0]["rank0_messages"] == tree[1]["rank0_messages"] == 2 * K
    assert tree[1]["store_bytes_rank"] == tree[0]["store_bytes_rank"]
    assert star[1]["rank0_messages"] == 2 * 4095
    assert star[1]["startup_s"] > tree[1]["startup_s"]


def test_comparison_names_the_design_the_counts_follow(tmp_path, capsys):
    lines = [{"costs": True, "store_request_us": 20.0, "store_ns_per_byte": 0.5,
              "tcp_connect_us": 30.0}]
    for n in (4, 16):
        lines.append({"ranks": n, "rank0_cached_messages_per_cycle": 2 * (n - 1),
                      "rank0_cached_bytes_per_cycle": 256 * 2 * (n - 1),
                      "worker_max_cached_messages_per_cycle": 2, "cpu_us_per_message": 9.0,
                      "idle_cpu_us_per_message": 8.0})
    path, more = tmp_path / "scale.json", tmp_path / "scale-16.json"  # one run in a file of its own
    path.write_text("\n".join(json.dumps(line) for line in lines[:2]) + "\n")
    more.write_text(json.dumps(lines[2]) + "\n")
    runs, cost_line = scale_model.read_measured([path, more])
    costs = scale_model.costs_from(runs, cost_line, COSTS)
    assert costs.message_bytes == 256 and costs.store_request_us == 20.0
    assert costs.cpu_us_per_message == 8.0  # the idle cycles' figure
    rows = scale_model.comparison(runs, K, costs)
    # At N = 4 every rank is a child of rank 0: the tree is the star.
    assert [r["agrees"] for r in rows] == [["star", "tree(8)"], ["star"]]
    assert scale_model.main(["--ranks", "64", "--measured", str(path), str(more)]) == 0
    assert "agrees with" in capsys.readouterr().out
