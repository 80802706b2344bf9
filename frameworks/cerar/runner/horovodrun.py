"""horovodrun's command line in cerarrun: its flags with Horovod's meaning and units, its YAML
--config-file, a warning for the flags that have no effect here and an error for the MPI ones
(docs/from-horovod.md). The flags cerar's settings table defines (--fusion-threshold-mb,
--cycle-time-ms, --autotune, ...) already have Horovod's names and units (_launch.py)."""
import argparse
import importlib.util
import os
import sys

# Flags that change nothing here: flag -> why (a warning when given).
NO_EFFECT = {
    "--hierarchical-allgather": "hierarchical all-gather is not built",
    "--num-nccl-streams": "the NCCL transport's streams are not configurable",
    "--thread-affinity": "the background thread is not pinned to cores",
    "--binding-args": "they are mpirun's, and cerarrun does not start mpirun",
    "--autotune-bayes-opt-max-samples": "the autotuner has no Bayesian optimisation",
    "--autotune-gaussian-process-noise": "the autotuner has no Bayesian optimisation",
    "--log-with-timestamp": "cerar's log lines carry no time",
}
# Flags that ask for MPI: flag -> the error's reason.
MPI_ONLY = ("cerarrun starts the ranks itself (here, or over ssh) and has no MPI controller; "
            "to start a job with mpirun, run `mpirun -np N python train.py` without cerarrun "
            "(cerar reads Open MPI's rank variables)")
REFUSED = ("--mpi", "--jsrun", "--mpi-args")
# Horovod's --log-level as cerar's CERAR_LOG_LEVEL (as the alias HOROVOD_LOG_LEVEL maps it).
LOG_LEVELS = {"TRACE": "debug", "DEBUG": "debug", "INFO": "info", "WARNING": "warning",
              "ERROR": "error", "FATAL": "error"}


def add_horovod_flags(parser):
    """horovodrun's flags that cerar's settings table does not define."""
    group = parser.add_argument_group("horovodrun's flags (docs/from-horovod.md)")
    add = group.add_argument
    add("-cb", "--check-build", action="store_true",
        help="print the frameworks, controllers and operations this build has, then exit")
    add("-v", "--version", action="store_true", help="print cerar's version, then exit")
    add("-i", "--ssh-identity-file", default=None, metavar="FILE",
        help="ssh's private key for remote hosts (ssh -i)")
    add("--cache-capacity", type=int, default=None, metavar="N",
        help="response cache entries (CERAR_CACHE_CAPACITY; 0 disables)")
    add("--timeline-filename", dest="timeline", default=None, metavar="FILE",
        help="rank 0's timeline file (CERAR_TIMELINE; '{rank}' in it: one per rank)")
    add("--timeline-mark-cycles", action="store_true", default=None,
        help="CYCLE_START marks in the timeline (CERAR_TIMELINE_MARK_CYCLES=1)")
    add("--no-timeline-mark-cycles", dest="timeline_mark_cycles", action="store_false",
        help=argparse.SUPPRESS)
    add("--no-autotune", dest="autotune", action="store_false", help=argparse.SUPPRESS)
    add("--no-stall-check", action="store_true", default=None,
        help="no stall warnings (CERAR_STALL_CHECK_TIME_SECONDS=0)")
    add("--stall-check", dest="no_stall_check", action="store_false", help=argparse.SUPPRESS)
    add("--stall-check-warning-time-seconds", type=float, default=None, metavar="SECONDS",
        help="seconds before a stall warning (CERAR_STALL_CHECK_TIME_SECONDS)")
    add("--stall-check-shutdown-time-seconds", type=float, default=None, metavar="SECONDS",
        help="seconds of stall before the job fails (CERAR_STALL_SHUTDOWN_TIME_SECONDS; 0 never)")
    add("--log-level", type=str.upper, choices=list(LOG_LEVELS), default=None,
        help="the ranks' log level (CERAR_LOG_LEVEL; TRACE is debug, FATAL error)")
    add("--log-without-timestamp", "--log-hide-timestamp", dest="log_with_timestamp",
        action="store_false", default=None, help="(the default: log lines carry no time)")
    add("--log-with-timestamp", "--no-log-hide-timestamp", dest="log_with_timestamp",
        action="store_true", help=argparse.SUPPRESS)
    add("--start-timeout", type=float, default=None, metavar="SECONDS",
        help="seconds the ranks have to start and meet (CERAR_RENDEZVOUS_TIMEOUT_SECONDS; "
             "default HOROVOD_START_TIMEOUT, else the ranks' timeout)")
    add("--gloo-timeout-seconds", dest="timeout", type=float, default=None, metavar="SECONDS",
        help="the same as --timeout (CERAR_TIMEOUT_SECONDS)")
    add("--network-interface", dest="network_interface", action="append", default=[],
        metavar="IFACE", help="as --network-interfaces, one a time (repeatable)")
    add("--verbose", action="store_true", help="print each rank's command line")
    add("--output-filename", default=None, metavar="DIR",
        help="also write each rank's output to DIR/rank.<rank>/stdout and stderr")
    add("-prefix-timestamp", "--prefix-output-with-timestamp", action="store_true",
        help="prefix each output line with the time")
    add("--config-file", default=None, metavar="YAML",
        help="Horovod's YAML of these settings; flags given here win over it")
    add("--disable-cache", action="store_true", help="(cerarrun caches no host checks)")
    add("--gloo", action="store_true", help="(the default: cerar's own TCP controller)")
    add("--tcp", action="store_true", help="TCP only: NCCL_IB_DISABLE=1 for the ranks")
    add("--hierarchical-allreduce", action="store_true", default=None,
        help="reduce host by host (CERAR_HIERARCHICAL_ALLREDUCE=1; default auto)")
    add("--no-hierarchical-allreduce", dest="hierarchical_allreduce", action="store_false",
        help="never host by host (CERAR_HIERARCHICAL_ALLREDUCE=0)")
    _add_ignored(add)


def _add_ignored(add):
    for flag in ("--hierarchical-allgather", "--mpi-threads-disable"):
        dest = flag[2:].replace("-", "_")
        add(flag, dest=dest, action="store_true", default=None, help=argparse.SUPPRESS)
        add("--no-" + flag[2:], dest=dest, action="store_false", help=argparse.SUPPRESS)
    add("--num-nccl-streams", type=int, default=None, help=argparse.SUPPRESS)
    add("--thread-affinity", type=int, default=None, help=argparse.SUPPRESS)
    add("--binding-args", default=None, help=argparse.SUPPRESS)
    add("--autotune-bayes-opt-max-samples", type=int, default=None, help=argparse.SUPPRESS)
    add("--autotune-gaussian-process-noise", type=float, default=None,
        help=argparse.SUPPRESS)
    add("--mpi", action="store_true", help=argparse.SUPPRESS)
    add("--jsrun", action="store_true", help=argparse.SUPPRESS)
    add("--mpi-args", default=None, help=argparse.SUPPRESS)


def check_horovod_args(parser, args, environ=os.environ):
    """Applies --config-file, refuses the MPI flags, warns of those with no effect, answers
    --check-build and --version (exit 0), checks ranges and reads HOROVOD_START_TIMEOUT."""
    if args.config_file:
        apply_config(parser, args, load_config(parser, args.config_file))
    for flag in REFUSED:
        if getattr(args, _dest(flag)):
            parser.error(f"{flag}: {MPI_ONLY}")
    if args.version:
        from cerar import __version__
        print(f"cerar {__version__}")
        parser.exit(0)
    if args.check_build:
        print(build_table())
        parser.exit(0)
    for flag, why in NO_EFFECT.items():
        if getattr(args, _dest(flag)) not in (None, False):
            print(f"cerarrun: {flag} has no effect here: {why}", file=sys.stderr)
    if args.start_timeout is None and environ.get("HOROVOD_START_TIMEOUT"):
        try:
            args.start_timeout = float(environ["HOROVOD_START_TIMEOUT"])
        except ValueError:
            parser.error(f"HOROVOD_START_TIMEOUT={environ['HOROVOD_START_TIMEOUT']!r}: "
                         "not a number of seconds")
    _check_ranges(parser, args)


def _dest(flag):
    return flag.lstrip("-").replace("-", "_")


# Flags whose value must be >= 0 (Horovod's checks), and those that must be > 0 here.
_NONNEGATIVE = ("fusion_threshold_mb", "cache_capacity", "autotune_warmup_samples",
                "stall_check_warning_time_seconds", "stall_check_shutdown_time_seconds")
_POSITIVE = ("cycle_time_ms", "autotune_steps_per_sample", "timeout", "start_timeout")


def _check_ranges(parser, args):
    for dest in _NONNEGATIVE + _POSITIVE:
        value = getattr(args, dest, None)
        if value is None:
            continue
        if value < 0 or (value == 0 and dest in _POSITIVE):
            flag = "--" + ("gloo-timeout-seconds/--timeout" if dest == "timeout"
                           else dest.replace("_", "-"))
            limit = "positive" if dest in _POSITIVE else "at least 0"
            parser.error(f"{flag} {value:g} must be {limit}")


def horovod_knobs(args):
    """The ranks' variables of the flags defined here (the table's come from _launch.knob_env)."""
    env = {}
    if getattr(args, "cache_capacity", None) is not None:
        env["CERAR_CACHE_CAPACITY"] = str(args.cache_capacity)
    for dest, variable in (("timeline_mark_cycles", "CERAR_TIMELINE_MARK_CYCLES"),
                           ("autotune", "CERAR_AUTOTUNE"),
                           ("hierarchical_allreduce", "CERAR_HIERARCHICAL_ALLREDUCE")):
        if getattr(args, dest, None) is not None:
            env[variable] = "1" if getattr(args, dest) else "0"
    for dest, variable in (("stall_check_warning_time_seconds", "CERAR_STALL_CHECK_TIME_SECONDS"),
                           ("stall_check_shutdown_time_seconds",
                            "CERAR_STALL_SHUTDOWN_TIME_SECONDS"),
                           ("start_timeout", "CERAR_RENDEZVOUS_TIMEOUT_SECONDS")):
        if getattr(args, dest, None) is not None:
            env[variable] = repr(float(getattr(args, dest)))
    if getattr(args, "no_stall_check", None):  # as in Horovod, it wins over a warning time
        env["CERAR_STALL_CHECK_TIME_SECONDS"] = "0"
    if getattr(args, "log_level", None):
        env["CERAR_LOG_LEVEL"] = LOG_LEVELS[args.log_level]
    nics = getattr(args, "network_interface", None)
    if nics:
        given = (getattr(args, "network_interfaces", None) or "").split(",")
        env["CERAR_IFACE"] = ",".join(dict.fromkeys(n for n in given + nics if n))
    if getattr(args, "tcp", False):
        env["NCCL_IB_DISABLE"] = "1"
    return env


def horovod_identity(placement, rank):
    """The variables horovodrun gives each worker (HOROVOD_RANK, ...), for job scripts that
    read them; cerar itself does not. `placement`: (rank, host, local_rank, local_size) rows."""
    _, host, local_rank, local_size = placement[rank]
    peers = []  # the hosts with a rank of this local rank, in order: cross rank and size
    for _, other, other_local, _ in placement:
        if other_local == local_rank and other not in peers:
            peers.append(other)
    return {"HOROVOD_HOSTNAME": host, "HOROVOD_RANK": str(rank),
            "HOROVOD_SIZE": str(len(placement)), "HOROVOD_LOCAL_RANK": str(local_rank),
            "HOROVOD_LOCAL_SIZE": str(local_size), "HOROVOD_CROSS_RANK": str(peers.index(host)),
            "HOROVOD_CROSS_SIZE": str(len(peers))}


def build_table():
    """--check-build's answer, in horovodrun's layout."""
    import cerar

    def mark(on):
        return "X" if on else " "

    def installed(module):
        return importlib.util.find_spec(module) is not None

    frameworks = [("TensorFlow", False), ("PyTorch", installed("torch")), ("MXNet", False),
                  ("JAX", installed("jax")), ("NumPy", installed("numpy"))]
    controllers = [("MPI", cerar.mpi_built()), ("Gloo", cerar.gloo_built())]
    operations = [("NCCL", cerar.nccl_built()), ("DDL", cerar.ddl_built()),
                  ("CCL", cerar.ccl_built()), ("MPI", cerar.mpi_built()),
                  ("Gloo", cerar.gloo_built())]
    lines = [f"cerar v{cerar.__version__}:"]
    for title, rows in (("Available Frameworks", frameworks),
                        ("Available Controllers", controllers),
                        ("Available Tensor Operations", operations)):
        lines += ["", f"{title}:"] + [f"    [{mark(on)}] {name}" for name, on in rows]
    return "\n".join(lines)


# Horovod's YAML: section -> {key: the flag's dest}; the booleans "enabled" are inverted or not.
CONFIG_KEYS = {
    "params": {"fusion_threshold_mb": "fusion_threshold_mb", "cycle_time_ms": "cycle_time_ms",
               "cache_capacity": "cache_capacity",
               "hierarchical_allreduce": "hierarchical_allreduce",
               "hierarchical_allgather": "hierarchical_allgather"},
    "autotune": {"enabled": "autotune", "log_file": "autotune_log_file",
                 "warmup_samples": "autotune_warmup_samples",
                 "steps_per_sample": "autotune_steps_per_sample",
                 "bayes_opt_max_samples": "autotune_bayes_opt_max_samples",
                 "gaussian_process_noise": "autotune_gaussian_process_noise"},
    "timeline": {"filename": "timeline", "mark_cycles": "timeline_mark_cycles"},
    "stall_check": {"enabled": "no_stall_check",
                    "warning_time_seconds": "stall_check_warning_time_seconds",
                    "shutdown_time_seconds": "stall_check_shutdown_time_seconds"},
    "library_options": {"mpi_threads_disable": "mpi_threads_disable",
                        "num_nccl_streams": "num_nccl_streams",
                        "ccl_bgt_affinity": None,  # Intel's oneCCL: no effect here
                        "gloo_timeout_seconds": "timeout"},
    "logging": {"level": "log_level", "with_timestamp": "log_with_timestamp"},
}


def load_config(parser, path):
    try:
        import yaml
    except ImportError:
        parser.error("--config-file needs PyYAML (Debian's package python3-yaml; pip's PyYAML)")
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except OSError as error:
        parser.error(f"--config-file {path}: {error.strerror}")
    except yaml.YAMLError as error:
        parser.error(f"--config-file {path}: not YAML: {error}")
    if config is None:
        return {}
    if not isinstance(config, dict):
        parser.error(f"--config-file {path}: not a mapping of Horovod's sections")
    return config


def apply_config(parser, args, config):
    """Sets the flags the command line left unset from Horovod's YAML sections."""
    controller = config.get("controller")
    if controller is not None and str(controller).lower() != "gloo":
        parser.error(f"--config-file: controller {controller!r}: {MPI_ONLY}")
    for section, values in config.items():
        if section == "controller":
            continue
        keys = CONFIG_KEYS.get(section)
        if keys is None or not isinstance(values, dict):
            print(f"cerarrun: --config-file: section {section!r} is not Horovod's "
                  f"({', '.join(['controller', *CONFIG_KEYS])}); ignored", file=sys.stderr)
            continue
        for key, value in values.items():
            if key not in keys:
                print(f"cerarrun: --config-file: {section}.{key} is not Horovod's "
                      f"({', '.join(keys)}); ignored", file=sys.stderr)
            elif keys[key] is None:
                print(f"cerarrun: --config-file: {section}.{key} has no effect here: oneCCL is "
                      "not built", file=sys.stderr)
            elif value is not None:
                _set_from_config(parser, args, section, key, keys[key], value)


def _set_from_config(parser, args, section, key, dest, value):
    if dest == "no_stall_check":
        value = not value  # stall_check.enabled is the opposite of --no-stall-check
    if getattr(args, dest, None) not in (None, []):
        return  # the command line wins
    action = next(a for a in parser._actions if a.dest == dest)
    if isinstance(value, bool) or action.type is None:
        setattr(args, dest, value)
        return
    try:
        setattr(args, dest, action.type(value))
    except (TypeError, ValueError):
        parser.error(f"--config-file: {section}.{key}: {value!r} is not a {action.type.__name__}")
    if dest == "log_level" and args.log_level not in LOG_LEVELS:
        parser.error(f"--config-file: logging.level: {value!r} is not one of "
                     f"{', '.join(LOG_LEVELS)}")
