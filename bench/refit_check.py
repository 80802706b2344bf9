#!/usr/bin/env python3
"""What refitting the cost model from observed CERAR runs would choose, from suite runs.

  python3 bench/refit_check.py [--partial-segments] bench/results/NAME [more result folders]

The runtime only ever observes the c it chose. One run at that c gives one excess over the
probe's model, E = observed - modelled, which cannot tell a per-round cost from a per-byte one:

  per byte:  every round scaled by the same factor: the same c (the search is scale-free);
  fixed:     the same c;
  per round: o = E / (c+N-2) added to every round, c re-chosen by the same rule.

For each size of each run this prints auto's c, the per-round reading's c and the median time
of the grid's c nearest to it (log scale), against auto's and the grid's best. It first checks
that its copy of the model (core/policy/selection.cc: the probe's rounds interpolated, a message
longer than a segment charged its segments whole, the fewest components within 0.5 % of the
fastest) gives the c the run used; --partial-segments drops the whole-segment charge, as the
model did before (the runs named *-selection and the headline).
"""
import json, math, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_report import by_size, grid_rows, load, size_text  # noqa: E402

TOLERANCE = 0.005  # core/policy/selection.h kComponentsTolerance
MAX_COMPONENTS = 16384


def round_seconds(m, probe, overhead=0.0, whole_segments=True):
    """core/policy/selection.cc transferSeconds + arithmetic, with measured rounds: a message longer
    than the run's segment is charged its segments whole (wholeSegmentBytes)."""
    points, s, codec_bytes = probe["rounds"], probe.get("segment_bytes") or 0, m
    if whole_segments and s and m > s:
        m = s * math.ceil(m / s)
    last_b, last_s = points[-1]
    if m >= last_b:
        t = last_s * m / last_b
    else:
        b0, s0 = 0.0, probe["alpha_s"]
        for b, t1 in points:
            if m <= b:
                t = s0 + (m - b0) / (b - b0) * (t1 - s0)
                break
            b0, s0 = b, t1
    return t + codec_bytes * probe["gamma_s_per_byte"] + overhead


def cerar_seconds(n, c, d, probe, overhead=0.0, whole_segments=True):
    return (c + n - 2) * round_seconds(d / c, probe, overhead, whole_segments)


def best_components(n, d, probe, tolerance=TOLERANCE, overhead=0.0, whole_segments=True):
    max_r = max(1, int(min(d / 4, MAX_COMPONENTS) // n))
    times = [cerar_seconds(n, r * n, d, probe, overhead, whole_segments)
             for r in range(1, max_r + 1)]
    fastest = min(times)
    return next(r + 1 for r, t in enumerate(times) if t <= (1 + tolerance) * fastest) * n


def nearest(grid, c):
    return min(grid, key=lambda r: abs(math.log(r["c"] / c)))


def report(run, whole):
    n, probe = run["config"]["n"], run["probe"]
    lines = []
    for d, rows in sorted(by_size(run).items()):
        auto, grid = rows.get("cerar-auto"), grid_rows(rows)
        if not auto or not grid or not auto.get("c"):
            continue
        c = auto["c"]
        replica = best_components(n, d, probe, whole_segments=whole)
        observed = auto["median_s"]
        excess = observed - cerar_seconds(n, c, d, probe, whole_segments=whole)
        overhead = max(0.0, excess / (c + n - 2))
        refit = best_components(n, d, probe, overhead=overhead, whole_segments=whole)
        near, best = nearest(grid, refit), min(grid, key=lambda r: r["median_s"])
        lines.append(f"| {run['config']['name']} | {size_text(d)} | {c} | "
                     f"{'yes' if replica == c else f'NO ({replica})'} | {observed:.3f} | "
                     f"{excess / observed * 100:+.1f} % | {overhead * 1e6:.0f} | {refit} | "
                     f"{near['c']}: {near['median_s'] / observed:.3f} | "
                     f"{best['c']}: {best['median_s'] / observed:.3f} |")
    return lines


def main(args):
    # Runs made before the model charged whole segments (December 2026 sweeps named
    # *-selection, the headline) need --partial-segments to reproduce their c.
    whole = "--partial-segments" not in args
    folders = [a for a in args if a != "--partial-segments"]
    print("| config | size | auto c | model copy agrees | auto median s | excess over the model "
          "| per-round reading, us | its c | nearest grid c ÷ auto | best grid c ÷ auto |")
    print("|---" * 10 + "|")
    for folder in folders:
        for run in load(folder):
            if run.get("probe", {}).get("rounds"):
                print("\n".join(report(run, whole)))


if __name__ == "__main__":
    main(sys.argv[1:] or ["bench/results/sweep-200-segments"])
