"""Shared by the worker scripts: checks that name the rank when they fail."""
import sys

import numpy as np


def check_close(name, got, expected, rtol=0.0, atol=0.0):
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        fail(f"{name}: shape {got.shape}, expected {expected.shape}")
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    error = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64)))) \
        if got.size else 0.0
    if error > atol + rtol * scale:
        fail(f"{name}: max error {error:g} > {atol + rtol * scale:g}\ngot {got}\nexpected {expected}")


def count_resets(state):
    """{"resets": n, "restores": n}, counted as the elastic `state` goes through them."""
    counts = {"resets": 0, "restores": 0}
    original = state.restore

    def restore():
        counts["restores"] += 1
        original()
    state.restore = restore
    state.register_reset_callbacks([lambda: counts.__setitem__("resets", counts["resets"] + 1)])
    return counts


def check(name, condition, detail=""):
    if not condition:
        fail(f"{name}: {detail}")


def fail(message):
    import cerar
    rank = cerar.rank() if cerar.is_initialized() else "?"
    print(f"FAIL rank {rank}: {message}", flush=True)
    sys.exit(1)
