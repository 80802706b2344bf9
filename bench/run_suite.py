#!/usr/bin/env python3
"""Every contender on every emulated cluster, calibrated in the same run; tables and plots.

  sudo python3 bench/run_suite.py --headline          # N=4@400 and N=8@200, 64 MiB, 2 repeats
  sudo python3 bench/run_suite.py [--configs 4@400,8@200,4@100,lo4] [--sizes 1M,4M,16M,64M,256M]
                                  [--repeats R] [--runtime] [--name NAME] [--bin PATH] [--dry-run]
                                  [--net-only] [--only ring,cerar]

A config N@R is N ranks on links shaped to R Mbit/s (bench/netem.sh); loN is N ranks on
loopback (unshaped: the CPU-bound case). Per config: bring the cluster up, calibrate the links
(tcp_ring.py, before and after the contenders), run cerar-bench-net (cerar ring, CERAR over a c
grid and with the modelled c, Gloo's all-reduces), torch.distributed (gloo) and Open MPI's
MPI_Allreduce, the lossy contenders on Gaussian data (torch-gloo float32 and cast to fp16,
cerar's runtime: float32 ring, fp16/bf16 wires, the same casts in Python, CERAR, auto and
auto within error budgets; each result's error against the float64 sum), with --runtime also a
ResNet-50 gradient step through torch DDP and through cerar's runtime; take the cluster down
(also on error and Ctrl-C). --lossy-only runs the calibration and the lossy contenders alone. Writes
bench/results/NAME/<config>.json, .log, and through suite_report.py results.md and PNGs.
Exit: 0 ok, 1 a run failed, 2 bad arguments, 3 not root / tools missing, 130 interrupted.
"""
import argparse, json, os, re, shutil, signal, subprocess, sys, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import runner  # noqa: E402
from tcp_ring import parse_bytes  # noqa: E402

PREFIX = "cerarbench"  # netem.sh --name of the suite's clusters
CAL_BYTES = 64 << 20
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")


def parse_config(text):
    m = re.fullmatch(r"(\d+)@(\d+)|lo(\d+)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"config {text!r}: want N@RATE (e.g. 8@200) or loN (e.g. lo4)")
    n = int(m.group(1) or m.group(3))
    rate = int(m.group(2)) if m.group(2) else None
    if not 2 <= n <= 16 or (rate is not None and not 1 <= rate <= 10000):
        raise argparse.ArgumentTypeError(f"config {text!r}: N in 2..16, rate in 1..10000 Mbit/s")
    if rate and n * rate > 1600:
        print(f"run_suite: warning: {text}: N x rate = {n * rate} Mbit/s is past what the 2 cores "
              "here can shape (~1600); the CPUs, not the links, will limit", file=sys.stderr)
    return {"name": f"n{n}-{rate}mbit" if rate else f"n{n}-loopback", "n": n, "rate_mbit": rate}


def parse_sizes(text):
    sizes = [parse_bytes(x) for x in text.split(",") if x]
    if not sizes or any(s < 1024 or s % 4 for s in sizes):
        raise argparse.ArgumentTypeError("sizes: multiples of 4 bytes, >= 1K (e.g. 1M,64M)")
    return sizes


class Collect:
    """Runner output sink: keeps rank 0's JSON lines, echoes everything to the log."""

    def __init__(self, log):
        self.log, self.rows = log, []

    def write(self, text):
        self.log.write(text)
        for line in text.splitlines():
            m = re.match(r"^\[0\] (\{.*\})$", line) or re.match(r"^(\{\"contender.*\})$", line)
            if m:
                self.rows.append(json.loads(m.group(1)))

    def flush(self):
        self.log.flush()


class Suite:
    def __init__(self, a, log):
        self.a, self.log, self.port = a, log, 29800
        self.notes = []
        # torch's contenders on Debian's torch and cerar's from .venv, or both on --torch-python
        self.torch_py = a.torch_python or "/usr/bin/python3"
        self.cerar_py = a.torch_python or VENV_PY

    def say(self, msg):
        print(f"run_suite: {msg}", flush=True)
        self.log.write(f"# {msg}\n")

    def ranks(self, cmd, cfg, timeout):
        """cmd on every rank through runner.py; returns rank 0's JSON lines."""
        self.port += 7  # a fresh port per launch: no waiting for the last one's sockets
        sink = Collect(self.log)
        prefix = PREFIX if cfg["rate_mbit"] else ""
        status = runner.run(cmd, cfg["n"], prefix, self.port, timeout, out=sink, log=self.log)
        if status == 130:
            raise KeyboardInterrupt
        if status:
            self.notes.append(f"{' '.join(os.path.basename(c) for c in cmd)[:120]}: exit {status}")
            self.say(f"failed ({status}): {' '.join(cmd)}")
        return sink.rows

    def calibrate(self, cfg):
        """The link rate: raw TCP rings, free and with a 64 KiB send window (a free stream loses
        packets on links with shallow queues, a paced one not); the faster, the stricter limit."""
        found = []
        for window in ([], ["--window", "64K"]):
            cmd = [sys.executable, os.path.join(HERE, "tcp_ring.py"), "--ranks", str(cfg["n"]),
                   "--bytes", str(CAL_BYTES), "--port", str(29650)] + window
            if cfg["rate_mbit"]:
                cmd += ["--netns-prefix", PREFIX]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if out.returncode:
                raise RuntimeError(f"calibration failed: {out.stderr.strip()}")
            found.append(json.loads(out.stdout.strip().splitlines()[-1]))
        res = max(found, key=lambda r: r["min_mbit"])
        res = dict(res, free_mbit=found[0]["min_mbit"], windowed_mbit=found[1]["min_mbit"])
        self.say(f"calibrated {cfg['name']}: min {res['min_mbit']} Mbit/s {res['rank_mbit']} "
                 f"(free {res['free_mbit']}, 64 KiB window {res['windowed_mbit']})")
        return res

    def mpi(self, cfg, sizes):
        binary = os.path.join(self.a.builddir, "mpi_allreduce")
        if not shutil.which("mpirun") or not shutil.which("mpicc"):
            self.notes.append("mpi: Open MPI not installed (apt-get install openmpi-bin libopenmpi-dev)")
            return []
        src = os.path.join(HERE, "mpi_allreduce.c")
        if not os.path.exists(binary) or os.path.getmtime(binary) < os.path.getmtime(src):
            subprocess.run(["mpicc", "-O2", "-o", binary, src, "-lm"], check=True)
        n = cfg["n"]
        cmd = ["mpirun", "--allow-run-as-root", "-np", str(n), "--mca", "btl", "self,tcp",
               "--mca", "pml", "ob1"]
        env = dict(os.environ)
        if cfg["rate_mbit"]:
            # One "host" per namespace; the rsh agent starts Open MPI's daemon with ip netns exec.
            hostfile = os.path.join(self.a.builddir, "mpi_hosts")
            with open(hostfile, "w") as f:
                f.writelines(f"10.77.0.{i + 1} slots=1\n" for i in range(n))
            cmd = ["ip", "netns", "exec", f"{PREFIX}0"] + cmd + [
                "--hostfile", hostfile, "--map-by", "node",
                "--mca", "plm_rsh_agent", os.path.join(HERE, "mpi_netns_rsh.sh"),
                "--mca", "btl_tcp_if_include", "veth0", "--mca", "oob_tcp_if_include", "veth0"]
            env["CERAR_MPI_NETNS_PREFIX"] = PREFIX
        else:
            cmd += ["--oversubscribe", "--mca", "btl_tcp_if_include", "lo"]
        rows = []
        # Open MPI's own choice, then its ring forced (the tuned component's algorithm 4).
        for name, extra in (("mpi-allreduce", []), ("mpi-allreduce-ring", [
                "--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_allreduce_algorithm", "4"])):
            rows += self.mpirun(cmd + extra + [binary, name, str(self.a.repeats)] + [str(s) for s in sizes], env)
        return rows

    def mpirun(self, cmd, env):
        sink = Collect(self.log)
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
        watchdog = threading.Timer(self.a.timeout, lambda: os.killpg(p.pid, signal.SIGKILL))
        watchdog.start()
        try:
            for line in p.stdout:
                sink.write(line)
            p.wait()
        finally:
            watchdog.cancel()
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if p.returncode:
            self.notes.append(f"mpi: mpirun exit {p.returncode} (see the log)")
        return sink.rows

    def cerar_torch_fails(self, what):
        """Whether cerar's interpreter cannot import cerar.torch; if so, notes that `what` was
        skipped."""
        if subprocess.run([self.cerar_py, "-c", "import cerar.torch"],
                          capture_output=True).returncode == 0:
            return False
        self.notes.append(f"{what}: `import cerar.torch` fails in {self.cerar_py}; skipped")
        return True

    def lossy(self, cfg, sizes):
        """Time and error side by side on Gaussian data: torch-gloo (float32, fp16 cast) and
        cerar's runtime (its wires, Python casts, CERAR, auto, error budgets)."""
        a = self.a
        common = ["--sizes", sizes, "--repeats", str(a.repeats)]
        rows = self.ranks([self.torch_py, os.path.join(HERE, "torch_contender.py"),
                           "--mode", "lossy"] + common, cfg, a.timeout)
        if self.cerar_torch_fails("cerar lossy contenders"):
            return rows
        cerar_py = [self.cerar_py, os.path.join(HERE, "torch_contender.py"), "--mode", "cerar-lossy"] + common
        for extra in [["--algorithm", "ring"], ["--algorithm", "cerar"], ["--algorithm", "auto"]] + [
                ["--algorithm", "auto", "--max-error", str(x)] for x in a.max_errors]:
            rows += self.ranks(cerar_py + extra, cfg, a.timeout)
        return rows

    def config(self, cfg):
        a, n, rows = self.a, cfg["n"], []
        shaped = cfg["rate_mbit"] is not None
        if shaped:
            subprocess.run([os.path.join(HERE, "netem.sh"), "up", "--ranks", str(n), "--rate-mbit",
                            str(cfg["rate_mbit"]), "--name", PREFIX], check=True)
        try:
            cal = [self.calibrate(cfg)]
            sizes = ",".join(str(s) for s in a.sizes)
            torch_py = [self.torch_py, os.path.join(HERE, "torch_contender.py")]
            if not a.lossy_only:
                only = ["--only", a.only] if a.only else []
                rows += self.ranks([a.bin, "--sizes", sizes, "--repeats", str(a.repeats),
                                    "--timeout-s", "300"] + only, cfg, a.timeout)
            if not a.lossy_only and not a.net_only:
                rows += self.ranks(torch_py + ["--sizes", sizes, "--repeats", str(a.repeats)], cfg, a.timeout)
                rows += self.mpi(cfg, a.sizes)
            if not a.net_only:
                rows += self.lossy(cfg, sizes)
            if a.runtime:
                for hook in ("none", "fp16"):
                    rows += self.ranks(torch_py + ["--mode", "ddp", "--hook", hook, "--repeats",
                                                   str(a.repeats)], cfg, a.timeout)
                if not self.cerar_torch_fails("cerar runtime"):
                    for alg in ("ring", "cerar"):
                        rows += self.ranks([self.cerar_py, os.path.join(HERE, "torch_contender.py"),
                                            "--mode", "ddp", "--hook", "cerar", "--algorithm",
                                            alg, "--repeats", str(a.repeats)], cfg, a.timeout)
                        for fusion in ("on", "off"):
                            rows += self.ranks([self.cerar_py, os.path.join(HERE, "torch_contender.py"),
                                                "--mode", "cerar", "--algorithm", alg, "--fusion",
                                                fusion, "--repeats", str(a.repeats)], cfg, a.timeout)
            cal.append(self.calibrate(cfg))
        finally:
            if shaped:
                subprocess.run([os.path.join(HERE, "netem.sh"), "down", "--name", PREFIX])
        probe = next((r["probe"] for r in rows if "probe" in r), None)
        return {"config": cfg, "calibration": cal, "probe": probe,
                # The best the links showed: the stricter (lower) limit.
                "rate_mbit": max(c["min_mbit"] for c in cal),
                "results": [r for r in rows if "contender" in r], "notes": self.notes}


def find_bin():
    for d in ("build", "build-bench", "build-rt"):
        path = os.path.join(ROOT, d, "cerar-bench-net")
        if os.path.exists(path):
            return path
    return os.path.join(ROOT, "build", "cerar-bench-net")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--headline", action="store_true", help="4@400,8@200 at 64M, 2 repeats")
    p.add_argument("--configs", type=lambda s: [parse_config(x) for x in s.split(",") if x])
    p.add_argument("--sizes", type=parse_sizes)
    p.add_argument("--repeats", type=int, help="timed runs per contender (3; 2 with --headline)")
    p.add_argument("--runtime", action="store_true", help="also the ResNet-50 step (DDP, cerar runtime)")
    p.add_argument("--lossy-only", action="store_true",
                   help="only the calibration and the lossy contenders (time and error)")
    p.add_argument("--net-only", action="store_true",
                   help="cerar-bench-net alone (no torch, Open MPI or lossy contenders)")
    p.add_argument("--only", help="cerar-bench-net's contenders (names or prefixes, e.g. ring,cerar)")
    p.add_argument("--max-errors", default="2e-3,5e-3",
                   type=lambda s: [float(x) for x in s.split(",") if x],
                   help="CERAR_MAX_ERROR budgets of the cerar-budget-X contenders (%(default)s)")
    p.add_argument("--name", help="results folder under bench/results (default: headline / sweep)")
    p.add_argument("--outdir", help="results folder (default: bench/results/NAME)")
    p.add_argument("--bin", default=find_bin(), help="cerar-bench-net (default: %(default)s)")
    p.add_argument("--timeout", type=float,
                   help="seconds per launch (900, scaled with the largest size above 64 MiB)")
    p.add_argument("--torch-python", help="the interpreter of every torch and cerar contender "
                   "(default: Debian's torch for torch's, .venv for cerar's; e.g. "
                   "build-torch2/venv/bin/python of scripts/torch2-env.sh, whose torch 2.x gloo sums "
                   "bfloat16: DDP's bf16 hook runs there)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    a = p.parse_args(argv)
    a.repeats = a.repeats if a.repeats is not None else (2 if a.headline else 3)  # headline: < 10 min
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    a.configs = a.configs or [parse_config(x) for x in
                              (["4@400", "8@200"] if a.headline else ["4@400", "8@200", "4@100", "lo4"])]
    a.sizes = a.sizes or ([64 << 20] if a.headline else parse_sizes("1M,4M,16M,64M,256M"))
    a.name = a.name or ("headline" if a.headline else "sweep")
    # One launch runs every size and repeat of a contender group: 256 MiB takes 4x as long.
    a.timeout = a.timeout or 900 * max(1, max(a.sizes) / (64 << 20))
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", a.name):
        p.error("--name: letters, digits, _ . - only")
    a.outdir = a.outdir or os.path.join(HERE, "results", a.name)
    a.builddir = os.path.dirname(os.path.abspath(a.bin))
    plan = (f"{a.name}: configs {[c['name'] for c in a.configs]}, sizes {a.sizes}, "
            f"repeats {a.repeats}, runtime step {a.runtime}, lossy only {a.lossy_only}, "
            f"net only {a.net_only}, only {a.only or 'all'}, "
            f"budgets {a.max_errors}, bin {a.bin}")
    if a.dry_run:
        print(f"run_suite: plan: {plan}")
        return 0
    if not a.lossy_only and not os.access(a.bin, os.X_OK):
        print(f"run_suite: {a.bin} not found; build it: cmake --build build --target cerar-bench-net",
              file=sys.stderr)
        return 3
    if any(c["rate_mbit"] for c in a.configs) and os.geteuid() != 0:
        print("run_suite: shaped configs need root (namespaces, tc); try sudo", file=sys.stderr)
        return 3
    os.makedirs(a.outdir, exist_ok=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # TERM cleans up like Ctrl-C
    status = 0
    try:
        for cfg in a.configs:
            with open(os.path.join(a.outdir, cfg["name"] + ".log"), "w") as log:
                suite = Suite(a, log)
                suite.say(f"{plan}\n# config {cfg['name']}")
                start = time.monotonic()
                res = suite.config(cfg)
                res.update(command=" ".join(["python3", "bench/run_suite.py"] + (argv or sys.argv[1:])),
                           seconds=round(time.monotonic() - start, 1))
                status = status or (1 if res["notes"] and any("exit" in n for n in res["notes"]) else 0)
                suite.say(f"{cfg['name']} done in {res['seconds']} s")
            with open(os.path.join(a.outdir, cfg["name"] + ".json"), "w") as f:
                json.dump(res, f, indent=1)
    except KeyboardInterrupt:
        print("run_suite: interrupted; clusters taken down", file=sys.stderr)
        return 130
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"run_suite: {e}", file=sys.stderr)
        return 1
    # The plots need Debian's matplotlib, which the interpreter running this may lack.
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    subprocess.run([py, os.path.join(HERE, "suite_report.py"), a.outdir], check=False)
    print(f"run_suite: results in {os.path.relpath(a.outdir, ROOT)}/results.md")
    return status


if __name__ == "__main__":
    sys.exit(main())
