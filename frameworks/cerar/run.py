"""cerarrun: starts a cerar job.

    cerarrun -np 4 python train.py
    cerarrun -np 8 -H node1:4,node2:4 --algorithm cerar --components 2 python train.py
    cerarrun -np 8 --hostfile hosts.txt -x LD_LIBRARY_PATH python train.py

The launcher hosts the rendezvous store itself (the C++ TcpStoreServer, with a fresh job
secret), starts the ranks with CERAR_RANK, CERAR_SIZE, CERAR_LOCAL_RANK, CERAR_LOCAL_SIZE,
CERAR_RENDEZVOUS_ADDR, CERAR_RENDEZVOUS_PORT, CERAR_SECRET and the knobs given, prefixes each
output line with "[rank] ", and when a rank fails terminates the others and exits with its code.

Ranks on other hosts are started over ssh (keys must be set up; the working directory must
exist there). They get the variables above, the ones forwarded by default (FORWARDED: CERAR_*,
NCCL_*, GLOO_SOCKET_IFNAME, HOROVOD_GLOO_IFACE, PYTHONPATH) and those named with -x; everything
else comes from the remote login shell. The secret travels on ssh's standard input, which stays
open while the job runs: when it closes (the job ends, the launcher is interrupted or dies) the
remote shell terminates the rank's process group, so no rank outlives the job.
"""
import argparse
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time

from cerar._hosts import (assign, is_local, is_loopback, parse_hostfile,  # noqa: F401
                          parse_hosts, route_source)
from cerar._store import HostedStore, rank_identity

# Variables of the launcher's environment that remote ranks get without -x.
FORWARDED_PREFIXES = ("CERAR_", "NCCL_")
FORWARDED_NAMES = ("GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "PYTHONPATH")
# Seconds a terminated rank (or a remote one whose ssh input closed) has before SIGKILL.
GRACE_SECONDS = 5


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="cerarrun", description="Runs a command as the ranks of a cerar job.")
    parser.add_argument("-np", "--num-proc", dest="np", type=int, required=True,
                        help="number of ranks")
    hosts = parser.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", default=None,
                       help="host1:slots,host2:slots (default: all ranks on this host)")
    hosts.add_argument("-hostfile", "--hostfile", default=None,
                       help="a file of lines 'host slots=N' (Horovod's and Open MPI's format)")
    parser.add_argument("-x", dest="export", action="append", default=[], metavar="VAR[=VALUE]",
                        help="also set VAR for every rank: its value here, or VALUE "
                             "(repeatable; remote ranks get only these and the defaults)")
    _add_knob_flags(parser)
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


def exported(names, environ):
    """The variables named by -x: "VAR" takes its value here, "VAR=VALUE" sets it."""
    out = {}
    for item in names:
        name, eq, value = item.partition("=")
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise ValueError(f"-x {item!r}: not a variable name")
        if eq:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
        else:
            raise ValueError(f"-x {name}: not set in the launcher's environment")
    return out


def forwarded(environ):
    """What remote ranks get from the launcher's environment without -x."""
    return {k: v for k, v in environ.items()
            if k.startswith(FORWARDED_PREFIXES) or k in FORWARDED_NAMES}


def _knob_settings():
    """The settings that have a cerarrun flag, from the settings table (core/settings.cc)."""
    from cerar._cerar import settings
    return [row for row in settings() if row["flag"]]


def _add_knob_flags(parser):
    for row in _knob_settings():
        flag = row["flag"]
        name = "--" + flag["name"]
        if row["type"] == "flag":
            parser.add_argument(name, action="store_true", default=None, help=flag["help"])
            continue
        # A flag in other units than its variable's (MiB of bytes) takes any number.
        kind = {"integer": int, "number": float}.get(row["type"], str)
        parser.add_argument(name, type=float if flag["scale"] != 1 else kind, default=None,
                            choices=row["choices"] or None, metavar=flag["metavar"],
                            help=flag["help"])


def _knob_value(row, value):
    """The variable's text for a flag's value."""
    scale = row["flag"]["scale"]
    if row["type"] == "flag":
        return "1"
    if scale != 1:
        return str(int(value * scale))
    return repr(value) if row["type"] == "number" else str(value)


def knob_env(args):
    """The CERAR_* variables of the knob flags given."""
    env = {}
    for row in _knob_settings():
        value = getattr(args, row["flag"]["name"].replace("-", "_"))
        if value is not None and value is not False:
            env[row["variable"]] = _knob_value(row, value)
    return env


def rank_env(rank, size, local_rank, local_size, addr, port, secret, knobs):
    env = rank_identity(rank, size, local_rank, local_size, addr, port, secret)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(knobs)
    return env


def ssh_command(host, env, command, cwd, ssh_port=None):
    """The ssh command line that runs `command` on `host` in `cwd` with `env` set.

    CERAR_SECRET is left out: command lines are visible to every user of both hosts (ps), so
    the remote shell reads it from its standard input, which the launcher writes (ssh_stdin)
    and keeps open. The rank runs in a session of its own; a watcher reads the rest of the
    input, and when it ends (the launcher closed it, or died, or ssh's connection broke)
    terminates the rank's process group, then kills it after GRACE_SECONDS. The remote shell
    exits with the rank's code, which ssh returns.
    """
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    if ssh_port:
        ssh += ["-p", str(ssh_port)]
    public = {k: v for k, v in env.items() if k != "CERAR_SECRET"}
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(public.items()))
    read_secret = "IFS= read -r CERAR_SECRET || exit 1; export CERAR_SECRET; " \
        if "CERAR_SECRET" in env else ""
    rank = "setsid env " + assignments + " " + " ".join(shlex.quote(c) for c in command)
    # A background list's input is /dev/null unless redirected: the watcher reads ssh's
    # through descriptor 3.
    watcher = ("{ while read -r _; do :; done; kill -TERM -$pid $pid; "
               f"sleep {GRACE_SECONDS}; kill -KILL -$pid $pid; }} <&3 >/dev/null 2>&1 & "
               "watch=$!; exec 3<&-; ")
    remote = (f"{read_secret}cd {shlex.quote(cwd)} || exit 1; exec 3<&0; "
              f"{rank} </dev/null 3<&- & pid=$!; {watcher}"
              "wait $pid; rc=$?; kill $watch 2>/dev/null; exit $rc")
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


def _terminate(procs, grace=GRACE_SECONDS):
    """Stops every rank still running. A remote rank's ssh first gets its input closed, which
    makes the remote shell terminate the rank and exit; a local one (or an ssh that outlives
    the grace period) gets SIGTERM, then SIGKILL, to its process group."""
    for proc in procs:
        if proc.stdin is not None and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
    # A remote shell kills its rank GRACE_SECONDS after its SIGTERM: ssh ends soon after.
    deadline = time.monotonic() + grace
    remote_deadline = deadline + GRACE_SECONDS + 2
    for proc in procs:
        if proc.poll() is None and proc.stdin is None:
            _signal_group(proc, signal.SIGTERM)
    for proc in procs:
        limit = remote_deadline if proc.stdin is not None else deadline
        try:
            proc.wait(max(0.0, limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGTERM if proc.stdin is not None else signal.SIGKILL)
    for proc in procs:
        try:
            proc.wait(1.0)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def _signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


class _Stopped(Exception):
    """SIGTERM or SIGHUP reached the launcher."""

    def __init__(self, sig):
        super().__init__(sig)
        self.code = 128 + sig


def _raise_stopped(sig, _frame):
    raise _Stopped(sig)


def _exit_code(rc):
    return rc if rc > 0 else 128 - rc


def rendezvous_address(args, placement):
    """Where ranks reach the launcher's store: --rendezvous-addr, loopback when every rank is
    local, else this host's address on the route to the first remote host (the network the
    hosts share, whatever this host's name resolves to here)."""
    if args.rendezvous_addr:
        return args.rendezvous_addr
    remote = [host for _, host, _, _ in placement if not is_local(host)]
    return route_source(remote[0]) if remote else "127.0.0.1"


def launch(args):
    if args.hostfile:
        hosts = parse_hostfile(args.hostfile, args.np)
    else:
        hosts = parse_hosts(args.hosts, args.np)
    placement = assign(hosts, args.np)
    exported(args.export, os.environ)  # a bad -x fails before anything starts
    addr = rendezvous_address(args, placement)
    store = HostedStore(addr, local=is_loopback(addr))
    procs, pumps = [], []
    try:
        code = _start_ranks(args, placement, store, procs, pumps)
        if code == 0:
            code = _wait(args, placement, procs)
    except KeyboardInterrupt:
        code = 130
    except _Stopped as stop:
        code = stop.code
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up below must not be cut short
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _terminate(procs)
    for pump in pumps:
        pump.join(timeout=2.0)
    store.close()
    return code


def _start_ranks(args, placement, store, procs, pumps):
    """Starts every rank, appending to procs and pumps; 0, or 127 when one cannot start."""
    extra = exported(args.export, os.environ)
    knobs = knob_env(args)
    lock = threading.Lock()
    for rank, host, local_rank, local_size in placement:
        env = rank_env(rank, args.np, local_rank, local_size, store.address, store.port,
                       store.secret, knobs)
        remote = not is_local(host)
        if remote:
            command = ssh_command(host, {**forwarded(os.environ), **extra, **env},
                                  args.command, os.getcwd(), args.ssh_port)
            full_env = dict(os.environ)
        else:
            command, full_env = args.command, {**os.environ, **extra, **env}
        try:
            proc = subprocess.Popen(command, env=full_env,
                                    stdin=subprocess.PIPE if remote else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            if remote:  # the secret travels inside ssh's encrypted stream, not on its line
                proc.stdin.write(ssh_stdin(env))
                proc.stdin.flush()  # the input stays open: its end stops the remote rank
        except OSError as error:
            print(f"cerarrun: cannot start rank {rank}: {error}", file=sys.stderr)
            return 127
        procs.append(proc)
        pump = threading.Thread(target=_pump, args=(rank, proc.stdout, lock), daemon=True)
        pump.start()
        pumps.append(pump)
    return 0


def _wait(args, placement, procs):
    """The job's exit code: 0 when every rank succeeded, else the first failure's."""
    # One waiter per rank reports exits in the order they happen: the first failure decides.
    exits = queue.Queue()
    for rank, proc in enumerate(procs):
        threading.Thread(target=lambda r, p: exits.put((r, p.wait())), args=(rank, proc),
                         daemon=True).start()
    deadline = time.monotonic() + args.max_time if args.max_time else None
    code, finished = 0, 0
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
            where = placement[rank][1]
            how = ": ssh could not run it there" if rc == 255 and not is_local(where) else ""
            print(f"cerarrun: rank {rank} exited with code {rc} (on {where}{how}); "
                  "terminating the others", file=sys.stderr, flush=True)
            code = _exit_code(rc)
            break
    return code


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGHUP, _raise_stopped)
    try:
        return launch(args)
    except (ValueError, OSError) as error:
        print(f"cerarrun: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
