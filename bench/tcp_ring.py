#!/usr/bin/env python3
"""Calibrate the link rate with a raw TCP ring: every rank streams B bytes to the next rank
while receiving B bytes from the previous one, all at once.

  python3 bench/tcp_ring.py --ranks N --bytes B [--netns-prefix P] [--port PORT] [--timeout S]

With --netns-prefix, rank i runs in namespace P{i} (made by bench/netem.sh) at 10.77.0.(i+1);
without it, all ranks run on 127.0.0.1 (ports PORT..PORT+N-1). Prints one JSON line:
rank_mbit[i] = 8*B / (seconds from "go" until rank i has received all B bytes) / 10^6, and
min_mbit, the calibrated link rate (Mbit = 10^6 bit). B accepts suffixes K/M/G (2^10, 2^20, 2^30).
"""
import argparse, json, os, signal, socket, subprocess, sys, threading, time

CHUNK = 1 << 20
STATE_DIR = os.environ.get("CERAR_NETEM_STATE_DIR", "/run/cerar-netem")


def parse_bytes(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    try:
        value = int(text[:-1] if mult > 1 else text) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte count: {text!r} (e.g. 64M)")
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def say(msg):
    print(msg, flush=True)


def worker(a):
    """One rank: listen, (on 'connect') connect to next and accept prev, (on 'go') stream."""
    host = lambda r: f"10.77.0.{r + 1}" if a.netns_prefix else "127.0.0.1"
    port = lambda r: a.port if a.netns_prefix else a.port + r
    nxt = (a.rank + 1) % a.ranks
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((host(a.rank), port(a.rank)))
    lsock.listen(1)
    lsock.settimeout(a.timeout)
    say("listening")
    assert sys.stdin.readline().strip() == "connect"
    out = socket.create_connection((host(nxt), port(nxt)), timeout=a.timeout)
    inc, _ = lsock.accept()
    inc.settimeout(a.timeout)
    say("ready")
    assert sys.stdin.readline().strip() == "go"
    t0 = time.monotonic()
    sent = [None]

    got = [0]
    arrived = threading.Condition()
    chunk = min(CHUNK, a.window // 2) if a.window else CHUNK

    def send():
        data = memoryview(bytearray(chunk))
        left = a.bytes
        while left:
            n = min(left, chunk)
            if a.window:  # at most `window` bytes ahead of what arrived from prev
                with arrived:
                    arrived.wait_for(lambda: a.bytes - left + n - got[0] <= a.window)
            out.sendall(data[:n])
            left -= n
        sent[0] = time.monotonic() - t0
        out.shutdown(socket.SHUT_WR)

    th = threading.Thread(target=send)
    th.start()
    buf = memoryview(bytearray(CHUNK))
    while got[0] < a.bytes:
        n = inc.recv_into(buf, min(CHUNK, a.bytes - got[0]))
        if n == 0:
            raise SystemExit(f"rank {a.rank}: peer closed after {got[0]} of {a.bytes} bytes")
        with arrived:
            got[0] += n
            arrived.notify()
    recv_s = time.monotonic() - t0
    th.join()
    inc.recv(1)  # wait for the sender's FIN, so nobody closes with data in flight
    say(json.dumps({"rank": a.rank, "recv_s": recv_s, "send_s": sent[0]}))


def shaped_rate(prefix):
    try:
        with open(os.path.join(STATE_DIR, prefix)) as f:
            words = f.readline().split()
        return int(words[words.index("--rate-mbit") + 1])
    except (OSError, ValueError, IndexError):
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--bytes", type=parse_bytes, required=True)
    p.add_argument("--netns-prefix", default="")
    p.add_argument("--window", type=parse_bytes, default=0,
                   help="send at most this many bytes ahead of what arrived (default: no limit)")
    p.add_argument("--port", type=int, default=29600)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)  # internal: run as that rank
    a = p.parse_args()
    if not 2 <= a.ranks <= 64:
        p.error("--ranks must be in 2..64")
    if a.rank is not None:
        return worker(a)
    if a.netns_prefix:
        missing = [f"{a.netns_prefix}{i}" for i in range(a.ranks)
                   if not os.path.exists(f"/run/netns/{a.netns_prefix}{i}")]
        if missing:
            sys.exit(f"tcp_ring.py: namespaces {' '.join(missing)} do not exist; "
                     f"run bench/netem.sh up --ranks {a.ranks} --rate-mbit R --name {a.netns_prefix}")
    procs = []
    for i in range(a.ranks):
        cmd = [sys.executable, os.path.abspath(__file__), "--ranks", str(a.ranks), "--bytes", str(a.bytes),
               "--port", str(a.port), "--timeout", str(a.timeout), "--rank", str(i)]
        if a.window:
            cmd += ["--window", str(a.window)]
        if a.netns_prefix:
            cmd = ["ip", "netns", "exec", f"{a.netns_prefix}{i}"] + cmd + ["--netns-prefix", a.netns_prefix]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                      start_new_session=True))
    watchdog = threading.Timer(a.timeout, lambda: [q.kill() for q in procs])
    watchdog.start()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # TERM, like Ctrl-C, stops every rank
    try:
        def step(expect, cmd):
            for q in procs:
                line = q.stdout.readline().strip()
                if line != expect:
                    raise RuntimeError(f"a rank did not report '{expect}' (got {line!r})")
            for q in procs:
                q.stdin.write(cmd + "\n")
                q.stdin.flush()
        step("listening", "connect")
        step("ready", "go")
        res = [json.loads(q.stdout.readline()) for q in procs]
        if any(q.wait() for q in procs):
            raise RuntimeError("a rank failed")
    except (RuntimeError, ValueError) as e:
        sys.exit(f"tcp_ring.py: {e}")
    except KeyboardInterrupt:
        sys.exit("tcp_ring.py: interrupted")
    finally:
        watchdog.cancel()
        for q in procs:
            if q.poll() is None:
                q.kill()
    mbit = [round(8 * a.bytes / r["recv_s"] / 1e6, 2) for r in sorted(res, key=lambda r: r["rank"])]
    out = {"ranks": a.ranks, "bytes": a.bytes, "netns_prefix": a.netns_prefix or None,
           "rank_mbit": mbit, "min_mbit": min(mbit), "max_mbit": max(mbit)}
    shaped = shaped_rate(a.netns_prefix) if a.netns_prefix else None
    if shaped:
        out.update(shaped_mbit=shaped, efficiency=round(min(mbit) / shaped, 3))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
