"""Under CERAR, a NaN/Inf in one rank's gradient stays in its element on every rank and a
scaler-style loop skips the step on every rank together; the fallback shows in stats()."""
import numpy as np

import cerar
import cerar.numpy as cn

cerar.init(algorithm="cerar", components=16, measure_link=False)
r, n = cerar.rank(), cerar.size()
skipped = []
for step in range(3):
    g = np.random.default_rng(10 * step + r).normal(1.0, 1.0, 1 << 16).astype(np.float32)
    if step == 1 and r == n - 1:
        g[12345] = np.inf
        g[777] = np.nan
    out = cn.allreduce(g, op=cerar.Sum, name="grad")
    bad = np.flatnonzero(~np.isfinite(out))
    if step == 1:
        assert list(bad) == [777, 12345], bad
        assert np.isnan(out[777]) and np.isposinf(out[12345]), out[[777, 12345]]
    else:
        assert bad.size == 0, bad
    skipped.append(bool(bad.size))
stats = cerar.stats()
assert stats["non_finite_fallbacks"] == 1 and stats["cerar_buffers"] == 2 \
    and stats["ring_buffers"] == 1, stats
cerar.shutdown()
print(f"nonfinite OK skipped={skipped}", flush=True)
