"""The runtime of a process group on torch.distributed's backend "cerar" (cerar.torch.backend),
met through the store, rank, size and timeout that torch hands the backend."""
import json
import os
import socket

from cerar._store import HostedStore


def _hosts(store, rank, size):
    store.set(f"cerar/host/{rank}", socket.gethostname())
    return [store.get(f"cerar/host/{r}").decode() for r in range(size)]


def start_runtime(store, rank, size, timeout_seconds):
    """A runtime for this group, met through torch's store; returns (runtime, server)."""
    from cerar import _cerar
    hosts = _hosts(store, rank, size)
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
        store.set("cerar/endpoint", json.dumps(endpoint))
    endpoint = json.loads(store.get("cerar/endpoint"))
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
