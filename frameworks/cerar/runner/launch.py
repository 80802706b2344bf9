"""How cerarrun starts and stops processes, here or over ssh: the environment a rank gets, the
ssh command line that carries it (the secret on ssh's input), prefixed output and termination
by process group. The fixed launcher (run.py) and the elastic driver share them."""
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import typing

from cerar.runner.horovodrun import horovod_knobs
from cerar.runner.hosts import is_local
from cerar._store import rank_identity

# Variables of the launcher's environment that remote ranks get without -x.
FORWARDED_PREFIXES = ("CERAR_", "NCCL_")
FORWARDED_NAMES = ("GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "PYTHONPATH")
# Seconds a terminated rank (or a remote one whose ssh input closed) has before SIGKILL.
GRACE_SECONDS = 5


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
    """The settings that have a cerarrun flag, from the settings table (core/config/settings.cc)."""
    from cerar._cerar import settings
    return [row for row in settings() if row["flag"]]


def add_knob_flags(parser):
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
    """The CERAR_* variables of the knob flags given (horovodrun's included)."""
    env = {}
    for row in _knob_settings():
        value = getattr(args, row["flag"]["name"].replace("-", "_"))
        if value is not None and value is not False:
            env[row["variable"]] = _knob_value(row, value)
    env.update(horovod_knobs(args))
    return env


def shadowed(env):
    """What a rank must not see of the launcher's environment: the HOROVOD_* aliases of the
    variables `env` sets (a flag wins over them, without the rank's warning that both forms
    are set) and HOROVOD_START_TIMEOUT (cerarrun's own, --start-timeout's default)."""
    from cerar._cerar import settings
    return sorted(["HOROVOD_START_TIMEOUT"] + [
        alias for row in settings() if row["variable"] in env
        for alias in row["aliases"] if alias.startswith("HOROVOD_")])


class SpawnOptions(typing.NamedTuple):
    """How spawn starts a rank, from horovodrun's flags (spawn_options)."""
    identity_file: str = None   # ssh -i
    output_dir: str = None      # a copy of the output in <dir>/rank.<label>/stdout, stderr
    width: int = 1              # digits of the label there (zero-padded, as Horovod's)
    timestamps: bool = False    # each output line prefixed with the time
    verbose: bool = False       # print each command line


def spawn_options(args):
    size = max(getattr(args, "max_np", None) or 0, getattr(args, "np", None) or 1)
    return SpawnOptions(getattr(args, "ssh_identity_file", None),
                        getattr(args, "output_filename", None), len(str(size - 1)),
                        bool(getattr(args, "prefix_output_with_timestamp", False)),
                        bool(getattr(args, "verbose", False)))


def rank_env(rank, size, local_rank, local_size, addr, port, secret, knobs):
    env = rank_identity(rank, size, local_rank, local_size, addr, port, secret)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(knobs)
    return env


def ssh_command(host, env, command, cwd, ssh_port=None, identity_file=None, unset=()):
    """The ssh command line that runs `command` on `host` in `cwd` with `env` set.

    CERAR_SECRET is left out: command lines are visible to every user of both hosts (ps), so
    the remote shell reads it from its standard input, which the launcher writes (ssh_stdin)
    and keeps open. The rank runs in a session of its own; a watcher reads the rest of the
    input, and when it ends (the launcher closed it, or died, or ssh's connection broke)
    terminates the rank's process group, then kills it after GRACE_SECONDS. The remote shell
    exits with the rank's code, which ssh returns. `unset`: variables the rank must not see.
    """
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    if ssh_port:
        ssh += ["-p", str(ssh_port)]
    if identity_file:
        ssh += ["-i", identity_file]
    public = {k: v for k, v in env.items() if k != "CERAR_SECRET"}
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(public.items()))
    read_secret = "IFS= read -r CERAR_SECRET || exit 1; export CERAR_SECRET; " \
        if "CERAR_SECRET" in env else ""
    removals = "".join(f"-u {shlex.quote(name)} " for name in unset)
    rank = "setsid env " + removals + assignments + " " + " ".join(shlex.quote(c) for c in command)
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


def pump_output(label, stream, lock, copy=None, timestamps=False, also=None):
    """Copies a process's output to ours, each line prefixed with "[label] " (and the time
    when asked), and unprefixed to the file `copy`; `also`: a thread pumping its other stream,
    waited for at the end."""
    prefix = f"[{label}] ".encode()
    out = sys.stdout.buffer
    for line in iter(stream.readline, b""):
        line = line if line.endswith(b"\n") else line + b"\n"
        if copy is not None:
            copy.write(line)
            copy.flush()
        stamp = time.strftime("%a %b %d %H:%M:%S %Y ").encode() if timestamps else b""
        with lock:
            out.write(stamp + prefix + line)
            out.flush()
    stream.close()
    if copy is not None:
        copy.close()
    if also is not None:
        also.join()


def terminate(procs, grace=GRACE_SECONDS):
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
            signal_group(proc, signal.SIGTERM)
    for proc in procs:
        limit = remote_deadline if proc.stdin is not None else deadline
        try:
            proc.wait(max(0.0, limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGTERM if proc.stdin is not None else signal.SIGKILL)
    for proc in procs:
        try:
            proc.wait(1.0)
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
            proc.wait()


def signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def spawn(label, host, command, env, extra, ssh_port, lock, options=SpawnOptions()):
    """Starts `command` with the rank variables `env` on `host` (here, or over ssh with the
    forwarded variables and `extra`, the -x ones) in a session of its own, its output pumped
    with the prefix "[label] "; (process, pump thread). OSError when it cannot start."""
    remote = not is_local(host)
    unset = shadowed(env)
    if remote:
        argv = ssh_command(host, {**forwarded(os.environ), **extra, **env}, command,
                           os.getcwd(), ssh_port, options.identity_file, unset)
        full_env = dict(os.environ)
    else:
        argv, full_env = command, {**os.environ, **extra, **env}
        for name in unset:
            full_env.pop(name, None)
    if options.verbose:
        shown = argv if remote else [f"{k}={v}" for k, v in sorted({**extra, **env}.items())
                                     if k != "CERAR_SECRET"] + list(command)
        print(f"cerarrun: [{label}] on {host}: {shlex.join(shown)}", file=sys.stderr, flush=True)
    files = _output_files(label, options)
    try:
        proc = subprocess.Popen(argv, env=full_env,
                                stdin=subprocess.PIPE if remote else subprocess.DEVNULL,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE if files else subprocess.STDOUT,
                                start_new_session=True)
    except OSError:
        for file in files or ():
            file.close()
        raise
    if remote:  # the secret travels inside ssh's encrypted stream, not on its line
        try:
            proc.stdin.write(ssh_stdin(env))
            proc.stdin.flush()  # the input stays open: its end stops the remote rank
        except OSError:
            terminate([proc])
            raise
    errors = None
    if files:
        errors = threading.Thread(target=pump_output, daemon=True,
                                  args=(label, proc.stderr, lock, files[1], options.timestamps))
        errors.start()
    thread = threading.Thread(target=pump_output, daemon=True,
                              args=(label, proc.stdout, lock, files[0] if files else None,
                                    options.timestamps, errors))
    thread.start()
    return proc, thread


def _output_files(label, options):
    """(stdout, stderr) files of --output-filename, or None."""
    if not options.output_dir:
        return None
    name = str(label).zfill(options.width) if str(label).isdigit() else str(label)
    folder = os.path.join(options.output_dir, f"rank.{name}")
    os.makedirs(folder, exist_ok=True)
    return open(os.path.join(folder, "stdout"), "wb"), open(os.path.join(folder, "stderr"), "wb")


class Worker:
    """One process the elastic driver started (proc None: it could not start, code 127);
    `handled`: its end needs no reaction (the driver stopped it, or took its failure into
    account)."""

    def __init__(self, worker_id, host, proc, pump):
        self.id, self.host, self.proc, self.pump = worker_id, host, proc, pump
        self.code = None if proc is not None else 127
        self.handled = False
        self.leave_by = None  # set while it is out of the plan but may still run
        self.holds_state = False  # it started the job, or took part in a sync
        self.join_by = None  # until it reaches a barrier: when its start counts as failed

    def exited(self):
        if self.code is None:
            self.code = self.proc.poll()
        return self.code is not None


class Stopped(Exception):
    """SIGTERM or SIGHUP reached the launcher."""

    def __init__(self, sig):
        super().__init__(sig)
        self.code = 128 + sig


def raise_stopped(sig, _frame):
    raise Stopped(sig)


def exit_code(rc):
    """The launcher's exit code for a rank's: a signal's death as the shell reports it."""
    return rc if rc > 0 else 128 - rc
