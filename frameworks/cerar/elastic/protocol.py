"""What cerarrun's elastic driver and the elastic workers say to each other, through the job's
rendezvous store (which the launcher hosts, so it outlives every worker). docs/elastic.md tells
the whole story; this module holds the names and encodings both sides use.

A *generation* is one membership of the job: the driver numbers them 1, 2, ... and publishes
each one's *plan* (which worker process gets which rank) before its `latest` key. A worker is
one process the driver started; its id (CERAR_ELASTIC_ID) is unique for the job, so a process
from an earlier generation can never be mistaken for a newer one on the same host and slot.

Keys (every value is UTF-8 text; JSON where noted):
  cerar/elastic/plan/<G>           generation G's plan (JSON, encode_plan/decode_plan)
  cerar/elastic/latest             the newest G, decimal; set after plan/<G>
  cerar/elastic/ready/<G>          a counter (store add): workers of G that reached its barrier
  cerar/elastic/running/<G>        set by G's rank 0 once G's state is synced and training runs
  cerar/elastic/failed/<G>/<id>    worker <id>'s report that G failed (JSON: rank, peer, error)
  cerar/elastic/joined/<id>        set by worker <id> when it first reaches a barrier (the
                                   driver's proof that its start worked)
The runtime of generation G names its own keys with the rendezvous scope scope_of(G).

A worker's environment: CERAR_ELASTIC_ID, CERAR_ELASTIC_GENERATION (the first generation
whose plan names it), CERAR_ELASTIC_TIMEOUT (seconds to wait for a plan or the barrier), and
the store's CERAR_RENDEZVOUS_ADDR, CERAR_RENDEZVOUS_PORT, CERAR_SECRET.
"""
import json

PREFIX = "cerar/elastic/"
LATEST = PREFIX + "latest"

ENV_ID = "CERAR_ELASTIC_ID"
ENV_GENERATION = "CERAR_ELASTIC_GENERATION"
ENV_TIMEOUT = "CERAR_ELASTIC_TIMEOUT"
DEFAULT_TIMEOUT = 600.0  # seconds, as horovodrun's --elastic-timeout


def plan_key(generation):
    return f"{PREFIX}plan/{generation}"


def ready_key(generation):
    return f"{PREFIX}ready/{generation}"


def running_key(generation):
    return f"{PREFIX}running/{generation}"


def failed_key(generation, worker):
    return f"{PREFIX}failed/{generation}/{worker}"


def joined_key(worker):
    return f"{PREFIX}joined/{worker}"


def scope_of(generation):
    """The runtime's rendezvous scope (RuntimeConfig.rendezvous_scope) in generation G."""
    return f"elastic/{generation}"


def encode_plan(generation, workers, added=(), removed=(), reason=""):
    """`workers`: {id: {"rank", "local_rank", "local_size", "host"}} with ranks 0..n-1.
    `added`/`removed`: ids new in G, and ids of G-1 not in G. `reason`: why G exists."""
    ranks = sorted(entry["rank"] for entry in workers.values())
    if ranks != list(range(len(workers))):
        raise ValueError(f"generation {generation}: ranks {ranks} are not 0..{len(workers) - 1}")
    return json.dumps({"generation": generation, "size": len(workers), "workers": workers,
                       "added": sorted(added), "removed": sorted(removed),
                       "reason": reason}, sort_keys=True).encode()


def decode_plan(data):
    plan = json.loads(bytes(data).decode())
    plan["workers"] = {worker: dict(entry) for worker, entry in plan["workers"].items()}
    return plan


def encode_failure(rank, peer, error):
    return json.dumps({"rank": rank, "peer": peer, "error": str(error)}).encode()


def decode_failure(data):
    return json.loads(bytes(data).decode())
