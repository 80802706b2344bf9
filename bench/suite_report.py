#!/usr/bin/env python3
"""Tables and plots from bench/run_suite.py's JSON files (one per cluster config).

  python3 bench/suite_report.py bench/results/NAME      # rewrites NAME/results.md and the PNGs

Limits, with d the buffer in bytes and B the calibrated link rate (Mbit = 10^6 bit):
exact all-reduce 2(N-1)/N*d/B; CERAR with c components (1+(N-2)/c)*d/B; floor d/B.
All ratios are between figures measured in the same run of the same config.
"""
import glob, json, os, sys

HEADLINE_BYTES = 64 << 20
ORDER = ["cerar-auto", "ring", "torch-gloo", "mpi-allreduce", "mpi-allreduce-ring", "gloo-ring", "gloo-bcube",
         "gloo-ringchunked", "gloo-hd"]


def limit_s(row, n, rate_mbit):
    """The contender's own bound: bytes each rank must send over the link rate."""
    d, bps = row["bytes"], rate_mbit * 1e6 / 8
    if row.get("wire_bytes"):  # a 16-bit exact ring: half the bytes
        d = d * row["wire_bytes"] / 4
    if row.get("c"):
        return (1 + (n - 2) / row["c"]) * d / bps
    if row["contender"].startswith("cerar-rt-cerar"):
        return d / bps  # c is chosen per fused buffer: only the floor is known
    return 2 * (n - 1) / n * d / bps


def floor_s(row, rate_mbit):
    return row["bytes"] / (rate_mbit * 1e6 / 8)


def size_text(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def sort_key(name):
    if name in ORDER:
        return (0, ORDER.index(name), 0)
    if name.startswith("cerar-c"):
        return (1, 0, int(name[7:]))
    return (2, 0, name)


def load(outdir):
    runs = []
    for path in sorted(glob.glob(os.path.join(outdir, "n*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    return sorted(runs, key=lambda r: (r["config"]["rate_mbit"] is None, -(r["config"]["rate_mbit"] or 0)))


def by_size(run):
    table = {}
    for row in run["results"]:
        table.setdefault(row["bytes"], {})[row["contender"]] = row
    return table


def headline(run):
    """The figures the project's targets are stated in, at 64 MiB (or the largest size)."""
    n, rate, table = run["config"]["n"], run["rate_mbit"], by_size(run)
    sizes = [s for s in table if not any(k.startswith(("cerar-rt", "torch-ddp")) for k in table[s])]
    if not sizes:
        return None
    d = HEADLINE_BYTES if HEADLINE_BYTES in sizes else max(sizes)
    rows = table[d]
    out = {"config": run["config"]["name"], "n": n, "bytes": d, "rate_mbit": rate}
    auto, ring = rows.get("cerar-auto"), rows.get("ring")
    if auto:
        out.update(c_auto=auto["c"], cerar_auto_s=auto["best_s"],
                   cerar_auto_vs_limit=auto["best_s"] / limit_s(auto, n, rate),
                   cerar_auto_vs_floor=auto["best_s"] / floor_s(auto, rate))
    if ring:
        out.update(ring_s=ring["best_s"], ring_vs_limit=ring["best_s"] / limit_s(ring, n, rate))
    shaped = run["config"]["rate_mbit"]
    if shaped:  # the same limits at the rate tbf was given: what the links could carry at best
        out.update({f"{k}_vs_shaped_limit": r["best_s"] / limit_s(r, n, shaped)
                    for k, r in (("cerar_auto", auto), ("ring", ring)) if r})
    others = {k: v["best_s"] for k, v in rows.items()
              if not k.startswith("cerar") and k != "ring" and v.get("data") != "gaussian"}
    if auto and "torch-gloo" in rows:
        out["cerar_auto_over_torch_gloo"] = auto["best_s"] / rows["torch-gloo"]["best_s"]
    if auto and others:
        best = min(others, key=others.get)
        out.update(best_other=best, cerar_auto_over_best_other=auto["best_s"] / others[best])
    return out


def table_md(run, d, rows):
    n, rate = run["config"]["n"], run["rate_mbit"]
    names = sorted(rows, key=sort_key)
    ref = [k for k in ("cerar-auto", "ring", "torch-gloo", "gloo-ring", "mpi-allreduce") if k in rows]
    lines = [f"**{size_text(d)}** (limit: exact 2(N-1)/N·d/B, CERAR (1+(N-2)/c)·d/B; floor d/B)\n",
             "| contender | c | best s | median s | limit s | best/limit | best/floor | "
             + " | ".join(f"÷ {k}" for k in ref) + " | max rel err |",
             "|---" * (8 + len(ref)) + "|"]
    for k in names:
        r = rows[k]
        lim = limit_s(r, n, rate)
        extra = f" (+{r['local_backward_s']:.3f} s backward alone)" if "local_backward_s" in r else ""
        lines.append(f"| {k}{extra} | {r.get('c') or ''} | {r['best_s']:.3f} | {r['median_s']:.3f} | "
                     f"{lim:.3f} | {r['best_s'] / lim:.2f} | {r['best_s'] / floor_s(r, rate):.2f} | "
                     + " | ".join(f"{r['best_s'] / rows[x]['best_s']:.2f}" for x in ref)
                     + f" | {r['max_rel_err']:.2g} |")
    fits = [(what, excess_fit(rows, n, rate, most)) for what, most in
            (("c = N..16N", 16 * n), ("the whole grid", None))]
    fits = [(what, fit) for what, fit in fits if fit]
    if fits:
        lines.append("\nWhere CERAR's time over its limit goes (least squares, excess = fixed + per round "
                     "x (c+N-2)): " + "; ".join(f"over {what}: {fit[0]:.3f} s fixed + {fit[1] * 1e3:.2f} ms "
                                                 f"per round ({fit[2]} points)" for what, fit in fits) + ".")
    return "\n".join(lines) + "\n"


def grid_rows(rows):
    """The cerar-c<k> contenders (fixed c)."""
    return [r for k, r in rows.items() if k.startswith("cerar-c") and r.get("c")]


def excess_fit(rows, n, rate, most=None):
    """excess = a + b*(c+N-2) over the cerar-c<k> rows with c <= most: b is the per-round cost
    the limit omits (latency, stalls, a link idle between short messages), a the rest
    (start-up, bandwidth lost to the CPU or to TCP). Returns (a, b, points)."""
    pts = [(r["c"] + n - 2, r["best_s"] - limit_s(r, n, rate))
           for r in grid_rows(rows) if most is None or r["c"] <= most]
    if len(pts) < 3:
        return None
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    b = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else 0.0
    return my - b * mx, b, len(pts)


def spread(row):
    """Run-to-run spread: the interquartile range of the repeats over their median."""
    runs = sorted(row.get("runs_s") or [row["best_s"]])
    q1, q3 = runs[len(runs) // 4], runs[(3 * len(runs)) // 4]
    return (q3 - q1) / row["median_s"]


def selection_md(table):
    """cerar-auto against the best c of the grid and the exact ring, by medians of the
    interleaved repeats. Where the grid also ran auto's c, that c was timed twice (two identical
    contenders on links of their own): its time is the mean of the two medians, and how far
    apart they were (auto ÷ same c) joins the noise. Noise = the largest of that and the two
    interquartile ranges / median. 'within' / 'not slower' = the difference is at most the noise."""
    lines = ["**Selection** (medians of the interleaved repeats; auto's c timed twice where the grid has it: "
             "their mean; noise = the largest of |auto ÷ same c - 1| and the interquartile ranges / median)\n",
             "| size | auto c | auto median s | auto ÷ same c | best grid c | its median s | auto's c ÷ best c "
             "| noise | within | ring median s | auto ÷ ring | noise | not slower |", "|---" * 13 + "|"]
    for d in sorted(table):
        rows = table[d]
        auto, ring, grid = rows.get("cerar-auto"), rows.get("ring"), grid_rows(rows)
        if not auto or not grid or not ring:
            continue
        best = min(grid, key=lambda r: r["median_s"])
        same = next((r for r in grid if r["c"] == auto.get("c")), None)
        twin = auto["median_s"] / same["median_s"] if same else None
        chosen = (auto["median_s"] + same["median_s"]) / 2 if same else auto["median_s"]
        noise = max(spread(auto), abs(twin - 1) if same else 0)
        vs_best, s_best = chosen / best["median_s"], max(noise, spread(best))
        vs_ring, s_ring = chosen / ring["median_s"], max(noise, spread(ring))
        lines.append(f"| {size_text(d)} | {auto.get('c') or 'ring'} | {auto['median_s']:.3f} | "
                     f"{f'{twin:.3f}' if same else ''} | {best['c']} | {best['median_s']:.3f} | "
                     f"{vs_best:.3f} | {s_best:.3f} | {'yes' if vs_best - 1 <= s_best else 'NO'} | "
                     f"{ring['median_s']:.3f} | {vs_ring:.3f} | {s_ring:.3f} | "
                     f"{'yes' if vs_ring - 1 <= s_ring else 'NO'} |")
    return "\n".join(lines) + "\n" if len(lines) > 3 else ""


def lossy_rows(rows):
    return {k: r for k, r in rows.items() if r.get("data") == "gaussian"}


def lossy_md(run, d, rows):
    """Time and error side by side on the Gaussian data, every error against the fp64 sum."""
    n, rate = run["config"]["n"], run["rate_mbit"]
    ref = [k for k in ("torch-gloo-fp16", "cerar-ring-f32") if k in rows]
    lines = [f"**{size_text(d)}, time and error** (g = mu + noise, standard normal, mu shared; "
             "error = max|result - fp64 sum| / max|fp64 sum|, worst rank; predicted = the "
             "runtime's bound of its choice, relative to max sum|g|)\n",
             "| contender | ran | best s | best/limit | " + " | ".join(f"÷ {k}" for k in ref)
             + " | error | predicted |", "|---" * (6 + len(ref)) + "|"]
    for k in sorted(rows, key=lambda k: rows[k]["best_s"]):
        r = rows[k]
        ran = r.get("last_choice") or ("fp16 cast" if k.endswith("fp16") else "float32")
        if r.get("c"):
            ran += f" c={r['c']}"
        pred = f"{r['predicted_error']:.2g}" if r.get("predicted_error") else ""
        lines.append(f"| {k} | {ran} | {r['best_s']:.3f} | {r['best_s'] / limit_s(r, n, rate):.2f} | "
                     + " | ".join(f"{r['best_s'] / rows[x]['best_s']:.2f}" for x in ref)
                     + f" | {r['max_rel_err']:.2g} | {pred} |")
    return "\n".join(lines) + "\n"


def error_plot(outdir, run):
    """Best time against measured error, one point per lossy contender, at the largest size."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    table = {d: lossy_rows(rows) for d, rows in by_size(run).items()}
    table = {d: rows for d, rows in table.items() if rows}
    if not table:
        return []
    d = max(table)
    fig, ax = plt.subplots(figsize=(8, 5))
    for k, r in sorted(table[d].items()):
        err = max(r["max_rel_err"], 1e-9)  # exact results sit on the axis floor
        ax.plot([err], [r["best_s"]], "o" if k.startswith("cerar") else "s", label=k)
        ax.annotate(k, (err, r["best_s"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("max relative error against the fp64 sum")
    ax.set_ylabel("best time per all-reduce (s)")
    ax.set_title(f"{run['config']['name']}: {size_text(d)}, B = {run['rate_mbit']:.0f} Mbit/s, "
                 "Gaussian fp32 data")
    ax.legend(fontsize=6, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    path = f"{run['config']['name']}-time-vs-error.png"
    fig.savefig(os.path.join(outdir, path), dpi=90, bbox_inches="tight")
    plt.close(fig)
    return [path]


def matrix_md(rows):
    names = sorted(rows, key=sort_key)
    lines = ["Ratio of best times, row ÷ column:\n", "| | " + " | ".join(names) + " |",
             "|---" * (len(names) + 1) + "|"]
    for a in names:
        lines.append(f"| {a} | " + " | ".join(f"{rows[a]['best_s'] / rows[b]['best_s']:.2f}"
                                             for b in names) + " |")
    return "\n".join(lines) + "\n"


def size_lines(plt, series, col, ylabel, what):
    """One line per contender over buffer sizes."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for k in sorted(series, key=sort_key):
        pts = series[k]
        style = "-o" if k in ("cerar-auto", "ring") else ("--." if k.startswith("cerar-c") else ":x")
        ax.plot([p[0] for p in pts], [p[col] for p in pts], style, label=k)
    ax.set_xscale("log", base=2)
    if what == "time":
        ax.set_yscale("log")
    else:
        ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("buffer (MiB)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def single_size_bars(plt, series, col, xlabel, what):
    """One horizontal bar per contender, fastest on top, its value written beside it."""
    names = sorted(series, key=lambda k: series[k][0][col], reverse=True)
    values = [series[k][0][col] for k in names]
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.32 * len(names)))
    colors = ["C0" if k.startswith("cerar") or k == "ring" else "C7" for k in names]  # ring: cerar's
    ax.barh(range(len(names)), values, color=colors)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=8)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.3g}", va="center", fontsize=7)
    if what == "ratio":
        ax.axvline(1.0, color="gray", lw=0.8)
    ax.set_xlim(0, max(values) * 1.15)
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def plots(outdir, run):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    name, n, rate = run["config"]["name"], run["config"]["n"], run["rate_mbit"]
    table = by_size(run)
    series = {}
    for d in sorted(table):
        for k, r in table[d].items():
            if not k.startswith(("cerar-rt", "torch-ddp")) and r.get("data") != "gaussian":
                series.setdefault(k, []).append((d / 2**20, r["best_s"], r["best_s"] / limit_s(r, n, rate)))
    made = []
    if not series:  # only the lossy contenders ran: their plot is error_plot's
        return made
    sizes = {p[0] for pts in series.values() for p in pts}
    for what, col, ylabel in (("time", 1, "best time per all-reduce (s)"),
                              ("ratio", 2, "best time / its own limit")):
        if len(sizes) == 1:  # one size: a line through one point says nothing; bars do
            fig = single_size_bars(plt, series, col, ylabel, what)
            fig.axes[0].set_title(f"{name}: {size_text(int(next(iter(sizes)) * 2**20))}, "
                                  f"B = {rate:.0f} Mbit/s calibrated, fp32 sum")
        else:
            fig = size_lines(plt, series, col, ylabel, what)
            fig.axes[0].set_title(f"{name}: B = {rate:.0f} Mbit/s calibrated, fp32 sum")
        path = f"{name}-{what}.png"
        fig.savefig(os.path.join(outdir, path), dpi=90, bbox_inches="tight")
        plt.close(fig)
        made.append(path)
    return made


def write(outdir):
    runs = load(outdir)
    heads = [h for h in map(headline, runs) if h]
    md = ["# Results\n", f"Command: `sudo {runs[0]['command']}`\n" if runs else "",
          "B = the calibrated link rate (tcp_ring.py free and with a 64 KiB window, best of before/after the contenders); "
          "times are the slowest rank's, best of the repeats.\n",
          "## Headline\n",
          "| config | d | B Mbit/s | c auto | CERAR auto s | ÷ its limit | ÷ d/B | ring s | ring ÷ limit "
          "| CERAR ÷ torch-gloo | best other | CERAR ÷ best other | at the shaped rate: CERAR ÷ limit, ring ÷ limit |",
          "|---" * 13 + "|"]
    f = lambda h, k, fmt="{:.2f}": fmt.format(h[k]) if k in h else "n/a"
    for h in heads:
        md.append(f"| {h['config']} | {size_text(h['bytes'])} | {h['rate_mbit']:.0f} | {h.get('c_auto', '')} | "
                  f"{f(h, 'cerar_auto_s', '{:.3f}')} | {f(h, 'cerar_auto_vs_limit')} | {f(h, 'cerar_auto_vs_floor')} | "
                  f"{f(h, 'ring_s', '{:.3f}')} | {f(h, 'ring_vs_limit')} | {f(h, 'cerar_auto_over_torch_gloo')} | "
                  f"{h.get('best_other', '')} | {f(h, 'cerar_auto_over_best_other')} | "
                  f"{f(h, 'cerar_auto_vs_shaped_limit')}, {f(h, 'ring_vs_shaped_limit')} |")
    for run in runs:
        cfg, cal = run["config"], run["calibration"]
        md += [f"\n## {cfg['name']}\n",
               f"N = {cfg['n']}, shaped {cfg['rate_mbit'] or 'no (loopback)'} Mbit/s; calibrated "
               + ", ".join(f"{c['min_mbit']:.0f}" for c in cal) + f" Mbit/s -> B = {run['rate_mbit']:.0f}; "
               f"took {run.get('seconds', '?')} s.",
               (f"Probe: alpha {run['probe']['alpha_s'] * 1e6:.0f} µs, beta {run['probe']['beta_s_per_byte'] * 1e9:.2f} ns/B, "
                f"gamma {run['probe']['gamma_s_per_byte'] * 1e9:.2f} ns/B.\n") if run.get("probe") else ""]
        md += [f"* {n}" for n in run.get("notes", [])]
        table = by_size(run)
        for d in sorted(table):
            md.append(table_md(run, d, table[d]))
            if lossy_rows(table[d]):
                md.append(lossy_md(run, d, lossy_rows(table[d])))
        md.append(selection_md(table))
        step = [d for d in table if not any(k.startswith(("cerar-rt", "torch-ddp")) for k in table[d])]
        if step:
            d = HEADLINE_BYTES if HEADLINE_BYTES in step else max(step)
            md.append(matrix_md(table[d]))
        md += [f"![{p}]({p})" for p in plots(outdir, run) + error_plot(outdir, run)]
    with open(os.path.join(outdir, "results.md"), "w") as out:
        out.write("\n".join(md) + "\n")
    with open(os.path.join(outdir, "headline.json"), "w") as out:
        json.dump(heads, out, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: suite_report.py bench/results/NAME")
    write(sys.argv[1])
