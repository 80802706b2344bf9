"""CERAR_AUTOTUNE against an exhaustive sweep, in one job, on ResNet-50's gradient list.

    .venv/bin/python bench/autotune_resnet50.py -np 4 [--json out.json]
    sudo .venv/bin/python bench/autotune_resnet50.py -np 4 --rate-mbit 300 --steps 4 --warmup 1

One job of N ranks, on loopback (cerarrun) or, with --rate-mbit, one rank per network namespace
of the emulated cluster (bench/netem.sh: links shaped both ways; needs root); every rank holds ResNet-50's 161 gradients (float32,
97.5 MiB, bench/resnet50_sizes.py) and a step all-reduces all of them, submitted last layer
first as backward produces them, then waits for all. In that one job (the runtime restarted
with init() overrides for each setting; a restart is a new rendezvous, not a new process):

1. the sweep: every fusion threshold x cycle time of the autotuner's grid (core/policy/autotune.h),
   then every scale of c at the best of those (CERAR_COMPONENTS_SCALE), `--steps` measured
   steps each after `--warmup`;
2. autotuning: CERAR_AUTOTUNE from the default settings until it freezes (steps counted), then
   `--steps` measured steps at the frozen point;
3. the spread: the sweep's best point and the frozen point re-measured `--repeats` times,
   alternating, each a fresh start.

Prints the sweep's table, steps until frozen, and the frozen point's step time against the
sweep's best with the spread of both. Step time = median of a setting's measured steps.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
THRESHOLDS_MB = [0, 1, 2, 4, 8, 16, 32, 64, 128]  # as AutotuneOptions
CYCLES_MS = [0.5, 1, 2, 5, 10, 20]
SCALES = [0.25, 0.5, 1, 2, 4, 8]


def resnet50_step():
    """This rank's step over ResNet-50's gradients (all-reduced last layer first, as backward
    produces them), as a function returning its seconds."""
    import numpy as np

    import cerar
    import cerar.numpy as cn
    sys.path.insert(0, HERE)
    from resnet50_sizes import SHAPES, numel

    grads = [np.full(numel(s), 1.0, dtype=np.float32) for s in reversed(SHAPES)]
    names = [f"grad.{i}" for i in range(len(grads))]

    def step():
        start = time.perf_counter()
        handles = [cn.allreduce_async_(g, name=n, op=cerar.Average) for g, n in zip(grads, names)]
        for h in handles:
            cn.synchronize(h)
        return time.perf_counter() - start
    return step


def worker(args):
    import numpy as np

    import cerar
    import cerar.numpy as cn

    rank = int(os.environ["CERAR_RANK"])
    step = resnet50_step()

    def measure(**settings):
        cerar.init(**settings)
        for _ in range(args.warmup):
            step()
        times = [step() for _ in range(args.steps)]
        stats = cerar.stats()
        cerar.shutdown()
        return {"step_s": statistics.median(times), "times": times,
                "cerar_buffers": stats["cerar_buffers"], "fused_buffers": stats["fused_buffers"]}

    def report(kind, **fields):
        if rank == 0:
            print("RESULT " + json.dumps({"kind": kind, **fields}), flush=True)

    sweep = []
    for t in args.thresholds_mb:
        for c in args.cycles_ms:
            r = measure(fusion_threshold_bytes=int(t * MiB), cycle_time_ms=c)
            sweep.append((r["step_s"], t, c, r["cerar_buffers"]))
            report("sweep", threshold_mb=t, cycle_ms=c, components_scale=1.0, **r)
    # c's scales at the best threshold and cycle time: every rank must pick the same point,
    # so rank 0's measurement decides (broadcast).
    _, t, c, cerar_buffers = min(sweep)
    choice = np.array([t, c, cerar_buffers], dtype=np.float64)
    cerar.init()
    cn.broadcast_(choice, root_rank=0, name="sweep.best")
    cerar.shutdown()
    t, c, cerar_buffers = choice
    if cerar_buffers > 0:
        for s in SCALES:
            if s == 1.0:
                continue
            r = measure(fusion_threshold_bytes=int(t * MiB), cycle_time_ms=c,
                        components_scale=s)
            report("sweep", threshold_mb=t, cycle_ms=c, components_scale=s, **r)

    steps, tuning_s, stats = tune_until_frozen(step, args, args.autotune_log or "")
    point = {"threshold_mb": stats["fusion_threshold_bytes"] / MiB,
             "cycle_ms": stats["cycle_time_ms"], "components_scale": stats["components_scale"],
             "frozen": stats["autotune_frozen"]}
    for _ in range(args.warmup):
        step()
    times = [step() for _ in range(args.steps)]
    cerar.shutdown()
    report("tuned", steps=steps, tuning_s=tuning_s, step_s=statistics.median(times),
           times=times, **point)


def tune_until_frozen(step, args, log=""):
    """CERAR_AUTOTUNE from the defaults, stepping until it freezes (or args.max_steps); the
    runtime is left running. The ranks agree when to stop (they may see the freeze in different
    steps), at the cost of one 4-byte all-reduce per step. Returns (steps, seconds, stats)."""
    import numpy as np

    import cerar
    import cerar.numpy as cn

    cerar.init(autotune=True, autotune_warmup_samples=args.autotune_warmup,
               autotune_steps_per_sample=args.autotune_steps, autotune_log=log)
    steps, start = 0, time.perf_counter()
    while True:
        step()
        steps += 1
        frozen = np.array([int(cerar.stats()["autotune_frozen"])], dtype=np.int32)
        if cn.allreduce(frozen, op=cerar.Max, name="frozen")[0] or steps >= args.max_steps:
            break
    return steps, time.perf_counter() - start, cerar.stats()


def agreed_best(sweep):
    return min(sweep, key=lambda r: r["step_s"])


def spread_worker(args):
    """Re-measures two settings (given on the command line) alternately."""
    import cerar

    rank = int(os.environ["CERAR_RANK"])
    step = resnet50_step()

    settings = json.loads(args.spread)
    for repeat in range(args.repeats):
        for label, s in settings.items():
            cerar.init(fusion_threshold_bytes=int(s["threshold_mb"] * MiB),
                       cycle_time_ms=s["cycle_ms"], components_scale=s["components_scale"])
            for _ in range(args.warmup):
                step()
            times = [step() for _ in range(args.steps)]
            cerar.shutdown()
            if rank == 0:
                print("RESULT " + json.dumps({"kind": "repeat", "label": label, "repeat": repeat,
                                              "step_s": statistics.median(times)}), flush=True)


NETEM_PREFIX = "cerartune"


class Captured:
    """A file-like sink for bench/runner.py's prefixed output lines."""

    def __init__(self):
        self.lines = []

    def write(self, text):
        self.lines.extend(text.splitlines())

    def flush(self):
        pass


@contextlib.contextmanager
def emulated_cluster(args):
    """With --rate-mbit, the emulated cluster's namespaces (bench/netem.sh) for the block."""
    netem = os.path.join(HERE, "netem.sh")
    if args.rate_mbit:
        subprocess.run([netem, "up", "--ranks", str(args.np), "--rate-mbit", str(args.rate_mbit),
                        "--name", NETEM_PREFIX], check=True)
    try:
        yield
    finally:
        if args.rate_mbit:
            subprocess.run([netem, "down", "--name", NETEM_PREFIX])


def run(args, extra, script=__file__):
    """Runs `script` (this one by default) with `extra` as a job of args.np ranks; returns the
    RESULT lines' objects."""
    worker = [sys.executable, os.path.abspath(script), *extra]
    if not args.rate_mbit:
        command = [sys.executable, "-m", "cerar.run", "-np", str(args.np), *worker]
        out = subprocess.run(command, capture_output=True, text=True, timeout=args.job_timeout)
        status, lines = out.returncode, out.stdout.splitlines() + out.stderr.splitlines()
    else:
        # One rank per namespace; rank 0 hosts the rendezvous store on its link's address.
        sys.path.insert(0, HERE)
        import runner
        os.environ.update(CERAR_HOST_STORE="1", CERAR_IFACE="veth0",
                          CERAR_SECRET=os.environ.get("CERAR_SECRET", "cerar-bench"))
        sink = Captured()
        status = runner.run(worker, args.np, NETEM_PREFIX, args.port, timeout=args.job_timeout,
                            out=sink, log=sink)
        lines = sink.lines
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in lines if "RESULT " in line]
    if status != 0:
        raise RuntimeError(f"job failed (exit {status}):\n" + "\n".join(lines[-60:]))
    return results


def pct(a, b):
    return 100.0 * (a / b - 1.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-np", type=int, default=4)
    parser.add_argument("--thresholds-mb", type=float, nargs="+", default=THRESHOLDS_MB)
    parser.add_argument("--cycles-ms", type=float, nargs="+", default=CYCLES_MS)
    parser.add_argument("--steps", type=int, default=8, help="measured steps per setting")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--autotune-warmup", type=int, default=3)
    parser.add_argument("--autotune-steps", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--autotune-log", default=None, help="CERAR_AUTOTUNE_LOG of the tuning")
    parser.add_argument("--json", default=None, help="write every result here")
    parser.add_argument("--job-timeout", type=float, default=7200)
    parser.add_argument("--rate-mbit", type=int, default=0,
                        help="the emulated cluster at this link rate (0: loopback)")
    parser.add_argument("--port", type=int, default=29650, help="rendezvous port (emulated)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--spread", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return spread_worker(args) if args.spread else worker(args)

    common = ["--worker", "--steps", str(args.steps), "--warmup", str(args.warmup),
              "--autotune-warmup", str(args.autotune_warmup),
              "--autotune-steps", str(args.autotune_steps), "--max-steps", str(args.max_steps),
              "--repeats", str(args.repeats),
              *(["--autotune-log", os.path.abspath(args.autotune_log)] if args.autotune_log
                else []),
              "--thresholds-mb",
              *map(str, args.thresholds_mb), "--cycles-ms", *map(str, args.cycles_ms)]
    where = (f"emulated cluster @ {args.rate_mbit} Mbit/s" if args.rate_mbit else "loopback")
    print(f"{args.np} ranks, ResNet-50 gradients (161 float32 tensors, 97.5 MiB), {where}",
          flush=True)
    with emulated_cluster(args):
        measure_all(args, common)


def measure_all(args, common):
    results = run(args, common)
    sweep = [r for r in results if r["kind"] == "sweep"]
    tuned = next(r for r in results if r["kind"] == "tuned")
    if args.json:  # kept if the re-measurement fails
        with open(args.json, "w") as f:
            json.dump({"sweep": sweep, "tuned": tuned}, f, indent=1)
    print(f"{'threshold MiB':>13} {'cycle ms':>8} {'c scale':>7} {'step ms':>8} "
          f"{'min-max ms':>15} {'CERAR bufs':>10}")
    for r in sweep:
        print(f"{r['threshold_mb']:>13g} {r['cycle_ms']:>8g} {r['components_scale']:>7g} "
              f"{1e3 * r['step_s']:>8.1f} "
              f"{1e3 * min(r['times']):>7.1f}-{1e3 * max(r['times']):<7.1f} "
              f"{r['cerar_buffers']:>10}", flush=True)
    best = agreed_best(sweep)
    print(f"sweep best: {best['threshold_mb']:g} MiB, {best['cycle_ms']:g} ms, c scale "
          f"{best['components_scale']:g}: {1e3 * best['step_s']:.1f} ms/step "
          f"({len(sweep)} points)")
    print(f"autotune: frozen after {tuned['steps']} steps ({tuned['tuning_s']:.0f} s) at "
          f"{tuned['threshold_mb']:g} MiB, {tuned['cycle_ms']:g} ms, c scale "
          f"{tuned['components_scale']:g}: {1e3 * tuned['step_s']:.1f} ms/step "
          f"({pct(tuned['step_s'], best['step_s']):+.1f}% against the sweep's best)", flush=True)

    keys = ("threshold_mb", "cycle_ms", "components_scale")
    pair = {"sweep best": {k: best[k] for k in keys}, "frozen": {k: tuned[k] for k in keys}}
    repeats = run(args, common + ["--spread", json.dumps(pair)])
    print(f"re-measured alternately, {args.repeats} fresh starts each:")
    medians = {}
    for label in pair:
        values = [r["step_s"] for r in repeats if r["label"] == label]
        medians[label] = statistics.median(values)
        print(f"  {label:>10}: median {1e3 * medians[label]:.1f} ms/step, spread "
              f"{1e3 * min(values):.1f}-{1e3 * max(values):.1f} ms "
              f"({pct(max(values), min(values)):.1f}%)")
    print(f"frozen / sweep best: {medians['frozen'] / medians['sweep best']:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sweep": sweep, "tuned": tuned, "repeats": repeats}, f, indent=1)


if __name__ == "__main__":
    main()
