#!/usr/bin/env python3
"""The int8 wire's free choices, measured (docs/wires.md, "The int8 wire"): the block length
(elements per scale), the rounding (to nearest, or stochastic) and the format (int8 codes, or
fp8 e4m3 / e5m2 values under the same block scale), on the suite's data.

  .venv/bin/python bench/int8_design.py [--ranks 4,8,16] [--elements 262144] [--steps 50]

The wire's arithmetic in numpy float32, element by element as ops/codec/int8_loops.h: a ring
all-reduce of N ranks is, per element, N encodings (the first rank's value, then each hop's
float32 sum of the decoded partial and its own value, then the owner's total), each block of
the partial sums scaled by its largest magnitude / 127.

Block length: per length, the bytes per element on the wire (1 + 4 / B) and the error of one
all-reduce: the largest |result - sum| / max sum|g| (what the error budget bounds) and the
RMS error / RMS |sum|, worst over the data kinds.
Rounding: one gradient (mean + noise, then a small change per step) all-reduced for --steps
steps; the bias is |mean over steps of (result - sum)|, its largest over elements relative to
max sum|g|, against the error of one step. Nearest rounding repeats nearly the same loss every
step (bias = one step's error); stochastic rounding is unbiased but doubles the spread of each
rounding; nearest with error feedback (CERAR_ERROR_FEEDBACK) sends each step's loss the next.
"""
import argparse, os, sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
F = np.float32


def encode(x, block, rng=None):
    """(scales, codes) of x (float32, length a multiple of block)."""
    b = x.reshape(-1, block)
    scale = (np.abs(b).max(axis=1) / F(127)).astype(F)
    safe = np.where(scale == 0, F(1), scale)
    q = b / safe[:, None]
    if rng is None:
        q = np.rint(q)  # nearest, ties to even
    else:
        q = np.floor(q + rng.random(q.shape, dtype=F))
    q = np.clip(q, -127, 127)
    q[scale == 0] = 0
    return scale, q.astype(np.int8)


def decode(scale, codes):
    return (codes.astype(F) * scale[:, None]).reshape(-1)


# fp8 formats (OCP): mantissa bits, smallest normal exponent, largest value.
FP8 = {"e4m3": (3, -6, 448.0), "e5m2": (2, -14, 57344.0)}


def fp8_values(x, block, fmt):
    """x's values after an fp8 wire: each block scaled so its largest magnitude is the format's
    largest value, each element rounded to nearest even on the format's grid (subnormals
    included), scaled back."""
    bits, emin, top = FP8[fmt]
    b = x.reshape(-1, block).astype(np.float64)
    scale = np.abs(b).max(axis=1) / top
    safe = np.where(scale == 0, 1.0, scale)
    y = b / safe[:, None]
    exponent = np.maximum(np.floor(np.log2(np.maximum(np.abs(y), 2.0 ** emin))), emin)
    step = 2.0 ** (exponent - bits)
    q = np.clip(np.rint(y / step) * step, -top, top)
    return (q * safe[:, None]).astype(F).reshape(-1)


def ring(grads, block, rng=None, residuals=None, fmt="int8"):
    """Each element's N encodings in rank order; with residuals (per rank, error feedback)
    each rank adds its own and gets back what its encoding lost."""
    N = len(grads)
    g = [x + r for x, r in zip(grads, residuals)] if residuals is not None else grads
    partial = g[0]
    for k in range(1, N + 1):
        if fmt == "int8":
            value = decode(*encode(partial, block, rng))
        else:
            value = fp8_values(partial, block, fmt)
        if residuals is not None:
            residuals[k - 1] = (partial - value).astype(F)
        partial = (value + g[k]).astype(F) if k < N else value
    return partial


def data(kind, N, n, rng):
    if kind == "gaussian":
        return [rng.standard_normal(n).astype(F) for _ in range(N)]
    if kind == "mean+noise":
        mu = rng.standard_normal(n)
        return [(mu + rng.standard_normal(n)).astype(F) for _ in range(N)]
    if kind == "heavy-tailed":
        return [rng.standard_t(2.5, n).astype(F) for _ in range(N)]
    if kind == "sparse":
        return [(rng.standard_normal(n) * (rng.random(n) < 0.1)).astype(F) for _ in range(N)]
    raise ValueError(kind)


def real_gradients(N, n, rng):
    """Each rank's buffer: chunks of 2048 parameters (tests/data/gradients.npy's rows are
    minibatch gradients of the same 2048), each chunk from other minibatches per rank."""
    rows = np.load(os.path.join(HERE, "..", "tests", "data", "gradients.npy")).astype(F)
    chunks = -(-n // rows.shape[1])
    picks = [rng.permutation(rows.shape[0])[:N] for _ in range(chunks)]
    return [np.concatenate([rows[p[r]] for p in picks])[:n].copy() for r in range(N)]


def errors(grads, result):
    exact = np.sum(np.array(grads, dtype=np.float64), axis=0)
    magnitude = np.sum(np.abs(np.array(grads, dtype=np.float64)), axis=0).max()
    diff = result.astype(np.float64) - exact
    return np.abs(diff).max() / magnitude, np.sqrt(np.mean(diff ** 2) / np.mean(exact ** 2))


def block_table(a, rng):
    print("| N | format | block B | wire bytes / element | max err / max sum|g| (worst kind) | "
          "RMS err / RMS sum (worst kind) |\n|---|---|---|---|---|---|")
    kinds = ["gaussian", "mean+noise", "heavy-tailed", "sparse", "gradients"]
    cases = [("int8", b) for b in (256, 512, 1024, 2048, 4096)] + [("e4m3", 256), ("e5m2", 256)]
    for N in a.ranks:
        for fmt, block in cases:
            worst_max = worst_rms = 0.0
            for kind in kinds:
                for _ in range(a.buffers):
                    grads = (real_gradients(N, a.elements, rng) if kind == "gradients"
                             else data(kind, N, a.elements, rng))
                    if grads[0].size % block:
                        grads = [x[:x.size - x.size % block] for x in grads]
                    e_max, e_rms = errors(grads, ring(grads, block, fmt=fmt))
                    worst_max, worst_rms = max(worst_max, e_max), max(worst_rms, e_rms)
            print(f"| {N} | {fmt} | {block} | {1 + 4 / block:.4f} | {worst_max:.3g} | "
                  f"{worst_rms:.3g} |", flush=True)


def rounding_table(a, rng):
    print("\n| N | rounding | one step: max err | bias over steps: max / max sum|g| | "
          "bias / one step's error |\n|---|---|---|---|---|")
    n = a.elements // 4
    for N in a.ranks:
        base = data("mean+noise", N, n, rng)
        drift = [rng.standard_normal(n).astype(F) for _ in range(N)]
        for name in ("nearest", "stochastic", "nearest + error feedback"):
            srng = np.random.default_rng(7) if name == "stochastic" else None
            residuals = [np.zeros(n, F) for _ in range(N)] if "feedback" in name else None
            total = np.zeros(n)
            first = None
            magnitude = 0.0
            for step in range(a.steps):
                grads = [(b + F(0.01) * step / a.steps * d).astype(F) for b, d in zip(base, drift)]
                result = ring(grads, 1024, srng, residuals)
                exact = np.sum(np.array(grads, dtype=np.float64), axis=0)
                total += result - exact
                magnitude = max(magnitude, np.sum(np.abs(np.array(grads, np.float64)), axis=0).max())
                if first is None:
                    first = np.abs(result - exact).max() / magnitude
            bias = np.abs(total / a.steps).max() / magnitude
            print(f"| {N} | {name} | {first:.3g} | {bias:.3g} | {bias / first:.3f} |", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="4,8,16", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--elements", type=int, default=1 << 18)
    p.add_argument("--buffers", type=int, default=3, help="buffers per kind, N and block")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    block_table(a, rng)
    rounding_table(a, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
