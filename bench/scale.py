#!/usr/bin/env python3
"""Control traffic and times at scale: N numpy ranks run 100 all-reduces of mixed small sizes
(checked against numpy) and report their control and rendezvous counters (docs/scale.md).

  .venv/bin/python bench/scale.py                       # 32 ranks, 8 on each of 4 emulated hosts
  .venv/bin/python bench/scale.py --hosts 0 --ranks 2,4,8,16,32   # loopback, one host
  .venv/bin/python bench/scale.py --json out.json       # also the per-rank counters
  .venv/bin/python bench/scale.py --hosts 0 --ranks 4,8,16,32,64 --fanout 2,8   # tree shapes

Emulated hosts (tests/python/emulated_hosts.py: namespaces, host names, sshd) need root; the
job is started by cerarrun on the first host, which reaches the others over ssh. Run it with
the interpreter that has cerar installed (the same path on every emulated host). Times on a
shared machine mostly measure CPU contention; the counts do not depend on it.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKERS = ROOT / "tests" / "python" / "workers"
sys.path.insert(0, str(ROOT / "tests" / "python"))

JOB_ENV = {"CERAR_LOG_LEVEL": os.environ.get("CERAR_LOG_LEVEL", "warning"), "CERAR_TIMEOUT_SECONDS": "300",
           "CERAR_RENDEZVOUS_TIMEOUT_SECONDS": "300", "PYTHONUNBUFFERED": "1"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="32", help="comma-separated job sizes (default 32)")
    parser.add_argument("--hosts", type=int, default=4,
                        help="emulated hosts, ranks spread evenly (0: all on loopback here)")
    parser.add_argument("--fanout", default="",
                        help="comma-separated control tree fanouts (CERAR_CONTROL_FANOUT; "
                             "default: the job's)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="passes of the same names after the first (cached: the steady "
                             "state, reported in the steady_* columns)")
    parser.add_argument("--lazy-links", action="store_true",
                        help="links made on demand (CERAR_LAZY_LINKS=1)")
    parser.add_argument("--count", type=int, default=100, help="all-reduces per job")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per job")
    parser.add_argument("--json", help="write every rank's counters here")
    return parser.parse_args(argv)


def parse_output(text, n):
    """{rank: counters} from the ranks' "SCALE <json>" lines."""
    stats = {}
    for line in text.splitlines():
        if "SCALE " in line:
            entry = json.loads(line.split("SCALE ", 1)[1])
            stats[entry["rank"]] = entry
    if sorted(stats) != list(range(n)):
        raise RuntimeError(f"{n - len(stats)} of {n} ranks reported no counters:\n{text}")
    return stats


def steady_per_cycle(s, what):
    """Sent plus received `what` per cycle in the cached passes (0 when there were none)."""
    steady = s.get("steady", {})
    cycles = steady.get("cycles", 0)
    return (steady[f"{what}_sent"] + steady[f"{what}_received"]) / cycles if cycles else 0


def summary(stats, wall_s, fanout=""):
    """One row: the coordinator's and the workers' traffic per cycle, the busiest rank's,
    rendezvous, times."""
    n = len(stats)
    coordinator, workers = stats[0], [stats[r] for r in range(1, n)]
    cycles = coordinator["cycles"]
    per_worker = lambda key: sum(w[key] for w in workers) / len(workers)  # noqa: E731
    messages = lambda s: s["control_messages_sent"] + s["control_messages_received"]  # noqa: E731
    return {
        "ranks": n, "fanout": fanout or "default", "cycles": cycles,
        "max_msgs_per_cycle": max(messages(s) for s in stats.values()) / cycles,
        "coord_msgs_per_cycle": (coordinator["control_messages_sent"]
                                 + coordinator["control_messages_received"]) / cycles,
        "coord_bytes_per_cycle": (coordinator["control_bytes_sent"]
                                  + coordinator["control_bytes_received"]) / cycles,
        "worker_msgs_per_cycle": (per_worker("control_messages_sent")
                                  + per_worker("control_messages_received")) / cycles,
        "worker_bytes_per_cycle": (per_worker("control_bytes_sent")
                                   + per_worker("control_bytes_received")) / cycles,
        "links_max": max(s.get("data_links", 0) for s in stats.values()),
        "rdv_requests_min": min(s["rendezvous_requests"] for s in stats.values()),
        "rdv_requests_max": max(s["rendezvous_requests"] for s in stats.values()),
        "rdv_requests_total": sum(s["rendezvous_requests"] for s in stats.values()),
        "rdv_bytes_total": sum(s["rendezvous_bytes_sent"] + s["rendezvous_bytes_received"]
                               for s in stats.values()),
        # The cached passes only, per cycle of each rank's own: rank 0's and the busiest rank's.
        "steady_coord_msgs_per_cycle": steady_per_cycle(coordinator, "control_messages"),
        "steady_coord_bytes_per_cycle": steady_per_cycle(coordinator, "control_bytes"),
        "steady_max_bytes_per_cycle": max(steady_per_cycle(s, "control_bytes")
                                          for s in stats.values()),
        "init_s_max": max(s["init_s"] for s in stats.values()),
        "allreduce_s_max": max(s["allreduce_s"] for s in stats.values()),
        "wall_s": wall_s,
    }


def run_job(n, args, hosts=None, fanout=""):
    command = [sys.executable, "-m", "cerar.run", "-np", str(n)]
    if hosts is not None:
        per_host = -(-n // hosts.count)
        command += ["-H", ",".join(f"{name}:{per_host}" for name in hosts.names)]
    command += [sys.executable, str(WORKERS / "scale_job.py"), str(args.count), "ring",
                str(args.repeat)]
    env = {**os.environ, **JOB_ENV}
    if fanout:
        env["CERAR_CONTROL_FANOUT"] = fanout
    if args.lazy_links:
        env["CERAR_LAZY_LINKS"] = "1"
    started = time.perf_counter()
    if hosts is None:
        result = subprocess.run(command, capture_output=True, text=True, env=env,
                                timeout=args.timeout, stdin=subprocess.DEVNULL, cwd=WORKERS)
    else:
        result = hosts.run(0, command, env=hosts.client_env(env), timeout=args.timeout,
                           cwd=str(WORKERS))
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{n} ranks: exit {result.returncode}\n{result.stdout}{result.stderr}")
    return parse_output(result.stdout, n), wall


COLUMNS = ("ranks", "fanout", "cycles", "coord_msgs_per_cycle", "max_msgs_per_cycle", "coord_bytes_per_cycle",
           "worker_msgs_per_cycle", "worker_bytes_per_cycle", "links_max", "rdv_requests_min",
           "rdv_requests_max", "rdv_requests_total", "rdv_bytes_total",
           "steady_coord_msgs_per_cycle", "steady_coord_bytes_per_cycle",
           "steady_max_bytes_per_cycle", "init_s_max",
           "allreduce_s_max", "wall_s")


def print_row(row):
    print(" | ".join(f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c])
                     for c in COLUMNS), flush=True)


def main(argv=None):
    args = parse_args(argv)
    sizes = [int(n) for n in args.ranks.split(",")]
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"on {os.cpu_count()} CPUs", flush=True)
    rows, everything = [], {}
    print(" | ".join(COLUMNS), flush=True)

    def sweep(hosts=None):
        for fanout in args.fanout.split(","):
            for n in sizes:
                stats, wall = run_job(n, args, hosts, fanout)
                rows.append(summary(stats, wall, fanout))
                everything[f"{n}/{fanout or 'default'}"] = stats
                print_row(rows[-1])

    if args.hosts:
        from emulated_hosts import EmulatedHosts, unavailable
        why = unavailable()
        if why:
            sys.exit(f"scale.py: emulated hosts unavailable ({why}); use --hosts 0")
        with EmulatedHosts(args.hosts) as hosts:
            sweep(hosts)
    else:
        sweep()
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "ranks": everything}, indent=1))


if __name__ == "__main__":
    main()
