"""Does choosing c from observed times pay? CERAR_AUTOTUNE's scale of c against the cost model.

    .venv/bin/python bench/autotune_components.py -np 8 --rate-mbit 200 --size-mib 16

One job of N ranks (one per namespace of the emulated cluster with --rate-mbit, as
bench/autotune_resnet50.py; loopback without), a step = one all-reduce of a float32 tensor of
--size-mib, waited for. In that job (the runtime restarted with init() overrides per setting):

1. the sweep: every scale of c of the autotuner's grid (core/policy/autotune.h) from fresh starts,
   the scales interleaved, --repeats passes, --warmup + --steps steps each (the step time of a
   start: the median of its steps);
2. autotuning: CERAR_AUTOTUNE from the defaults until it freezes (steps counted), then
   --repeats fresh starts of the frozen point interleaved with the model's c (scale 1).

Prints per scale the c that ran and the median over the passes with the spread (IQR/median),
then the frozen scale, the steps it took, and frozen / model and frozen / the sweep's best.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from autotune_resnet50 import emulated_cluster, run, tune_until_frozen  # noqa: E402
MiB = 1 << 20
SCALES = [0.25, 0.5, 1, 2, 4, 8]  # as AutotuneOptions::componentsScales


def worker(args):
    import numpy as np

    import cerar
    import cerar.numpy as cn

    rank = int(os.environ["CERAR_RANK"])
    grad = np.ones(int(args.size_mib * MiB) // 4, dtype=np.float32)

    def step():
        start = time.perf_counter()
        cn.allreduce_(grad, name="grad", op=cerar.Average)
        return time.perf_counter() - start

    def measure(**settings):
        cerar.init(**settings)
        for _ in range(args.warmup):
            step()
        times = [step() for _ in range(args.steps)]
        c = cerar.stats()["last_components"]
        cerar.shutdown()
        return statistics.median(times), c

    def report(kind, **fields):
        if rank == 0:
            print("RESULT " + json.dumps({"kind": kind, **fields}), flush=True)

    for repeat in range(args.repeats):
        for s in SCALES:
            seconds, c = measure(components_scale=s)
            report("sweep", repeat=repeat, scale=s, c=c, step_s=seconds)

    steps, tuning_s, stats = tune_until_frozen(step, args)
    point = dict(fusion_threshold_bytes=stats["fusion_threshold_bytes"],
                 cycle_time_ms=stats["cycle_time_ms"], components_scale=stats["components_scale"])
    cerar.shutdown()
    report("tuned", steps=steps, tuning_s=tuning_s, **point)
    for repeat in range(args.repeats):
        for label, settings in (("model", {}), ("frozen", point)):
            seconds, c = measure(**settings)
            report("repeat", repeat=repeat, label=label, c=c, step_s=seconds)


def spread(values):
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return (q[2] - q[0]) / statistics.median(values)


def summary(results, args):
    lines = [f"N = {args.np}, {args.size_mib:g} MiB float32, "
             f"{f'{args.rate_mbit} Mbit/s links' if args.rate_mbit else 'loopback'}; "
             f"{args.repeats} passes, median step of {args.steps} after {args.warmup}", "",
             "| scale of c | c | median s | spread | ÷ scale 1 |", "|---|---|---|---|---|"]
    sweep = {}
    for r in results:
        if r["kind"] == "sweep":
            sweep.setdefault(r["scale"], []).append(r)
    model = statistics.median(r["step_s"] for r in sweep[1])
    medians = {}
    for s, rows in sweep.items():
        times = [r["step_s"] for r in rows]
        medians[s] = statistics.median(times)
        lines.append(f"| {s:g} | {rows[0]['c']} | {medians[s]:.3f} | {spread(times):.3f} | "
                     f"{medians[s] / model:.2f} |")
    tuned = next(r for r in results if r["kind"] == "tuned")
    repeats = {label: [r for r in results if r["kind"] == "repeat" and r["label"] == label]
               for label in ("model", "frozen")}
    frozen = statistics.median(r["step_s"] for r in repeats["frozen"])
    at_model = statistics.median(r["step_s"] for r in repeats["model"])
    best = min(medians, key=medians.get)
    lines += ["", f"autotune froze after {tuned['steps']} steps ({tuned['tuning_s']:.0f} s) at "
              f"scale {tuned['components_scale']:g} (c = {repeats['frozen'][0]['c']}), "
              f"threshold {tuned['fusion_threshold_bytes'] / MiB:g} MiB, cycle "
              f"{tuned['cycle_time_ms']:g} ms",
              f"re-measured side by side: frozen {frozen:.3f} s, model's c {at_model:.3f} s: "
              f"frozen / model = {frozen / at_model:.2f} (spreads "
              f"{spread([r['step_s'] for r in repeats['frozen']]):.3f}, "
              f"{spread([r['step_s'] for r in repeats['model']]):.3f}); sweep's best: scale "
              f"{best:g}, frozen / it = {frozen / medians[best]:.2f}"]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-np", type=int, default=4)
    parser.add_argument("--size-mib", type=float, default=16)
    parser.add_argument("--steps", type=int, default=3, help="measured steps per start")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--autotune-warmup", type=int, default=1)
    parser.add_argument("--autotune-steps", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--rate-mbit", type=int, default=0,
                        help="emulated cluster at this rate (bench/netem.sh; root)")
    parser.add_argument("--port", type=int, default=29660)
    parser.add_argument("--json", default=None, help="write every result here")
    parser.add_argument("--job-timeout", type=float, default=7200)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.worker:
        worker(args)
        return
    with emulated_cluster(args):
        results = run(args, ["--worker", *sys.argv[1:]], script=__file__)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    print(summary(results, args))


if __name__ == "__main__":
    main()
