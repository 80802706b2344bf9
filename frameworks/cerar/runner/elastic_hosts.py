"""The hosts of an elastic job: what discovery lists (a script, or a fixed -H/--hostfile list),
which hosts are blacklisted and for how long, their stable order, and where each rank of a new
generation runs. Everything here but the discovery runs is pure (the clock and the random draw
are injectable), so the driver's decisions can be tested without processes."""
import math
import random
import subprocess
import sys
import threading
import time

from cerar.runner.hosts import parse_hostfile, parse_hosts

# Seconds one run of the discovery script may take; a slower run counts as a failed one.
DISCOVERY_TIMEOUT = 10.0
# Seconds between discovery runs (Horovod's driver polls about every second).
DISCOVERY_INTERVAL = 1.0


def parse_discovery(text, slots_per_host):
    """[(host, slots)] in the order listed, from lines "host:slots" or "host" (then
    `slots_per_host`); blank and repeated lines and hosts with 0 slots are skipped.
    ValueError names the first bad line."""
    hosts, seen = [], {}
    for number, line in enumerate(text.splitlines(), 1):
        item = line.strip()
        if not item:
            continue
        if item.startswith("["):  # [IPv6 address] or [IPv6 address]:slots
            host, _, rest = item[1:].partition("]")
            slots = rest[1:] if rest.startswith(":") else rest or str(slots_per_host)
        elif item.count(":") == 1:
            host, _, slots = item.partition(":")
        else:  # no slots given, or a bare IPv6 address
            host, slots = item, str(slots_per_host)
        try:
            count = int(slots)
        except ValueError:
            raise ValueError(f"line {number}: bad slot count in {item!r} "
                             "(expected host:slots or host)") from None
        if not host or count < 0 or any(c.isspace() for c in host):
            raise ValueError(f"line {number}: bad host {item!r} (expected host:slots or host)")
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
    """Runs the --host-discovery-script (through the shell, so it may carry arguments)."""

    def __init__(self, script, slots_per_host, timeout=DISCOVERY_TIMEOUT):
        self.script, self.slots_per_host, self.timeout = script, slots_per_host, timeout

    def find(self):
        """[(host, slots)]; ValueError saying why when the run fails or prints nonsense."""
        try:
            done = subprocess.run(self.script, shell=True, capture_output=True, text=True,
                                  timeout=self.timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ValueError(f"took more than {self.timeout:g} s") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [""])[-1]
            raise ValueError(f"exited with code {done.returncode}" + (f": {last}" if last else ""))
        return parse_discovery(done.stdout, self.slots_per_host)


class FixedDiscovery:
    """-H or --hostfile in elastic mode: the same hosts every time."""

    def __init__(self, hosts):
        self.hosts = list(hosts)

    def find(self):
        return list(self.hosts)


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
        self._hosts, self._failing = None, False
        self._stop = threading.Event()
        self._thread = None

    def poll_once(self):
        try:
            hosts = self._discovery.find()
        except (ValueError, OSError) as error:
            if not self._failing:
                self._log(f"cerarrun: host discovery failed ({error}); "
                          "keeping the last hosts it listed")
            self._failing = True
            return
        if self._failing:
            self._log("cerarrun: host discovery works again")
        self._failing = False
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
        self._failures = {}  # host -> times blacklisted
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
