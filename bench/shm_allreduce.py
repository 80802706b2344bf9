#!/usr/bin/env python3
"""One host, N ranks: cerar over shared memory against cerar over TCP loopback, torch's gloo
backend and a memory floor, in one run (docs/shared-memory.md).

    .venv/bin/python bench/shm_allreduce.py [--np 4] [--sizes 4K,64K,1M,16M,64M] [--rounds 3]
        [--average] [--only cerar-tcp,torch-gloo]

Each round runs one job per contender (cerarrun, float32 sum of the same buffers), the
contenders in turn; per job and size rank 0 reports the best of --repeats calls (each after a
barrier, the slowest rank's time). The table gives the median over rounds and ratios to torch's
gloo. The floor: every rank copying 2·d bytes at once (the copies an exact all-reduce through
memory cannot avoid), timed the same way. --average: the mean instead, as a user averages
gradients: cerar's Average, torch's sum then `div_` by N.
"""
import argparse
import json
import os
import statistics
import sys
import time

from worker_job import rank_zero_rows

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
CONTENDERS = {  # name: (worker mode, environment)
    "cerar-shm": ("cerar", {"CERAR_SHARED_MEMORY": "1", "CERAR_ALGORITHM": "ring"}),
    "cerar-tcp": ("cerar", {"CERAR_SHARED_MEMORY": "0", "CERAR_ALGORITHM": "ring"}),
    "cerar-tcp-auto": ("cerar", {"CERAR_SHARED_MEMORY": "0", "CERAR_ALGORITHM": "auto"}),
    "torch-gloo": ("gloo", {}),
    "floor": ("floor", {}),
}


def parse_size(text):
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def worker(mode, sizes, repeats, average):
    """One rank: prints {"size": bytes, "seconds": best} lines on rank 0."""
    import numpy as np
    rank, size = int(os.environ["CERAR_RANK"]), int(os.environ["CERAR_SIZE"])
    if mode == "gloo":
        import torch
        import torch.distributed as dist
        port = int(os.environ["CERAR_RENDEZVOUS_PORT"]) + 1
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size)
        barrier, slowest = dist.barrier, None
    else:
        import cerar
        import cerar.numpy as cn
        cerar.init()
        barrier = cerar.barrier if hasattr(cerar, "barrier") else cn.barrier
    for nbytes in sizes:
        data = np.ones(nbytes // 4, dtype=np.float32)
        scratch = np.empty_like(data)
        best = float("inf")
        for i in range(repeats + 1):
            barrier()
            start = time.perf_counter()
            if mode == "gloo":
                dist.all_reduce(torch.from_numpy(data))
                if average:
                    torch.from_numpy(data).div_(size)
            elif mode == "floor":
                np.copyto(scratch, data)
                np.copyto(data, scratch)
            else:
                cn.allreduce_(data, op=cerar.Average if average else cerar.Sum,
                              name=f"x.{nbytes}.{i}")
            took = time.perf_counter() - start
            if mode != "gloo":
                took = float(cn.allreduce(np.array([took]), op=cerar.Max, name=f"t.{nbytes}.{i}")[0])
            else:
                t = torch.tensor([took], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                took = float(t[0])
            if i > 0:  # the first call warms up
                best = min(best, took)
        if rank == 0:
            print(json.dumps({"size": nbytes, "seconds": best}), flush=True)
    if mode == "gloo":
        dist.destroy_process_group()
    else:
        cerar.shutdown()


def run(name, np_, sizes, repeats, average):
    mode, extra = CONTENDERS[name]
    env = {**os.environ, **extra, "CERAR_LOG_LEVEL": "error"}
    rows = rank_zero_rows(__file__, np_, [mode, "--sizes", ",".join(map(str, sizes)),
                                          "--repeats", str(repeats)] +
                          (["--average"] if average else []), env, f"{name} failed")
    return {row["size"]: row["seconds"] for row in rows}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--sizes", default="4K,64K,1M,16M,64M")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--average", action="store_true", help="the mean instead of the sum")
    p.add_argument("--only", default="", help="comma-separated contenders (torch-gloo always)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    if a.worker:
        return worker(a.worker, sizes, a.repeats, a.average)
    names = [n for n in CONTENDERS if not a.only or n in a.only.split(",") or n == "torch-gloo"]
    times = {name: {s: [] for s in sizes} for name in names}
    for _ in range(a.rounds):
        for name in names:
            for s, seconds in run(name, a.np, sizes, a.repeats, a.average).items():
                times[name][s].append(seconds)
    print(f"N = {a.np}, float32 {'mean' if a.average else 'sum'}, median over {a.rounds} "
          f"rounds of the best of {a.repeats}; (ratio to torch-gloo)")
    print("| size | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for s in sizes:
        gloo = statistics.median(times["torch-gloo"][s])
        cells = [f"{statistics.median(times[n][s]) * 1e3:.3f} ms "
                 f"({statistics.median(times[n][s]) / gloo:.2f})" for n in names]
        label = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
