"""The tests' reserved ports (ports.py): outside the ephemeral range, and never handed to two
processes at once."""
import subprocess
import sys
from pathlib import Path

from ports import _range, free_ports


def test_reserved_ports_are_outside_the_ephemeral_range_and_distinct():
    first, last = _range(2)
    bases = [free_ports(2) for _ in range(50)]
    ports = [p for b in bases for p in (b, b + 1)]
    assert len(set(ports)) == len(ports)
    assert all(first <= b < last for b in bases)


def test_another_process_cannot_take_a_held_port():
    held = set(free_ports(1) for _ in range(300))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from ports import free_port; "
            "print(' '.join(str(free_port()) for _ in range(300)))")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)],
                         capture_output=True, text=True, check=True).stdout
    assert not held & set(map(int, out.split()))
