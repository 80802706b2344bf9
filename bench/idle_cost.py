#!/usr/bin/env python3
"""What an idle cerar job costs, this tree against another: the CPU its N ranks spend while no
rank calls anything (a training step's compute), and a lone small all-reduce made after such a
pause (docs/shared-memory.md, "An idle job").

    .venv/bin/python bench/idle_cost.py --before OTHER/frameworks [--np 4] [--rounds 2]

Each round runs one job per version, in turn (cerarrun on this host; CERAR_SHARED_MEMORY as
set, shared memory by default). In a job every rank first sits idle for --idle seconds and
reports its process's CPU time over them (all its threads); then --calls times it sleeps --gap
seconds and times a 4 KiB float32 sum (the slowest rank's time). Printed: the idle CPU in
milliseconds per second for the whole job, and the lone calls' median and 90th percentile,
median over rounds, with after/before.
"""
import argparse
import json
import os
import statistics
import sys
import time

from worker_job import rank_zero_rows


def worker(idle, gap, calls):
    import numpy as np
    import cerar
    import cerar.numpy as cn
    cerar.init()
    cerar.barrier() if hasattr(cerar, "barrier") else cn.barrier()
    cpu = time.process_time()
    time.sleep(idle)
    cpu = time.process_time() - cpu
    cpu = float(cn.allreduce(np.array([cpu]), op=cerar.Sum, name="cpu")[0])
    x = np.ones(1024, dtype=np.float32)
    took = []
    for i in range(calls):
        time.sleep(gap)
        start = time.perf_counter()
        cn.allreduce_(x, op=cerar.Sum, name=f"lone.{i}")
        t = time.perf_counter() - start
        took.append(float(cn.allreduce(np.array([t]), op=cerar.Max, name=f"t.{i}")[0]))
    if cerar.rank() == 0:
        took = sorted(took[1:])  # the first call warms up
        print(json.dumps({"idle_cpu_ms_per_s": 1e3 * cpu / idle,
                          "lone_median_ms": 1e3 * took[len(took) // 2],
                          "lone_p90_ms": 1e3 * took[int(0.9 * (len(took) - 1))]}), flush=True)
    cerar.shutdown()


def run(frameworks, args):
    env = dict(os.environ, CERAR_LOG_LEVEL="error", PYTHONPATH=os.path.abspath(frameworks))
    rows = rank_zero_rows(__file__, args.np, ["--idle", str(args.idle), "--gap", str(args.gap),
                                              "--calls", str(args.calls)],
                          env, f"job failed ({frameworks})")
    return rows[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required="--worker" not in sys.argv,
                   help="frameworks folder of the version to compare with")
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--idle", type=float, default=3.0)
    p.add_argument("--gap", type=float, default=0.3)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.idle, args.gap, args.calls)
    # This tree: its frameworks folder (with a built _cerar there, as per_tensor_overhead.py).
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "frameworks")
    results = {"before": [], "after": []}
    for _ in range(args.rounds):
        results["before"].append(run(args.before, args))
        results["after"].append(run(here, args))
    print(f"N = {args.np}, idle {args.idle} s, lone 4 KiB calls after {args.gap} s pauses; "
          f"median over {args.rounds} rounds")
    print("| figure | before | after | after/before |")
    print("|---|---|---|---|")
    for key in ("idle_cpu_ms_per_s", "lone_median_ms", "lone_p90_ms"):
        before = statistics.median(r[key] for r in results["before"])
        after = statistics.median(r[key] for r in results["after"])
        print(f"| {key} | {before:.3f} | {after:.3f} | {after / before:.2f} |")


if __name__ == "__main__":
    main()
