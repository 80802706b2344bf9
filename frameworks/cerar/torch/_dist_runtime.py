"""The runtime of a process group on torch.distributed's backend "cerar" (cerar.torch.backend),
met through the store, rank, size and timeout that torch hands the backend."""
import json
import os
import socket

from cerar._store import HostedStore


def round_prefix():
    """The prefix of this group's keys in torch's store. torchrun (torch 2.x) keeps one store
    across the restarts of a worker group, so keys of a dead attempt would still be read: its
    attempt number (TORCHELASTIC_RESTART_COUNT, the same on every node as each node's workers
    fail with the lost rank) names a fresh set."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    return f"cerar/attempt{attempt}/" if attempt else "cerar/"


def _hosts(store, prefix, rank, size):
    store.set(f"{prefix}host/{rank}", socket.gethostname())
    return [store.get(f"{prefix}host/{r}").decode() for r in range(size)]


def start_runtime(store, rank, size, timeout_seconds):
    """A runtime for this group, met through torch's store; returns (runtime, server)."""
    from cerar import _cerar
    prefix = round_prefix()
    hosts = _hosts(store, prefix, rank, size)
    local = [r for r in range(size) if hosts[r] == hosts[rank]]
    all_local = len(set(hosts)) == 1
    server = None
    if rank == 0:
        given = os.environ.get("CERAR_SECRET")
        address = "127.0.0.1" if all_local else (os.environ.get("CERAR_RENDEZVOUS_ADDR")
                                                 or socket.getfqdn())
        server = HostedStore(address, all_local, given)
        endpoint = {"addr": server.address, "port": server.port}
        if not given:
            endpoint["secret"] = server.secret  # readable by who can read torch's store
        store.set(f"{prefix}endpoint", json.dumps(endpoint))
    endpoint = json.loads(store.get(f"{prefix}endpoint"))
    config = _cerar.RuntimeConfig.from_environment()
    config.rank, config.size = rank, size
    config.local_rank, config.local_size = local.index(rank), len(local)
    config.rendezvous_addr, config.rendezvous_port = endpoint["addr"], endpoint["port"]
    config.secret = endpoint.get("secret") or os.environ.get("CERAR_SECRET", "")
    config.host_store = False
    if not os.environ.get("CERAR_ALGORITHM") and not config.max_error:
        config.algorithm = "ring"  # exact unless the job asks for CERAR or an error budget
    if not os.environ.get("CERAR_TIMEOUT_SECONDS"):
        config.timeout_seconds = float(timeout_seconds)
    return _cerar.Runtime.start(config), server
