#!/usr/bin/env python3
"""Time to accuracy: the language model of tta_model.py trained data-parallel to a fixed
validation loss with each communication variant, N ranks on emulated slow links.

  sudo /usr/bin/python3 bench/time_to_accuracy.py --ranks 4 --rate-mbit 100 --seeds 3 \\
       --one-seed cerar-ring,cerar-budget --variants cerar-auto,ddp,ddp-fp16,cerar-ring,cerar-budget \\
       --out bench/results/tta-n4-100
  python3 bench/time_to_accuracy.py --loopback --ranks 2 --seeds 1 --tiny --out /tmp/tta  # smoke

Each (variant, seed) is one job (bench/runner.py, ranks in namespaces made by bench/netem.sh;
--loopback: all on 127.0.0.1, no root). The variants interleave (seed-major) so that drift
of a noisy machine spreads over all of them. Writes OUT/results.json (every run with its
validation log), OUT/report.md (the table) and OUT/loss_vs_time.png when matplotlib is there.
"""
import argparse, json, os, socket, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runner  # noqa: E402

PREFIX = "cerartta"
VENV_PY = os.path.join(os.path.dirname(HERE), ".venv", "bin", "python")
TINY = ["--d-model", "32", "--layers", "1", "--heads", "2", "--seq", "16", "--max-steps", "4",
        "--eval-every", "2", "--val-batches", "2", "--batch", "4", "--lr", "1e-3"]


class Lines:
    """A file-like sink keeping rank 0's TTA_RESULT line (runner prefixes lines with "[i] ")."""

    def __init__(self, echo):
        self.result, self.echo = None, echo

    def write(self, text):
        for line in text.splitlines():
            if line.startswith("[0] TTA_RESULT "):
                self.result = json.loads(line[len("[0] TTA_RESULT "):])
            elif self.echo and line.startswith("[0] TTA "):
                print("   ", line[4:], flush=True)
            elif self.echo and "rror" in line:
                print("   ", line, flush=True)

    def flush(self):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_one(a, variant, seed, port):
    cmd = [a.python, os.path.join(HERE, "tta_rank.py"), "--variant", variant, "--seed", str(seed),
           "--target-loss", str(a.target_loss), "--max-seconds", str(a.max_seconds),
           "--max-error", str(a.max_error)] + (TINY if a.tiny else []) + a.rank_args
    sink = Lines(echo=not a.quiet)
    status = runner.run(cmd, a.ranks, "" if a.loopback else PREFIX, port,
                        timeout=a.max_seconds * 3 + 300, out=sink, log=open(os.devnull, "w"))
    if status != 0 or sink.result is None:
        return dict(variant=variant, seed=seed, failed=status)
    if variant == "cerar-budget":
        sink.result["max_error"] = a.max_error
    return sink.result


def time_to(run, target):
    """(training seconds, step) at the first validation at or below `target`, from the run's
    log (a run that stopped at a lower target of its own passed this one on the way)."""
    return next(((p["train_s"], p["step"]) for p in run["log"] if p["val_loss"] <= target),
                (None, None))


def summarize(runs, baseline, target):
    """Per variant: seeds, median and range of time to target, the per-seed ratio to the
    baseline's run with the same seed, final loss, link bytes, step time."""
    rows, by = [], {}
    for r in runs:
        if "failed" not in r:
            r["to_target_s"], r["to_target_step"] = time_to(r, target)
        by.setdefault(r["variant"], []).append(r)
    base_by_seed = {r["seed"]: r for r in by.get(baseline, []) if r.get("to_target_s")}
    base = None
    for variant, rs in by.items():
        ok = [r for r in rs if "failed" not in r]
        times = sorted(r["to_target_s"] for r in ok if r["to_target_s"] is not None)
        ratios = sorted(r["to_target_s"] / base_by_seed[r["seed"]]["to_target_s"] for r in ok
                        if r["to_target_s"] is not None and r["seed"] in base_by_seed)
        row = dict(variant=variant, runs=len(rs), reached=len(times),
                   median_s=statistics.median(times) if times else None,
                   min_s=times[0] if times else None, max_s=times[-1] if times else None,
                   ratios=ratios,
                   final_loss=statistics.median(r["final_val_loss"] for r in ok) if ok else None,
                   tx_mib_per_step=statistics.median(r["tx_bytes_rank0"] / 2**20 / r["steps"]
                                                     for r in ok)
                   if ok and ok[0]["tx_bytes_rank0"] is not None else None,
                   step_s=statistics.median(r["train_s"] / r["steps"] for r in ok) if ok else None)
        rows.append(row)
        if variant == baseline:
            base = row
    for row in rows:
        # Unpaired: the ranges over seeds are apart (needs two or more seeds each). Paired:
        # every seed's ratio to the baseline's run with the same seed (same data, weights and
        # validation windows) is on the same side of 1.
        row["beyond_spread"] = bool(base and row is not base and row["reached"] >= 2 and
                                    base["reached"] >= 2 and (row["max_s"] < base["min_s"] or
                                                              row["min_s"] > base["max_s"]))
        r = row["ratios"]
        row["paired_apart"] = bool(row is not base and len(r) >= 2 and (r[-1] < 1 or r[0] > 1))
    return rows


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def report(rows, runs, a):
    lines = [f"Time to validation loss {a.target_loss}, {a.ranks} ranks "
             + ("on loopback" if a.loopback else f"@ {a.rate_mbit} Mbit/s") +
             "; times are training seconds (validation excluded); ratio: to the "
             f"{a.baseline} run of the same seed", "",
             f"| variant | reached | median s | range s | ratio to {a.baseline}, median (range) "
             "| apart: ranges / paired | final loss | MiB sent per step (rank 0) | s/step |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rng = "-" if r["min_s"] is None else f"{r['min_s']:.1f}-{r['max_s']:.1f}"
        q = r["ratios"]
        ratio = "-" if not q else (f"{statistics.median(q):.3f}" +
                                   (f" ({q[0]:.3f}-{q[-1]:.3f})" if len(q) > 1 else ""))
        apart = f"{'yes' if r['beyond_spread'] else 'no'} / {'yes' if r['paired_apart'] else 'no'}"
        lines.append(f"| {r['variant']} | {r['reached']}/{r['runs']} | {fmt(r['median_s'], '.1f')} "
                     f"| {rng} | {ratio} | {apart} | {fmt(r['final_loss'], '.3f')} "
                     f"| {fmt(r['tx_mib_per_step'], '.1f')} | {fmt(r['step_s'], '.2f')} |")
    lines += ["", "Every run:", "",
              "| variant | seed | s to target | steps to target | steps run | final loss "
              "| MiB sent per step (rank 0) | CERAR / ring / 16-bit wire buffers |",
              "|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r["variant"], r["seed"])):
        if "failed" in r:
            lines.append(f"| {r['variant']} | {r['seed']} | failed ({r['failed']}) | | | | | |")
            continue
        st = r.get("stats") or {}
        bufs = (f"{st['cerar_buffers']} / {st['ring_buffers']} / {st.get('wire_buffers', 0)}"
                if "cerar_buffers" in st else "-")
        tx = ("-" if r["tx_bytes_rank0"] is None
              else f"{r['tx_bytes_rank0'] / 2**20 / r['steps']:.1f}")
        lines.append(f"| {r['variant']} | {r['seed']} | {fmt(r['to_target_s'], '.1f')} "
                     f"| {fmt(r['to_target_step'], 'd')} | {r['steps']} | {r['final_val_loss']:.4f} "
                     f"| {tx} | {bufs} |")
    return "\n".join(lines + loss_at_steps(runs, a.baseline)) + "\n"


def loss_at_steps(runs, baseline):
    """Validation loss after a fixed number of steps, the same for every variant of a seed: step
    10 and the last validation step every run of that seed reached (runs stop at the target, so
    time to it is steps x seconds per step only where the losses per step agree)."""
    ok = [r for r in runs if "failed" not in r and r.get("log")]
    seeds = sorted({r["seed"] for r in ok})
    last = {s: min(r["log"][-1]["step"] for r in ok if r["seed"] == s) for s in seeds}
    at = {s: sorted({k for k in (10, last[s]) if k <= last[s]}) for s in seeds}
    cols = [(s, k) for s in seeds for k in at[s]]
    if not cols:
        return []

    def loss(r, k):
        return next((p["val_loss"] for p in r["log"] if p["step"] == k), None)
    lines = ["", f"Validation loss after a fixed number of steps (seed: step; in brackets the "
             f"difference to {baseline}'s run of the same seed):", "",
             "| variant | " + " | ".join(f"seed {s}: step {k}" for s, k in cols) + " |",
             "|---|" + "---|" * len(cols)]
    base = {r["seed"]: r for r in ok if r["variant"] == baseline}
    for variant in sorted({r["variant"] for r in ok}):
        by_seed = {r["seed"]: r for r in ok if r["variant"] == variant}
        cells = []
        for s, k in cols:
            v = loss(by_seed[s], k) if s in by_seed else None
            b = loss(base[s], k) if s in base and variant != baseline else None
            cells.append("-" if v is None else f"{v:.4f}" + ("" if b is None else f" ({v - b:+.4f})"))
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines


def plot(runs, path, target):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    # One panel per seed: runs are compared with the same seed's runs (same data, weights and
    # validation windows); seeds differ more from each other than variants within a seed.
    ok = [r for r in runs if "failed" not in r]
    seeds = sorted({r["seed"] for r in ok}) or [0]
    fig, axes = plt.subplots(1, len(seeds), figsize=(4.2 * len(seeds) + 1, 4.5), sharey=True,
                             squeeze=False)
    colors = {}
    for r in ok:
        colors.setdefault(r["variant"], f"C{len(colors)}")
    for ax, seed in zip(axes[0], seeds):
        for r in (r for r in ok if r["seed"] == seed):
            ax.plot([p["train_s"] for p in r["log"]], [p["val_loss"] for p in r["log"]],
                    color=colors[r["variant"]], alpha=0.85, label=r["variant"])
        ax.axhline(target, color="gray", linestyle="--", linewidth=0.8)
        ax.set_title(f"seed {seed}")
        ax.set_xlabel("training seconds")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("validation loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--rate-mbit", type=int, default=100)
    p.add_argument("--loopback", action="store_true", help="no namespaces, no shaping, no root")
    p.add_argument("--variants", default="ddp,ddp-fp16,cerar-ring,cerar-auto")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--one-seed", default="",
                   help="variants (comma-separated, also listed in --variants) run with seed 0 only")
    p.add_argument("--target-loss", type=float, default=None,
                   help="validation loss to reach (default 2.8; --report-only: the saved one)")
    p.add_argument("--max-seconds", type=float, default=600)
    p.add_argument("--max-error", type=float, default=3e-3,
                   help="cerar-budget's error budget (3e-3 admits the fp16 wire at N <= 5)")
    p.add_argument("--baseline", default="ddp")
    p.add_argument("--tiny", action="store_true", help="a 4-step toy model (smoke test)")
    p.add_argument("--port", type=int, default=0,
                   help="rendezvous port (0: a free one per job, found on loopback)")
    p.add_argument("--python", default=VENV_PY, help="interpreter of the ranks")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--resume", action="store_true",
                   help="keep OUT/results.json's finished runs and run only the missing ones")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite OUT's report and plot from its results.json; run nothing")
    p.add_argument("--out", required=True)
    p.add_argument("rank_args", nargs=argparse.REMAINDER, help="-- more tta_rank.py arguments")
    a = p.parse_args(argv)
    a.rank_args = a.rank_args[1:] if a.rank_args[:1] == ["--"] else a.rank_args
    a.variants = [v for v in a.variants.split(",") if v]
    a.one_seed = [v for v in a.one_seed.split(",") if v]
    if set(a.one_seed) - set(a.variants):
        p.error("--one-seed lists a variant missing from --variants")
    if not a.loopback and not a.report_only and os.geteuid() != 0:
        p.error("emulated links need root (or use --loopback)")
    return a


def main(argv=None):
    a = parse(argv)
    os.makedirs(a.out, exist_ok=True)
    if not a.report_only and a.target_loss is None:
        a.target_loss = 2.8
    if a.report_only:
        with open(os.path.join(a.out, "results.json")) as f:
            saved = json.load(f)
        for key in ("ranks", "rate_mbit", "loopback", "seeds", "baseline"):
            setattr(a, key, saved["args"][key])
        if a.target_loss is None:
            a.target_loss = saved["args"]["target_loss"]
        return write_report(saved["runs"], a)
    if not a.loopback:
        subprocess.run([os.path.join(HERE, "netem.sh"), "up", "--ranks", str(a.ranks),
                        "--rate-mbit", str(a.rate_mbit), "--name", PREFIX], check=True)
    runs = []
    if a.resume and os.path.exists(os.path.join(a.out, "results.json")):
        with open(os.path.join(a.out, "results.json")) as f:
            runs = [r for r in json.load(f)["runs"] if "failed" not in r]
    done = {(r["variant"], r["seed"]) for r in runs}
    try:
        for seed in range(a.seeds):
            for variant in a.variants:
                if (seed > 0 and variant in a.one_seed) or (variant, seed) in done:
                    continue
                print(f"== {variant} seed {seed}", flush=True)
                runs.append(run_one(a, variant, seed, a.port or free_port()))
                with open(os.path.join(a.out, "results.json"), "w") as f:
                    json.dump(dict(args=vars(a), runs=runs), f, indent=1)
    finally:
        if not a.loopback:
            subprocess.run([os.path.join(HERE, "netem.sh"), "down", "--name", PREFIX])
    return write_report(runs, a)


def write_report(runs, a):
    table = report(summarize(runs, a.baseline, a.target_loss), runs, a)
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(table)
    print(table)
    if not plot(runs, os.path.join(a.out, "loss_vs_time.png"), a.target_loss):
        print("(no matplotlib: no plot)")
    return 1 if any("failed" in r for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
