#!/usr/bin/env python3
"""Emulated hosts: H network namespaces on a bridge (bench/netem.sh, tbf at --rate-mbit on each
host's link), L ranks in each, sharing its /dev/shm. The flat all-reduces against the
hierarchical ones (docs/hierarchical.md) and torch's gloo backend, in one run (root only).

    sudo .venv/bin/python bench/hier_allreduce.py --hosts 2 --per-host 4 --rate-mbit 200

Each round runs one job per contender, in turn (interleaved: this machine's runs differ by more
than the effects measured); per job rank 0 reports the slowest rank's best of --repeats calls
after a warm-up call, the error of the result against a float64 sum of every rank's input
(max |error| / max |sum|), and what ran; cerar reduces in place (cerar.numpy.allreduce_), as
torch's all_reduce does. The table gives the median over rounds, the spread
(min-max) and the ratio to the flat exact ring.
"""
import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "cerar-hb"
CONTENDERS = {  # name: environment (cerar), or None (torch's gloo)
    "flat ring": {"CERAR_HIERARCHICAL_ALLREDUCE": "0", "CERAR_ALGORITHM": "ring"},
    "flat cerar": {"CERAR_HIERARCHICAL_ALLREDUCE": "0", "CERAR_ALGORITHM": "cerar"},
    "hier ring": {"CERAR_HIERARCHICAL_ALLREDUCE": "1", "CERAR_ALGORITHM": "ring"},
    "hier cerar": {"CERAR_HIERARCHICAL_ALLREDUCE": "1", "CERAR_ALGORITHM": "cerar"},
    "hier fp16": {"CERAR_HIERARCHICAL_ALLREDUCE": "1", "CERAR_ALGORITHM": "ring",
                  "CERAR_COMPRESSION": "fp16"},
    "hier int8": {"CERAR_HIERARCHICAL_ALLREDUCE": "1", "CERAR_ALGORITHM": "ring",
                  "CERAR_COMPRESSION": "int8"},
    "auto ring": {"CERAR_ALGORITHM": "ring"},
    "auto": {},
    "auto 1e-3": {"CERAR_MAX_ERROR": "1e-3", "CERAR_COMPRESSION": "allow"},
    "torch gloo": None,
}


def inputs(rank, count):
    import numpy as np
    return np.random.default_rng(rank).normal(1.0, 1.0, count).astype(np.float32)


def worker(mode, nbytes, repeats):
    """One rank: rank 0 prints one JSON line (seconds, error, what ran)."""
    import numpy as np
    rank, size = int(os.environ["CERAR_RANK"]), int(os.environ["CERAR_SIZE"])
    count = nbytes // 4
    if mode == "gloo":
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=size, init_method=(
            f"tcp://{os.environ['CERAR_RENDEZVOUS_ADDR']}:"
            f"{int(os.environ['CERAR_RENDEZVOUS_PORT']) + 1}"))

        def reduce(data, op="sum"):
            t = torch.from_numpy(data)
            dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
            return t.numpy()
        barrier = dist.barrier
    else:
        import cerar
        import cerar.numpy as cn
        cerar.init()
        calls = iter(range(1 << 30))

        def reduce(data, op="sum"):  # in place, as torch's all_reduce
            return cn.allreduce_(data, op=cerar.Max if op == "max" else cerar.Sum,
                                name=f"x{next(calls)}")
        barrier = cn.barrier
    best, result, ran = float("inf"), None, {}
    for i in range(repeats + 1):
        data = inputs(rank, count)
        before = cerar.stats()["hierarchical_buffers"] if mode != "gloo" else 0
        barrier()
        start = time.perf_counter()
        result = reduce(data)
        seconds = time.perf_counter() - start
        if mode != "gloo":  # what ran for the data, before the timing's own all-reduce
            stats = cerar.stats()
            ran = {k: stats[k] for k in ("last_choice", "last_components", "shared_memory")}
            ran["host_by_host"] = stats["hierarchical_buffers"] > before
        took = float(reduce(np.array([seconds]), "max")[0])
        if i > 0:  # the first call warms up
            best = min(best, took)
    if mode == "gloo":
        dist.barrier()
        dist.destroy_process_group()
    else:
        cerar.shutdown()
    if rank == 0:
        exact = np.zeros(count)
        for r in range(size):
            exact += inputs(r, count)
        error = float(np.max(np.abs(result - exact)) / np.max(np.abs(exact)))
        print(json.dumps({"seconds": best, "error": error, **ran}), flush=True)


def netem(*args):
    subprocess.run(["bash", os.path.join(HERE, "netem.sh"), *args], check=True,
                   stdout=subprocess.DEVNULL)


def run_job(name, a, port):
    """One contender's job on the emulated hosts; rank 0's report."""
    extra = CONTENDERS[name]
    N = a.hosts * a.per_host
    secret = secrets.token_hex(16)
    procs = []
    for rank in range(N):
        env = {**os.environ, "CERAR_RANK": str(rank), "CERAR_SIZE": str(N),
               "CERAR_LOCAL_RANK": str(rank % a.per_host), "CERAR_LOCAL_SIZE": str(a.per_host),
               "CERAR_RENDEZVOUS_ADDR": "10.77.0.1", "CERAR_RENDEZVOUS_PORT": str(port),
               "CERAR_HOST_STORE": "1", "CERAR_IFACE": "veth0", "CERAR_SECRET": secret,
               "GLOO_SOCKET_IFNAME": "veth0", "CERAR_LOG_LEVEL": "error",
               "CERAR_TIMEOUT_SECONDS": "300", **(extra or {})}
        command = ["ip", "netns", "exec", f"{PREFIX}{rank // a.per_host}", sys.executable,
                   os.path.abspath(__file__), "--worker", "gloo" if extra is None else "cerar",
                   "--size", str(a.size), "--repeats", str(a.repeats)]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=1800)[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit(f"{name} failed:\n" + "\n".join(outputs))
    return json.loads([line for line in outputs[0].splitlines() if line.startswith("{")][-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--per-host", type=int, default=4)
    p.add_argument("--rate-mbit", type=int, default=200)
    p.add_argument("--size", type=int, default=64 << 20, help="bytes of float32")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--only", default="", help="comma-separated contenders (default: all)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a.worker, a.size, a.repeats)
    names = [n for n in CONTENDERS if not a.only or n in a.only.split(",")]
    results = {name: [] for name in names}
    netem("up", "--ranks", str(a.hosts), "--rate-mbit", str(a.rate_mbit), "--name", PREFIX)
    try:
        port = 29700
        for _ in range(a.rounds):
            for name in names:
                port += 2
                results[name].append(run_job(name, a, port))
                print(f"{name}: {json.dumps(results[name][-1])}", file=sys.stderr, flush=True)
    finally:
        netem("down", "--name", PREFIX)
    print(f"{a.hosts} hosts x {a.per_host} ranks at {a.rate_mbit} Mbit/s, {a.size >> 20} MiB "
          f"float32 sum; median (min-max) over {a.rounds} rounds of the best of {a.repeats}")
    print("| contender | seconds | spread | vs flat ring | error | ran |")
    print("|---|---|---|---|---|---|")
    base = statistics.median(r["seconds"] for r in results.get("flat ring", [{"seconds": 1}]))
    for name in names:
        seconds = [r["seconds"] for r in results[name]]
        last = results[name][-1]
        ran = ""
        if "last_choice" in last:
            ran = last["last_choice"]
            ran += f" c={last['last_components']}" if ran == "cerar" else ""
            ran += " host by host" if last["host_by_host"] else ""
        print(f"| {name} | {statistics.median(seconds):.3f} | {min(seconds):.3f}-"
              f"{max(seconds):.3f} | {statistics.median(seconds) / base:.2f} | "
              f"{statistics.median(r['error'] for r in results[name]):.1e} | {ran} |")


if __name__ == "__main__":
    main()
