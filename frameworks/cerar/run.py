"""cerarrun: starts a cerar job.

    cerarrun -np 4 python train.py
    cerarrun -np 8 -H node1:4,node2:4 --algorithm cerar --components 2 python train.py

The launcher hosts the rendezvous store itself (the C++ TcpStoreServer, with a fresh job
secret), starts the ranks with CERAR_RANK, CERAR_SIZE, CERAR_LOCAL_RANK, CERAR_LOCAL_SIZE,
CERAR_RENDEZVOUS_ADDR, CERAR_RENDEZVOUS_PORT, CERAR_SECRET and the knobs given, prefixes each
output line with "[rank] ", and when a rank fails terminates the others and exits non-zero.
Ranks on other hosts are started over ssh (keys must be set up; the working directory must
exist there).
"""
import argparse
import os
import queue
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="cerarrun", description="Runs a command as the ranks of a cerar job.")
    parser.add_argument("-np", "--num-proc", dest="np", type=int, required=True,
                        help="number of ranks")
    parser.add_argument("-H", "--hosts", default=None,
                        help="host1:slots,host2:slots (default: all ranks on this host)")
    parser.add_argument("--fusion-threshold-mb", type=float, default=None,
                        help="fusion buffer size in MiB (CERAR_FUSION_THRESHOLD); 0 disables")
    parser.add_argument("--cycle-time-ms", type=float, default=None, help="CERAR_CYCLE_TIME")
    parser.add_argument("--algorithm", choices=["auto", "ring", "cerar"], default=None,
                        help="all-reduce algorithm (CERAR_ALGORITHM)")
    parser.add_argument("--components", type=int, default=None,
                        help="CERAR's component count c (CERAR_COMPONENTS; 0 = cost model)")
    parser.add_argument("--eps", type=float, default=None, help="CERAR's eps (CERAR_EPS)")
    parser.add_argument("--timeline", default=None, help="chrome trace file (CERAR_TIMELINE)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds a rank waits for a dead peer (CERAR_TIMEOUT_SECONDS)")
    parser.add_argument("--max-time", type=float, default=None,
                        help="terminate the job after this many seconds (exit 124)")
    parser.add_argument("--rendezvous-addr", default=None,
                        help="this host's address as the ranks see it (multi-host jobs)")
    parser.add_argument("--ssh-port", type=int, default=None, help="ssh port of remote hosts")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command of every rank")
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given")
    if args.np < 1:
        parser.error("-np must be at least 1")
    return args


def parse_hosts(spec, np):
    """[(host, slots)] from "h1:2,h2:2"; no spec means np slots on localhost."""
    if not spec:
        return [("localhost", np)]
    hosts = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, slots = item.rpartition(":") if ":" in item else (item, "", "1")
        try:
            count = int(slots)
        except ValueError:
            raise ValueError(f"bad slot count in host {item!r} (expected host:slots)") from None
        if not host or count < 1:
            raise ValueError(f"bad host {item!r} (expected host:slots)")
        hosts.append((host, count))
    total = sum(slots for _, slots in hosts)
    if total < np:
        raise ValueError(f"-np {np} needs {np} slots; the hosts have {total}")
    return hosts


def assign(hosts, np):
    """[(rank, host, local_rank, local_size)]: the hosts are filled in order."""
    placement = []
    for host, slots in hosts:
        count = min(slots, np - len(placement))
        placement += [(len(placement) + i, host, i, count) for i in range(count)]
        if len(placement) == np:
            break
    return placement


def is_local(host):
    return host in _LOCAL_NAMES or host in (socket.gethostname(), socket.getfqdn())


def knob_env(args):
    env = {}
    if args.fusion_threshold_mb is not None:
        env["CERAR_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        env["CERAR_CYCLE_TIME"] = repr(args.cycle_time_ms)
    if args.algorithm is not None:
        env["CERAR_ALGORITHM"] = args.algorithm
    if args.components is not None:
        env["CERAR_COMPONENTS"] = str(args.components)
    if args.eps is not None:
        env["CERAR_EPS"] = repr(args.eps)
    if args.timeline is not None:
        env["CERAR_TIMELINE"] = args.timeline
    if args.timeout is not None:
        env["CERAR_TIMEOUT_SECONDS"] = repr(args.timeout)
    return env


def rank_env(rank, size, local_rank, local_size, addr, port, secret, knobs):
    env = {
        "CERAR_RANK": str(rank), "CERAR_SIZE": str(size),
        "CERAR_LOCAL_RANK": str(local_rank), "CERAR_LOCAL_SIZE": str(local_size),
        "CERAR_RENDEZVOUS_ADDR": addr, "CERAR_RENDEZVOUS_PORT": str(port),
        "CERAR_SECRET": secret, "PYTHONUNBUFFERED": "1",
    }
    env.update(knobs)
    return env


def ssh_command(host, env, command, cwd, ssh_port=None):
    """The ssh command line that runs `command` on `host` in `cwd` with `env` set.

    CERAR_SECRET is left out: command lines are visible to every user of both hosts (ps), so
    the remote shell reads it from its standard input, which the launcher writes (ssh_stdin).
    """
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    if ssh_port:
        ssh += ["-p", str(ssh_port)]
    public = {k: v for k, v in env.items() if k != "CERAR_SECRET"}
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(public.items()))
    read_secret = "IFS= read -r CERAR_SECRET && export CERAR_SECRET && " \
        if "CERAR_SECRET" in env else ""
    remote = f"{read_secret}cd {shlex.quote(cwd)} && exec env {assignments} " + \
        " ".join(shlex.quote(c) for c in command) + " </dev/null"
    return ssh + [host, remote]


def ssh_stdin(env):
    """What the remote shell of ssh_command reads first: the secret and a newline."""
    return (env["CERAR_SECRET"] + "\n").encode() if "CERAR_SECRET" in env else b""


def _pump(rank, stream, lock):
    prefix = f"[{rank}] ".encode()
    out = sys.stdout.buffer
    for line in iter(stream.readline, b""):
        with lock:
            out.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
            out.flush()
    stream.close()


def _terminate(procs, grace=5.0):
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _exit_code(rc):
    return rc if rc > 0 else 128 - rc


def launch(args):
    from cerar._cerar import StoreServer

    hosts = parse_hosts(args.hosts, args.np)
    placement = assign(hosts, args.np)
    all_local = all(is_local(host) for _, host, _, _ in placement)
    addr = args.rendezvous_addr or ("127.0.0.1" if all_local else socket.getfqdn())
    secret = secrets.token_hex(16)
    server = StoreServer("127.0.0.1" if all_local else "0.0.0.0", 0, secret)
    server.start()
    knobs = knob_env(args)
    lock = threading.Lock()
    procs, pumps = [], []
    for rank, host, local_rank, local_size in placement:
        env = rank_env(rank, args.np, local_rank, local_size, addr, server.port, secret, knobs)
        remote = not is_local(host)
        if remote:
            command, full_env = ssh_command(host, env, args.command, os.getcwd(),
                                            args.ssh_port), dict(os.environ)
        else:
            command, full_env = args.command, {**os.environ, **env}
        try:
            proc = subprocess.Popen(command, env=full_env,
                                    stdin=subprocess.PIPE if remote else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            if remote:  # the secret travels inside ssh's encrypted stream, not on its line
                proc.stdin.write(ssh_stdin(env))
                proc.stdin.close()
        except OSError as error:
            print(f"cerarrun: cannot start rank {rank}: {error}", file=sys.stderr)
            _terminate(procs)
            return 127
        procs.append(proc)
        pump = threading.Thread(target=_pump, args=(rank, proc.stdout, lock), daemon=True)
        pump.start()
        pumps.append(pump)

    # One waiter per rank reports exits in the order they happen: the first failure decides.
    exits = queue.Queue()
    for rank, proc in enumerate(procs):
        threading.Thread(target=lambda r, p: exits.put((r, p.wait())), args=(rank, proc),
                         daemon=True).start()
    deadline = time.monotonic() + args.max_time if args.max_time else None
    code, finished = 0, 0
    try:
        while finished < len(procs):
            limit = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                rank, rc = exits.get(timeout=1.0 if limit is None else min(limit, 1.0))
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    print(f"cerarrun: the job ran past --max-time {args.max_time:g} s; "
                          "terminating it", file=sys.stderr, flush=True)
                    code = 124
                    break
                continue
            finished += 1
            if rc != 0:
                print(f"cerarrun: rank {rank} exited with code {rc}; terminating the others",
                      file=sys.stderr, flush=True)
                code = _exit_code(rc)
                break
    except KeyboardInterrupt:
        code = 130
    _terminate(procs)
    for pump in pumps:
        pump.join(timeout=2.0)
    del server
    return code


def main(argv=None):
    args = parse_args(argv)
    try:
        return launch(args)
    except ValueError as error:
        print(f"cerarrun: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
