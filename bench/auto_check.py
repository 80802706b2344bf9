#!/usr/bin/env python3
"""Is `auto` within a tolerance of the faster of the exact ring and the best CERAR c?

  python3 bench/auto_check.py --run [--name auto-grid] [--configs ...] [--sizes ...]
                                    [--repeats 5] [--bin PATH]     # run the grid, then check
  python3 bench/auto_check.py bench/results/NAME [--tolerance 0.03] # check results already run

--run runs bench/run_suite.py --net-only (cerar-bench-net's exact ring, its c grid 1..128 N and
cerar-auto, repeats interleaved) over the grid, by default loopback and links shaped to 1, 2.5,
5 and 10 Gbit/s, N = 4 and 8, 4-256 MiB, 5 repeats (as root: the shaped links are network
namespaces). Then, per config and size: auto's median (the mean with the grid's run of the same
c, as suite_report.py), the faster of the ring's and the best grid c's medians, their ratio, the
noise (suite_report.py's: interquartile ranges / median, and auto against the same c), and
whether the ratio is at most 1 + tolerance. Exit: 0 every point within, 1 some point not,
2 no results, 3 the run failed.
"""
import argparse, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import suite_report  # noqa: E402

CONFIGS = "lo4,lo8,4@1000,8@1000,4@2500,8@2500,4@5000,8@5000,4@10000,8@10000"
SIZES = "4M,16M,64M,256M"


def same_c(auto, grid):
    """The grid's row of auto's c (the same contender as auto), or None (auto ran the ring or a
    c off the grid)."""
    return next((r for r in grid if r["c"] == auto.get("c")), None)


def verdicts(run, tolerance):
    """One row per size: (size, auto c, auto s, floor name, floor s, ratio, noise, within)."""
    rows = []
    for d, table in sorted(suite_report.by_size(run).items()):
        auto, ring = table.get("cerar-auto"), table.get("ring")
        grid = suite_report.grid_rows(table)
        if not auto or not ring or not grid:
            continue
        best = min(grid, key=lambda r: r["median_s"])
        same = same_c(auto, grid)
        chosen = (auto["median_s"] + same["median_s"]) / 2 if same else auto["median_s"]
        twin = abs(auto["median_s"] / same["median_s"] - 1) if same else 0
        floor = ring if ring["median_s"] <= best["median_s"] else best
        noise = max(twin, suite_report.spread(auto), suite_report.spread(floor))
        ratio = chosen / floor["median_s"]
        name = "ring" if floor is ring else f"c={best['c']}"
        rows.append((d, auto.get("c") or "ring", chosen, name, floor["median_s"], ratio, noise,
                     ratio <= 1 + tolerance))
    return rows


def report(outdir, tolerance):
    runs = suite_report.load(outdir)
    if not runs:
        print(f"auto_check: no results in {outdir}", file=sys.stderr)
        return 2
    print(f"| config | size | auto c | auto s | faster of ring, best c | its s | auto ÷ it "
          f"| noise | within {tolerance:.0%} |\n|---|---|---|---|---|---|---|---|---|")
    ok = True
    for run in runs:
        for d, c, auto, name, floor, ratio, noise, within in verdicts(run, tolerance):
            ok &= within
            print(f"| {run['config']['name']} | {suite_report.size_text(d)} | {c} | {auto:.4f} | "
                  f"{name} | {floor:.4f} | {ratio:.3f} | {noise:.3f} | "
                  f"{'yes' if within else 'NO'} |")
    twins = sorted(t for run in runs for t in twin_ratios(run))
    if twins:
        off = sorted(abs(t - 1) for t in twins)
        print(f"\nThe floor of this run's noise: auto and the grid's run of the same c are one "
              f"contender timed twice; per pass, auto ÷ same c, its median over the passes at "
              f"{len(twins)} points: {twins[0]:.3f}-{twins[-1]:.3f}, |ratio - 1| median "
              f"{off[len(off) // 2]:.3f}, {sum(o > tolerance for o in off)} of {len(off)} "
              f"above {tolerance:.0%}.")
    return 0 if ok else 1


def twin_ratios(run):
    """Per size where the grid ran auto's c: the median over the interleaved passes of auto's
    time ÷ that c's time in the same pass (two identical contenders: 1 without noise)."""
    ratios = []
    for _, table in sorted(suite_report.by_size(run).items()):
        auto = table.get("cerar-auto")
        same = same_c(auto, suite_report.grid_rows(table)) if auto else None
        if same and auto.get("runs_s") and same.get("runs_s"):
            pairs = sorted(a / b for a, b in zip(auto["runs_s"], same["runs_s"]))
            ratios.append(pairs[len(pairs) // 2])
    return ratios


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outdir", nargs="?", help="results of run_suite.py (with --run: written)")
    p.add_argument("--run", action="store_true", help="run the grid first (root)")
    p.add_argument("--name", default="auto-grid", help="results folder under bench/results")
    p.add_argument("--configs", default=CONFIGS, help="run_suite.py configs (%(default)s)")
    p.add_argument("--sizes", default=SIZES, help="%(default)s")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--bin", help="cerar-bench-net (run_suite.py's default)")
    p.add_argument("--tolerance", type=float, default=0.03)
    a = p.parse_args(argv)
    outdir = a.outdir or os.path.join(HERE, "results", a.name)
    if a.run:
        cmd = [sys.executable, os.path.join(HERE, "run_suite.py"), "--net-only", "--only",
               "ring,cerar", "--configs", a.configs, "--sizes", a.sizes, "--repeats",
               str(a.repeats), "--outdir", outdir, "--name", os.path.basename(outdir)]
        if a.bin:
            cmd += ["--bin", a.bin]
        if subprocess.run(cmd).returncode:
            return 3
    return report(outdir, a.tolerance)


if __name__ == "__main__":
    sys.exit(main())
