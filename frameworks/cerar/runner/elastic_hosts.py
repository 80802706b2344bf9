"""The hosts of an elastic job: what discovery lists (a script, or a fixed -H/--hostfile list),
which hosts are blacklisted and for how long, their stable order, and where each rank of a new
generation runs. Everything here but the discovery runs is pure (the clock and the random draw
are injectable), so the driver's decisions can be tested without processes."""
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from cerar.runner.hosts import parse_hostfile, parse_hosts

# Seconds one run of the discovery script may take; a slower run counts as a failed one.
DISCOVERY_TIMEOUT = 10.0
# Seconds a host name's resolution (or its failure) is trusted.
NAME_TTL = 60.0
# Seconds between discovery runs (Horovod's driver polls about every second).
DISCOVERY_INTERVAL = 1.0


# A host as a discovery script may name it: a DNS name or IPv4 address (RFC 1123 labels), an
# IPv6 address, bare or in brackets. Anything else on a line (a log message, "#", spaces) is
# not a host.
_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                   r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")
_IPV6 = re.compile(r"^[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?$")


def _is_host(host, bracketed):
    if bracketed or host.count(":") >= 2:
        return host.count(":") >= 2 and bool(_IPV6.match(host))
    return bool(_NAME.match(host))


def parse_discovery(text, slots_per_host, rejected=None):
    """[(host, slots)] in the order listed, from lines "host:slots" or "host" (then
    `slots_per_host`); blank and repeated lines and hosts with 0 slots are skipped. A line
    that is neither form is left out, and "line N: why" appended to `rejected` (a list) —
    without one it raises ValueError. Two slot counts for one host raise ValueError."""
    hosts, seen = [], {}

    def reject(why):
        if rejected is None:
            raise ValueError(why)
        rejected.append(why)

    for number, line in enumerate(text.splitlines(), 1):
        item = line.strip()
        if not item:
            continue
        bracketed = item.startswith("[")
        if bracketed:  # [IPv6 address] or [IPv6 address]:slots
            host, _, rest = item[1:].partition("]")
            slots = rest[1:] if rest.startswith(":") else rest or str(slots_per_host)
        elif item.count(":") == 1:
            host, _, slots = item.partition(":")
        else:  # no slots given, or a bare IPv6 address
            host, slots = item, str(slots_per_host)
        try:
            count = int(slots)
        except ValueError:
            reject(f"line {number}: bad slot count in {item!r} (expected host:slots or host)")
            continue
        if count < 0 or not _is_host(host, bracketed):
            reject(f"line {number}: bad host {item!r} (expected host:slots or host)")
            continue
        if count == 0:  # a drained host, as a cluster's list may show it: not available
            continue
        if host in seen:  # a repeated line is harmless; two slot counts are not
            if seen[host] != count:
                raise ValueError(f"line {number}: host {host!r} listed twice, with "
                                 f"{seen[host]} and {count} slots")
            continue
        seen[host] = count
        hosts.append((host, count))
    return hosts


class ScriptDiscovery:
    """Runs the --host-discovery-script (through the shell, so it may carry arguments) in a
    process group of its own, killed whole when it overruns and when the job ends: a hanging
    script's children (a `sleep`, a stuck `curl`) never outlive the run or the launcher."""

    def __init__(self, script, slots_per_host, timeout=DISCOVERY_TIMEOUT, log=None,
                 resolves=None):
        self.script, self.slots_per_host, self.timeout = script, slots_per_host, timeout
        self._resolve = resolves or _resolves
        self._log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self._lock = threading.Lock()
        self._running = None  # the Popen of a run in progress
        self._warned = set()  # rejected lines already logged
        self._names = {}      # host -> (resolves, when asked)
        self._closed = False

    def find(self):
        """[(host, slots)]; ValueError saying why when the run fails or lists no valid host;
        EmptyListing when it exits 0 printing nothing."""
        # Files, not pipes: a child left in the background keeps a pipe open, and the end of
        # the script (not of its output) is what counts.
        with tempfile.TemporaryFile("w+") as out_file, tempfile.TemporaryFile("w+") as err_file:
            with self._lock:
                if self._closed:
                    raise ValueError("the job is ending")
                proc = subprocess.Popen(self.script, shell=True, stdout=out_file,
                                        stderr=err_file, text=True, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
                self._running = proc
            try:
                proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                raise ValueError(f"took more than {self.timeout:g} s") from None
            finally:
                _kill_group(proc)  # on a timeout, and whatever it left in the background
                proc.wait()
                with self._lock:
                    self._running = None
            out_file.seek(0)
            err_file.seek(0)
            out, err = out_file.read(), err_file.read()
        if proc.returncode != 0:
            last = (err.strip().splitlines() or [""])[-1]
            raise ValueError(f"exited with code {proc.returncode}" + (f": {last}" if last else ""))
        if not out.strip():
            raise EmptyListing()
        rejected = []
        hosts = [(host, slots) for host, slots in
                 parse_discovery(out, self.slots_per_host, rejected)
                 if self._resolves(host, rejected)]
        for why in rejected:
            if why not in self._warned:
                self._warned.add(why)
                self._log(f"cerarrun: host discovery: ignoring {why}")
        if not hosts and rejected:
            raise ValueError(f"no valid host in its output ({rejected[0]})")
        return hosts

    def _resolves(self, host, rejected):
        """A name that does not resolve (a stray word such as "done") would only fail its
        worker's start and cost a reset: left out, said once. Answers are kept a minute."""
        now = time.monotonic()
        known = self._names.get(host)
        if known is None or now - known[1] > NAME_TTL:
            known = (self._resolve(host), now)
            self._names[host] = known
        if not known[0]:
            rejected.append(f"host {host!r}: its name does not resolve")
        return known[0]

    def close(self):
        """Kills a run in progress, with its whole process group; no run starts after."""
        with self._lock:
            self._closed = True
            proc = self._running
        if proc is not None:
            _kill_group(proc)


class EmptyListing(ValueError):
    """The script exited 0 and printed nothing: taken as "no change" (the last list stays),
    not as "every host removed" (docs/elastic.md)."""

    def __init__(self):
        super().__init__("printed no host while exiting 0")


def _resolves(host):
    try:
        socket.getaddrinfo(host, None)
        return True
    except (socket.gaierror, UnicodeError):
        return False


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class FixedDiscovery:
    """-H or --hostfile in elastic mode: the same hosts every time."""

    def __init__(self, hosts):
        self.hosts = list(hosts)

    def find(self):
        return list(self.hosts)

    def close(self):
        pass


def discovery_of(args):
    """The script, or -H/--hostfile as a fixed list (no list: -np slots on this host)."""
    if args.host_discovery_script:
        return ScriptDiscovery(args.host_discovery_script, args.slots_per_host)
    if args.hostfile:
        return FixedDiscovery(parse_hostfile(args.hostfile, 0))
    return FixedDiscovery(parse_hosts(args.hosts, 0 if args.hosts else args.np))


class DiscoveryPoller:
    """Runs a discovery about every `interval` seconds on a thread of its own and keeps the last
    good list: a failing run keeps it and is logged once until a run succeeds again."""

    def __init__(self, discovery, interval=DISCOVERY_INTERVAL, log=None):
        self._discovery, self._interval = discovery, interval
        self._log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self._lock = threading.Lock()
        self._hosts, self._failing, self._empty = None, False, False
        self._stop = threading.Event()
        self._thread = None

    def poll_once(self):
        try:
            hosts = self._discovery.find()
        except EmptyListing:
            if not self._empty:
                self._log("cerarrun: host discovery printed no host (exit 0): taken as no "
                          "change, keeping the last hosts it listed")
            self._empty = True
            return
        except (ValueError, OSError) as error:
            if not self._failing:
                self._log(f"cerarrun: host discovery failed ({error}); "
                          "keeping the last hosts it listed")
            self._failing = True
            return
        if self._failing:
            self._log("cerarrun: host discovery works again")
        self._failing = self._empty = False
        with self._lock:
            self._hosts = hosts

    def start(self):
        """The first run must work: its failure is a misconfiguration (ValueError), not a
        passing one (as Horovod's driver decides)."""
        try:
            hosts = self._discovery.find()
        except (ValueError, OSError) as error:
            raise ValueError(f"host discovery failed ({error})") from None
        with self._lock:
            self._hosts = hosts
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.wait(self._interval):
            self.poll_once()

    def hosts(self):
        """The last good list, or None before the first good run."""
        with self._lock:
            return None if self._hosts is None else list(self._hosts)

    def stop(self):
        self._stop.set()
        close = getattr(self._discovery, "close", None)
        if close is not None:
            close()


def cooldown_seconds(failures, low, high, draw=random.random):
    """How long a host that failed `failures` times stays out: a random time that starts in
    [low, 2 low) and doubles with each failure, capped at `high`."""
    return min(high, low * 2 ** (failures - 1) * (1.0 + draw()))


class HostManager:
    """The hosts discovery lists, in a stable order, less the blacklisted ones.

    A host keeps the place where it was first seen; a host that comes back (listed again after
    it was dropped, or out of its cooldown) goes to the end, as a new host would. A blacklisted
    host stays out for good without a cooldown range, else for cooldown_seconds().
    """

    def __init__(self, cooldown_range=None, clock=time.monotonic, draw=random.random):
        self._cooldown, self._clock, self._draw = cooldown_range, clock, draw
        self._order = []     # available hosts, in the stable order
        self._slots = {}     # host -> slots, as last listed
        self._failures = {}  # host -> times blacklisted in a row
        self._until = {}     # blacklisted host -> when it may return (inf: never)

    def update(self, listed):
        """Takes discovery's latest [(host, slots)]; returns (added, removed): hosts now
        available that were not (or now with more slots), and hosts no longer available."""
        now = self._clock()
        for host, until in list(self._until.items()):
            if until <= now:
                del self._until[host]
        before = {host: self._slots[host] for host in self._order}
        self._slots = dict(listed)
        self._order = [host for host in self._order if host in self._slots
                       and host not in self._until]
        for host, _ in listed:
            if host not in self._order and host not in self._until:
                self._order.append(host)
        added = [host for host in self._order if self._slots[host] > before.get(host, 0)]
        removed = [host for host in before if host not in self._order]
        return added, removed

    def blacklist(self, host):
        """Takes `host` out; it returns (at the end of the order) after its cooldown."""
        self._failures[host] = self._failures.get(host, 0) + 1
        if self._cooldown is None:
            self._until[host] = math.inf
        else:
            low, high = self._cooldown
            self._until[host] = self._clock() + cooldown_seconds(self._failures[host], low,
                                                                 high, self._draw)
        if host in self._order:
            self._order.remove(host)

    def worked(self, host):
        """`host` took part in a generation that trained: its next failure counts as a first
        one again (the cooldown grows with failures in a row)."""
        self._failures.pop(host, None)

    def is_blacklisted(self, host):
        return host in self._until and self._until[host] > self._clock()

    def blacklisted(self):
        """The hosts out now (any thread: a copy is read)."""
        return [host for host in list(self._until) if self.is_blacklisted(host)]

    def available(self):
        """[(host, slots)] of the hosts that may get workers, in the stable order."""
        return [(host, self._slots[host]) for host in self._order]


def place(available, survivors, target):
    """Where each rank of a new generation runs.

    `available`: [(host, slots)] in the stable order; `survivors`: [(worker, host)] of the
    workers that go on, in their previous rank order; `target`: the size wanted. Returns
    [(worker or None for a new one, host, local_rank, local_size)] in rank order: the hosts
    in order, on each its survivors first (in their order, as many as its slots), then new
    workers in its free slots while the size is below `target`. So survivors keep their
    relative order and the lowest surviving rank becomes rank 0.
    """
    slots = dict(available)
    kept = {host: [] for host, _ in available}
    for worker, host in survivors:
        if host in kept and len(kept[host]) < slots[host]:
            kept[host].append(worker)
    free = max(0, target - sum(len(workers) for workers in kept.values()))
    placement = []
    for host, count in available:
        new = min(free, count - len(kept[host]))
        free -= new
        workers = kept[host] + [None] * new
        placement += [(worker, host, local, len(workers)) for local, worker in enumerate(workers)]
    return placement
