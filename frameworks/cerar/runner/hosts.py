"""Where a job's ranks run: the hosts and slots cerarrun is given (-H, --hostfile), the ranks
placed on them, and whether a host is this one."""
import socket

_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


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


def parse_hostfile(path, np):
    """[(host, slots)] from lines "host slots=N" ('#' starts a comment; no slots means 1)."""
    spec = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            slots = "1"
            for word in words[1:]:
                key, _, value = word.partition("=")
                if key not in ("slots", "max_slots", "max-slots") or not value:
                    raise ValueError(f"{path}:{number}: expected 'host slots=N', got {line.strip()!r}")
                if key == "slots":
                    slots = value
            spec.append(f"{words[0]}:{slots}")
    if not spec:
        raise ValueError(f"{path}: no hosts")
    return parse_hosts(",".join(spec), np)


def assign(hosts, np):
    """[(rank, host, local_rank, local_size)]: the hosts are filled in order."""
    placement = []
    for host, slots in hosts:
        count = min(slots, np - len(placement))
        placement += [(len(placement) + i, host, i, count) for i in range(count)]
        if len(placement) == np:
            break
    return placement


def is_loopback(address):
    """Whether `address` reaches this host only (then a store for it need not listen wider)."""
    return address in _LOCAL_NAMES or address.startswith("127.")


def is_local(host):
    """This host's names, or a name or address that resolves to one of its addresses."""
    if host in _LOCAL_NAMES or host in (socket.gethostname(), socket.getfqdn()):
        return True
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _, _, _, address in infos:
        if address[0].startswith("127."):  # a name of another host never resolves to loopback
            continue
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address[0], 0))  # only this host's own addresses can be bound
                return True
            except OSError:
                pass
    return False


def route_source(host):
    """The local address of the route to `host` (a connected UDP socket; nothing is sent)."""
    try:
        infos = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)
    except OSError as error:
        raise ValueError(f"cannot resolve host {host!r}: {error}") from None
    for family, _, _, _, address in infos:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect(address)
                return probe.getsockname()[0]
            except OSError:
                continue
    raise ValueError(f"no route to host {host!r}")
