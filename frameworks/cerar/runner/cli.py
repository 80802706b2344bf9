"""cerarrun: starts a cerar job.

    cerarrun -np 4 python train.py
    cerarrun -np 8 -H node1:4,node2:4 --algorithm cerar --components 2 python train.py
    cerarrun -np 8 --hostfile hosts.txt -x LD_LIBRARY_PATH python train.py

The launcher hosts the rendezvous store itself (the C++ TcpStoreServer, with a fresh job
secret), starts the ranks with CERAR_RANK, CERAR_SIZE, CERAR_LOCAL_RANK, CERAR_LOCAL_SIZE,
CERAR_RENDEZVOUS_ADDR, CERAR_RENDEZVOUS_PORT, CERAR_SECRET and the knobs given, prefixes each
output line with "[rank] ", and when a rank fails terminates the others and exits with its code.
horovodrun's flags are taken with Horovod's meaning (horovodrun.py; docs/from-horovod.md):

    cerarrun -np 2 --fusion-threshold-mb 32 --timeline-filename tl.json python train.py

Elastic mode (any of --min-np, --max-np, --host-discovery-script; horovodrun's flags and
meanings): the job survives the loss of workers and grows onto new hosts, as the elastic driver
(elastic_driver.py) tells; -H/--hostfile are then a fixed list for it to discover.

    cerarrun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh python train.py

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
import signal
import sys
import threading
import time

from cerar.runner.horovodrun import add_horovod_flags, check_horovod_args, horovod_identity
from cerar.runner.hosts import (assign, is_local, is_loopback, parse_hostfile,  # noqa: F401
                          parse_hosts, route_source)
from cerar.runner.launch import (FORWARDED_NAMES, FORWARDED_PREFIXES, GRACE_SECONDS,  # noqa: F401
                           Stopped, add_knob_flags, exit_code, exported, forwarded, knob_env,
                           raise_stopped, rank_env, spawn, spawn_options, ssh_command, ssh_stdin,
                           terminate)
from cerar._store import HostedStore


def build_parser():
    parser = argparse.ArgumentParser(
        prog="cerarrun", description="Runs a command as the ranks of a cerar job.")
    parser.add_argument("-np", "--num-proc", dest="np", type=int, default=None,
                        help="number of ranks (elastic: the initial number; default --min-np)")
    hosts = parser.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", default=None,
                       help="host1:slots,host2:slots (default: all ranks on this host)")
    hosts.add_argument("-hostfile", "--hostfile", default=None,
                       help="a file of lines 'host slots=N' (Horovod's and Open MPI's format)")
    parser.add_argument("-x", dest="export", action="append", default=[], metavar="VAR[=VALUE]",
                        help="also set VAR for every rank: its value here, or VALUE "
                             "(repeatable; remote ranks get only these and the defaults)")
    add_knob_flags(parser)
    parser.add_argument("--max-time", type=float, default=None,
                        help="terminate the job after this many seconds (exit 124)")
    parser.add_argument("--rendezvous-addr", default=None,
                        help="this host's address as the ranks see it (multi-host jobs)")
    parser.add_argument("-p", "--ssh-port", type=int, default=None,
                        help="ssh port of remote hosts")
    add_horovod_flags(parser)
    _add_elastic_flags(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command of every rank")
    return parser


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    check_horovod_args(parser, args)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given")
    args.elastic = (args.min_np is not None or args.max_np is not None
                    or args.host_discovery_script is not None)
    if args.np is None and args.elastic and args.min_np is not None:
        args.np = args.min_np
    if args.np is None:
        parser.error("-np is required (elastic mode: -np or --min-np)")
    if args.np < 1:
        parser.error("-np must be at least 1")
    if args.elastic:
        _check_elastic_flags(parser, args)
    return args


def _add_elastic_flags(parser):
    group = parser.add_argument_group("elastic mode (horovodrun's flags)")
    group.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int, default=None,
                       help="fewest ranks the job runs with (default -np)")
    group.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int, default=None,
                       help="most ranks the job grows to (default -np)")
    group.add_argument("--host-discovery-script", default=None, metavar="SCRIPT",
                       help="prints the available hosts, 'host:slots' or 'host' a line; "
                            "run about every second")
    group.add_argument("--slots-per-host", type=int, default=1, metavar="N",
                       help="slots of a host the discovery lists without them (default 1)")
    group.add_argument("--elastic-timeout", type=float, default=600.0, metavar="SECONDS",
                       help="how long to wait for --min-np slots before failing (default 600)")
    group.add_argument("--elastic-start-timeout", type=float, default=60.0, metavar="SECONDS",
                       help="how long a started worker has to join (reach the runtime's start) "
                            "before its host counts as failed (default 60)")
    group.add_argument("--reset-limit", type=int, default=None, metavar="N",
                       help="fail the job on its (N+1)th reset (default: no limit)")
    group.add_argument("--blacklist-cooldown-range", type=float, nargs=2, default=None,
                       metavar=("MIN", "MAX"),
                       help="seconds a failed host stays out, growing with its failures "
                            "(default: it stays out)")
    group.add_argument("--elastic-metrics-port", type=int, default=0, metavar="PORT",
                       help="serve the driver's Prometheus metrics (generation, size, resets, "
                            "blacklist, time to resume) on PORT, /metrics (default 0: off)")


def _check_elastic_flags(parser, args):
    if args.min_np is None:
        args.min_np = args.np
    if args.max_np is None:
        args.max_np = max(args.np, args.min_np)
    if args.min_np < 1:
        parser.error("--min-np must be at least 1")
    if args.min_np > args.np:
        parser.error(f"--min-np {args.min_np} is above -np {args.np}")
    if args.max_np < args.np:
        parser.error(f"--max-np {args.max_np} is below -np {args.np}")
    if args.slots_per_host < 1:
        parser.error("--slots-per-host must be at least 1")
    if args.elastic_timeout <= 0:
        parser.error("--elastic-timeout must be positive")
    if args.elastic_start_timeout <= 0:
        parser.error("--elastic-start-timeout must be positive")
    if not 0 <= args.elastic_metrics_port <= 65535:
        parser.error("--elastic-metrics-port must be in [0, 65535]")
    if args.reset_limit is not None and args.reset_limit < 0:
        parser.error("--reset-limit must be at least 0")
    cooldown = args.blacklist_cooldown_range
    if cooldown is not None and not 0 <= cooldown[0] <= cooldown[1]:
        parser.error("--blacklist-cooldown-range MIN MAX needs 0 <= MIN <= MAX")


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
    except Stopped as stop:
        code = stop.code
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up below must not be cut short
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    terminate(procs)
    for pump in pumps:
        pump.join(timeout=2.0)
    store.close()
    return code


def _start_ranks(args, placement, store, procs, pumps):
    """Starts every rank, appending to procs and pumps; 0, or 127 when one cannot start."""
    extra = exported(args.export, os.environ)
    knobs = knob_env(args)
    lock = threading.Lock()
    options = spawn_options(args)
    if options.verbose:
        print(f"cerarrun: store at {store.address}:{store.port}; {args.np} ranks",
              file=sys.stderr, flush=True)
    for rank, host, local_rank, local_size in placement:
        env = rank_env(rank, args.np, local_rank, local_size, store.address, store.port,
                       store.secret, knobs)
        env.update(horovod_identity(placement, rank))
        try:
            proc, pump = spawn(rank, host, args.command, env, extra, args.ssh_port, lock,
                               options)
        except OSError as error:
            print(f"cerarrun: cannot start rank {rank}: {error}", file=sys.stderr)
            return 127
        procs.append(proc)
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
            code = exit_code(rc)
            break
    return code


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_stopped)
    signal.signal(signal.SIGHUP, raise_stopped)
    try:
        if args.elastic:
            from cerar.runner.elastic_driver import run_elastic
            return run_elastic(args)
        return launch(args)
    except (ValueError, OSError) as error:
        print(f"cerarrun: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
