#!/usr/bin/env python3
"""Throughput of an elastic job before a failure, while shrunk, and after it regrew: 3 emulated
hosts x 2 workers (tests/python/emulated_hosts.py: namespaces, sshd), cerarrun's elastic driver
on a fourth, examples/elastic_train.py as the job. One worker is killed with SIGKILL after
--kill-after iterations; its host is blacklisted for the cooldown, then discovery lists it
again and the job grows back to 6 workers. Prints the per-worker and total img/sec of each
phase, their ratios, and the reset times the launcher logged. Needs root.

    python3 bench/elastic_regrow.py [--iters 40] [--kill-after 8] [--cooldown 3]

The hosts share this machine's cores: six workers on two cores measure the cores, so the
ratio after/before (same size, same cores) is the figure, not the absolute rate.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from emulated_hosts import EmulatedHosts, unavailable  # noqa: E402

ITER = re.compile(r"Iter #(\d+): ([\d.]+) img/sec per CPU on (\d+) workers")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--kill-after", type=int, default=8)
    parser.add_argument("--cooldown", type=float, default=3.0)
    parser.add_argument("--batches-per-iter", type=int, default=5)
    return parser.parse_args()


def phases(lines, kill_line):
    """img/sec per worker of each phase: before the kill (size 6), shrunk (4), regrown (6)."""
    before, shrunk, after = [], [], []
    for index, line in enumerate(lines):
        match = ITER.search(line)
        if not match:
            continue
        rate, size = float(match.group(2)), int(match.group(3))
        if index < kill_line:
            before.append(rate)
        elif size == 4:
            shrunk.append(rate)
        elif size == 6:
            after.append(rate)
    return before[1:], shrunk[1:], after[1:]  # each phase's first iteration warms up


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def main():
    args = parse_args()
    why = unavailable()
    if why:
        sys.exit(f"elastic_regrow: {why}")
    with EmulatedHosts(4) as hosts:
        tmp = hosts.tmp
        listing = tmp / "hosts.txt"
        listing.write_text("".join(f"{name}:2\n" for name in hosts.names[:3]))
        discover = tmp / "discover.sh"
        discover.write_text(f"#!/bin/sh\ncat {listing}\n")
        discover.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CERAR_")}
        env.update(PYTHONUNBUFFERED="1", CERAR_TIMEOUT_SECONDS="10")
        command = [sys.executable, "-m", "cerar.run", "-np", "6", "--min-np", "4",
                   "--max-np", "6", "--host-discovery-script", str(discover),
                   "--blacklist-cooldown-range", str(args.cooldown), str(args.cooldown),
                   sys.executable, str(ROOT / "examples" / "elastic_train.py"),
                   "--num-iters", str(args.iters),
                   "--num-batches-per-iter", str(args.batches_per_iter)]
        proc = hosts.popen(3, command, env=hosts.client_env(env), cwd=str(ROOT),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines, kill_line = [], [None]

        def read():
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                match = ITER.search(line)
                if match and int(match.group(1)) == args.kill_after and kill_line[0] is None:
                    pid = hosts.interpreters(1, "elastic_train.py")[0]
                    os.kill(pid, signal.SIGKILL)
                    kill_line[0] = len(lines)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            code = proc.wait(600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        reader.join(10)
    if code != 0 or kill_line[0] is None:
        print("\n".join(lines))
        sys.exit(f"elastic_regrow: the job exited {code} (kill done: {kill_line[0] is not None})")
    before, shrunk, after = phases(lines, kill_line[0])
    print("phase             size  iters  img/sec per worker  img/sec total")
    for name, size, rates in (("before the kill", 6, before), ("shrunk", 4, shrunk),
                              ("regrown", 6, after)):
        print(f"{name:16s}  {size:4d}  {len(rates):5d}  {mean(rates):18.1f}  "
              f"{size * mean(rates):13.1f}")
    print(f"regrown / before (total img/sec, same size): {mean(after) / mean(before):.2f}")
    for line in lines:
        if line.startswith("cerarrun: reset") or "resumed training" in line:
            print(line)


if __name__ == "__main__":
    main()
