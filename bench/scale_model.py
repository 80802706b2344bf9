#!/usr/bin/env python3
"""The control plane and start-up at 64 to 4096 ranks, modelled from counted figures
(docs/scale.md, "Simulated at 64 to 4096 ranks"). Two designs:

  star  every cycle each rank sends its request to rank 0, which answers each rank; Gloo's full
        mesh of links (a socket per peer); every rank writes one record of N-1 addresses to the
        rendezvous store and reads every peer's.
  tree  the ranks form a k-ary tree rooted at rank 0 (parent (r-1)//k, children k*r+1..k*r+k);
        requests are merged on the way up and the answer forwarded on the way down; at start
        only the ring neighbours and the tree links connect, one store key per pair address.

  python3 bench/scale_model.py                        # the tables, N = 64 .. 4096, k = 8
  python3 bench/scale_model.py --measured scale.json  # also the in-process counts against it

Pure Python: it needs no cerar. The cost figures' defaults come from cerar-bench-scale on this
machine (--costs and the counting runs) and from docs/scale.md's measured table; --measured
takes them from a file of the tool's JSON lines instead.
"""
import argparse
import json
import os
import sys
from dataclasses import dataclass, replace

# --- the figures the model is built on ------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    # Bytes on the links of one steady-state control message (every unit cached): the bare
    # frame. cerar-bench-scale, rank 0's bytes per message over the cached rounds, 256 at every
    # N from 4 to 1024 (bench/results/scale-inproc/).
    message_bytes: float = 256.0
    # CPU of one control message, both ends and the cycle's own work: the process's CPU over
    # the messages sent while the ranks idle (cycles with nothing to negotiate), the median over
    # N = 4 .. 1024 of the same runs (20 to 99 us). Threads on 2 cores: the wake-ups dominate,
    # so an upper bound.
    cpu_us_per_message: float = 29.5
    # One link hop's latency between hosts: an assumed figure for a small TCP message on a
    # data-centre LAN, not measured here.
    hop_latency_us: float = 50.0
    # Bytes in the store per pair address and per request (frame and key): a least-squares fit
    # of docs/scale.md's measured store bytes at N = 4 .. 32 (within 2% at each N).
    address_bytes: float = 136.0
    request_bytes: float = 54.0
    # A store request's round trip and the store's cost per byte of a value, and a TCP connect
    # accepted on loopback: cerar-bench-scale --costs.
    # Same run.
    store_request_us: float = 21.0
    store_ns_per_byte: float = 0.338
    tcp_connect_us: float = 33.2


# A rank's store requests besides the addresses (docs/scale.md): the hello, its start count,
# the job settings and its loss mark, the outcome of the links' start-up and its count. The
# agreement's polls of that count (a few per rank, every 10 ms) are left out.
FIXED_STORE_REQUESTS = 6


# --- the tree -----------------------------------------------------------------------------


def children(rank, n, k):
    """The number of tree children of `rank` among n ranks, fanout k."""
    return max(0, min(k, n - 1 - k * rank))


def depth(n, k):
    """The tree's depth: the least d whose full k-ary tree, (k^(d+1) - 1) / (k - 1) ranks, holds
    n; the same as ceil(log_k((k-1) n + 1)) - 1 without floating point."""
    if k < 2:
        raise ValueError("the fanout must be at least 2")
    d, full = 0, 1
    while full < n:
        d += 1
        full = full * k + 1
    return d


def start_peers(rank, n, k):
    """The ranks `rank` links to at start in the tree design: its ring neighbours, its parent
    and its children (a set: rank 0's ring successor is also its first child)."""
    peers = set()
    if n > 1:
        peers.update({(rank - 1) % n, (rank + 1) % n})
    if rank > 0:
        peers.add((rank - 1) // k)
    peers.update(range(k * rank + 1, k * rank + 1 + children(rank, n, k)))
    peers.discard(rank)
    return peers


# --- per cycle ------------------------------------------------------------------------------


def star_cycle(n):
    """Messages per cycle (sent and received): rank 0's, a worker's; and the hops in sequence."""
    return {"rank0_messages": 2 * (n - 1), "busiest_messages": 2 * (n - 1),
            "worker_messages": 2 if n > 1 else 0, "hops": 2 if n > 1 else 0}


def tree_cycle(n, k):
    """The same for the tree: rank 0 hears from and answers its children; an inner rank adds
    its parent; the busiest is the rank with the most links that cycle."""
    rank0 = 2 * children(0, n, k)
    busiest_worker = max((2 * (1 + children(r, n, k)) for r in range(1, n)), default=0)
    return {"rank0_messages": rank0, "busiest_messages": max(rank0, busiest_worker),
            "worker_messages": busiest_worker, "hops": 2 * depth(n, k)}


def cycle_figures(design, n, k, costs):
    """One cycle in the steady state: messages, bytes and CPU at rank 0, the busiest rank's
    messages, hops, and a latency: the hops' wire time plus, on the critical path, each level's
    CPU (a star's rank 0 handles all its messages in turn; a tree node its own)."""
    counts = star_cycle(n) if design == "star" else tree_cycle(n, k)
    rank0_cpu = counts["rank0_messages"] * costs.cpu_us_per_message
    if design == "star":
        path_cpu = rank0_cpu
    else:
        path_cpu = depth(n, k) * 2 * (k + 1) * costs.cpu_us_per_message
    return dict(counts, rank0_bytes=counts["rank0_messages"] * costs.message_bytes,
                rank0_cpu_us=rank0_cpu,
                latency_us=counts["hops"] * costs.hop_latency_us + path_cpu)


# --- at start -------------------------------------------------------------------------------


def star_requests(rank, n):
    """Rank `rank`'s store requests with the full mesh, as docs/scale.md's table measured them
    with Gloo's own connect: 6 + r + 2(N-1) exactly, r the rank (the fixed ones, a wait and a
    get of each peer's record, and r more)."""
    return FIXED_STORE_REQUESTS + rank + 2 * (n - 1)


def star_start(n, costs):
    """Sockets and store traffic at start with the full mesh: every rank writes one record of
    N-1 addresses and reads every peer's; the last rank makes the most requests."""
    records = (n - 1) * costs.address_bytes + (n - 1) ** 2 * costs.address_bytes
    total_requests = sum(star_requests(r, n) for r in range(n))
    most = star_requests(n - 1, n)
    return {"sockets_max": n - 1, "sockets_total": n * (n - 1) // 2,
            "store_requests_rank": most, "store_requests_total": total_requests,
            "store_bytes_rank": most * costs.request_bytes + records,
            "store_bytes_total": total_requests * costs.request_bytes + n * records}


def tree_start(n, k, costs):
    """The same with links on demand: per start peer one key written (its pair address) and a
    wait and a get of the peer's; the busiest rank's figures and the job's totals."""
    peers = [start_peers(r, n, k) for r in range(n)]
    requests = [FIXED_STORE_REQUESTS + 3 * len(p) for p in peers]
    bytes_ = [q * costs.request_bytes + 2 * len(p) * costs.address_bytes
              for q, p in zip(requests, peers)]
    return {"sockets_max": max(len(p) for p in peers),
            "sockets_total": sum(len(p) for p in peers) // 2,
            "store_requests_rank": max(requests), "store_requests_total": sum(requests),
            "store_bytes_rank": max(bytes_), "store_bytes_total": sum(bytes_)}


def startup_seconds(start, costs):
    """A start-up's estimate: the store serves one request at a time, so the slower of its
    whole load and one rank's own requests in turn, plus that rank's sockets connected in turn.
    Process start, imports and the link probe are not in it."""
    store = lambda requests, bytes_: (requests * costs.store_request_us * 1e-6  # noqa: E731
                                      + bytes_ * costs.store_ns_per_byte * 1e-9)
    serial = max(store(start["store_requests_total"], start["store_bytes_total"]),
                 store(start["store_requests_rank"], start["store_bytes_rank"]))
    return serial + start["sockets_max"] * costs.tcp_connect_us * 1e-6


def model(design, n, k, costs):
    """Every figure of one design at n ranks."""
    start = star_start(n, costs) if design == "star" else tree_start(n, k, costs)
    row = {"design": design if design == "star" else f"tree({k})", "ranks": n}
    row.update(cycle_figures(design, n, k, costs))
    row.update(start)
    row["startup_s"] = startup_seconds(start, costs)
    return row


# --- the measured figures -------------------------------------------------------------------


def read_measured(paths):
    """cerar-bench-scale's JSON lines from one file or several: the counting runs by N, and the
    --costs line if any (the last one read)."""
    runs, cost_line = {}, None
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                entry = json.loads(line)
                if entry.get("costs"):
                    cost_line = entry
                else:
                    runs[entry["ranks"]] = entry
    return runs, cost_line


def costs_from(runs, cost_line, base):
    """The model's figures from a measurement: the cached bytes per message and the idle CPU
    per message (medians over N), and the --costs line's store and connect figures."""
    def median(values):
        values = sorted(values)
        return values[len(values) // 2] if values else None

    updates = {}
    per_message = median([r["rank0_cached_bytes_per_cycle"] / r["rank0_cached_messages_per_cycle"]
                          for r in runs.values() if r.get("rank0_cached_messages_per_cycle")])
    if per_message:
        updates["message_bytes"] = per_message
    cpu = median([r["idle_cpu_us_per_message"] for r in runs.values()
                  if r.get("idle_cpu_us_per_message")])
    if cpu:
        updates["cpu_us_per_message"] = cpu
    if cost_line:
        updates.update(store_request_us=cost_line["store_request_us"],
                       store_ns_per_byte=cost_line["store_ns_per_byte"],
                       tcp_connect_us=cost_line["tcp_connect_us"])
    return replace(base, **updates)


def comparison(runs, k, costs):
    """Measured messages per cycle (cached rounds) against both designs' counts, per N, and the
    idle cycle's time against the star's rank 0 CPU (one process on few cores: all the ranks'
    CPU is on the critical path there)."""
    rows = []
    for n in sorted(runs):
        r = runs[n]
        star, tree = star_cycle(n), tree_cycle(n, k)
        measured = (r["rank0_cached_messages_per_cycle"], r["worker_max_cached_messages_per_cycle"])
        agrees = [name for name, c in (("star", star), (f"tree({k})", tree))
                  if abs(measured[0] - c["rank0_messages"]) < 1e-6
                  and abs(measured[1] - c["worker_messages"]) < 1e-6]
        rows.append({"ranks": n, "measured_rank0": measured[0], "measured_worker": measured[1],
                     "star_rank0": star["rank0_messages"], "star_worker": star["worker_messages"],
                     "tree_rank0": tree["rank0_messages"], "tree_worker": tree["worker_messages"],
                     "measured_rank0_bytes": r["rank0_cached_bytes_per_cycle"],
                     "model_rank0_bytes": star["rank0_messages"] * costs.message_bytes,
                     "measured_idle_ms": r.get("idle_ms_per_cycle"),
                     "model_rank0_cpu_ms": star["rank0_messages"] * costs.cpu_us_per_message / 1e3,
                     "agrees": agrees})
    return rows


# --- printing -------------------------------------------------------------------------------


def fmt(value):
    """Counts with thousands' commas; a fraction to two significant digits below 10."""
    if isinstance(value, float) and not value.is_integer():
        if value < 10:
            return f"{value:.2g}"
        return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    return f"{int(value):,}" if isinstance(value, (int, float)) else str(value)


def table(header, rows):
    lines = ["| " + " | ".join(h for h, _ in header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(get(row)) for _, get in header) + " |")
    return "\n".join(lines)


CYCLE_COLUMNS = [
    ("N", lambda r: r["ranks"]), ("design", lambda r: r["design"]),
    ("rank 0 messages / cycle", lambda r: r["rank0_messages"]),
    ("rank 0 bytes / cycle", lambda r: r["rank0_bytes"]),
    ("rank 0 CPU / cycle (ms)", lambda r: r["rank0_cpu_us"] / 1e3),
    ("busiest rank's messages / cycle", lambda r: r["busiest_messages"]),
    ("hops / cycle", lambda r: r["hops"]),
    ("cycle latency (ms)", lambda r: r["latency_us"] / 1e3),
]
START_COLUMNS = [
    ("N", lambda r: r["ranks"]), ("design", lambda r: r["design"]),
    ("sockets per rank (most)", lambda r: r["sockets_max"]),
    ("store requests per rank (most)", lambda r: r["store_requests_rank"]),
    ("store bytes per rank (most)", lambda r: r["store_bytes_rank"]),
    ("store requests, all", lambda r: r["store_requests_total"]),
    ("store bytes, all", lambda r: r["store_bytes_total"]),
    ("start-up (s)", lambda r: r["startup_s"]),
]
COMPARISON_COLUMNS = [
    ("N", lambda r: r["ranks"]),
    ("rank 0 messages / cycle, counted", lambda r: r["measured_rank0"]),
    ("star's", lambda r: r["star_rank0"]), ("tree's", lambda r: r["tree_rank0"]),
    ("busiest worker's, counted", lambda r: r["measured_worker"]),
    ("star's", lambda r: r["star_worker"]), ("tree's", lambda r: r["tree_worker"]),
    ("rank 0 bytes / cycle, counted", lambda r: r["measured_rank0_bytes"]),
    ("star's ", lambda r: r["model_rank0_bytes"]),
    ("idle cycle (ms), timed", lambda r: r["measured_idle_ms"] or 0.0),
    ("star's rank 0 CPU (ms)", lambda r: r["model_rank0_cpu_ms"]),
    ("agrees with", lambda r: ", ".join(r["agrees"]) or "neither"),
]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="64,256,1024,4096", help="comma-separated job sizes")
    parser.add_argument("--fanout", type=int, default=8, help="the tree's k (default 8)")
    parser.add_argument("--measured", nargs="+", metavar="FILE",
                        help="cerar-bench-scale's JSON lines: its figures and the comparison "
                        "with its counts")
    parser.add_argument("--json", action="store_true", help="one JSON line per row instead")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    costs, runs = Costs(), {}
    if args.measured:
        runs, cost_line = read_measured(args.measured)
        costs = costs_from(runs, cost_line, costs)
    rows = [model(design, n, args.fanout, costs)
            for n in (int(x) for x in args.ranks.split(","))
            for design in ("star", "tree")]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        for row in comparison(runs, args.fanout, costs):
            print(json.dumps(dict(row, comparison=True)))
        return 0
    print("Figures: " + ", ".join(f"{key} {value:g}" for key, value in vars(costs).items()))
    print("\nPer cycle, steady state (every unit cached):\n")
    print(table(CYCLE_COLUMNS, rows))
    print("\nAt start:\n")
    print(table(START_COLUMNS, rows))
    if runs:
        print("\nCounted in process (cerar-bench-scale, cached rounds) against the model:\n")
        print(table(COMPARISON_COLUMNS, comparison(runs, args.fanout, costs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
