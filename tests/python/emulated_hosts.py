"""Emulated hosts for multi-host tests: each a network namespace on one bridge (bench/netem.sh),
with its own address 10.77.0.<i>, its own host name node0<i> (a UTS namespace) that resolves to
127.0.1.1 on that host as on a fresh Debian host (/etc/netns/<ns>/hosts, which `ip netns exec`
mounts over /etc/hosts) and to 10.77.0.<i> on the others, and its own sshd on port 22 that
accepts a key made for the run. Needs root, `ip netns`, sshd and ssh; `unavailable()` says why
not. Names are unique per run (a prefix made from the process id); everything made is removed
by close(), also after a failure.

    with EmulatedHosts(4) as hosts:
        hosts.popen(0, ["cerarrun", "-H", "node01:2,node02:2", ...], env=hosts.client_env())
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NETEM = ROOT / "bench" / "netem.sh"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def unavailable():
    """Why emulated hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, sshd)"
    for tool in ("ip", "tc", "ssh", "ssh-keygen", "unshare", "setsid"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.access(SSHD, os.X_OK):
        return "needs sshd (Debian's openssh-server; scripts/setup.sh test installs it)"
    probe = f"cerarprobe{os.getpid()}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if result.returncode != 0:
        return f"cannot make network namespaces: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _letters(number):
    return "".join("abcdefghij"[int(d)] for d in str(number))


class EmulatedHosts:
    def __init__(self, count):
        assert 2 <= count <= 9
        self.count = count
        self.prefix = "mh" + _letters(os.getpid())  # netem.sh: a letter last, at most 12
        self.names = [f"node{i + 1:02d}" for i in range(count)]
        self.addresses = [f"10.77.0.{i + 1}" for i in range(count)]
        self.tmp = Path(tempfile.mkdtemp(prefix="cerar-hosts-"))
        self._sshd = []
        self._up = False

    # --- set-up -------------------------------------------------------------------------------
    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_):
        self.close()

    def namespace(self, host):
        return f"{self.prefix}{host}"

    def _start(self):
        result = subprocess.run([str(NETEM), "up", "--ranks", str(self.count), "--rate-mbit",
                                 "10000", "--name", self.prefix], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"netem.sh up failed: {result.stdout}{result.stderr}")
        self._up = True
        for host in range(self.count):
            lines = ["127.0.0.1 localhost", f"127.0.1.1 {self.names[host]}"]
            lines += [f"{self.addresses[i]} {self.names[i]}" for i in range(self.count)
                      if i != host]
            folder = Path("/etc/netns") / self.namespace(host)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text("\n".join(lines) + "\n")
        self._make_keys()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation
        for host in range(self.count):
            log = open(self.tmp / f"sshd-{host}.log", "wb")
            self._sshd.append(self.popen(host, [
                SSHD, "-D", "-e", "-f", str(self.tmp / "sshd_config"), "-o", f"PidFile={self.tmp}/sshd-{host}.pid"], stdout=log, stderr=log))
        deadline = time.monotonic() + 60
        for host in range(self.count):
            while True:
                probe = self.run(0, ["ssh", self.names[host], "hostname"],
                                 env=self.client_env(), timeout=30)
                if probe.returncode == 0 and probe.stdout.strip() == self.names[host]:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd on {self.names[host]} does not answer: "
                                       f"{probe.stdout}{probe.stderr}\n"
                                       f"{(self.tmp / f'sshd-{host}.log').read_text()}")
                time.sleep(0.2)

    def _make_keys(self):
        for key in ("id", "host_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            str(self.tmp / key)], check=True, capture_output=True)
        shutil.copy(self.tmp / "id.pub", self.tmp / "authorized_keys")
        (self.tmp / "sshd_config").write_text(
            f"Port 22\nHostKey {self.tmp}/host_key\n"
            f"AuthorizedKeysFile {self.tmp}/authorized_keys\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPrintMotd no\n"
            "PrintLastLog no\nMaxStartups 100\nMaxSessions 100\n")
        (self.tmp / "ssh_config").write_text(
            f"Host *\n  IdentityFile {self.tmp}/id\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.tmp}/known_hosts\n  StrictHostKeyChecking no\n"
            "  BatchMode yes\n  LogLevel ERROR\n  ConnectTimeout 20\n")
        wrapper = self.tmp / "bin" / "ssh"  # `ssh` for cerarrun and mpirun: this run's key
        wrapper.parent.mkdir()
        wrapper.write_text(f"#!/bin/sh\nexec {shutil.which('ssh')} -F {self.tmp}/ssh_config "
                           '"$@"\n')
        wrapper.chmod(0o755)

    def client_env(self, extra=None):
        """The environment for commands that ssh to the hosts (this run's key, no prompts)."""
        env = {**os.environ, **(extra or {})}
        env["PATH"] = f"{self.tmp}/bin:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    # --- running ------------------------------------------------------------------------------
    def command(self, host, argv):
        """argv run on host `host` (0-based): in its namespace, under its host name."""
        return ["ip", "netns", "exec", self.namespace(host), "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.names[host], *map(str, argv)]

    def popen(self, host, argv, **kwargs):
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(self.command(host, argv), **kwargs)

    def run(self, host, argv, timeout=120, **kwargs):
        return subprocess.run(self.command(host, argv), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, **kwargs)

    def processes(self, host, marker):
        """Pids in host's namespace whose command line contains `marker`."""
        result = subprocess.run(["ip", "netns", "pids", self.namespace(host)],
                                capture_output=True, text=True)
        found = []
        for pid in result.stdout.split():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if marker.encode() in cmdline and b"ip netns" not in cmdline:
                found.append(int(pid))
        return found

    def interpreters(self, host, marker):
        """Pids of the Python processes on host whose command line contains `marker` (the
        workers themselves, not the shells that started them)."""
        found = []
        for pid in self.processes(host, marker):
            try:
                argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if b"python" in os.path.basename(argv0):
                found.append(pid)
        return found

    # --- tear-down ----------------------------------------------------------------------------
    def close(self):
        for proc in self._sshd:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if self._up:
            for host in range(self.count):  # whatever a failed test left in our namespaces
                for pid in self.processes(host, ""):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            subprocess.run([str(NETEM), "down", "--name", self.prefix], capture_output=True)
            self._up = False
        for host in range(self.count):
            shutil.rmtree(Path("/etc/netns") / self.namespace(host), ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
