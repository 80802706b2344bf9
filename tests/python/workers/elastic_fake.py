"""A fake elastic worker for cerarrun's driver tests: speaks the store protocol minimally (no
cerar runtime). Each generation it prints what its plan says, its rank 0 marks the generation
running, and it does what the JSON spec (argv[1]) asks for that generation:

  "fail":   {"G": {"id": code}}     worker id exits with code in generation G
  "report": {"G": {"id": peer}}     worker id reports G failed, blaming rank peer (or null),
                                    after "report_after" s, and waits for a new generation
  "write":  {"G": text}             G's rank 0 writes text to spec["discovery_file"]
  "finish": G                       in generation G the others exit 0 (after "hold" s)
  "hang":   ["id"]                  worker id never joins (as behind an sshd that accepts
                                    and never runs the command): it sleeps until stopped

While it waits for a new generation it watches its peers (all fake workers run on this host,
"remote" ones too), and reports G failed, blaming the first that died, as a real worker's
failed collective would. It leaves with 0 when a plan no longer names it, and exits 9 when no
new generation comes within spec["timeout"] seconds."""
import json
import os
import sys
import time

from cerar.elastic import protocol
from cerar._cerar import StoreClient

spec = json.loads(sys.argv[1])
me = os.environ[protocol.ENV_ID]
generation = int(os.environ[protocol.ENV_GENERATION])
client = StoreClient(os.environ["CERAR_RENDEZVOUS_ADDR"], int(os.environ["CERAR_RENDEZVOUS_PORT"]),
                     os.environ["CERAR_SECRET"], timeout_seconds=spec.get("timeout", 20))
if me in spec.get("hang", []):
    print("hanging before it joins", flush=True)
    time.sleep(3600)
client.set(protocol.joined_key(me), b"1")
print(f"pid={os.getpid()} first_rank={os.environ['CERAR_RANK']} "
      f"first_size={os.environ['CERAR_SIZE']} timeout={os.environ[protocol.ENV_TIMEOUT]}",
      flush=True)



def dead(worker):
    """Whether `worker` (an id) has died (a zombie counts: its parent has not reaped it yet)."""
    if not client.check([f"fake/pid/{worker}"]):
        return False
    try:
        with open(f"/proc/{int(client.get(f'fake/pid/{worker}'))}/status") as status:
            return any(line.split()[1] == "Z" for line in status if line.startswith("State:"))
    except FileNotFoundError:
        return True


def wait_for_next(current, plan, reported):
    deadline = time.monotonic() + spec.get("timeout", 20)
    while time.monotonic() < deadline:
        latest = int(client.get(protocol.LATEST))
        if latest > current:
            return latest
        lost = [entry["rank"] for worker, entry in sorted(plan["workers"].items())
                if worker != me and dead(worker)]
        if lost and not reported:
            client.set(protocol.failed_key(current, me),
                       protocol.encode_failure(plan["workers"][me]["rank"], min(lost), "peer lost"))
            reported = True
        time.sleep(0.05)
    print(f"no generation after {current}", flush=True)
    sys.exit(9)


while True:
    plan = protocol.decode_plan(client.get(protocol.plan_key(generation)))
    entry = plan["workers"].get(me)
    if entry is None:
        print(f"left gen={generation}", flush=True)
        sys.exit(0)
    rank, key = entry["rank"], str(generation)
    print(f"gen={generation} rank={rank} size={plan['size']} host={entry['host']} "
          f"local={entry['local_rank']}/{entry['local_size']}", flush=True)
    client.set(f"fake/pid/{me}", str(os.getpid()).encode())  # after the line tests look for
    if rank == 0:
        client.set(protocol.running_key(generation), b"1")
        if key in spec.get("write", {}):
            with open(spec["discovery_file"], "w") as hosts:
                hosts.write(spec["write"][key])
    if me in spec.get("fail", {}).get(key, {}):
        time.sleep(0.2)
        sys.exit(spec["fail"][key][me])
    reported = me in spec.get("report", {}).get(key, {})
    if reported:  # once the blamed peer runs; then waits, as a real worker does
        blamed = [w for w, e in plan["workers"].items() if e["rank"] == spec["report"][key][me]]
        if blamed:
            client.get(f"fake/pid/{blamed[0]}")
        time.sleep(spec.get("report_after", 0))
        client.set(protocol.failed_key(generation, me),
                   protocol.encode_failure(rank, spec["report"][key][me], "fake failure"))
    elif spec.get("finish") == generation:
        time.sleep(spec.get("hold", 0.3))
        print("done", flush=True)
        sys.exit(0)
    generation = wait_for_next(generation, plan, reported)
