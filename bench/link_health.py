#!/usr/bin/env python3
"""What the emulated cluster's kernel did while a command ran: TCP retransmissions, timeouts
and tbf drops per rank namespace, and the machine's CPU split (user, system, softirq, idle).

  sudo python3 bench/link_health.py --ranks N [--prefix cerar-ns] -- CMD [ARGS...]

Run it inside `bench/netem.sh run ... --` (or after `netem.sh up`), around a benchmark: it
prints one JSON line ({"link_health": ...}) after CMD's own output and exits with CMD's status.
A retransmitted segment costs the same kernel time as a new one, and a timeout stalls a
dependent ring for at least the minimum RTO (200 ms on Linux), so both bound what any
contender can reach on these links.
"""
import argparse, json, re, subprocess, sys

COUNTERS = ("TcpOutSegs", "TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPLossProbes",
            "TcpExtTCPRetransFail")
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def netns(ns, *cmd):
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          check=True).stdout


def counters(ns):
    values = dict.fromkeys(COUNTERS, 0)
    for line in netns(ns, "nstat", "-a", "-z").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in values:
            values[parts[0]] = int(parts[1])
    return values


def drops(ns, dev):
    text = subprocess.run(["tc", "-n", ns, "-s", "qdisc", "show", "dev", dev], capture_output=True,
                          text=True).stdout
    return sum(int(x) for x in re.findall(r"dropped (\d+)", text))


def cpu():
    with open("/proc/stat") as f:
        first = f.readline().split()[1:1 + len(CPU_FIELDS)]
    return dict(zip(CPU_FIELDS, map(int, first)))


def snapshot(a):
    ranks = [f"{a.prefix}{i}" for i in range(a.ranks)]
    return {"cpu": cpu(),
            "ranks": [dict(counters(ns), veth_drops=drops(ns, "veth0")) for ns in ranks],
            "ports": [drops(f"{a.prefix}br", f"p{i}") for i in range(a.ranks)]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--prefix", default="cerar-ns")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd or a.ranks < 2:
        p.error("need --ranks >= 2 and -- CMD")
    before = snapshot(a)
    status = subprocess.run(cmd).returncode
    after = snapshot(a)
    ticks = {k: after["cpu"][k] - before["cpu"][k] for k in CPU_FIELDS}
    total = sum(ticks.values()) or 1
    ranks = []
    for b, e in zip(before["ranks"], after["ranks"]):
        d = {k: e[k] - b[k] for k in e}
        d["retrans_share"] = round(d["TcpRetransSegs"] / d["TcpOutSegs"], 4) if d["TcpOutSegs"] else 0
        ranks.append(d)
    out = {"cpu_share": {k: round(v / total, 3) for k, v in ticks.items() if v},
           "ranks": ranks,
           "port_drops": [e - b for b, e in zip(before["ports"], after["ports"])],
           "retrans_share_max": max(r["retrans_share"] for r in ranks),
           "timeouts_total": sum(r["TcpExtTCPTimeouts"] for r in ranks)}
    print(json.dumps({"link_health": out}), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
