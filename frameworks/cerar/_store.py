"""The job's rendezvous store, hosted by this process: cerarrun, cerar.ray's driver and rank 0
of the torch.distributed backend all serve it the same way."""
import secrets


class HostedStore:
    """The C++ store server with the job's secret (a fresh one unless given), on a free port.

    `local`: every rank runs on this host, so the server listens on loopback only; otherwise on
    every interface. `address` is where the ranks reach it. It serves until close().
    """

    def __init__(self, address, local, secret=None):
        from cerar._cerar import StoreServer
        self.address = address
        self.secret = secret or secrets.token_hex(16)
        self._server = StoreServer("127.0.0.1" if local else "0.0.0.0", 0, self.secret)
        self._server.start()
        self.port = self._server.port

    def close(self):
        self._server = None  # the C++ server stops with its last reference


def rank_identity(rank, size, local_rank, local_size, address, port, secret):
    """The CERAR_* variables with which init() joins rank `rank` to a job whose store is at
    address:port (as cerarrun and cerar.ray hand them to their ranks)."""
    return {
        "CERAR_RANK": str(rank), "CERAR_SIZE": str(size),
        "CERAR_LOCAL_RANK": str(local_rank), "CERAR_LOCAL_SIZE": str(local_size),
        "CERAR_RENDEZVOUS_ADDR": address, "CERAR_RENDEZVOUS_PORT": str(port),
        "CERAR_SECRET": secret,
    }
