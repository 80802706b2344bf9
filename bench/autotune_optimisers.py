"""The autotuner's walk against Bayesian optimisation, replayed on a measured sweep.

    .venv/bin/python bench/autotune_optimisers.py sweep.json [--trials 200]

`sweep.json` is `bench/autotune_resnet50.py --json`'s output: every fusion threshold x cycle
time of the grid with its measured step times. A tuner's sample at a point is replayed by
drawing `--steps-per-sample` of that point's measured steps (with replacement) and scoring
their median, so both optimisers see the noise this machine really had. Compared, over
`--trials` replays:

- walk: the runtime's coordinate descent (core/policy/autotune.h): every threshold at the starting
  cycle time, every cycle time at the best threshold, every threshold again at the best
  cycle time; 9 + 5 + 8 samples (fewer where points repeat). `--single-pass` drops the
  second threshold sweep.
- bayes: Horovod's scheme (horovod/common/optim/bayesian_optimization.cc, read for its
  semantics): four fixed test points, then a Gaussian process (RBF kernel, noise 0.2 on
  standardised scores) with expected improvement picks the next point, 20 samples in all;
  here over the same grid in log coordinates. Both end at their best-scored point.

Reported per optimiser: samples, and the true step time (the sweep's median at the chosen
point) against the sweep's best: median, 90th percentile, share of trials within 5%.
"""
import argparse
import json
import math
import random
import statistics
import warnings

import numpy as np

START_CYCLE_MS = 1.0  # CERAR_CYCLE_TIME's default, where the walk sweeps the thresholds


def load(path):
    sweep = json.load(open(path))["sweep"]
    table = {(r["threshold_mb"], r["cycle_ms"]): r["times"] for r in sweep
             if r.get("components_scale", 1.0) == 1.0}
    thresholds = sorted({t for t, _ in table})
    cycles = sorted({c for _, c in table})
    return table, thresholds, cycles


def make_sampler(table, steps, rng):
    def sample(point):
        # Scores are throughputs; the step's bytes are the same everywhere, so 1 / step time.
        return 1.0 / statistics.median(rng.choice(table[point]) for _ in range(steps))
    return sample


def walk(thresholds, cycles, sample, second_pass=True):
    scores = {}

    def measure(point):
        if point not in scores:
            scores[point] = sample(point)

    cycle = min(cycles, key=lambda c: abs(c - START_CYCLE_MS))
    for t in thresholds:
        measure((t, cycle))
    best_t = max(scores, key=scores.get)[0]
    for c in cycles:
        measure((best_t, c))
    if second_pass:
        best_c = max(scores, key=scores.get)[1]
        for t in thresholds:
            measure((t, best_c))
    return max(scores, key=scores.get), len(scores)


def bayes(thresholds, cycles, sample, budget=20, noise=0.2):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    from scipy.stats import norm

    grid = [(t, c) for t in thresholds for c in cycles]
    coords = np.array([[math.log2(t + 0.5), math.log2(c)] for t, c in grid])
    nearest = lambda t, c: min(grid, key=lambda p: abs(math.log2(p[0] + .5) - math.log2(t + .5))
                               + abs(math.log2(p[1]) - math.log2(c)))
    tried = []
    for t, c in [(4, 5), (32, 50), (16, 25), (8, 10)]:  # Horovod's test points (MiB, ms)
        p = nearest(t, c)
        if p not in tried:
            tried.append(p)
    scores = {p: sample(p) for p in tried}
    while len(scores) < budget:
        x = np.array([coords[grid.index(p)] for p in scores])
        y = np.array(list(scores.values()))
        y = (y - y.mean()) / (y.std() or 1.0)
        gp = GaussianProcessRegressor(ConstantKernel() * RBF(), alpha=noise, normalize_y=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gp.fit(x, y)
        mu, sigma = gp.predict(coords, return_std=True)
        gain = mu - y.max()
        z = gain / np.maximum(sigma, 1e-9)
        ei = gain * norm.cdf(z) + sigma * norm.pdf(z)
        order = [i for i in np.argsort(-ei) if grid[i] not in scores]
        if not order:
            break
        p = grid[order[0]]
        scores[p] = sample(p)
    return max(scores, key=scores.get), len(scores)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--steps-per-sample", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--single-pass", action="store_true",
                        help="also replay the walk without its second threshold sweep")
    args = parser.parse_args()
    table, thresholds, cycles = load(args.sweep)
    truth = {p: statistics.median(v) for p, v in table.items()}
    best = min(truth.values())
    print(f"{len(table)} points; sweep best {1e3 * best:.1f} ms/step at "
          f"{min(truth, key=truth.get)}; {args.trials} replays, "
          f"{args.steps_per_sample} steps per sample")
    print(f"{'optimiser':>9} {'samples':>7} {'median ratio':>12} {'p90 ratio':>9} "
          f"{'within 5%':>9}")
    optimisers = [("walk", walk), ("bayes", bayes)]
    if args.single_pass:
        optimisers.insert(1, ("walk-1", lambda *a: walk(*a, second_pass=False)))
    for name, optimiser in optimisers:
        rng = random.Random(args.seed)
        ratios, used = [], []
        for _ in range(args.trials):
            point, n = optimiser(thresholds, cycles,
                                 make_sampler(table, args.steps_per_sample, rng))
            ratios.append(truth[point] / best)
            used.append(n)
        ratios.sort()
        within = sum(r <= 1.05 for r in ratios) / len(ratios)
        print(f"{name:>9} {statistics.mean(used):>7.1f} {statistics.median(ratios):>12.3f} "
              f"{ratios[int(0.9 * len(ratios))]:>9.3f} {100 * within:>8.0f}%")


if __name__ == "__main__":
    main()
