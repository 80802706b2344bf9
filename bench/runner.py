#!/usr/bin/env python3
"""Run one command per rank, rank i inside namespace PREFIX{i} (made by bench/netem.sh).

  python3 bench/runner.py --ranks N [--prefix P] [--port PORT] [--timeout S] -- CMD [ARGS...]

Each rank gets CERAR_RANK=i, CERAR_SIZE=N, CERAR_RENDEZVOUS_ADDR=10.77.0.1 (rank 0),
CERAR_RENDEZVOUS_PORT=PORT and CERAR_NETNS_IFACE=veth0 (its link inside the namespace).
Without --prefix all ranks run here, with CERAR_RENDEZVOUS_ADDR=127.0.0.1 and no
CERAR_NETNS_IFACE. "{rank}" in ARGS is replaced by i. Output lines are prefixed "[i] ".
On the first rank that fails (or on --timeout, or Ctrl-C) all others are killed.
Exit status: 0 when every rank exits 0; else the first failure's status (128+signal when
killed), 124 on timeout, 130 on Ctrl-C, 2 on bad arguments.
"""
import argparse, os, signal, subprocess, sys, threading, time

IFACE = "veth0"
GRACE_S = 3.0


def _pump(i, stream, out, lock):
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        with lock:
            out.write(f"[{i}] {line}\n")
            out.flush()


def _signal_all(procs, sig):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass


def run(cmd, ranks, prefix="", port=29500, timeout=None, out=None, log=None):
    """Launch the ranks, wait for them, return the exit status described above."""
    out, log = out or sys.stdout, log or sys.stderr
    procs, pumps, lock = [], [], threading.Lock()
    for i in range(ranks):
        env = dict(os.environ, CERAR_RANK=str(i), CERAR_SIZE=str(ranks),
                   CERAR_RENDEZVOUS_ADDR="10.77.0.1" if prefix else "127.0.0.1",
                   CERAR_RENDEZVOUS_PORT=str(port))
        env.pop("CERAR_NETNS_IFACE", None)
        if prefix:
            env["CERAR_NETNS_IFACE"] = IFACE
        argv = [a.replace("{rank}", str(i)) for a in cmd]
        if prefix:
            argv = ["ip", "netns", "exec", f"{prefix}{i}"] + argv
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        pumps.append(threading.Thread(target=_pump, args=(i, p.stdout, out, lock), daemon=True))
        pumps[-1].start()
    deadline = time.monotonic() + timeout if timeout else None
    status, killed_at = None, None
    try:
        while [p.poll() for p in procs].count(None):
            now = time.monotonic()
            if status is None:
                bad = [p.returncode for p in procs if p.returncode not in (None, 0)]
                if bad:
                    status = bad[0] if bad[0] > 0 else 128 - bad[0]
                    log.write(f"runner: a rank failed with status {status}; stopping the others\n")
                elif deadline and now > deadline:
                    status = 124
                    log.write(f"runner: timeout after {timeout} s; stopping all ranks\n")
                if status is not None:
                    _signal_all(procs, signal.SIGTERM)
                    killed_at = now
            elif now - killed_at > GRACE_S:
                _signal_all(procs, signal.SIGKILL)
            time.sleep(0.02)
    except KeyboardInterrupt:
        status = 130
        _signal_all(procs, signal.SIGTERM)
        time.sleep(0.5)
        _signal_all(procs, signal.SIGKILL)
    for p in procs:
        p.wait()
    for t in pumps:
        t.join(timeout=2)
    if status is None:
        bad = [p.returncode for p in procs if p.returncode != 0]
        status = 0 if not bad else (bad[0] if bad[0] > 0 else 128 - bad[0])
    log.write(f"runner: exit codes {[p.returncode for p in procs]} -> {status}\n")
    return status


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="%(prog)s --ranks N [--prefix P] [--port PORT] [--timeout S] -- CMD [ARGS...]")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--prefix", default="", help="namespace prefix given to netem.sh --name (none: run locally)")
    p.add_argument("--port", type=int, default=29500)
    p.add_argument("--timeout", type=float, default=None, help="seconds; then every rank is killed")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        p.error("missing '-- CMD [ARGS...]'")
    if not 1 <= a.ranks <= 64:
        p.error("--ranks must be in 1..64")
    if a.timeout is not None and a.timeout <= 0:
        p.error("--timeout must be > 0")
    if a.prefix:
        if os.geteuid() != 0:
            sys.exit("runner.py: --prefix needs root (ip netns exec); try sudo")
        missing = [f"{a.prefix}{i}" for i in range(a.ranks) if not os.path.exists(f"/run/netns/{a.prefix}{i}")]
        if missing:
            sys.exit(f"runner.py: namespaces {' '.join(missing)} do not exist; "
                     f"run bench/netem.sh up --ranks {a.ranks} --rate-mbit R --name {a.prefix}")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # TERM stops every rank, like Ctrl-C
    return run(cmd, a.ranks, a.prefix, a.port, a.timeout)


if __name__ == "__main__":
    sys.exit(main())
