"""Sweeps the fusion threshold and the cycle time on a gradient-like workload; prints a table.

    python examples/fusion_tuning.py -np 4
    python examples/fusion_tuning.py -np 4 --thresholds-mb 0 1 8 64 --cycles-ms 0.5 2 --algorithm ring

Each setting is a fresh job (cerarrun -np N ... --worker): every step all-reduces the same
list of tensors (sizes like a small CNN's gradients), started back to back as backward would,
then waits for them all. Reported: median step time, all-reduce throughput, and the number of
fused buffers the runtime dispatched per step.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

# A small CNN's parameter sizes (elements), last layer first, as backward produces them.
SIZES = [10, 5120, 128, 65536, 256, 294912, 128, 147456, 64, 36864, 64, 1728] * 2


def worker(args):
    import numpy as np

    import cerar
    import cerar.numpy as cn
    cerar.init()
    grads = [np.full(n, 1.0, dtype=np.float32) for n in SIZES]
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        handles = [cn.allreduce_async_(g, name=f"grad.{i}") for i, g in enumerate(grads)]
        for h in handles:
            cn.synchronize(h)
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    stats = cerar.stats()
    if cerar.rank() == 0:
        print("RESULT " + json.dumps({"step_s": statistics.median(times),
                                      "fused_buffers": stats["fused_buffers"],
                                      "steps": args.warmup + args.steps}), flush=True)
    cerar.shutdown()


def run_setting(args, threshold_mb, cycle_ms):
    command = [sys.executable, "-m", "cerar.run", "-np", str(args.np),
               "--fusion-threshold-mb", str(threshold_mb), "--cycle-time-ms", str(cycle_ms)]
    if args.algorithm:
        command += ["--algorithm", args.algorithm]
    command += [sys.executable, __file__, "--worker", "--steps", str(args.steps),
                "--warmup", str(args.warmup)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=args.job_timeout)
    for line in out.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise RuntimeError(f"setting {threshold_mb} MiB / {cycle_ms} ms failed "
                       f"(exit {out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")


def main():
    parser = argparse.ArgumentParser(description="fusion threshold x cycle time sweep")
    parser.add_argument("-np", type=int, default=4)
    parser.add_argument("--thresholds-mb", type=float, nargs="+", default=[0, 0.5, 2, 8, 64])
    parser.add_argument("--cycles-ms", type=float, nargs="+", default=[0.5, 1, 5])
    parser.add_argument("--algorithm", choices=["auto", "ring", "cerar"], default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--job-timeout", type=float, default=300)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    megabytes = 4 * sum(SIZES) / 2**20
    print(f"{args.np} ranks, {len(SIZES)} float32 tensors per step, {megabytes:.2f} MiB, "
          f"algorithm {args.algorithm or 'auto'}")
    print(f"{'threshold MiB':>13} {'cycle ms':>8} {'step ms':>8} {'MiB/s':>8} {'buffers/step':>12}")
    best = None
    for threshold in args.thresholds_mb:
        for cycle in args.cycles_ms:
            result = run_setting(args, threshold, cycle)
            step_ms = 1000 * result["step_s"]
            per_step = result["fused_buffers"] / result["steps"]
            print(f"{threshold:>13g} {cycle:>8g} {step_ms:>8.2f} {megabytes / result['step_s']:>8.1f} "
                  f"{per_step:>12.1f}", flush=True)
            if best is None or step_ms < best[0]:
                best = (step_ms, threshold, cycle)
    print(f"best: --fusion-threshold-mb {best[1]:g} --cycle-time-ms {best[2]:g} "
          f"({best[0]:.2f} ms/step)")


if __name__ == "__main__":
    main()
