"""Training fidelity of CERAR against the exact ring and torch DDP (gloo), 4 local ranks.

    .venv/bin/python examples/fidelity_suite.py                 # all runs + report (~10 min)
    .venv/bin/python examples/fidelity_suite.py --report-only   # redo table and plot

Runs examples/fidelity_train.py once per configuration (same seed, same steps; the exact ring
also over 3 seeds, so that CERAR's difference reads against seed-to-seed noise) and writes
bench/results/fidelity/: runs/*.json, results.json, table.md and loss_curves.png.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "fidelity"
TRAIN = ROOT / "examples" / "fidelity_train.py"
PY = sys.executable
EPS = 2.0 ** -11  # the spec's default for f32
N = 4

# (name, environment, extra arguments); CERAR rows force CERAR on every fused buffer. An
# environment of None or a backend name runs torch DDP (gloo, or with cerar's hook).
def cerar(c=4 * N, eps=None, share=False):
    env = {"CERAR_ALGORITHM": "cerar", "CERAR_COMPONENTS": str(c)}
    if eps:
        env["CERAR_EPS"] = repr(eps)
    if share:
        env["CERAR_SHARE_CORRECTION"] = "1"
    return env


OFF = ["--drift-check-every", "0"]  # drift control off: CERAR's drift as it comes

CONFIGS = [
    ("ring seed 0", {"CERAR_ALGORITHM": "ring"}, ["--seed", "0"]),
    ("ring seed 1", {"CERAR_ALGORITHM": "ring"}, ["--seed", "1"]),
    ("ring seed 2", {"CERAR_ALGORITHM": "ring"}, ["--seed", "2"]),
    ("torch DDP gloo", None, []),
    ("DDP + cerar hook", "ddp-cerar", []),  # the runtime's defaults (auto), from DDP's buckets
    ("auto (defaults)", {}, []),
    ("cerar c=16 eps=2^-11 (default eps)", cerar(), OFF),
    ("cerar c=16 eps=2^-8", cerar(eps=2.0 ** -8), OFF),
    ("cerar c=16 eps=2^-14", cerar(eps=2.0 ** -14), OFF),
    ("cerar c=64 eps=2^-11", cerar(c=16 * N), OFF),
    ("cerar c=16 eps=2^-11 share-corrected", cerar(share=True), OFF),
    ("cerar c=16 eps=2^-8 share-corrected", cerar(eps=2.0 ** -8, share=True), OFF),
    ("cerar c=16 eps=2^-11 resync every 50", cerar(), ["--resync-every", "50", *OFF]),
    ("cerar c=16 defaults (drift control on)", cerar(), []),
    ("cerar c=64 defaults (drift control on)", cerar(c=16 * N), []),
]
TASKS = {
    "digits": ["--steps", "300", "--eval-every", "20", "--error-every", "5"],
    "charlm": ["--steps", "200", "--eval-every", "20", "--error-every", "10"],
}
SKIP = {"charlm": {"auto (defaults)", "cerar c=16 eps=2^-14",
                   "cerar c=16 eps=2^-8 share-corrected"}}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slug(task, name):
    return task + "_" + "".join(ch if ch.isalnum() else "_" for ch in name).strip("_")


def run(task, name, env_extra, extra):
    out = OUT / "runs" / (slug(task, name) + ".json")
    args = [str(TRAIN), "--task", task, *TASKS[task], *extra, "--out", str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CERAR_")}
    env.update(OMP_NUM_THREADS="1", CERAR_MEASURE_LINK="0", CERAR_LOG_LEVEL="warning")
    if env_extra is None or isinstance(env_extra, str):  # torch DDP: torchrun's variables
        port = str(free_port())  # cerar's rendezvous (ddp-cerar) takes the next one
        procs = [subprocess.Popen([PY, *args, "--backend", env_extra or "ddp"], env=dict(
            env, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(r), WORLD_SIZE=str(N),
            LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(N)),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for r in range(N)]
        codes = [p.wait(timeout=900) for p in procs]
        errors = [p.stderr.read() for p in procs]
        if any(codes):
            raise RuntimeError(f"{task}/{name} failed: {errors}")
    else:
        env.update(env_extra)
        subprocess.run([PY, "-m", "cerar.run", "-np", str(N), PY, *args], env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=900)
    result = json.loads(out.read_text())
    result["name"] = name
    out.write_text(json.dumps(result, indent=1))
    print(f"{task:7s} {name:40s} val loss {result['final_val_loss']:.4f} "
          f"err {result['error_max'] or 0:.1e} {result['seconds']:.0f}s", flush=True)
    return result


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def report(results):
    lines = ["| task | configuration | final val loss | vs ring seed 0 | best val loss | "
             "final / best val acc | all-reduce error, median / max of per-step max | "
             "drift max rel (final / worst sampled) | drift checks / resyncs | step ms | "
             "all-reduce wait ms |", "|" + "---|" * 11]
    noise = {}
    for task in TASKS:
        rows = [r for r in results if r["task"] == task]
        ring = [r for r in rows if r["name"].startswith("ring seed")]
        base = next(r for r in ring if r["seed"] == 0)["final_val_loss"]
        finals = [r["final_val_loss"] for r in ring]
        noise[task] = {"ring_final_val_loss": finals,
                       "spread_pct": 100 * (max(finals) - min(finals)) / base,
                       "max_dev_pct": 100 * max(abs(f - base) for f in finals) / base}
        for r in rows:
            delta = 100 * (r["final_val_loss"] - base) / base
            drift = r["final_drift"].get("max_rel")
            worst = max((d.get("max_rel", 0) for d in r.get("drift", [])), default=None)
            control = r.get("drift_control") or {}
            checks = (f"{control['checks']} / {control['resyncs']}"
                      if control.get("checks") is not None and control.get("every", 0)
                      else "off")
            lines.append(
                f"| {task} | {r['name']} | {r['final_val_loss']:.4f} | {delta:+.2f}% | "
                f"{r['best_val_loss']:.4f} | {r['final_val_acc']:.3f} / {r['best_val_acc']:.3f} | "
                f"{fmt(r['error_max_median'], '.1e')} / {fmt(r['error_max'], '.1e')} | "
                f"{fmt(drift, '.1e')} / {fmt(worst, '.1e')} | {checks} | {r['step_ms']:.1f} | "
                f"{r['allreduce_wait_ms']:.2f} |")
    lines.append("")
    for task, n in noise.items():
        lines.append(f"- {task}: exact ring over seeds 0-2, final val loss "
                     f"{', '.join(f'{v:.4f}' for v in n['ring_final_val_loss'])}; "
                     f"spread {n['spread_pct']:.2f}% of seed 0's.")
    costs = [r for r in results if r.get("costs")]
    for task in TASKS:
        # the helpers' costs, from the CERAR rows of the quieter machine (not the defaults')
        c = [r["costs"] for r in costs if r["task"] == task and r["name"].startswith("cerar")
             and "defaults" not in r["name"]]
        if c:
            mean = {k: 1000 * sum(x[k] for x in c) / len(c) for k in c[0]}
            step = [r["step_ms"] for r in costs if r["task"] == task]
            size = next(r["parameters"] for r in results if r["task"] == task)
            lines.append(f"- {task} ({size} parameters): cheap drift check "
                         f"{mean['drift_check_s']:.2f} ms, exact "
                         f"drift {mean['drift_exact_s']:.2f} ms, resync "
                         f"{mean['resync_s']:.2f} ms per call (median step "
                         f"{sorted(step)[len(step) // 2]:.1f} ms).")
    lines += drift_lines(results)
    (OUT / "table.md").write_text("\n".join(lines) + "\n")
    summary = [{k: v for k, v in r.items() if k not in ("history",)} for r in results]
    (OUT / "results.json").write_text(json.dumps({"noise": noise, "runs": summary}, indent=1))
    plot(results)
    print("\n".join(lines))


def drift_lines(results):
    """Drift control's cost: as measured inside it in the rows with the defaults, and from
    the interleaved on/off run (overhead.json) as paired block differences."""
    lines = []
    for r in results:
        control = r.get("drift_control") or {}
        if "defaults" in r["name"] and control.get("checks"):
            inside = (control["check_ms"] + control["resync_ms"]) / r["steps"]
            lines.append(
                f"- {r['task']} {r['name']}: {control['checks']} checks "
                f"({control['check_ms'] / control['checks']:.2f} ms each on the host), "
                f"{control['resyncs']} resyncs "
                f"({control['resync_ms'] / max(1, control['resyncs']):.1f} ms, "
                f"{control['resync_bytes'] / max(1, control['resyncs']) / 1e6:.2f} MB each); "
                f"{inside:.3f} ms per step in drift control = "
                f"{100 * inside / r['step_ms']:.2f}% of the median step; drift estimate at "
                f"the checks up to {control['max_drift']:.1e} (relative L2).")
    overhead = OUT / "overhead.json"
    if not overhead.exists():
        return lines
    lines += ["", "Drift control's overhead, defaults on and off on alternating steps of one "
              "run (CERAR forced, c = 16); the on - off difference of the mean step over all "
              "pairs of neighbouring steps (+- its standard error) and over each tenth of the "
              "run:", "",
              "| task | steps | mean step ms on / off | on - off, all pairs | on - off, tenths "
              "of the run: min / median / max | inside drift control |", "|" + "---|" * 6]
    for o in json.loads(overhead.read_text()):
        on, off = o["ab"]["on_block_means_ms"], o["ab"]["off_block_means_ms"]
        n = min(len(on), len(off))
        tenths = sorted(100 * (sum(on[i:i + n // 10]) - sum(off[i:i + n // 10])) /
                        sum(off[i:i + n // 10]) for i in range(0, n - n // 10 + 1, n // 10))
        control = o["drift_control"]
        inside = (control["check_ms"] + control["resync_ms"]) / (o["steps"] / 2)
        mean_on, mean_off = sum(on[:n]) / n, sum(off[:n]) / n
        pairs = [a - b for a, b in zip(on, off)]
        mean = sum(pairs) / n
        error = (sum((d - mean) ** 2 for d in pairs) / (n - 1) / n) ** 0.5
        lines.append(
            f"| {o['task']} | {o['steps']} | {mean_on:.1f} / {mean_off:.1f} | "
            f"{100 * mean / mean_off:+.1f}% +- {100 * error / mean_off:.1f}% | "
            f"{tenths[0]:+.1f}% / {tenths[len(tenths) // 2]:+.1f}% / {tenths[-1]:+.1f}% | "
            f"{inside:.3f} ms/step = "
            f"{100 * inside / mean_off:.2f}% ({control['checks']} checks, "
            f"{control['resyncs']} resyncs) |")
    return lines


def plot(results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, len(TASKS), figsize=(14, 9))
    for col, task in enumerate(TASKS):
        for r in [r for r in results if r["task"] == task]:
            dashed = r["name"].startswith("ring seed") and r["seed"]
            style = dict(lw=1.0, ls="--" if dashed else "-")
            ev = [h for h in r["history"] if "val_loss" in h]
            axes[0, col].plot([h["step"] for h in ev], [h["val_loss"] for h in ev],
                              label=r["name"], **style)
            er = [h for h in r["history"] if "error_max" in h]
            axes[1, col].semilogy([h["step"] for h in er],
                                  [max(h["error_max"], 1e-9) for h in er], label=r["name"],
                                  **style)
        axes[0, col].set(title=f"{task}: validation loss (4 ranks)", xlabel="step",
                         ylabel="val loss")
        axes[1, col].set(title=f"{task}: all-reduce error, max over ranks",
                         xlabel="step", ylabel="max|reduced - fp64 mean| / max|mean|")
        axes[0, col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "loss_curves.png", dpi=110)


# On and off alternate every step: the other jobs on this shared machine change its speed
# by several times within seconds, so only neighbouring steps compare.
AB = {"digits": ["--steps", "1000", "--ab-blocks", "1"],
      "charlm": ["--steps", "400", "--ab-blocks", "1"]}


def overhead(tasks):
    """Drift control's defaults on and off in alternating blocks of one run per task (the
    machine's load changes slower than a block), CERAR forced at c = 16."""
    rows = []
    for task in tasks:
        out = OUT / "runs" / f"{task}_overhead.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CERAR_")}
        env.update(OMP_NUM_THREADS="1", CERAR_MEASURE_LINK="0", CERAR_LOG_LEVEL="warning",
                   **cerar())
        subprocess.run([PY, "-m", "cerar.run", "-np", str(N), PY, str(TRAIN), "--task", task,
                        *AB[task], "--error-every", "0", "--eval-every", "100000",
                        "--drift-every", "100000", "--out", str(out)],
                       env=env, check=True, stdout=subprocess.DEVNULL, timeout=1800)
        result = json.loads(out.read_text())
        rows.append({k: result[k] for k in ("task", "steps", "ab", "drift_control")})
        print(f"{task} overhead {result['ab']['on_mean_ms']:.1f} ms on, "
              f"{result['ab']['off_mean_ms']:.1f} ms off", flush=True)
    (OUT / "overhead.json").write_text(json.dumps(rows, indent=1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--rows", default="", help="only configurations whose name contains this")
    parser.add_argument("--overhead", action="store_true",
                        help="also time drift control on and off interleaved (overhead.json)")
    args = parser.parse_args()
    (OUT / "runs").mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for task in args.tasks.split(","):
            for name, env, extra in CONFIGS:
                if name not in SKIP.get(task, ()) and args.rows in name:
                    run(task, name, env, extra)
        if args.overhead:
            overhead(args.tasks.split(","))
    results = []
    for task in TASKS:
        for name, _, _ in CONFIGS:
            path = OUT / "runs" / (slug(task, name) + ".json")
            if path.exists():
                results.append(json.loads(path.read_text()))
    report(results)


if __name__ == "__main__":
    main()
