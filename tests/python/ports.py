"""Loopback ports that a rank started by a test binds later, reserved for this process.

They lie below the kernel's ephemeral range, so no connect() or bind(port 0) of a concurrent
test can take them meanwhile; a lock file per port (held until this process exits, released
by the kernel even on a crash) keeps two concurrent tests from choosing the same ones. The
C++ tests' testing::freePort() keeps the same files."""
import fcntl
import os
import random
import socket

LOCKS = "/tmp/cerar-test-ports"
_held = []  # open lock files: closing one would release its port


def _range(count):
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return (10000, low - count) if low > 12000 else (high + 1, 65536 - count)


def _take(port):
    """The lock file of `port`, held, if no one holds it and the port binds; else None."""
    lock = open(os.path.join(LOCKS, str(port)), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
        return lock
    except OSError:
        lock.close()
        return None


def free_ports(count=1):
    """The first of `count` consecutive reserved ports."""
    os.makedirs(LOCKS, mode=0o777, exist_ok=True)
    first, last = _range(count)
    for _ in range(1000):
        base = random.randrange(first, last)
        locks = []
        for port in range(base, base + count):
            lock = _take(port)
            if lock is None:
                break
            locks.append(lock)
        if len(locks) == count:
            _held.extend(locks)
            return base
        for lock in locks:
            lock.close()
    raise RuntimeError(f"no {count} free consecutive loopback ports in [{first}, {last})")


def free_port():
    return free_ports(1)
